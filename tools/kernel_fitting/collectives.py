"""Collectives: bus bandwidth against message size per (silicon, link level, kind).

Model (nccl-tests' bus bandwidth, busbw = algbw x 2(n-1)/n for all-reduce, x (n-1)/n for
all-gather, reduce-scatter and all-to-all, x 1 for send/recv):

    busbw(S) = eff_max * link * S / (S + half_bytes)

with ``link`` the catalog's per-device scale-up bandwidth (intra_node_link_GB_per_s), or for
scale-out the devices per node x the per-device NIC bandwidth of the measured cluster (a ring
across nodes crosses every node's NICs, so nccl-tests' busbw approaches the node's NIC total).
The fit is least squares on log busbw over messages of 4 MiB to 4 GiB; ``latency_us`` is the smallest
time per call of the sweep's small messages (<= 64 KiB; <= 1 MiB across nodes).
"""

from __future__ import annotations

import math
from collections import defaultdict
from statistics import median
from typing import Any

import numpy as np

from .common import (
    NEIGHBOUR,
    Param,
    Row,
    borrowed,
    catalog,
    cite,
    param,
    sig,
    silicons,
    vendor_knob,
)

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "send-recv")
MIN_FIT_BYTES = 4 * 2**20
MAX_FIT_BYTES = 4 * 2**30
"""Bandwidth fits use messages in [4 MiB, 4 GiB]: below, protocol switches (LL/LL128) and launch
costs dominate (the latency floor covers them); above, B200's NCCL switches to NVLS at 8 GiB, a
size no training collective reaches."""
SMALL_BYTES = {"scale-up": 64 * 2**10, "scale-out": 2**20}
REF_RANKS = {"scale-up": 8, "scale-out": 32}
NVSWITCH = {"ampere": None, "hopper": 5, "blackwell": 6}
"""NVSwitch silicons -> smallest group on which NCCL's default all-reduce is NVLS (None: no NVLS,
A100's NVSwitch has no in-switch reduction); from the GPU-count tables of the H200 and B200 nodes."""
MESH = ("cdna2", "cdna3", "cdna4")
"""Fully connected xGMI: a group of n of a node's 8 GPUs uses n-1 of each GPU's 7 links."""


def bus_factor(kind: str, n: int) -> float:
    """busbw / algbw of nccl-tests for a group of n ranks."""
    if kind == "all-reduce":
        return 2.0 * (n - 1) / n
    if kind == "send-recv":
        return 1.0
    return (n - 1) / n


def link_of(r: Row) -> float:
    """The link bandwidth a row's busbw is a fraction of (see the module docstring)."""
    if r["level"] == "scale-up":
        return catalog()[r["sku"]].intra_node_link_GB_per_s
    return 8.0 * float(r["nic_GBps_per_device"])


def busbw(r: Row) -> float:
    if r["busbw_GBps"]:
        return float(r["busbw_GBps"])
    return float(r["algbw_GBps"]) * bus_factor(r["kind"], int(r["ranks"]))


def points(rows: list[Row]) -> tuple[np.ndarray, np.ndarray]:
    """(message bytes, busbw / link) of the rows that have a size."""
    rs = [r for r in rows if r["size_bytes"]]
    return (np.array([float(r["size_bytes"]) for r in rs]),
            np.array([busbw(r) / link_of(r) for r in rs]))


def fit(s: np.ndarray, e: np.ndarray, eff: float | None = None) -> tuple[float, float, float, int]:
    """(eff_max, half_bytes, rms log error, points) of e = eff_max s / (s + h) over 4 MiB..4 GiB; with
    ``eff`` given only h is fitted. h on a log grid from 1 kB to 100 GB (1601 points)."""
    keep = (s >= MIN_FIT_BYTES) & (s <= MAX_FIT_BYTES)
    s, e = s[keep], e[keep]
    hs = np.logspace(3, 11, 1601)
    shape = np.log(s[None, :] / (s[None, :] + hs[:, None]))
    le = np.log(e)[None, :]
    lE = (le - shape).mean(axis=1) if eff is None else np.full(len(hs), math.log(eff))
    sse = ((le - lE[:, None] - shape) ** 2).sum(axis=1)
    i = int(np.argmin(sse))
    return float(math.exp(lE[i])), float(hs[i]), math.sqrt(float(sse[i]) / len(s)), len(s)


