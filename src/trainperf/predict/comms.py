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


def collective_time_s(kind: str, size_bytes, n, per_node, nodes, intra_bw, inter_bw, params,
                      link_fraction=1.0, calls=1.0):
    """Seconds of ``calls`` collectives moving ``size_bytes`` in all (see the module docstring).

    ``size_bytes``: the full buffer (all-gather output, reduce-scatter input, all-reduce buffer),
    summed over the calls. ``intra_bw``/``inter_bw``: per-device, per-direction link bandwidth in
    bytes/s (the catalog's scale-up and scale-out figures). ``params``: the silicon's measured
    collective behaviour per level, ``(up_eff, up_half_bytes, up_latency_us, out_eff,
    out_half_bytes, out_latency_us)`` (:func:`trainperf.predict.kernels.collectives.link_params`):
    a stage moving ``S`` bytes per call runs at ``eff * bw * S / (S + half)``, and every call pays
    the level's latency once. ``link_fraction``: the share of that the software stack gets.
    Returns 0 for a group of one.
    """
    up_eff, up_half, up_lat, out_eff, out_half, out_lat = params
    vol = VOLUME[kind]
    if kind == "send-recv":
        inter = nodes > 1
        bw = vec.where(inter, inter_bw * out_eff, intra_bw * up_eff) * link_fraction
        half = vec.where(inter, out_half, up_half)
        lat = vec.where(inter, out_lat, up_lat) * 1e-6
        return vec.where(n > 1, (size_bytes + calls * half) / bw + calls * lat, 0.0)
    k = vec.maximum(per_node, 1.0)
    t_intra = vol * (k - 1.0) / k * (size_bytes + calls * up_half) / (intra_bw * up_eff * link_fraction)
    t_inter = vol * (nodes - 1.0) / nodes * (size_bytes + calls * out_half) / (k * inter_bw * out_eff
                                                                               * link_fraction)
    lat = calls * vec.where(nodes > 1, out_lat, up_lat) * 1e-6
    return vec.where(n > 1, vec.maximum(t_intra, t_inter) + lat, 0.0)


def link_name(nodes) -> str:
    """'inter-node' when the group spans several nodes, else 'intra-node' (scalar input)."""
    return "inter-node" if float(nodes) > 1 else "intra-node"


def exposed_s(comm_s, window_s, overlap):
    """Exposed part of a collective that may overlap a compute window.

    ``(1 - overlap) * comm`` is always exposed (comm kernels share the device with compute and
    synchronise); of the rest, whatever does not fit in the window is exposed too.
    """
    return (1.0 - overlap) * comm_s + vec.maximum(0.0, overlap * comm_s - window_s)
