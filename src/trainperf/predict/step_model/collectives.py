"""Collective communication time: bytes, the link crossed, the algorithm, latency.

Bus volumes per device for a buffer of ``S`` bytes over ``n`` ranks (Thakur et al. 2005;
NCCL's nccl-tests "bus bandwidth" definitions):

* all-gather / reduce-scatter (ring): ``(n-1)/n * S``
* all-reduce (ring = reduce-scatter + all-gather): ``2 (n-1)/n * S``
* all-to-all: ``(n-1)/n * S``
* send/recv: ``S``

A group of ``n`` ranks spanning ``N`` nodes with ``k = n/N`` members per node runs
hierarchically (NCCL rings/trees are rail-aligned: each node's data crosses the network once
per node, over the ``k`` NICs of the group's members): intra-node stage
``vol * (k-1)/k * S / (intra_bw * eff_up(S))``, inter-node stage ``vol * (N-1)/N * S / (k *
inter_bw * eff_out(S))``; the stages pipeline, so the slower one sets the time. The achieved
fraction of each level's wire rate comes from the silicon's measured collectives (nccl-tests /
rccl-tests bus bandwidth against message size: ``eff(S) = eff_max * S / (S + half)``, see
:mod:`trainperf.predict.kernels.collectives`), and every call pays the level's latency. "Node"
here is the scale-up domain (NVLink/xGMI/ICI). Functions accept floats or numpy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainperf import vec
from trainperf.predict.kernels.collectives import LevelModel, at_group
from trainperf.predict.step_model.layout import Flag, Layout, Num

VOLUME: dict[str, float] = {
    "all-gather": 1.0,
    "reduce-scatter": 1.0,
    "all-reduce": 2.0,
    "all-to-all": 1.0,
    "send-recv": 1.0,
}
"""Bus-volume factor of each collective, in units of ``(n-1)/n * S``."""


@dataclass(slots=True, eq=False)
class Group:
    """A process group of the mesh."""

    size: Num
    per_node: Num
    """Members within one scale-up domain."""
    nodes: Num
    """Scale-up domains the group spans."""


@dataclass(slots=True, eq=False)
class Fabric:
    """The links a layout's collectives cross and how fast the stack drives them."""

    intra_bytes_per_s: Num
    inter_bytes_per_s: Num
    up: LevelModel
    """Measured collective behaviour within a domain (:func:`~trainperf.predict.kernels.collectives.level_model`)."""
    out: LevelModel
    link_fraction: Num
    """Share of the measured bus bandwidth the stack's collectives reach (a fitted knob)."""
    domain: Num
    """Devices per scale-up domain."""

    def group(self, degree: Num, stride: Num) -> Group:
        """The group of ``degree`` ranks whose members are ``stride`` ranks apart."""
        per_node, nodes = group_layout(degree, stride, self.domain)
        return Group(degree, per_node, nodes)

    def time_s(self, kind: str, size_bytes: Num, g: Group, calls: Num = 1.0) -> Num:
        """Seconds of ``calls`` collectives of ``kind`` moving ``size_bytes`` in all over ``g``."""
        return collective_time_s(kind, size_bytes, g.size, g.per_node, g.nodes, self.intra_bytes_per_s,
                                 self.inter_bytes_per_s, self.up, self.out, self.link_fraction, calls)


def fabric_of(lay: Layout, link_fraction: Num) -> Fabric:
    """The :class:`Fabric` of a layout; collectives are priced by the scale-up domains a group spans."""
    return Fabric(lay.device.intra_bytes_per_s, lay.device.inter_bytes_per_s, lay.kernels.link_up,
                  lay.kernels.link_out, link_fraction, lay.mesh.scale_up_domain)


@dataclass(slots=True, eq=False)
class CommCost:
    """One kind of collective over a step: what it takes and what of it the step waits for."""

    time_s: Num
    exposed_s: Num
    """Seconds on the critical path (not hidden behind compute)."""
    bytes_per_device: Num
    """Bytes each device sends per step (ring bus volume)."""
    group: Group


@dataclass(slots=True, eq=False)
class OnCriticalPath:
    """A collective that runs between a micro-batch's kernels, with nothing to hide behind."""

    comm: CommCost
    exposed_mb_s: Num
    """Exposed seconds per micro-batch (they lengthen every pipeline slot, and so the bubble)."""
    exposed_step_s: Num = 0.0
    """Exposed seconds once per step, after the micro-batches (outside the pipeline's slots)."""


def ring_bytes_per_device(kind: str, size_bytes: Num, n: Num) -> Num:
    """Bytes each rank sends (= receives) in a ring collective over ``n`` ranks."""
    if kind == "send-recv":
        return size_bytes * 1.0
    return VOLUME[kind] * (n - 1.0) / n * size_bytes


def group_layout(degree: Num, stride: Num, devices_per_node: Num) -> tuple[Num, Num]:
    """(members per node, nodes spanned) of a process group of ``degree`` ranks whose members are
    ``stride`` ranks apart (inner mesh dimensions), on nodes of ``devices_per_node`` devices."""
    per_node = vec.maximum(1.0, vec.minimum(degree, devices_per_node / stride))
    per_node = vec.where(stride >= devices_per_node, 1.0, per_node)
    nodes = vec.maximum(1.0, degree / per_node)
    return per_node, nodes


def _params_s(model: LevelModel, kind: str, ranks: Num, scale_out: bool) -> tuple[Num, Num, Num]:
    """(eff, half_bytes, latency_s) of ``kind`` at a group of ``ranks`` on one level
    (:func:`~trainperf.predict.kernels.collectives.at_group`)."""
    eff, half, lat = at_group(model, kind, ranks, scale_out)
    return eff, half, lat * 1e-6


