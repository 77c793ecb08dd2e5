"""Expert-parallel token dispatch and combine: the link-level efficiency of each kernel family per
(silicon, link level), against the expert-parallel group size.

A family's figure is turned (``tools/curate_kernels.py``, ``curate_moe``) into the bytes one rank
moves over the level per second, divided here by the level's per-GPU bandwidth (``link_GBps``: the
catalog's NVLink/xGMI figure within a scale-up domain, the NIC per GPU across domains)::

    time of one call = max(latency_us, bytes the rank moves over the level / (eff(ranks) x link x S/(S+h)))

``eff(ranks)`` is given by its measured points (mean per group size, interpolated in log2(ranks) at
run time, flat outside); ``S/(S+h)`` with ``h = half_bytes`` is the size law of the collectives
(``S`` the level's buffer: :func:`level_buffer`); ``latency_us`` the smallest call. The families:

* ``deepep``: DeepSeek's DeepEP normal kernels (V1): H800 within a node and across 2-8 nodes
  (README, after Tencent's PR #130), B200 and GB200 (the Hybrid-EP document's DeepEP baseline);
* ``hybrid-ep``: NVIDIA's Hybrid-EP (DeepEP hybrid-ep branch): B200, GB200 NVL72 up to 36 ranks;
* ``mori``: AMD's MORI-EP: MI300X/MI355X intranode (tuning sweeps 128-4096 tokens), across 2-4
  nodes (README RDMA figures, the MI355X internode tuning sweep);
* ``nccl``: NCCL/RCCL all-to-all (Megatron-Core's ``alltoall`` dispatcher, torchtitan's
  ``all_to_all_single``): GB200/GB300/B300 and MI355X (OCI nccl-tests/rccl-tests at 4-16 GiB).

Fallbacks, each flagged ``measured: false`` with the rule and the lender's source: Hybrid-EP where
unmeasured takes DeepEP's of the silicon and the reverse; a scale-out figure of an NVIDIA family
unmeasured on a silicon takes the family's (or its sibling's) on hopper, the same ConnectX NICs;
DeepEP and Hybrid-EP on AMD take MORI's, MORI on NVIDIA takes DeepEP's; the size law and floor of a
family without a sweep come from MORI's (the only measured token sweeps); NCCL where unmeasured,
and every family on silicon with no dispatch kernel (DeepEP needs Hopper or later; TPUs, Gaudi, the
CPU), is the collectives' all-to-all (scale-up) and send/recv (scale-out) of the silicon.
"""

from __future__ import annotations

import math
from collections import defaultdict
from statistics import mean
from typing import Any

import numpy as np

from .common import Param, Row, borrowed, cite, param, silicons

FAMILIES = ("nccl", "deepep", "hybrid-ep", "mori")
OPS = ("dispatch", "combine")
LEVELS = ("scale-up", "scale-out")
NVIDIA_FAMILIES = ("deepep", "hybrid-ep")
SIBLING = {"deepep": "hybrid-ep", "hybrid-ep": "deepep"}
DISPATCH_SILICONS = ("hopper", "blackwell", "cdna3", "cdna4")
"""Silicon a dispatch-kernel library runs on: DeepEP and Hybrid-EP need sm90+, MORI gfx942/gfx950."""
MORI_BYTES_PER_TOKEN_TOPK = 8
"""Top-k of the MORI README setting, used for the bytes of its combine sweeps (their rules do not
record one); it moves the fitted plateau by under 3% (4096 tokens are 40x the half size)."""


def distinct(n: float, topk: float) -> float:
    """Expected distinct ranks (of ``n``) among ``topk`` destinations drawn uniformly:
    ``n (1 - (1 - 1/n)^topk)``."""
    return n * (1.0 - (1.0 - 1.0 / n) ** topk)


def _eff(r: Row) -> float:
    return float(r["GBps"]) / float(r["link_GBps"])


def _op_points(rows: list[Row]) -> tuple[list[float], list[float], str]:
    """(ranks, mean eff per ranks, source) of one (silicon, family, op, level)."""
    by: dict[int, list[Row]] = defaultdict(list)
    for r in rows:
        by[int(r["ranks"])].append(r)
    ranks = sorted(by)
    effs = [mean(_eff(r) for r in by[n]) for n in ranks]
    src = "; ".join(f"{n} ranks: " + ", ".join(f"{float(r['GBps']):.4g}/{float(r['link_GBps']):g} GB/s "
                                               f"({r['basis']}; {cite(r)})" for r in by[n]) for n in ranks)
    return [float(n) for n in ranks], effs, src


def _op_param(ranks: list[float], effs: list[float], measured: bool, source: str) -> Param:
    """An op's entry: ``value`` the efficiency at the first measured group, the points beside it."""
    return {**param(effs[0], measured, source), "ranks": ranks, "effs": [float(f"{e:.4g}") for e in effs]}


