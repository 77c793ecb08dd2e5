"""Refit the packaged stack profiles on the packaged published-runs table (a developer tool: the
package ships only the result).

Fits every profile (:func:`trainperf.predict.fit_profiles.build_problem`, ``generic`` and each
stack's deviation), judges each stack by leave-one-table-out and leave-one-(stack, silicon)-out
(:mod:`trainperf.predict.holdout`), and writes ``src/trainperf/predict/data/stacks/*.toml`` with
every fitted value's source, the hold-out cache (``data/holdout_cache.json``) and the interval
model (``data/intervals.json``). The hand-written facts of each profile (``[kernels]``,
``[capabilities]``, ``[defaults]``) are carried over.

    PYTHONPATH=src python -m tools.fit_profiles [--out DIR]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainperf.predict import fit_profiles, intervals
from trainperf.predict.fit_profiles import (
    COMPOSED,
    FitRow,
    build_problem,
    profiles_from_fit,
    rows_from_table,
    solve,
)
from trainperf.predict.holdout import (
    PACKAGED_CACHE,
    Prediction,
    cache_key,
    cache_payload,
    leave_one_group_out,
    leave_one_table_out,
    summarize,
)
from trainperf.predict.stacks import DEFAULT_STACK, STACKS, Profile, packaged_profile

DATA = Path(fit_profiles.__file__).parent / "data"

DESCRIPTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "generic": ("Every published table fitted jointly: the default for a stack trainperf has no "
                "profile for.", ()),
    "megatron-core": ("Megatron-LM, NeMo, Megatron-Bridge (Megatron-Core + Transformer Engine).",
                      ("megatron", "nemo")),
    "megatron-lm-2021": ("Megatron-LM as of 2021 (Narayanan et al., SC21): tensor, pipeline (1F1B and "
                         "interleaved) and data parallelism, full recomputation, unfused attention; no sequence "
                         "parallelism, distributed optimizer or selective recomputation yet.", ("megatron-lm 2021",)),
    "maxtext": ("MaxText (JAX/XLA), GPU and TPU.", ("maxtext",)),
    "paxml": ("PaxML / Praxis (JAX/XLA) on GPU.", ("paxml", "pax")),
    "torchtitan": ("torchtitan (PyTorch FSDP2, DTensor TP, eager unless compiled).", ("torchtitan",)),
    "llm-foundry": ("MosaicML LLM Foundry / Composer (PyTorch FSDP, FlashAttention).",
                    ("llm foundry", "llm-foundry", "composer")),
    "deepspeed": ("DeepSpeed and Megatron-DeepSpeed (ZeRO, pipeline engine).", ("deepspeed",)),
    "trainperf-bench": ("trainperf's own bench (`trainperf bench`: PyTorch FSDP2 or torch.autocast, DTensor TP/SP, "
                        "torch.distributed.pipelining, PyTorch context_parallel, all-to-all expert parallel, SDPA "
                        "attention).", ("trainperf bench", "trainperf-bench")),
    "hf-transformers": ("Hugging Face Transformers models trained eagerly in PyTorch (Trainer, Accelerate, TRL): DDP, "
                        "FSDP or DeepSpeed ZeRO, SDPA attention, one kernel launch per PyTorch op, a measured launch "
                        "model.",
                        ("hugging face", "huggingface", "hf trainer", "transformers", "accelerate")),
}


def _packaged_facts(name: str) -> dict[str, Any]:
    """The hand-written fact tables (kernels, capabilities, defaults) of a packaged profile,
    carried over when the fitted numbers are rewritten."""
    if name not in STACKS:
        return {}
    p = packaged_profile(name)
    return {"kernels": dict(p.kernels), "capabilities": dict(p.capabilities), "defaults": dict(p.defaults)}


def _source(key: str, marker: str, fitted_text: str) -> str:
    """The source written for a fitted value (``fitted_text``), or for a GEMM share composed for a
    generation the stack has no table on (fit_profiles._with_generic_generations)."""
    if marker != COMPOSED:
        return fitted_text
    gen = key.split(".")[0]
    return (f"no table of this stack on {gen}: generic's {gen} share with the stack's shared deviation, "
            "as the fit and its hold-outs compose them")


def packaged_fit(rows: Sequence[FitRow]) -> tuple[dict[str, Profile], list[Prediction], dict[str, list[Prediction]]]:
    """Fit every packaged profile on ``rows`` and judge each stack on held-out data.

    Returns (profiles with sources, in-sample predictions, ``{"table": leave-one-table-out,
    "group": leave-one-group-out}`` predictions). Each fitted value's source names the tables it
    was fitted on and the stack's held-out errors."""
    pb = build_problem(rows)
    theta, _ = solve(pb)
    preds = [Prediction(r.name, r.table, r.stack, r.measured_step_time_s, float(p), r.generation)
             for r, p in zip(pb.rows, pb.predict(theta), strict=True)]
    held = {"table": leave_one_table_out(rows), "group": leave_one_group_out(rows)}
    out: dict[str, Profile] = {}
    for name, prof in profiles_from_fit(pb, theta).items():
        mine = rows if name == DEFAULT_STACK else [r for r in rows if r.stack == name]
        lo = summarize([p for p in held["table"] if name == DEFAULT_STACK or p.stack == name])
        go = summarize([p for p in held["group"] if name == DEFAULT_STACK or p.stack == name])
        tables = list(dict.fromkeys(r.table for r in mine))
        text = (f"fitted on the {len(tables)} table(s) listed in [fit] ({len(mine)} rows); held out: "
                f"leave-one-(stack, silicon)-out MAPE {go['mape_pct']:.1f}% (mean signed "
                f"{go['mean_signed_pct']:+.1f}%), leave-one-table-out MAPE {lo['mape_pct']:.1f}%")
        if name == DEFAULT_STACK:
            text = "fitted jointly with every stack's deviation on " + text.removeprefix("fitted on ")
        desc, fws = DESCRIPTIONS.get(name, ("", ()))
        out[name] = Profile(name=name, description=desc, frameworks=fws, knobs=prof.knobs,
                            generations=prof.generations, sources={k: _source(k, v, text) for k, v in prof.sources.items()},
                            **_packaged_facts(name),
                            fit={"tables": tables, "rows": len(mine),
                                 "leave_one_group_out_mape_pct": round(go["mape_pct"], 2),
                                 "leave_one_group_out_mean_signed_pct": round(go["mean_signed_pct"], 2),
                                 "leave_one_table_out_mape_pct": round(lo["mape_pct"], 2),
                                 "leave_one_table_out_mean_signed_pct": round(lo["mean_signed_pct"], 2),
                                 "in_sample_mape_pct": round(summarize(
                                     [p for p in preds if name == DEFAULT_STACK or p.stack == name])["mape_pct"], 2)})
    for name, (desc, fws) in DESCRIPTIONS.items():
        if name not in out:
            out[name] = Profile(name=name, description=desc + " No published table: generic's values.",
                                frameworks=fws, **_packaged_facts(name))
    return out, preds, held


