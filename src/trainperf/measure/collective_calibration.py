"""Measure this machine's collectives between a run's processes (gloo on a CPU).

A CPU run's processes talk through gloo over shared memory or loopback; no datasheet gives its
bandwidth or latency, and they depend on the cores left to gloo's threads. So a CPU bench with
several processes times each collective kind the step model prices (all-reduce, all-gather,
reduce-scatter, all-to-all, send/recv) on its own process group at a small and a large size,
and reads the alpha-beta model ``t(S) = latency + bus_volume(S) / busbw`` off the times (bus volume as
nccl-tests counts it: ``2(n-1)/n S`` for all-reduce, ``(n-1)/n S`` for all-gather,
reduce-scatter and all-to-all, ``S`` for send/recv; Hockney 1994). Rank 0 stores the result in
the calibration cache (:mod:`trainperf.specs.cpu_calibration`), where the predictor's CPU link
model reads it (:mod:`trainperf.predict.kernels.cpu`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist

from trainperf.specs.cpu_calibration import MeasuredCollective
from trainperf.specs.model import ModelSpec

SIZES_BYTES = (16 << 10, 512 << 10, 4 << 20)
"""Full-buffer sizes each kind is timed at, from latency-bound to bandwidth-bound
(:func:`alpha_beta` reads latency and bandwidth from their times per call in bursts, :func:`_mean_s`)."""
_REPEATS = 9
_BURST = 4
GRADIENT_KINDS = ("all-reduce", "reduce-scatter")
"""Kinds timed in fp32, the dtype gradients are reduced in; the others move activations,
parameters or tokens in the run's dtype."""

DRIFT_SEGMENT_S = 5e-3
"""Compute between two collectives where :func:`sync_wait_s` measures the ranks' drift: about
what separates two collectives of the bench's CPU runs under tensor parallelism (the default
model under ``--tp 2``: 48 collectives in a step of about 0.4 s)."""
DRIFT_CALLS = 12
DRIFT_BLOCKS = 7

BUS_VOLUME: dict[str, Callable[[int], float]] = {
    "all-reduce": lambda n: 2.0 * (n - 1) / n,
    "all-gather": lambda n: (n - 1) / n,
    "reduce-scatter": lambda n: (n - 1) / n,
    "all-to-all": lambda n: (n - 1) / n,
    "send-recv": lambda n: 1.0,
}
"""Bus bytes per byte of the full buffer, by kind (nccl-tests' busbw factors)."""