def level_buffer(r: Row) -> float:
    """Bytes of a sweep row's call on its level, as the step model sizes it
    (``predict/step_model/expert_parallel.py``): within a domain the rank's buffer, tokens x
    distinct destination ranks x hidden x 2 bytes; across domains the bytes leaving its NIC, one
    copy per distinct remote domain (these families send a token once per domain)."""
    k = float(r["topk"] or MORI_BYTES_PER_TOKEN_TOPK)
    if r["level"] == "scale-up":
        copies = distinct(float(r["ranks"]), k)
    else:
        nodes = float(r["nodes"])
        copies = distinct(nodes, k) * (nodes - 1.0) / nodes
    return float(r["tokens"]) * copies * 7168 * 2


def _sweep_fit(rows: list[Row]) -> tuple[float, float, float, str]:
    """(eff_max, half_bytes, latency_us, source) of a token sweep: eff = eff_max S/(S+h) with S the
    level's buffer (:func:`level_buffer`), least squares on log eff over h on a log grid; latency =
    the smallest call."""
    sa = np.array([level_buffer(r) for r in rows])
    ea = np.array([_eff(r) for r in rows])
    hs = np.logspace(4, 10, 1201)
    shape = np.log(sa[None, :] / (sa[None, :] + hs[:, None]))
    le = np.log(ea)[None, :]
    lE = (le - shape).mean(axis=1)
    sse = ((le - lE[:, None] - shape) ** 2).sum(axis=1)
    i = int(np.argmin(sse))
    lat = min(float(r["time_us"]) for r in rows)
    src = (f"fit of eff = eff_max S/(S+h) on {len(rows)} calls of 128-{max(int(r['tokens']) for r in rows)} tokens "
           f"(rms log error {math.sqrt(float(sse[i]) / len(rows)):.3f}) of {cite(rows[0])} and siblings")
    return float(math.exp(lE[i])), float(hs[i]), lat, src


def _measured(rows: list[Row]) -> dict[str, dict[str, dict[str, Any]]]:
    """silicon -> family -> level -> {op: Param, half_bytes, latency_us} from the curated rows."""
    groups: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for r in rows:
        groups[(r["silicon"], r["family"], r["level"])].append(r)
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(lambda: defaultdict(dict))
    for (sil, fam, level), rs in groups.items():
        entry: dict[str, Any] = {}
        sweeps = [r for r in rs if r["use"] == "sweep"]
        half = lat = None
        if sweeps:
            dispatch = [r for r in sweeps if r["op"] == "dispatch" and r["topk"]] or sweeps
            _, h, _, src = _sweep_fit(dispatch)
            half = param(h, True, f"{sil} {fam} {level} size law: {src}")
            lat = param(min(float(r["time_us"]) for r in sweeps), True,
                        f"{sil} {fam} {level}: the smallest call of the token sweeps ({cite(sweeps[0])})")
        for op in OPS:
            plateau = [r for r in rs if r["use"] == "plateau" and r["op"] in (op, "all-to-all")]
            if plateau:
                ranks, effs, src = _op_points(plateau)
                entry[op] = _op_param(ranks, effs, True, f"{sil} {fam} {op} {level}: {src}")
            elif sweeps:
                op_rows = [r for r in sweeps if r["op"] == op and (r["topk"] or op == "combine")]
                big = max(int(r["tokens"]) for r in op_rows)
                top = [r for r in op_rows if int(r["tokens"]) == big]
                e_big = mean(_eff(r) for r in top)
                s_big = level_buffer(top[0])
                assert half is not None
                e_max = e_big * (s_big + half["value"]) / s_big
                entry[op] = _op_param([float(top[0]["ranks"])], [e_max], True,
                                      f"{sil} {fam} {op} {level}: {e_big:.3f} of the link at {big} tokens per rank "
                                      f"(mean of {len(top)} rules), over S/(S+h) with the sweep's half size "
                                      f"({cite(top[0])})")
        if half is not None:
            entry["half_bytes"], entry["latency_us"] = half, lat
        out[sil][fam][level] = entry
    return out


def _from_collectives(coll: dict[str, Any], sil: str, level: str, why: str) -> dict[str, Any]:
    """The collectives' all-to-all (within a domain) or send/recv (across, the NIC's point-to-point
    behaviour the step model prices an all-to-all's cross-domain bytes with) as a dispatch entry."""
    kind = "all-to-all" if level == "scale-up" else "send-recv"
    d = coll[sil][level]["kinds"][kind]
    ref = float(coll[sil][level]["ref_ranks"])
    eff = borrowed(d["eff_max"], f"{why}: the {sil} {level} {kind} of the collectives")
    entry: dict[str, Any] = {op: {**eff, "ranks": [ref], "effs": [eff["value"]]} for op in OPS}
    if level == "scale-out":
        # many concurrent peers through one NIC run at a collective's efficiency across nodes, not
        # at one RDMA stream's (the send/recv half size): one step of the measured 32-rank ring
        ar = coll[sil][level]["kinds"]["all-reduce"]["half_bytes"]
        entry["half_bytes"] = {**param(ar["value"] / ref, False, f"{why}: derived, the {sil} scale-out all-reduce "
                                       f"half size / {ref:g} (one step of the {ref:g}-rank ring it was measured on: "
                                       "an all-to-all's per-peer transfers share the NICs as a collective's do)"),
                               "from": [ar["source"]]}
    else:
        entry["half_bytes"] = borrowed(d["half_bytes"], f"{why}: the {sil} {level} {kind} half size")
    entry["latency_us"] = borrowed(d["latency_us"], f"{why}: the {sil} {level} {kind} floor")
    return entry