def main(argv: Sequence[str] | None = None) -> int:
    """Refit the packaged profiles on the packaged table, write ``data/stacks/*.toml``, the
    hold-out cache and the interval model."""
    from trainperf.predict.runs_table import packaged_runs

    ap = argparse.ArgumentParser(prog="python -m tools.fit_profiles")
    ap.add_argument("--out", default=str(DATA / "stacks"))
    args = ap.parse_args(argv)
    rows = rows_from_table(packaged_runs())
    profs, preds, held = packaged_fit(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, prof in profs.items():
        header = (f"# trainperf software-stack profile '{name}' (see trainperf/predict/stacks.py).\n"
                  "# Written by `python -m tools.fit_profiles` from data/published_runs.csv;\n"
                  "# every fitted value says which tables it was fitted on and its held-out errors.\n")
        (out / f"{name}.toml").write_text(header + prof.to_toml(), encoding="utf-8")
    # the cache key hashes the profiles just written, so it is computed after writing them
    if out.resolve() == (DATA / "stacks").resolve():
        (DATA / PACKAGED_CACHE).write_text(cache_payload(cache_key(rows), held["table"], held["group"]),
                                           encoding="utf-8")
        model = intervals.fit_interval_model(rows, held["table"], held["group"])
        (DATA / intervals.PACKAGED).write_text(json.dumps(model.to_dict(), indent=1) + "\n", encoding="utf-8")
        cov = intervals.group_out_coverage(rows, held["group"], held["table"])
        print(f"80% ranges: group-out log-ends {model.group_out} (leave-one-table-out's {model.table_out}), "
              f"x{model.novelty:.2f} for a new source; group-out coverage {cov['coverage_pct']:.1f}% of "
              f"{cov['rows']} rows, {cov['group_balanced_coverage_pct']:.1f}% group-balanced (each group's range "
              f"fitted without it; {cov['quantile_coverage_pct']:.1f}% and "
              f"{cov['quantile_group_balanced_coverage_pct']:.1f}% before the widening)")
    s, lo, go = summarize(preds), summarize(held["table"]), summarize(held["group"])
    print(f"in-sample MAPE {s['mape_pct']:.2f}% (mean signed {s['mean_signed_pct']:+.2f}%); "
          f"leave-one-table-out MAPE {lo['mape_pct']:.2f}% (mean signed {lo['mean_signed_pct']:+.2f}%); "
          f"leave-one-(stack, silicon)-out MAPE {go['mape_pct']:.2f}% (mean signed {go['mean_signed_pct']:+.2f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