def collective_time_s(kind: str, size_bytes: Num, n: Num, per_node: Num, nodes: Num, intra_bw: Num, inter_bw: Num,
                      up: LevelModel, out: LevelModel, link_fraction: Num = 1.0, calls: Num = 1.0) -> Num:
    """Seconds of ``calls`` collectives moving ``size_bytes`` in all (see the module docstring).

    ``size_bytes``: the full buffer (all-gather output, reduce-scatter input, all-reduce buffer),
    summed over the calls. ``intra_bw``/``inter_bw``: per-device, per-direction link bandwidth in
    bytes/s (the catalog's scale-up and scale-out figures). ``up``/``out``: the silicon's measured
    collective behaviour per level: a stage moving ``S`` bytes per call runs its bus volume at
    ``eff * bw * S / (S + half)`` and no call is faster than the level's latency floor.
    ``link_fraction``: the share of that the software stack gets. 0 for a group of one.
    """
    per_call = size_bytes / calls
    if kind == "send-recv":
        return _send_recv_s(per_call, n, nodes, intra_bw, inter_bw, up, out, link_fraction, calls)
    k = vec.maximum(per_node, 1.0)
    e_u, h_u, l_u = _params_s(up, kind, k, False)
    if kind == "all-to-all":
        return _all_to_all_s(per_call, n, k, nodes, intra_bw, inter_bw, (e_u, h_u, l_u),
                             _params_s(out, "send-recv", n, True), link_fraction, calls)
    e_o, h_o, l_o = _params_s(out, kind, n, True)
    vol = VOLUME[kind]
    t_intra = vol * (k - 1.0) / k * (per_call + h_u) / (intra_bw * e_u * link_fraction)
    t_inter = vol * (nodes - 1.0) / nodes * (per_call + h_o) / (k * inter_bw * e_o * link_fraction)
    t_intra = vec.where(k > 1, vec.maximum(t_intra, l_u), 0.0)
    t_inter = vec.where(nodes > 1, vec.maximum(t_inter, l_o), 0.0)
    return vec.where(n > 1, calls * vec.maximum(t_intra, t_inter), 0.0)


def _send_recv_s(per_call: Num, n: Num, nodes: Num, intra_bw: Num, inter_bw: Num, up: LevelModel,
                 out: LevelModel, link_fraction: Num, calls: Num) -> Num:
    """Seconds of ``calls`` point-to-point transfers of ``per_call`` bytes: over the scale-up
    links within a domain, the NIC across domains, no faster than the level's latency."""
    inter: Flag = nodes > 1
    e_u, h_u, l_u = _params_s(up, "send-recv", n, False)
    e_o, h_o, l_o = _params_s(out, "send-recv", n, True)
    bw = vec.where(inter, inter_bw * e_o, intra_bw * e_u) * link_fraction
    t = (per_call + vec.where(inter, h_o, h_u)) / bw
    return vec.where(n > 1, calls * vec.maximum(t, vec.where(inter, l_o, l_u)), 0.0)


def _all_to_all_s(per_call: Num, n: Num, k: Num, nodes: Num, intra_bw: Num, inter_bw: Num, up: tuple[Num, Num, Num],
                  out: tuple[Num, Num, Num], link_fraction: Num, calls: Num) -> Num:
    """Seconds of ``calls`` all-to-alls of ``per_call`` bytes a rank over ``n`` ranks, ``k`` a node.

    An all-to-all is ``n-1`` concurrent sends of ``S/n`` bytes (NCCL: grouped send/recv; PXN
    routes each cross-node send through the NIC on the destination's rail), not a ring: within
    the node the ``k`` members exchange ``S k/n`` bytes each as a ``k``-rank all-to-all (the
    measured scale-up curve); across nodes a rank's ``(N-1)/N S`` bytes leave through its own NIC
    as one stream, priced as a send/recv of that size (the scale-out point-to-point level: NIC
    efficiency, half size, latency floor). The two run at once: the slower sets the time. No
    all-to-all across nodes was measured (docs/KERNELS.md): this is the textbook exchange at the
    NICs' measured point-to-point behaviour, not a fit.
    """
    e_u, h_u, l_u = up
    e_o, h_o, l_o = out
    local = per_call * k / n
    t_intra = (k - 1.0) / k * (local + h_u) / (intra_bw * e_u * link_fraction)
    t_intra = vec.where(k > 1, vec.maximum(t_intra, l_u), 0.0)
    cross = (nodes - 1.0) / nodes * per_call
    t_inter = vec.where(nodes > 1, vec.maximum((cross + h_o) / (inter_bw * e_o * link_fraction), l_o), 0.0)
    return vec.where(n > 1, calls * vec.maximum(t_intra, t_inter), 0.0)


def link_name(nodes: float, kind: str = "gpu") -> str:
    """'inter-node' when the group spans several scale-up domains, else 'intra-node' (scalar
    input); on a TPU (``kind`` 'tpu') the domain is a slice: 'DCN (inter-slice)' / 'ICI
    (intra-slice)'."""
    if kind == "tpu":
        return "DCN (inter-slice)" if float(nodes) > 1 else "ICI (intra-slice)"
    return "inter-node" if float(nodes) > 1 else "intra-node"


def exposed_s(comm_s: Num, window_s: Num, overlap: Num) -> Num:
    """Exposed part of a collective that may overlap a compute window.

    ``(1 - overlap) * comm`` is always exposed (comm kernels share the device with compute and
    synchronise); of the rest, whatever does not fit in the window is exposed too.
    """
    return (1.0 - overlap) * comm_s + vec.maximum(0.0, overlap * comm_s - window_s)