def _borrow(entry: dict[str, Any], why: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in entry.items():
        b = borrowed(v, why)
        if "ranks" in v:
            b = {**b, "ranks": v["ranks"], "effs": v["effs"]}
        out[k] = b
    return out


def _lender(meas: dict, sil: str, fam: str, level: str) -> tuple[dict[str, Any], str] | None:
    """The measured entry an unmeasured (silicon, family, level) takes, and the rule."""
    vendor_nv = sil in ("hopper", "blackwell")
    order: list[tuple[str, str, str]] = []
    if fam in NVIDIA_FAMILIES:
        if vendor_nv:
            order += [(sil, SIBLING[fam], f"no {sil} {fam} {level} measurement: {SIBLING[fam]}'s of the silicon "
                                          "(Hybrid-EP's document measures it against DeepEP V1 on the same parts)")]
            if level == "scale-out":
                order += [("hopper", f, f"no {sil} {fam} scale-out measurement: hopper's {f} across nodes (the same "
                                        "ConnectX NICs carry it)") for f in (fam, SIBLING[fam])]
        else:
            order += [(sil, "mori", f"no {fam} on {sil} ({fam} is NVIDIA-only): AMD's own dispatch library, "
                                    f"MORI, on {sil}")]
    elif fam == "mori" and vendor_nv:
        order += [(sil, "deepep", f"no MORI on {sil} (MORI is AMD-only): DeepEP on {sil}")]
        if level == "scale-out":
            order += [("hopper", "deepep", f"no MORI on {sil} (MORI is AMD-only) nor DeepEP across its nodes: "
                                           "hopper's DeepEP across nodes")]
    for s, f, why in order:
        e = meas.get(s, {}).get(f, {}).get(level)
        if e and all(op in e for op in OPS):
            return e, why
    return None


def params(rows: list[Row], coll: dict[str, Any]) -> dict[str, Any]:
    """Per silicon, family and level: ``dispatch`` and ``combine`` (efficiency points over the
    group size), ``half_bytes`` and ``latency_us``; see the module docstring for the fallbacks."""
    meas = _measured(rows)
    mori_law = {lvl: next(meas[s]["mori"][lvl] for s in ("cdna4", "cdna3") if "half_bytes" in
                          meas.get(s, {}).get("mori", {}).get(lvl, {})) for lvl in LEVELS}
    result: dict[str, Any] = {}
    for sil in silicons():
        fams: dict[str, Any] = {}
        for fam in FAMILIES:
            levels: dict[str, Any] = {}
            for level in LEVELS:
                own = meas.get(sil, {}).get(fam, {}).get(level)
                if sil not in DISPATCH_SILICONS and fam != "nccl":
                    entry = _from_collectives(coll, sil, level, f"no {fam} kernel runs on {sil}; NCCL-style all-to-all")
                elif own and all(op in own for op in OPS):
                    entry = dict(own)
                elif fam == "nccl":
                    entry = _from_collectives(coll, sil, level, f"no {sil} NCCL all-to-all measurement at {level}")
                else:
                    lent = _lender(meas, sil, fam, level)
                    if lent is None:
                        entry = _from_collectives(coll, sil, level, f"no {sil} {fam} {level} measurement nor a "
                                                  "family to take it from")
                    else:
                        entry = _borrow({k: v for k, v in lent[0].items() if k in OPS}, lent[1])
                        for k in ("half_bytes", "latency_us"):
                            if k in lent[0]:
                                entry[k] = borrowed(lent[0][k], lent[1])
                if "half_bytes" not in entry:
                    if fam == "nccl":
                        c = _from_collectives(coll, sil, level, f"no {sil} NCCL all-to-all sweep at {level}: the size "
                                              "law")
                        entry["half_bytes"], entry["latency_us"] = c["half_bytes"], c["latency_us"]
                    else:
                        law = mori_law[level]
                        entry["half_bytes"] = borrowed(law["half_bytes"], f"no {sil} {fam} {level} token sweep: MORI's "
                                                       "size law (the only measured dispatch-kernel sweep)")
                        entry["latency_us"] = borrowed(law["latency_us"], f"no {sil} {fam} {level} token sweep: "
                                                       "MORI's smallest call")
                levels[level] = entry
            fams[fam] = levels
        result[sil] = fams
    return result
