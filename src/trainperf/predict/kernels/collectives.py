"""Collective bus bandwidth against message size, per silicon, link level and kind.

Bus bandwidth of one collective of ``S`` bytes (nccl-tests' busbw: algbw x 2(n-1)/n for
all-reduce, x (n-1)/n for all-gather, reduce-scatter and all-to-all, x 1 for send/recv; ``S``
the full buffer: all-gather output, reduce-scatter input, all-reduce buffer, per-device
all-to-all buffer, the bytes one rank sends)::

    busbw(S) = eff_max * link * S / (S + half_bytes)

``link`` is the catalog's per-device, per-direction bandwidth of the level:
``intra_node_link_GB_per_s`` for ``scale-up`` (NVLink/xGMI/ICI within the domain), and for
``scale-out`` the NICs: a ring across nodes crosses every node's NICs once, so its busbw
approaches devices_per_node x ``inter_node_link_GB_per_s`` (the node's NIC total), which is what
``eff_max`` is a fraction of there. ``latency_us`` is the small-message floor of one call; charge
``max(latency_us, bus_volume / busbw(S))`` per call, not their sum (``half_bytes`` already holds
the per-step latencies at large sizes).

Group size (``ranks``): the parameters are fitted on 8-GPU nodes (scale-up) and 4 nodes x 8
(scale-out). A different group changes them as follows:

* half_bytes grows as ((ranks-1)/(ref-1))^p (more ring steps per byte): p fitted on XLA's 8-, 64- and
  72-GPU NVLink groups (scale-up) and on the HF playbook's 4..64-node all-reduce (scale-out);
* scale-out latency grows with the ring steps, (ranks-1)/(ref-1); scale-up latency is held;
* NVSwitch (Hopper, Blackwell): all-reduce uses NVLS (in-switch reduction) from 5 (Hopper) / 6
  (Blackwell) GPUs of a node, a ring below: both are fitted; rings elsewhere;
* xGMI mesh (CDNA): a group of n of a node's 8 GPUs uses n-1 of each GPU's 7 links, so eff_max
  scales by (n-1)/7 (send/recv to one peer always uses one link);
* across nodes NCCL runs rings (NVLSTree was measured slower on EFA); SHARP was not measured.
Fitting, data and fallbacks: docs/KERNELS.md.
"""

from __future__ import annotations

from functools import cache, lru_cache
from typing import Any

from trainperf.errors import SpecError, UnknownNameError
from trainperf.predict.kernels._params import check_silicon, params
from trainperf.predict.vec import is_nonbool_number

LEVELS = ("scale-up", "scale-out")
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "send-recv")


@cache
def _level(silicon: str, level: str) -> dict[str, Any]:
    check_silicon(silicon)
    if level not in LEVELS:
        raise UnknownNameError("level", level, LEVELS)
    return params()["collectives"][silicon][level]


def _triple(d: dict[str, Any]) -> tuple[float, float, float]:
    return d["eff_max"]["value"], d["half_bytes"]["value"], d["latency_us"]["value"]


