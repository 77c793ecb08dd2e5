"""TPU multislice: the predicted slowdown of 2..32 slices against MaxText's published one.

MaxText's TPU v5e table (AI-Hypercomputer/maxtext, ``MaxText/configs/v5e/README.md``, the
"expected performance" table; also in trainperf's published runs, rows 406-411) gives the MFU of
16B, 32B and 128B models on 1, 2, 4, 8, 16 and 32 v5e-256 slices at the same per-chip work
(per-device batch fixed, global batch growing with the slices): the slices run data parallel
over the data-center network (DCN), everything else stays on each slice's ICI. The slowdown of
N slices is ``MFU(1) / MFU(N)``.

For each model this prints the measured slowdown beside the predicted one, with the catalog's
DCN bandwidth per chip (``inter_node_link_GB_per_s`` of ``tpu-v5e``) and, as the baseline
computed in the same run, with the DCN priced at the ICI rate (what the catalog assumed before:
cross-slice traffic as fast as ICI, no slowdown at all). ``--sweep`` also scans the DCN
bandwidth and prints the error of each value, and the value each pair of models would pick
for the third (a held-out check of the one-number model).

The 1-slice configurations are the published rows' (MaxText's ``16b.sh``, ``32b.sh`` and
``128b.sh``); N slices add ``dp=N``. Usage: ``python benchmarks/tpu_multislice.py [--sweep]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

SLICES = (1, 2, 4, 8, 16, 32)
MFU_PCT = {  # MaxText v5e README, "expected performance" table (MFU %, bf16)
    "16B": (61.10, 59.37, 59.14, 58.27, 56.56, 54.65),
    "32B": (66.86, 64.81, 64.10, 63.67, 62.26, 60.40),
    "128B": (56.06, 55.82, 54.93, 52.93, 50.86, 46.25),
}
ROWS = {"16B": "406", "32B": "408", "128B": "410"}  # the 1-slice published rows


def slowdowns(dcn_GB_per_s: float | None) -> dict[str, list[float]]:
    """Predicted step time of N slices over 1 slice, per model (``None``: the catalog's DCN)."""
    from trainperf.predict import predict
    from trainperf.predict.runs_table import packaged_runs

    runs = {r.row_id: r for r in packaged_runs()}
    out: dict[str, list[float]] = {}
    for name, row in ROWS.items():
        w = runs[row].workload
        hw = w.hardware if dcn_GB_per_s is None else dataclasses.replace(
            w.hardware, inter_node_link_GB_per_s=dcn_GB_per_s)
        times = [predict(dataclasses.replace(w, hardware=hw, num_devices=w.num_devices * n,
                                             global_batch=w.global_batch * n,
                                             plan=dataclasses.replace(w.plan, dp=n))).step_time_s
                 for n in SLICES]
        out[name] = [t / times[0] for t in times]
    return out


def measured() -> dict[str, list[float]]:
    return {m: [v[0] / x for x in v] for m, v in MFU_PCT.items()}


def errors(pred: dict[str, list[float]], models: tuple[str, ...] | None = None) -> list[float]:
    """Signed relative errors of the predicted slowdowns, 2..32 slices (1 slice is 1 by definition)."""
    meas = measured()
    return [p / m - 1.0 for k in (models or tuple(pred)) for p, m in zip(pred[k][1:], meas[k][1:], strict=True)]


def summary(errs: list[float]) -> str:
    return f"MAE {100 * statistics.mean(abs(e) for e in errs):.2f}%, mean signed {100 * statistics.mean(errs):+.2f}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", action="store_true", help="also scan the DCN bandwidth (slow: ~1 s a value)")
    args = ap.parse_args(argv)
    from trainperf.specs.hardware import get_hardware

    hw = get_hardware("tpu-v5e")
    meas = measured()
    cat, ici = slowdowns(None), slowdowns(hw.intra_node_link_GB_per_s)
    print(f"slowdown of N v5e-256 slices over one (measured / predicted at the catalog's DCN "
          f"{hw.inter_node_link_GB_per_s:g} GB/s per chip / baseline: DCN at the ICI rate "
          f"{hw.intra_node_link_GB_per_s:g} GB/s)")
    print(f"{'model':6s} " + " ".join(f"{n:>20d}" for n in SLICES[1:]))
    for m in MFU_PCT:
        cells = [f"{meas[m][i]:.3f}/{cat[m][i]:.3f}/{ici[m][i]:.3f}" for i in range(1, len(SLICES))]
        print(f"{m:6s} " + " ".join(f"{c:>20s}" for c in cells))
    print(f"catalog DCN: {summary(errors(cat))}; baseline (ICI rate): {summary(errors(ici))}")
    if args.sweep:
        grid = [0.5 * i for i in range(1, 17)]
        table = {bw: slowdowns(bw) for bw in grid}
        for bw in grid:
            print(f"  DCN {bw:5.2f} GB/s per chip: {summary(errors(table[bw]))}")
        for held in MFU_PCT:
            fit = tuple(m for m in MFU_PCT if m != held)
            best = min(grid, key=lambda bw: statistics.mean(abs(e) for e in errors(table[bw], fit)))
            print(f"  fitted on {'+'.join(fit)}: {best:g} GB/s; on {held} (held out): "
                  f"{summary(errors(table[best], (held,)))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