def floor_us(rows: list[Row], level: str) -> float | None:
    """Smallest time per call among the sweep's small messages (time column, else size/algbw)."""
    ts = []
    for r in rows:
        if not r["size_bytes"] or float(r["size_bytes"]) > SMALL_BYTES[level]:
            continue
        if r["time_us"]:
            ts.append(float(r["time_us"]))
        else:
            bb = busbw(r)
            if bb > 0:
                ts.append(float(r["size_bytes"]) * bus_factor(r["kind"], int(r["ranks"])) / (bb * 1e9) * 1e6)
    return min(ts) if ts else None


def _sweeps(rows: list[Row]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        out[r["sweep"]].append(r)
    return out


def _fit_param(rows_by_sweep: dict[str, list[Row]], names: list[str], level: str, what: str
               ) -> tuple[Param, Param, Param | None]:
    """Joint fit over several sweeps of one (silicon, level, kind, algorithm); the latency is None
    when no sweep has a small message."""
    s = np.concatenate([points(rows_by_sweep[n])[0] for n in names])
    e = np.concatenate([points(rows_by_sweep[n])[1] for n in names])
    eff, h, rms, npts = fit(s, e)
    floors = [f for n in names if (f := floor_us(rows_by_sweep[n], level)) is not None]
    src = "; ".join(f"{n} ({cite(rows_by_sweep[n][0])})" for n in names)
    text = f"{what}: fit of busbw = eff_max x link x S/(S+h) on {npts} messages of 4 MiB..4 GiB (rms log error {rms:.3f}) of {src}"
    lat = param(median(floors), True, f"{what}: median over sweeps of the smallest time per call (<= "
                f"{SMALL_BYTES[level] >> 10} KiB): " + ", ".join(f"{f:.1f} us" for f in floors) + f" [{src}]") \
        if floors else None
    return param(eff, True, text), param(h, True, text), lat


def _point_eff(rows: list[Row], half: float) -> tuple[float, str]:
    """eff_max of single large-message rows given the half size: mean of busbw/link x (S+h)/S."""
    vals = [busbw(r) / link_of(r) * (float(r["size_bytes"]) + half) / float(r["size_bytes"]) for r in rows]
    return sum(vals) / len(vals), ", ".join(f"{r['busbw_GBps']} GB/s at {int(r['ranks'])} ranks, "
                                            f"{int(float(r['size_bytes'])) >> 20} MiB ({cite(r)})" for r in rows)


def _triple(eff: Param, half: Param, lat: Param | None) -> dict[str, Param]:
    if lat is None:
        raise ValueError(f"no small message for the latency floor of {eff['source']}")
    return {"eff_max": eff, "half_bytes": half, "latency_us": lat}


Triple = dict[str, Param]
"""{"eff_max", "half_bytes", "latency_us"} of one (silicon, level, kind)."""
Table = dict[str, dict[str, Triple]]
"""silicon -> collective kind -> its triple."""


def params(rows: list[Row]) -> dict[str, dict[str, Any]]:
    """Per silicon: the scale-up and scale-out bus-bandwidth model of every collective kind."""
    sw = _sweeps(rows)
    up = _default_all_reduce(sw)
    ring_ar = _ring_all_reduce(rows, sw, up)
    mesh_check = _cdna3_all_reduce(sw, up)
    _scale_up_kinds(sw, up, ring_ar, mesh_check[1])
    _ampere_scale_up(sw, up)
    up_exp = _scale_up_exponent(sw)
    out_p, e_hop, h_hop = _scale_out_all_reduce(sw)
    out_exp = _scale_out_exponent(sw, e_hop, h_hop)
    _scale_out_kinds(out_p, sw["ib-write-bw"][0])
    return _assemble(up, ring_ar, out_p, up_exp, out_exp, mesh_check)


def _default_all_reduce(sw: dict[str, list[Row]]) -> Table:
    """Scale-up all-reduce of each measured silicon with NCCL's (RCCL's) default algorithm."""
    up: Table = defaultdict(dict)
    # ---- scale-up all-reduce: the default algorithm of an 8-GPU node
    defaults = {"ampere": ["azure-a100-sxm-80gb", "stas00-a100-8gpu"],
                "hopper": ["azure-h100-sxm", "azure-h200-sxm", "stas00-h200-8gpu"],
                "blackwell": ["stas00-b200-8gpu"], "cdna3": ["azure-mi300x"]}
    for sil, names in defaults.items():
        algo = "NVLS (NCCL's default on an 8-GPU NVSwitch node)" if NVSWITCH.get(sil) else "ring"
        eff, half, lat = _fit_param(sw, names, "scale-up", f"{sil} all-reduce, {algo}")
        up[sil]["all-reduce"] = _triple(eff, half, lat)
    return up


def _ring_all_reduce(rows: list[Row], sw: dict[str, list[Row]], up: Table) -> dict[str, Triple]:
    """Scale-up ring all-reduce of the NVSwitch silicons with NVLS (hopper, blackwell)."""
    ring_ar: dict[str, Triple] = {}
    # ring all-reduce below the NVLS threshold (hopper, blackwell)
    h_ring_src = {"hopper": "xla-h100-sxm-all-reduce-8", "blackwell": "azure-gb200"}
    for sil in ("hopper", "blackwell"):
        _, h, _ = _fit_param(sw, [h_ring_src[sil]], "scale-up", f"{sil} ring all-reduce shape")
        ring_rows = [r for r in rows if r["silicon"] == sil and r["level"] == "scale-up"
                     and r["kind"] == "all-reduce" and r["algo"] == "ring" and r["sweep"].startswith("stas00")]
        ring_eff, text = _point_eff(ring_rows, h["value"])
        ring_ar[sil] = _triple(
            param(ring_eff, True, f"{sil} ring all-reduce (NVLS off or below {NVSWITCH[sil]} ranks): large-message points "
                  f"{text} divided by S/(S+h) with h from the {h_ring_src[sil]} sweep"),
            {**h, "source": f"{sil} ring all-reduce half size from the {h_ring_src[sil]} sweep: {h['source']}"},
            borrowed(up[sil]["all-reduce"]["latency_us"], f"no {sil} ring small-message sweep: the default "
                     "algorithm's floor"))
    return ring_ar


def _cdna3_all_reduce(sw: dict[str, list[Row]], up: Table) -> tuple[float, str]:
    """Averages a second source into cdna3's all-reduce eff_max (in ``up``); returns the mesh check
    (2-GPU / 8-GPU MI300X all-reduce busbw, citation of the 2-GPU row)."""
    # cdna3: the 8-GPU point of a second source joins the Azure sweep's eff (mean)
    mi8 = [r for r in sw["stas00-mi300x-ranks"] if r["ranks"] == "8"]
    e8, text8 = _point_eff(mi8, up["cdna3"]["all-reduce"]["half_bytes"]["value"])
    e_az = up["cdna3"]["all-reduce"]["eff_max"]
    up["cdna3"]["all-reduce"]["eff_max"] = param((e_az["value"] + e8) / 2, True,
                                                 f"mean of the Azure fit {e_az['value']:.3f} and {text8}; "
                                                 + e_az["source"])
    mi2 = next(r for r in sw["stas00-mi300x-ranks"] if r["ranks"] == "2")
    return busbw(mi2) / busbw(mi8[0]), cite(mi2)


def _scale_up_kinds(sw: dict[str, list[Row]], up: Table, ring_ar: dict[str, Triple], mi2_cite: str) -> None:
    """Adds all-gather, reduce-scatter, all-to-all and send/recv within a node to ``up``."""
    # ---- all-gather / reduce-scatter: hopper's measured ratio to ring all-reduce at 16 GiB, the
    # ring all-reduce half size (a ring's per-step latency and chunk give AG, RS and AR one S/(S+h))
    h_ag = {k: next(r for r in sw["stas00-h200-algo"] if r["kind"] == k) for k in ("all-gather", "reduce-scatter")}
    ar16 = next(r for r in sw["stas00-h200-algo"] if r["kind"] == "all-reduce" and r["algo"] == "ring"
            and float(r["size_bytes"]) == float(h_ag["all-gather"]["size_bytes"]))
    # ---- all-to-all and send/recv: XLA sweeps; send/recv eff_max from copy-engine P2P tests
    a2a = {"hopper": "xla-h100-sxm-all-to-all-8", "blackwell": "xla-b200-all-to-all-8", "cdna3": "xla-mi300x-all-to-all-8"}
    perm = {"hopper": "xla-h100-sxm-send-recv-8", "blackwell": "xla-b200-send-recv-8", "cdna3": "xla-mi300x-send-recv-8"}
    p2p = _p2p(sw)
    for sil in ("ampere", "hopper", "blackwell", "cdna3"):
        ring = ring_ar.get(sil, up[sil]["all-reduce"])
        for kind, r in h_ag.items():
            up[sil][kind] = _ring_kind(sil, kind, r, ar16, ring)
        if sil in a2a:
            eff, half, lat = _fit_param(sw, [a2a[sil]], "scale-up", f"{sil} all-to-all (XLA GPU runtime over "
                                        "NCCL/RCCL, SKU not stated; its all-reduce runs 5-20% under nccl-tests')")
            up[sil]["all-to-all"] = _triple(eff, half, lat)
        if sil in perm:
            up[sil]["send-recv"] = _send_recv(sil, perm[sil], sw[perm[sil]], p2p.get(sil), mi2_cite)


def _p2p(sw: dict[str, list[Row]]) -> dict[str, list[Row]]:
    """The copy-engine P2P bandwidth rows by silicon."""
    p2p: dict[str, list[Row]] = {r["silicon"]: [] for r in sw["p2p"]}
    for r in sw["p2p"]:
        p2p[r["silicon"]].append(r)
    return p2p


def _ring_kind(sil: str, kind: str, r: Row, ar16: Row, ring: Triple) -> Triple:
    """All-gather or reduce-scatter: the ring all-reduce scaled by hopper's measured busbw ratio."""
    ratio = busbw(r) / busbw(ar16)
    why = (("" if sil == "hopper" else "derived: ") + f"{kind} = ring all-reduce eff_max x {ratio:.3f}, the "
           f"H200 {kind}/ring all-reduce busbw ratio at 16 GiB ({cite(r)}; {cite(ar16)})")
    return _triple(
        {**param(ring["eff_max"]["value"] * ratio, sil == "hopper", why), "from": [ring["eff_max"]["source"]]},
        borrowed(ring["half_bytes"], f"derived: {kind} half size = ring all-reduce's (same ring steps and "
                 "chunks)"),
        {**param(ring["latency_us"]["value"] / 2, False, f"derived: {kind} latency = half the all-reduce "
                 "floor (half the ring steps)"), "from": [ring["latency_us"]["source"]]})


def _send_recv(sil: str, name: str, sweep: list[Row], p2p: list[Row] | None, mi2_cite: str) -> Triple:
    """Send/recv within a node: eff_max from P2P tests (else the sweep's plateau), half size and
    latency from the XLA collective-permute sweep ``name``."""
    s, e = points(sweep)
    if p2p is not None:
        vals = [float(r["busbw_GBps"]) / link_of(r) for r in p2p]
        eff_v = sum(vals) / len(vals)
        eff_src = ("copy-engine P2P unidirectional bandwidth / link: " + ", ".join(
            f"{r['busbw_GBps']} GB/s ({cite(r)})" for r in p2p))
        _, h_v, rms, n = fit(s, e, eff=eff_v)
    else:
        eff_v, h_v, rms, n = fit(s, e)
        eff_src = (f"XLA collective-permute plateau: one peer is reached over one xGMI link of the mesh "
                   f"(cf. the 2-GPU all-reduce, {mi2_cite})")
    src = f"{name} ({cite(sweep[0])})"
    lat_us = floor_us(sweep, "scale-up")
    if lat_us is None:
        raise ValueError(f"{src}: no message of <= {SMALL_BYTES['scale-up']} bytes for the latency floor")
    return _triple(
        param(eff_v, True, f"{sil} send/recv: {eff_src}"),
        param(h_v, True, f"{sil} send/recv half size: fit of the XLA collective-permute sweep (8 pairs) at "
              f"eff_max {eff_v:.3f} on {n} messages of 4 MiB..4 GiB, rms log error {rms:.3f} [{src}]"),
        param(lat_us, True, f"{sil} send/recv latency: smallest time per call of {src}"))


def _ampere_scale_up(sw: dict[str, list[Row]], up: Table) -> None:
    """Adds ampere's all-to-all and send/recv (no XLA sweep) to ``up``."""
    p2p = _p2p(sw)
    # ampere: all-to-all from hopper (both NVSwitch nodes), send/recv half size and latency from hopper
    up["ampere"]["all-to-all"] = {k: borrowed(v, "no ampere all-to-all sweep: hopper's (NVSwitch node, ratio 1)")
                                  for k, v in up["hopper"]["all-to-all"].items()}
    vals = [float(r["busbw_GBps"]) / link_of(r) for r in p2p["ampere"]]
    up["ampere"]["send-recv"] = {
        "eff_max": param(sum(vals) / len(vals), True, "ampere send/recv: copy-engine P2P unidirectional bandwidth / "
                         "link: " + ", ".join(f"{r['busbw_GBps']} GB/s ({cite(r)})" for r in p2p["ampere"])),
        "half_bytes": borrowed(up["hopper"]["send-recv"]["half_bytes"], "no ampere send/recv sweep: hopper's"),
        "latency_us": borrowed(up["hopper"]["send-recv"]["latency_us"], "no ampere send/recv sweep: hopper's")}


def _scale_up_exponent(sw: dict[str, list[Row]]) -> Param:
    """Exponent of the scale-up half size in the group size."""
    # ---- ranks: the half size grows with the group (more ring steps); exponent from XLA all-reduce
    # and all-to-all on 8 (B200 node) against 64 and 72 (GB200 NVL72) GPUs
    exps = []
    for kind in ("all-reduce", "all-to-all"):
        _, h8, _ = _fit_param(sw, [f"xla-b200-{kind}-8"], "scale-up", "")
        for n in (64, 72):
            _, hn, _ = _fit_param(sw, [f"xla-gb200-{kind}-{n}"], "scale-up", "")
            exps.append(math.log(hn["value"] / h8["value"]) / math.log((n - 1) / 7))
    return param(sum(exps) / len(exps), True, "exponent p of half_bytes(n) = half_bytes(8) ((n-1)/7)^p: mean over "
                 "XLA all-reduce and all-to-all of log(h_n/h_8)/log((n-1)/7) for n = 64, 72 (GB200 NVL72) against "
                 f"8 (B200): {', '.join(f'{x:.3f}' for x in exps)} [{cite(sw['xla-gb200-all-reduce-64'][0])}]")


def _hf_playbook(sw: dict[str, list[Row]]) -> list[Row]:
    """The HF playbook's multi-node all-reduce rows, by node count."""
    return sorted(sw["hf-playbook-nodes"], key=lambda r: int(r["nodes"]))


def _scale_out_all_reduce(sw: dict[str, list[Row]]) -> tuple[Table, float, float]:
    """Scale-out all-reduce of blackwell, hopper and ampere, with hopper's unrounded (eff_max, half_bytes)."""
    # ---- scale-out
    out_p: Table = defaultdict(dict)
    eff, half, lat = _fit_param(sw, ["stas00-b200-4node"], "scale-out",
                                "blackwell all-reduce across 4 nodes x 8 (EFA v4, 8 x 400 Gb/s per node), NCCL default")
    out_p["blackwell"]["all-reduce"] = _triple(eff, half, lat)
    assert lat is not None  # _triple raised otherwise
    out_p["hopper"]["all-reduce"], e_hop, h_hop = _hopper_scale_out(sw, lat)
    dgx = sw["dgx-a100-multinode"][0]
    out_p["ampere"]["all-reduce"] = _triple(
        param(busbw(dgx) / link_of(dgx), True, f"ampere scale-out: {dgx['busbw_GBps']} GB/s multi-node DGX-A100 "
              f"all-reduce busbw / (8 x 25 GB/s HDR NICs), read as the large-message plateau ({cite(dgx)})"),
        borrowed(out_p["hopper"]["all-reduce"]["half_bytes"], "no ampere sweep across nodes: hopper's half size"),
        borrowed(lat, "no ampere small-message sweep across nodes: blackwell's"))
    return out_p, e_hop, h_hop


def _hopper_scale_out(sw: dict[str, list[Row]], lat: Param) -> tuple[Triple, float, float]:
    """Hopper's scale-out all-reduce (latency: blackwell's ``lat``) and its unrounded (eff_max, half_bytes)."""
    # hopper: p5en ring at 4 GiB and the HF playbook's 4-node point, both 32 ranks: two equations
    # E S/(S+h) = e for (E, h)
    p5 = next(r for r in sw["stas00-h200-4node"] if r["algo"] == "ring")
    hf4 = next(r for r in _hf_playbook(sw) if r["nodes"] == "4")
    s1, e1 = float(p5["size_bytes"]), busbw(p5) / link_of(p5)
    s2, e2 = float(hf4["size_bytes"]), busbw(hf4) / link_of(hf4)
    q = e1 / e2
    h_hop = (q - 1) * s1 * s2 / (s1 - q * s2)
    e_hop = e1 * (s1 + h_hop) / s1
    txt = (f"solved from two 32-rank all-reduce points: {p5['busbw_GBps']} GB/s ring at 4 GiB ({cite(p5)}) and "
           f"{hf4['busbw_GBps']} GB/s at 256 MiB ({cite(hf4)}), each / (8 x 50 GB/s NICs)")
    return _triple(param(e_hop, True, "hopper scale-out " + txt),
                   param(h_hop, True, "hopper scale-out " + txt),
                   borrowed(lat, "no hopper small-message sweep across nodes: blackwell's")), e_hop, h_hop


def _scale_out_exponent(sw: dict[str, list[Row]], e_hop: float, h_hop: float) -> Param:
    """Exponent of the scale-out half size in the group size, given hopper's eff_max and half size."""
    # ranks: HF playbook 256 MiB all-reduce on 4..64 nodes (rings), with hopper's eff_max
    hf = _hf_playbook(sw)
    xs, ys = [], []
    for r in hf:
        if int(r["nodes"]) < 4:
            continue
        e_r = busbw(r) / link_of(r)
        xs.append(math.log((int(r["ranks"]) - 1) / 31))
        ys.append(math.log(float(r["size_bytes"]) * (e_hop / e_r - 1) / h_hop))
    slope = float(np.dot(xs, ys) / np.dot(xs, xs))
    return param(slope, True, "exponent p of half_bytes(n) = half_bytes(32) ((n-1)/31)^p: least squares through "
                 "the origin on the HF playbook's 256 MiB all-reduce over 4, 8, 16, 32 and 64 nodes of 8 H100 "
                 f"with hopper's eff_max [{cite(hf[0])}]")


def _send_recv_half(anchor: Row) -> tuple[float, str]:
    """Half size of a point-to-point transfer across nodes from one RDMA write stream at ``anchor``'s
    message size S and share e of the adapter's line rate, the stream's plateau taken as the line
    rate (the most an adapter carries): e = S / (S + h), h = S (1 / e - 1)."""
    size, e = float(anchor["size_bytes"]), busbw(anchor) / float(anchor["nic_GBps_per_device"])
    return size * (1.0 / e - 1.0), (f"{busbw(anchor):.2f} GB/s = {e:.4f} of one {anchor['nic_GBps_per_device']} "
                                    f"GB/s adapter at {int(size):,}-byte messages ({cite(anchor)})")


def _scale_out_kinds(out_p: Table, anchor: Row) -> None:
    """Adds all-gather, reduce-scatter, all-to-all and send/recv across nodes, from each all-reduce, to
    ``out_p``; send/recv's half size from the RDMA write ``anchor`` (a ring all-reduce's half size over its
    32 steps, the derivation before it, held an 8 MB transfer at 39% of the line rate: 12.5 MB, set by a
    cluster whose 4-node all-reduce ran at 160 GB/s, not by the transfer)."""
    for d in out_p.values():
        ar = d["all-reduce"]
        for kind in ("all-gather", "reduce-scatter", "all-to-all"):
            d[kind] = {k: borrowed(v, f"no {kind} measurement across nodes: the all-reduce values (NIC-bound "
                                   "rings)") for k, v in ar.items()}
        half, said = _send_recv_half(anchor)
        d["send-recv"] = {
            "eff_max": borrowed(ar["eff_max"], "no send/recv measurement across nodes: the all-reduce NIC "
                                "efficiency"),
            "half_bytes": param(half, True, f"send/recv across nodes: the half size of one RDMA write stream "
                                f"measured at {said}, its plateau the line rate: h = S (1 / e - 1); NCCL's "
                                "per-message cost is the latency"),
            "latency_us": {**param(ar["latency_us"]["value"] / 62, False, "derived: send/recv across nodes = the "
                                   "all-reduce floor / 62 (one of a 32-rank ring's 2 x 31 steps)"),
                           "from": [ar["latency_us"]["source"]]}}


def _assemble(up: dict, ring_ar: dict, out_p: dict, up_exp: Param, out_exp: Param,
              mesh_check: tuple[float, str]) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = {}
    for sil, vendor in silicons().items():
        entry: dict[str, Any] = {}
        for level, table, level_exp in (("scale-up", up, up_exp), ("scale-out", out_p, out_exp)):
            exp = level_exp
            if sil in table:
                kinds = table[sil]
            elif NEIGHBOUR.get(sil) in table:
                nb = NEIGHBOUR[sil]
                base = ring_ar.get(nb)
                kinds = {k: {n: borrowed(v, f"no {sil} {level} measurement: {nb}'s (nearest measured silicon of "
                                            "the vendor; fraction of the own catalog link)")
                             for n, v in d.items()} for k, d in table[nb].items()}
                if base and level == "scale-up":  # NVLS only on NVSwitch silicons
                    kinds["all-reduce"] = {n: borrowed(v, f"no {sil} measurement: {nb}'s ring all-reduce")
                                           for n, v in base.items()}
            else:
                kinds = _vendor_default(sil, vendor, level, table)
            owner = "blackwell" if level == "scale-up" else "hopper"
            if sil != owner:
                exp = borrowed(exp, f"no {sil} group-size sweep: the {level} exponent measured on {owner}")
            lvl: dict[str, Any] = {"ref_ranks": REF_RANKS[level], "half_bytes_exponent": exp, "kinds": kinds}
            if level == "scale-up":
                lvl["nvls_min_ranks"] = NVSWITCH.get(sil)
                lvl["ring_all_reduce"] = ring_ar.get(sil)
                lvl["mesh"] = sil in MESH
                if sil in MESH:
                    lvl["mesh_check"] = {"value": sig(mesh_check[0]), "expected": sig(1 / 7),
                                         "source": f"2-GPU / 8-GPU MI300X all-reduce busbw ({mesh_check[1]})"}
            entry[level] = lvl
        result[sil] = entry
    return result


def steps(kind: str, n: int) -> int:
    """Ring steps of one collective over n ranks (send/recv: one)."""
    return 1 if kind == "send-recv" else (2 * (n - 1) if kind == "all-reduce" else n - 1)


def _vendor_default(sil: str, vendor: str, level: str, table: dict) -> dict[str, dict[str, Param]]:
    """No measurement at this level: eff_max = the vendor's link_efficiency; half size from the
    measured reference silicon; latency = the vendor's per-step link_latency_us x the ring steps of
    the reference group (x 0.25 within a node, as predict/step_model/collectives.py charges intra-node steps)."""
    eff, eff_src = vendor_knob(vendor, "link_efficiency")
    step, lat_src = vendor_knob(vendor, "link_latency_us")
    frac = 0.25 if level == "scale-up" else 1.0
    ref = "blackwell" if level == "scale-out" else "hopper"
    out = {}
    for kind in KINDS:
        n_steps = steps(kind, REF_RANKS[level])
        out[kind] = {"eff_max": param(eff, False, f"no {sil} {level} measurement: {eff_src}"),
                     "half_bytes": borrowed(table[ref][kind]["half_bytes"],
                                            f"no {sil} {level} measurement: the {ref} half size"),
                     "latency_us": param(step * frac * n_steps, False,
                                         f"no {sil} {level} measurement: {step:g} us per step x {n_steps} steps of a "
                                         f"{REF_RANKS[level]}-rank {kind}" + (" x 0.25 (intra-node)" if frac < 1 else "")
                                         + f" ({lat_src})")}
    return out
