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
:mod:`trainperf.predict.kernels.collectives`), and every call pays the level's latency.
Functions accept floats or numpy arrays.
"""

from __future__ import annotations

import functools

from trainperf.predict import vec

VOLUME: dict[str, float] = {
    "all-gather": 1.0,
    "reduce-scatter": 1.0,
    "all-reduce": 2.0,
    "all-to-all": 1.0,
    "send-recv": 1.0,
}
"""Bus-volume factor of each collective, in units of ``(n-1)/n * S``."""

def ring_bytes_per_device(kind: str, size_bytes, n):
    """Bytes each rank sends (= receives) in a ring collective over ``n`` ranks."""
    if kind == "send-recv":
        return size_bytes * 1.0
    return VOLUME[kind] * (n - 1.0) / n * size_bytes


def group_layout(degree, stride, devices_per_node):
    """(members per node, nodes spanned) of a process group of ``degree`` ranks whose members are
    ``stride`` ranks apart (inner mesh dimensions), on nodes of ``devices_per_node`` devices."""
    per_node = vec.maximum(1.0, vec.minimum(degree, devices_per_node / stride))
    per_node = vec.where(stride >= devices_per_node, 1.0, per_node)
    nodes = vec.maximum(1.0, degree / per_node)
    return per_node, nodes


def level_model(silicon: str, level: str) -> tuple:
    """The silicon's measured collective behaviour at one link level, as a hashable tuple the
    vectorised model can carry: ``(ref_ranks, half_exponent, mesh, nvls_min_ranks, ring_all_reduce,
    kinds)`` with ``ring_all_reduce`` and each of ``kinds`` ``(kind, eff_max, half_bytes,
    latency_us)`` at the reference group (:mod:`trainperf.predict.kernels.collectives`)."""
    from trainperf.predict.kernels import collectives

    return collectives.level_model(silicon, level)


@functools.lru_cache(maxsize=256)
def _kinds(model: tuple) -> dict[str, tuple[float, float, float]]:
    return {k[0]: k[1:] for k in model[5]}


def _params_at(model: tuple, kind: str, ranks, scale_out: bool):
    """(eff, half_bytes, latency_s) of ``kind`` at a group of ``ranks`` (float or array) on one level,
    scaled from the reference group as :func:`trainperf.predict.kernels.collectives.link_params`
    does: half size grows as ((ranks-1)/(ref-1))^p, latency across nodes with the ring steps, an
    xGMI mesh keeps (ranks-1)/(ref-1) of its links, NVSwitch all-reduce is NVLS from
    ``nvls_min_ranks`` GPUs of a node and a ring below."""
    ref, p, mesh, nvls_min, ring_ar, _ = model
    eff, half, lat = _kinds(model)[kind]
    scalar = isinstance(ranks, float | int)
    if kind == "all-reduce" and ring_ar is not None and nvls_min:
        if scalar:
            if ranks < nvls_min:
                eff, half, lat = ring_ar[1:]
        else:
            below = ranks < nvls_min
            eff = vec.where(below, ring_ar[1], eff)
            half = vec.where(below, ring_ar[2], half)
            lat = vec.where(below, ring_ar[3], lat)
    if kind == "send-recv":
        return eff, half, lat * 1e-6
    steps = (max(ranks - 1.0, 1.0) if scalar else vec.maximum(ranks - 1.0, 1.0)) / (ref - 1.0)
    half = half * steps ** p
    if scale_out:
        lat = lat * steps
    elif mesh:
        eff = eff * (min(steps, 1.0) if scalar else vec.minimum(steps, 1.0))
    return eff, half, lat * 1e-6


def collective_time_s(kind: str, size_bytes, n, per_node, nodes, intra_bw, inter_bw, up: tuple, out: tuple,
                      link_fraction=1.0, calls=1.0):
    """Seconds of ``calls`` collectives moving ``size_bytes`` in all (see the module docstring).

    ``size_bytes``: the full buffer (all-gather output, reduce-scatter input, all-reduce buffer),
    summed over the calls. ``intra_bw``/``inter_bw``: per-device, per-direction link bandwidth in
    bytes/s (the catalog's scale-up and scale-out figures). ``up``/``out``: the silicon's measured
    collective behaviour per level (:func:`level_model`): a stage moving ``S`` bytes per call runs
    its bus volume at ``eff * bw * S / (S + half)`` and no call is faster than the level's latency
    floor. ``link_fraction``: the share of that the software stack gets. 0 for a group of one.
    """
    vol = VOLUME[kind]
    per_call = size_bytes / calls
    if kind == "send-recv":
        inter = nodes > 1
        e_u, h_u, l_u = _params_at(up, kind, n, False)
        e_o, h_o, l_o = _params_at(out, kind, n, True)
        bw = vec.where(inter, inter_bw * e_o, intra_bw * e_u) * link_fraction
        t = (per_call + vec.where(inter, h_o, h_u)) / bw
        return vec.where(n > 1, calls * vec.maximum(t, vec.where(inter, l_o, l_u)), 0.0)
    k = vec.maximum(per_node, 1.0)
    e_u, h_u, l_u = _params_at(up, kind, k, False)
    if kind == "all-to-all":
        return _all_to_all_s(per_call, n, k, nodes, intra_bw, inter_bw, (e_u, h_u, l_u),
                             _params_at(out, "send-recv", n, True), link_fraction, calls)
    e_o, h_o, l_o = _params_at(out, kind, n, True)
    t_intra = vol * (k - 1.0) / k * (per_call + h_u) / (intra_bw * e_u * link_fraction)
    t_inter = vol * (nodes - 1.0) / nodes * (per_call + h_o) / (k * inter_bw * e_o * link_fraction)
    t_intra = vec.where(k > 1, vec.maximum(t_intra, l_u), 0.0)
    t_inter = vec.where(nodes > 1, vec.maximum(t_inter, l_o), 0.0)
    return vec.where(n > 1, calls * vec.maximum(t_intra, t_inter), 0.0)


def _all_to_all_s(per_call, n, k, nodes, intra_bw, inter_bw, up: tuple, out: tuple, link_fraction, calls):
    """Seconds of ``calls`` all-to-alls of ``per_call`` bytes a rank over ``n`` ranks, ``k`` a node.

    An all-to-all is ``n-1`` concurrent sends of ``S/n`` bytes (NCCL: grouped send/recv; PXN
    routes each cross-node send through the NIC on the destination's rail), not a ring: within
    the node the ``k`` members exchange ``S k/n`` bytes each as a ``k``-rank all-to-all (the
    measured scale-up curve); across nodes a rank's ``(N-1)/N S`` bytes leave through its own NIC
    as one stream, priced as a send/recv of that size (the scale-out point-to-point level: NIC
    efficiency, half size, latency floor). The two run at once: the slower sets the time. No
    all-to-all across nodes was measured (KERNELS.md): this is the textbook exchange at the NICs'
    measured point-to-point behaviour, not a fit.
    """
    e_u, h_u, l_u = up
    e_o, h_o, l_o = out
    local = per_call * k / n
    t_intra = (k - 1.0) / k * (local + h_u) / (intra_bw * e_u * link_fraction)
    t_intra = vec.where(k > 1, vec.maximum(t_intra, l_u), 0.0)
    cross = (nodes - 1.0) / nodes * per_call
    t_inter = vec.where(nodes > 1, vec.maximum((cross + h_o) / (inter_bw * e_o * link_fraction), l_o), 0.0)
    return vec.where(n > 1, calls * vec.maximum(t_intra, t_inter), 0.0)


def link_name(nodes, kind: str = "gpu") -> str:
    """'inter-node' when the group spans several scale-up domains, else 'intra-node' (scalar
    input); on a TPU (``kind`` 'tpu') the domain is a slice: 'DCN (inter-slice)' / 'ICI
    (intra-slice)'."""
    if kind == "tpu":
        return "DCN (inter-slice)" if float(nodes) > 1 else "ICI (intra-slice)"
    return "inter-node" if float(nodes) > 1 else "intra-node"


def exposed_s(comm_s, window_s, overlap):
    """Exposed part of a collective that may overlap a compute window.

    ``(1 - overlap) * comm`` is always exposed (comm kernels share the device with compute and
    synchronise); of the rest, whatever does not fit in the window is exposed too.
    """
    return (1.0 - overlap) * comm_s + vec.maximum(0.0, overlap * comm_s - window_s)