def _call(kind: str, size_bytes: int, dtype: torch.dtype, group: dist.ProcessGroup | None) -> Callable[[], None]:
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    elems = max(n, size_bytes // torch.finfo(dtype).bits * 8 // n * n)
    full, shard = torch.ones(elems, dtype=dtype), torch.ones(elems // n, dtype=dtype)
    gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
    scatter = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
    if kind == "all-reduce":
        return lambda: dist.all_reduce(full, group=group)
    if kind == "all-gather":
        return lambda: gather(full, shard, group=group)
    if kind == "reduce-scatter":
        return lambda: scatter(shard, full, group=group)
    if kind == "all-to-all":
        out = torch.empty_like(full)
        return lambda: dist.all_to_all_single(out, full, group=group)
    peer = dist.get_global_rank(group, rank ^ 1) if group is not None else rank ^ 1

    def ping() -> None:  # pairs (0,1), (2,3)...: there and back, two transfers
        if rank % 2 == 0:
            dist.send(full, peer)
            dist.recv(full, peer)
        else:
            dist.recv(full, peer)
            dist.send(full, peer)
    return ping


def _mean_s(fn: Callable[[], None], group: dist.ProcessGroup | None, per_call: float = 1.0) -> float:
    """Seconds per call of ``fn``: the median over :data:`_REPEATS` samples, each after a
    barrier, of the mean of :data:`_BURST` calls back to back. A step runs tens of collectives
    and pays their sum, so their mean: gloo's occasional slow transfer (a core taken by the
    other process's threads) and the ranks drifting apart between calls count, as a burst
    sees them; the median over bursts leaves out one-off stalls (a page fault, the first touch of
    a buffer), as a median of steps does."""
    fn()
    times = []
    for _ in range(_REPEATS):
        dist.barrier(group=group)
        t = time.perf_counter()
        for _ in range(_BURST):
            fn()
        times.append((time.perf_counter() - t) / per_call / _BURST)
    return statistics.median(times)


def alpha_beta(bus_bytes: list[float], times_s: list[float]) -> tuple[float, float]:
    """(latency s, bandwidth bytes/s) of ``t = latency + bytes / bandwidth`` from the timed sizes
    (ascending): the latency is the smallest size's time (its bytes take microseconds), the
    bandwidth the largest size's bytes over its time beyond that latency. Where the largest size
    took barely longer than the smallest (scheduling noise on shared cores), its bytes over its
    whole time: a bound from below, never an absurd line through noise."""
    latency = min(times_s[0], times_s[-1])
    beyond = times_s[-1] - latency
    if beyond < 0.5 * times_s[-1]:
        return latency, bus_bytes[-1] / times_s[-1]
    return latency, bus_bytes[-1] / beyond


def _from_first_rank(t: torch.Tensor, group: dist.ProcessGroup | None) -> None:
    """``t`` as the group's first rank holds it, on every rank of ``group`` (in place)."""
    dist.broadcast(t, dist.get_global_rank(group, 0) if group is not None else 0, group=group)


def _segment(seconds: float, group: dist.ProcessGroup | None) -> Callable[[], None]:
    """About ``seconds`` of compute on this rank, made of what a layer's operators do: an fp32
    GEMM (fast on every CPU) into a fresh 1 MiB output, SiLU and a product into fresh tensors,
    a sum; rank 0's count of them on every rank, so that the ranks do equal work as a step's do.
    (Matmuls on a few cached KiB, allocating nothing, drift apart about half as much here.)"""
    a, b = torch.ones(1024, 256), torch.ones(256, 256)

    def op() -> None:
        y = torch.mm(a, b)
        (torch.nn.functional.silu(y) * y).sum()
    t = time.perf_counter()
    for _ in range(8):
        op()
    count = torch.tensor([max(1, round(seconds * 8 / max(time.perf_counter() - t, 1e-9)))], dtype=torch.int64)
    _from_first_rank(count, group)
    reps = int(count)

    def run() -> None:
        for _ in range(reps):
            op()
    return run


def _block_s(fn: Callable[[], None], group: dist.ProcessGroup | None) -> float:
    """Seconds per call of :data:`DRIFT_CALLS` calls of ``fn`` back to back, after a barrier."""
    dist.barrier(group=group)
    t = time.perf_counter()
    for _ in range(DRIFT_CALLS):
        fn()
    return (time.perf_counter() - t) / DRIFT_CALLS


def sync_wait_s(run_dtype: torch.dtype, group: dist.ProcessGroup | None = None) -> float:
    """Seconds a collective costs beyond its burst time (what :func:`measure_collectives` fits)
    when the ranks come to it from compute, as a step's ranks do: per block of
    :data:`DRIFT_CALLS` iterations, the time of :data:`DRIFT_SEGMENT_S` of compute followed by a
    small all-gather, less the same compute alone and the all-gather alone in a burst; the mean
    over :data:`DRIFT_BLOCKS` blocks (a step pays the mean of its collectives' waits, which come
    in bursts of a core taken away; the three timed in turn within a block, so that load from
    other processes hits them alike), at least 0. On a shared host the ranks' compute drifts
    apart between two collectives (other processes, gloo's threads and the OS take a core now
    and then) and the first to arrive waits for the last; in a burst they stay in step. Rank 0's
    figure on every rank."""
    seg = _segment(DRIFT_SEGMENT_S, group)
    small = _call("all-gather", SIZES_BYTES[0], run_dtype, group)

    def both() -> None:
        seg()
        small()
    small()
    waits = []
    for _ in range(DRIFT_BLOCKS):
        alone, burst, joint = _block_s(seg, group), _block_s(small, group), _block_s(both, group)
        waits.append(joint - alone - burst)
    got = torch.tensor([max(0.0, statistics.mean(waits))], dtype=torch.float64)
    _from_first_rank(got, group)
    return float(got)


def measure_collectives(run_dtype: torch.dtype, group: dist.ProcessGroup | None = None
                        ) -> dict[str, MeasuredCollective]:
    """Latency and bus bandwidth of each collective kind over ``group`` (all ranks must call it;
    send/recv only with an even group size), in ``run_dtype`` except :data:`GRADIENT_KINDS`, and
    the wait the ranks' drift adds to each call in a step (:func:`sync_wait_s`, measured once:
    it belongs to the arrival, not to the kind). Every rank returns rank 0's figures
    (broadcast), so that all agree."""
    n = dist.get_world_size(group)
    out: dict[str, tuple[float, float]] = {}
    for kind, factor in BUS_VOLUME.items():
        if kind == "send-recv" and n % 2:
            continue
        dtype = torch.float32 if kind in GRADIENT_KINDS else run_dtype
        per = 2.0 if kind == "send-recv" else 1.0
        times = [_mean_s(_call(kind, s, dtype, group), group, per) for s in SIZES_BYTES]
        out[kind] = alpha_beta([factor(n) * s for s in SIZES_BYTES], times)
    figures = torch.tensor([v for kind in out for v in out[kind]], dtype=torch.float64)
    _from_first_rank(figures, group)
    wait_us = round(sync_wait_s(run_dtype, group) * 1e6, 3)
    return {kind: MeasuredCollective(ranks=n, latency_us=round(float(figures[2 * i]) * 1e6, 3),
                                     busbw_GB_per_s=round(float(figures[2 * i + 1]) / 1e9, 4), averaged=True,
                                     sync_wait_us=wait_us)
            for i, kind in enumerate(out)}


def fsdp_module_us(dtype: torch.dtype) -> float:
    """Host microseconds FSDP2 adds per sharded module and step on this machine: a one-Linear
    module under ``fully_shard`` over a one-rank mesh of each rank's own (parameters in
    ``dtype``, gradients reduced in fp32, as the bench shards), forward and backward on one row,
    less the same Linear unsharded: FSDP2's hooks, its copy-in and copy-out and the bookkeeping
    around its collectives, which still run, over the one rank; the transfers between ranks are
    priced from :func:`measure_collectives`. Sharding over every rank and subtracting the
    collectives' separately measured latencies left the difference of two noisy figures: from
    1 to 3,563 us from one run to the next here, against 241-268 us this way. Every rank must
    call it; at least 1 us."""
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    n = dist.get_world_size()
    alone = init_device_mesh("cpu", (n, 1), mesh_dim_names=("ranks", "alone"))["alone"]
    plain, sharded = nn.Linear(64, 64, bias=False), nn.Linear(64, 64, bias=False)
    fully_shard(sharded, mesh=alone, mp_policy=MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32))
    x = torch.ones(1, 64)

    def step(m: nn.Module) -> Callable[[], None]:
        return lambda: m(x).float().sum().backward()

    return _agreed_us((_mean_s(step(sharded), None) - _mean_s(step(plain), None)) * 1e6)


def _agreed_us(us: float, least: float = 1.0) -> float:
    """Rank 0's figure (at least ``least``) on every rank."""
    got = torch.tensor([max(least, us)], dtype=torch.float64)
    dist.broadcast(got, 0)
    return round(float(got), 3)


@contextlib.contextmanager
def wait_seconds(names: tuple[str, ...] = ("wait_tensor",)) -> Iterator[list[float]]:
    """Inside, the seconds spent in the functional collectives ``names`` (of
    ``torch.distributed._functional_collectives``; by default waiting for DTensor's collectives
    to complete) add up in the one-element list it yields."""
    import torch.distributed._functional_collectives as funcol

    spent = [0.0]
    originals = {name: getattr(funcol, name) for name in names if hasattr(funcol, name)}

    def timed(fn: Callable[..., object]) -> Callable[..., object]:
        def call(*args: object, **kwargs: object) -> object:
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - t
        return call

    try:
        for name, fn in originals.items():
            setattr(funcol, name, timed(fn))
        yield spent
    finally:
        for name, fn in originals.items():
            setattr(funcol, name, fn)


def tp_modules_per_layer(gated: bool, sequence_parallel: bool) -> int:
    """Modules the bench's TP plan turns into DTensor modules per layer (``apply_tp``): four
    attention Linears, two or three MLP Linears, and the two norms under sequence parallelism."""
    return 4 + (3 if gated else 2) + (2 if sequence_parallel else 0)


TP_PROBE_TOKENS = 4096
"""Most tokens of the real-size probe of :func:`tp_host_cost` (a rank's micro-batch beyond it
is measured on fewer sequences: the cost per element is what is kept)."""


@dataclasses.dataclass(frozen=True)
class TpHost:
    """DTensor tensor parallelism's host cost per sharded module and step on this machine, as
    ``module_us + ns_per_element x elements`` (``elements``: the micro-batch's ``[tokens, hidden]``
    activation on a rank, before sequence sharding)."""

    module_us: float
    """The fixed part: sharding propagation, redistribution, issuing the collectives."""
    ns_per_element: float
    """The part that grows with the activation: the copies that gather or scatter along the
    sequence dimension, the casts and layout changes DTensor's redistributions add."""


def tp_host_cost(spec: ModelSpec, tp: int, sequence_parallel: bool, dtype: torch.dtype,
                 batch: int = 1, seq: int = 256) -> TpHost:
    """Host time DTensor tensor parallelism adds per sharded module and step on this machine:
    one block of the run's model (``spec``) under the bench's TP plan
    (:func:`trainperf.measure.parallelize.apply_tp`) over groups of ``tp`` ranks, forward and
    backward under autocast to ``dtype`` (16-bit runs), its time waiting for the collectives to
    complete left out (:func:`wait_seconds`: the step model prices the transfers from
    :func:`measure_collectives`), less the same block built at one rank's share (``heads / tp``,
    ``kv_heads / tp``, ``ffn_hidden / tp``: the rank's GEMMs, attention, RoPE and activation),
    over the modules the plan shards (:func:`tp_modules_per_layer`). Timed twice: on one sequence
    of 8 tokens, where compute is negligible (the fixed part), and at the run's micro-batch of
    ``batch`` sequences of ``seq`` tokens (at most :data:`TP_PROBE_TOKENS`), whose excess over
    the fixed part, per element of the ``[tokens, hidden]`` activation, is the part that grows
    with it (:class:`TpHost`). What is left is DTensor's own cost per operator (sharding
    propagation, redistribution) and the functional collectives' host work around the transfer
    (issuing it, the copies that gather or scatter along the sequence dimension, wrapping the
    result), which on a CPU adds to the step; under sequence parallelism the reference's norms
    and residual adds run on all the tokens, not the rank's share (a small underestimate).
    Every rank must call it; the fixed part at least 1 us, the growing part at least 0."""

    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh

    from trainperf.measure.model import TransformerBlock
    from trainperf.measure.parallelize import apply_tp

    n = dist.get_world_size()
    dense = dataclasses.replace(spec, moe_experts=0, moe_topk=0, moe_shared_experts=0, moe_dense_layers=0)
    sharded = nn.Module()
    sharded.layers, sharded.tok_embeddings, sharded.output = nn.ModuleList([TransformerBlock(dense)]), None, None
    apply_tp(sharded, init_device_mesh("cpu", (n // tp, tp), mesh_dim_names=("dp", "tp"))["tp"], sequence_parallel)
    local = TransformerBlock(dataclasses.replace(dense, heads=max(1, dense.heads // tp), ffn_hidden=max(
        1, dense.ffn_hidden // tp), kv_heads=max(1, (dense.kv_heads or dense.heads) // tp)))
    modules = tp_modules_per_layer(spec.gated_mlp, sequence_parallel)
    small = max(8, 2 * tp)
    fixed_s = _tp_excess_s(sharded.layers[0], local, spec.hidden, dtype, 1, small, tp, sequence_parallel)
    seq = max(2 * tp, min(seq, TP_PROBE_TOKENS) // (2 * tp) * (2 * tp))
    batch = max(1, min(batch, TP_PROBE_TOKENS // seq))
    big_s = _tp_excess_s(sharded.layers[0], local, spec.hidden, dtype, batch, seq, tp, sequence_parallel)
    grows = (big_s - fixed_s) / max(batch * seq - small, 1) / spec.hidden
    return TpHost(module_us=_agreed_us(fixed_s * 1e6 / modules),
                  ns_per_element=_agreed_us(grows * 1e9 / modules, least=0.0))


def _tp_excess_s(sharded: torch.nn.Module, local: torch.nn.Module, hidden: int, dtype: torch.dtype,
                 batch: int, seq: int, tp: int, sequence_parallel: bool) -> float:
    """Median seconds the tensor-parallel block ``sharded`` takes beyond the rank-share block
    ``local`` on ``batch`` sequences of ``seq`` tokens, forward and backward, its waits for the
    collectives left out: the two timed in turn, after a barrier each round."""
    from trainperf.measure.kernel_calibration import block_step

    run_tp = block_step(sharded, hidden, dtype, seq, seq // tp if sequence_parallel else seq, batch=batch)
    run_local = block_step(local, hidden, dtype, seq, batch=batch)
    run_tp()
    run_local()
    excess = []
    for _ in range(_REPEATS):
        dist.barrier()
        with wait_seconds() as spent:
            t = time.perf_counter()
            run_tp()
            took = time.perf_counter() - t - spent[0]
        t = time.perf_counter()
        run_local()
        excess.append(took - (time.perf_counter() - t))
    return statistics.median(excess)