def link_params(silicon: str, level: str, kind: str, ranks: Any = None) -> tuple[Any, Any, Any]:
    """(eff_max, half_bytes, latency_us) of a ``kind`` collective at ``level`` on ``silicon``.

    level: 'scale-up' or 'scale-out'; kind: all-reduce | all-gather | reduce-scatter | all-to-all |
    send-recv. ``ranks``: the group size (default: the reference group the values were fitted on,
    8 GPUs within a node, 32 = 4 nodes x 8 across nodes), an integer or a numpy array of them (the
    three results are then arrays); see the module docstring for what it changes. Bus bandwidth of
    S bytes = eff_max * link * S / (S + half_bytes).
    """
    if ranks is None or is_nonbool_number(ranks):
        return _link_params(silicon, level, kind, None if ranks is None else int(ranks))
    import numpy as np

    n = np.asarray(ranks)
    if n.dtype.kind not in "iuf" or (n < 2).any() or (n != np.round(n)).any():
        raise SpecError("ranks", "array", "integer group sizes of at least 2")
    lvl = _level(silicon, level)
    ref = lvl["ref_ranks"]
    base = np.array(_link_params(silicon, level, kind, None))
    out = np.broadcast_to(base, (*n.shape, 3)).copy()
    if kind == "all-reduce" and lvl.get("ring_all_reduce") and lvl.get("nvls_min_ranks"):
        ring = np.array(_triple(lvl["ring_all_reduce"]))
        out = np.where((n < lvl["nvls_min_ranks"])[..., None], ring, out)
    if kind != "send-recv":
        out[..., 1] *= ((n - 1) / (ref - 1)) ** lvl["half_bytes_exponent"]["value"]
        if level == "scale-out":
            out[..., 2] *= (n - 1) / (ref - 1)
        elif lvl.get("mesh"):
            out[..., 0] *= np.where(n < ref, (n - 1) / (ref - 1), 1.0)
    return out[..., 0], out[..., 1], out[..., 2]


@lru_cache(maxsize=4096)
def _link_params(silicon: str, level: str, kind: str, ranks: int | None) -> tuple[float, float, float]:
    lvl = _level(silicon, level)
    if kind not in KINDS:
        raise UnknownNameError("collective kind", kind, KINDS)
    ref = lvl["ref_ranks"]
    if ranks is not None and ranks < 2:
        raise SpecError("ranks", ranks, "an integer group size of at least 2 (or None for the reference group)")
    n = ref if ranks is None else ranks
    if kind == "all-reduce" and lvl.get("ring_all_reduce") and n < (lvl.get("nvls_min_ranks") or 0):
        eff, half, lat = _triple(lvl["ring_all_reduce"])
    else:
        eff, half, lat = _triple(lvl["kinds"][kind])
    if kind == "send-recv" or n == ref:
        return eff, half, lat
    half *= ((n - 1) / (ref - 1)) ** lvl["half_bytes_exponent"]["value"]
    if level == "scale-out":
        lat *= (n - 1) / (ref - 1)
    elif lvl.get("mesh") and n < ref:
        eff *= (n - 1) / (ref - 1)
    return eff, half, lat


def busbw_fraction(silicon: str, level: str, kind: str, size_bytes: Any, ranks: Any = None) -> Any:
    """eff_max * S / (S + half_bytes): bus bandwidth as a fraction of the level's catalog link
    bandwidth (see the module docstring); ``size_bytes`` and ``ranks`` may be numpy arrays."""
    eff, half, _ = link_params(silicon, level, kind, ranks)
    if is_nonbool_number(size_bytes) and isinstance(eff, float):
        if size_bytes <= 0:
            raise SpecError("size_bytes", size_bytes, "a positive number of bytes")
        return eff * size_bytes / (size_bytes + half)
    import numpy as np

    s = np.asarray(size_bytes, float)
    if (s <= 0).any():
        raise SpecError("size_bytes", "array", "positive numbers of bytes")
    return eff * s / (s + half)


@lru_cache(maxsize=256)
def level_model(silicon: str, level: str) -> tuple[Any, ...]:
    """One level's collective parameters at the reference group, as a hashable tuple for the
    vectorised step model: ``(ref_ranks, half_bytes_exponent, mesh, nvls_min_ranks,
    ring_all_reduce, kinds)``, ``ring_all_reduce`` ``("all-reduce", eff_max, half_bytes, latency_us)``
    or ``None``, ``kinds`` one such tuple per kind. :func:`link_params` applies the same group-size
    rules to one integer group."""
    lvl = _level(silicon, level)
    ring = lvl.get("ring_all_reduce")
    return (float(lvl["ref_ranks"]), float(lvl["half_bytes_exponent"]["value"]), bool(lvl.get("mesh")),
            float(lvl.get("nvls_min_ranks") or 0.0), ("all-reduce", *_triple(ring)) if ring else None,
            tuple((k, *_triple(lvl["kinds"][k])) for k in KINDS))
