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

from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any

from trainperf import vec
from trainperf.errors import SpecError, UnknownNameError
from trainperf.predict.kernels._params import check_silicon, params
from trainperf.vec import is_nonbool_number

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
    three results are then arrays); see :func:`at_group` for what it changes. Bus bandwidth of
    S bytes = eff_max * link * S / (S + half_bytes).
    """
    if kind not in KINDS:
        raise UnknownNameError("collective kind", kind, KINDS)
    model = level_model(silicon, level)
    if ranks is None:
        return model.by_kind[kind]
    if is_nonbool_number(ranks):
        if ranks < 2:
            raise SpecError("ranks", ranks, "an integer group size of at least 2 (or None for the reference group)")
        return _link_params(model, kind, int(ranks), level == "scale-out")
    import numpy as np

    n = np.asarray(ranks)
    if n.dtype.kind not in "iuf" or (n < 2).any() or (n != np.round(n)).any():
        raise SpecError("ranks", "array", "integer group sizes of at least 2")
    e, h, lat = (np.broadcast_to(np.asarray(x, float), n.shape)
                 for x in at_group(model, kind, n.astype(float), level == "scale-out"))
    return e, h, lat


@lru_cache(maxsize=4096)
def _link_params(model: LevelModel, kind: str, ranks: int, scale_out: bool) -> tuple[float, float, float]:
    eff, half, lat = at_group(model, kind, float(ranks), scale_out)
    return float(eff), float(half), float(lat)


def at_group(model: LevelModel, kind: str, ranks: Any, scale_out: bool) -> tuple[Any, Any, Any]:
    """(eff_max, half_bytes, latency_us) of ``kind`` at a group of ``ranks`` (a float, or a numpy
    array of them) on one level, scaled from the reference group: half size grows as
    ((ranks-1)/(ref-1))^p; latency across nodes with the ring steps; an xGMI mesh keeps
    (ranks-1)/(ref-1) of its links below the full node; NVSwitch all-reduce is NVLS from
    ``nvls_min_ranks`` GPUs and a ring below; send/recv is the same at any size. A group of one
    is priced as two (the step model zeroes it). The one definition of these rules: the step
    model and :func:`link_params` both call it."""
    eff, half, lat = model.by_kind[kind]
    ring = model.ring_all_reduce if kind == "all-reduce" else None
    if type(ranks) is float or type(ranks) is int:  # one group: plain Python (a prediction)
        if ring is not None and ranks < model.nvls_min_ranks:
            eff, half, lat = ring
        if kind == "send-recv":
            return eff, half, lat
        steps = (ranks - 1.0 if ranks > 2.0 else 1.0) / (model.ref_ranks - 1.0)
    else:
        if ring is not None and model.nvls_min_ranks:
            below = ranks < model.nvls_min_ranks
            eff, half, lat = (vec.where(below, r, x) for r, x in zip(ring, (eff, half, lat), strict=True))
        if kind == "send-recv":
            return eff, half, lat
        steps = vec.maximum(ranks - 1.0, 1.0) / (model.ref_ranks - 1.0)
    half = half * steps ** model.half_exponent
    if scale_out:
        lat = lat * steps
    elif model.mesh:
        eff = eff * vec.minimum(steps, 1.0)
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


@dataclass(frozen=True)
class LevelModel:
    """One link level's measured collective behaviour on a silicon, at the reference group
    (:func:`at_group` scales it to a group)."""

    ref_ranks: float
    """The group the values were fitted on (8 GPUs of a node; 4 nodes x 8 across nodes)."""
    half_exponent: float
    """``p`` of the half size's growth with the ring steps, ((ranks-1)/(ref-1))^p."""
    mesh: bool
    """xGMI mesh (CDNA): a smaller group uses fewer of each GPU's links."""
    nvls_min_ranks: float
    """NVSwitch in-switch all-reduce (NVLS) from this many GPUs of a node (0: none)."""
    ring_all_reduce: tuple[float, float, float] | None
    """(eff_max, half_bytes, latency_us) of the ring all-reduce below ``nvls_min_ranks``."""
    kinds: tuple[tuple[str, float, float, float], ...]
    """(kind, eff_max, half_bytes, latency_us) of each collective kind."""
    by_kind: dict[str, tuple[float, float, float]] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_kind", {k[0]: (k[1], k[2], k[3]) for k in self.kinds})


@lru_cache(maxsize=256)
def level_model(silicon: str, level: str) -> LevelModel:
    """The :class:`LevelModel` of one level ('scale-up' or 'scale-out') of a silicon."""
    lvl = _level(silicon, level)
    ring = lvl.get("ring_all_reduce")
    return LevelModel(float(lvl["ref_ranks"]), float(lvl["half_bytes_exponent"]["value"]), bool(lvl.get("mesh")),
                      float(lvl.get("nvls_min_ranks") or 0.0), _triple(ring) if ring else None,
                      tuple((k, *_triple(lvl["kinds"][k])) for k in KINDS))
