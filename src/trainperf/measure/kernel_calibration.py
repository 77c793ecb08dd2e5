"""Time, on this CPU, the kernels of a training step: what the predictor's CPU kernel physics
stands on (the matmul peak itself: :mod:`trainperf.measure.calibrate`).

A GPU's kernel physics comes from other people's microbenchmarks (the kernel tables). A CPU has
none that fit it, and its own behaviour differs from a GPU's in kind: an eager operator's host
cost is not hidden behind an earlier kernel (the same cores dispatch and compute), elementwise
ops are limited by the cores (bf16 conversions, ``exp``) more than by DRAM, and the attention
kernel's speed against the matmul peak depends on the dtype. So the bench measures, in the run's
dtype and with its threads per process:

* **attention**: ``scaled_dot_product_attention`` forward and forward+backward at the run's own
  shape (micro-batch, local heads, local sequence, head dim), causal (and full under context
  parallelism, whose ring runs unmasked blocks), as fractions of the dtype's calibrated matmul
  peak with FLOPs counted as the step model counts them;
* **elementwise ops**: the bench's eager RMSNorm, residual add, RoPE, gated activation and the
  attention's layout copies (grouped-query K/V repeats, the output transposed back) at the run's
  token count, timed forward and backward, over the bytes the step model charges for them
  (``elementwise_bytes_per_token``: each input read and output written once forward, no layout
  copies; backward twice that); the rate therefore carries the eager implementation's extra work;
* **per-operator overhead**: one dense block of the run's width, forward and backward at one
  sequence of 8 tokens (where compute is negligible), divided by the operators it runs (counted
  with a ``TorchDispatchMode``; their product, the layer's host cost, is what the step model
  uses, the count only apportions it); at a wide model the block's tiny GEMMs and weight-sized
  traffic are in that time too (44 us per operator at width 768 against 10 at 256 here);
* **the optimizer step**: gradient clipping and fused AdamW over as many parameters as one of the
  run's processes steps (:func:`optimizer_GB_per_s`), bytes as the step model charges them.
* **the layers' GEMMs**: each weight GEMM shape of the run (:func:`layer_gemm_shapes`), forward
  and its two backward GEMMs together (:func:`gemm_rates`), and the routed experts as the bench's
  grouped GEMM runs them (:func:`grouped_rates`): a CPU's GEMM speed varies with the shape more
  than one shape law captures, and ``torch._grouped_mm`` runs below the same GEMMs one by one.

Each CPU run measures them (one to two seconds) and the calibration cache keeps, beside the matmul
peak, a running mean of every run's (:class:`~trainperf.specs.cpu_calibration.MeasuredKernels`,
:func:`merge_kernels`). Left out: autocast's casts of the weights and their gradients (about 12
bytes per parameter per micro-batch, not priced), and collectives (measured between the run's
processes: :mod:`trainperf.measure.collective_calibration`).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from trainperf.specs.cpu_calibration import (
    MeasuredAttention,
    MeasuredCollective,
    MeasuredGemm,
    MeasuredKernels,
    MeasuredWidth,
)
from trainperf.specs.model import ModelSpec

FLASH_BACKWARD_FACTOR = 2.5
"""Backward/forward FLOP ratio the step model counts for fused attention (FlashAttention-2's
five GEMMs backward against two forward, Dao 2023); the same constant as
``trainperf.predict.step_model.attention`` (a test checks they agree)."""
OPTIMIZER_BYTES_PER_PARAM = 34.0
"""Bytes per parameter the step model charges an optimizer step (AdamW plus clipping's read);
the same constant as ``trainperf.predict.step_model.optimizer`` (a test checks they agree)."""
OPTIMIZER_SAMPLE = (1 << 18, 1 << 25)
"""Fewest and most parameters the optimizer's rate is timed over: a run's own count between
them, so that a model whose states fit the caches is timed in them and a large one past them."""
PROBE_TOKENS = 8
"""Tokens of the overhead probe: a layer's compute at 8 tokens is a few microseconds."""
_MAX_POINTS = 32
"""Attention lengths kept per dtype (the oldest dropped first)."""
_MAX_GEMMS = 64
"""GEMM shapes kept per dtype (the oldest dropped first)."""


WARMUP_CALLS = 2
"""Untimed calls before a figure is timed: the first calls of a fresh process page in its buffers
and the allocator's pools, and a backward's first call builds its graph's buffers (one warm-up
left the attention backward 25% slow in one fresh process out of five here)."""


MIN_TIMED_CALLS = 7
"""Fewest timed calls of each figure, however long the calls take."""


def _median_s(fn: Callable[[], object], min_time_s: float = 0.15, most: int = 50,
              fewest: int = MIN_TIMED_CALLS) -> float:
    """Median seconds of ``fn`` over repeats lasting ``min_time_s`` in all (at least ``fewest``),
    after :data:`WARMUP_CALLS` untimed calls."""
    return _medians_s((fn,), min_time_s, most, fewest)[0]


def _medians_s(fns: tuple[Callable[[], object], ...], min_time_s: float = 0.15, most: int = 50,
               fewest: int = MIN_TIMED_CALLS) -> list[float]:
    """Median seconds of each of ``fns``, timed in turn (one call of each per round, so that a
    load that comes and goes falls on all alike: a difference of two of them, as the attention
    backward is, then holds) over rounds lasting ``min_time_s`` in all (at least ``fewest``),
    after :data:`WARMUP_CALLS` untimed calls of each."""
    for _ in range(WARMUP_CALLS):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    start = time.perf_counter()
    while len(times[0]) < fewest or (time.perf_counter() - start < min_time_s and len(times[0]) < most):
        for fn, ts in zip(fns, times, strict=True):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
    return [statistics.median(ts) for ts in times]


GEMM_MIN_TIME_S = 0.04
"""Seconds each GEMM shape is timed for: a run has a handful of shapes, so they cost a fraction of
a second together."""
GEMM_FEWEST_CALLS = 3
"""Fewest timed calls of a GEMM shape: a GEMM's time varies little from call to call, and a large
model's take a second each on a CPU (7 calls of 6 shapes would add a minute to its run)."""


def layer_gemm_shapes(workload) -> tuple[tuple[int, int, int], ...]:
    """The distinct ``(m, k, n)`` weight GEMMs one of ``workload``'s processes runs per micro-batch,
    forward (``(m x k) @ (k x n)``), as the step model prices them: ``m`` the micro-batch's tokens
    on a rank (``micro_batch x seq_len / cp``; tensor parallelism keeps them, sequence parallelism
    gathers them), the attention projections and the dense MLP split ``tp`` ways, the LM head's
    vocabulary too, the router over the experts, a routed expert's ``tokens x topk x ep / experts``
    rows (a balanced load) split ``etp`` ways, the shared experts as an MLP, LoRA's rank-``r``
    adapters on the hidden width."""
    from trainperf.measure.calibrate import projection_dims

    m, plan = workload.model, workload.plan
    tokens = _tokens(workload)
    h = m.hidden
    dense = projection_dims(m, plan.tp, mlp=not m.moe_experts or bool(m.moe_dense_layers))
    shapes = {(tokens, k, n) for k, n in dense}
    if m.moe_experts:
        _, rows, f_e = _routed(workload)
        shapes |= {(tokens, h, m.moe_experts), (rows, h, f_e), (rows, f_e, h)}
        if m.moe_shared_experts:
            f = m.moe_shared_experts * (m.moe_expert_ffn or m.ffn_hidden) // plan.tp
            shapes |= {(tokens, h, f), (tokens, f, h)}
    if workload.lora is not None:
        shapes |= {(tokens, h, workload.lora.rank), (tokens, workload.lora.rank, h)}
    return tuple(sorted(s for s in shapes if min(s) > 0))


def _tokens(workload) -> int:
    """Tokens of a micro-batch on one rank: ``micro_batch x seq_len / cp``."""
    return max(1, workload.micro_batch * workload.seq_len // workload.plan.cp)


def _routed(workload) -> tuple[int, int, int]:
    """(local experts, rows each at a balanced load, their width) of an MoE workload's routed
    experts on one rank: ``experts / ep``, ``tokens x topk x ep / experts``, the expert MLP's
    width over ``etp``."""
    m, plan = workload.model, workload.plan
    ep = max(plan.ep, 1)
    return (max(1, m.moe_experts // ep), max(1, _tokens(workload) * m.moe_topk * ep // m.moe_experts),
            max(1, (m.moe_expert_ffn or m.ffn_hidden) // plan.expert_tp))


def gemm_rates(shapes: tuple[tuple[int, int, int], ...], dtype: torch.dtype) -> tuple[MeasuredGemm, ...]:
    """Each ``(m, k, n)`` of ``shapes`` timed forward and backward as a layer's weight runs them
    (:class:`~trainperf.specs.cpu_calibration.MeasuredGemm`): ``F.linear`` of an ``m x k`` input
    requiring grad by an ``n x k`` weight, and autograd's backward to both (the weight's
    transposed layout and autograd's own work are the run's: plain ``matmul`` calls into
    preallocated outputs ran 5-30% faster here than the same GEMMs inside a layer, at 1 and 2
    threads in bf16); median seconds of the three GEMMs together."""
    out = []
    g = torch.Generator().manual_seed(0)
    for m, k, n in shapes:
        x, w, dy = (torch.randn(a, b, generator=g).to(dtype) for a, b in ((m, k), (n, k), (m, n)))
        x.requires_grad_()
        w.requires_grad_()

        def step(x=x, w=w, dy=dy) -> None:
            x.grad = w.grad = None  # as a step's first micro-batch: the gradients are new tensors
            F.linear(x, w).backward(dy)

        seconds = _median_s(step, min_time_s=GEMM_MIN_TIME_S, fewest=GEMM_FEWEST_CALLS)
        out.append(MeasuredGemm(m=m, k=k, n=n, tflops=round(6.0 * m * k * n / max(seconds, 1e-9) / 1e12, 5)))
    return tuple(out)


def grouped_rates(workload, dtype: torch.dtype) -> tuple[MeasuredGemm, ...]:
    """The routed experts' two GEMM shapes of ``workload`` (none for a dense model) timed as the
    bench's :class:`~trainperf.measure.moe.GroupedExperts` runs them, forward and backward: its
    local experts' balanced rows, ``torch._grouped_mm`` where it runs here (else a loop of
    matmuls), fp32 master weights cast to ``dtype`` under autograd (``groups`` set:
    :class:`~trainperf.specs.cpu_calibration.MeasuredGemm`)."""
    from trainperf.measure.moe import grouped_mm, grouped_mm_runs

    m = workload.model
    if not m.moe_experts:
        return ()
    local, rows, f_e = _routed(workload)
    grouped = grouped_mm_runs(torch.device("cpu"), dtype)[0]
    offs = torch.arange(1, local + 1, dtype=torch.int32) * rows
    out = []
    g = torch.Generator().manual_seed(0)
    for k, n in ((m.hidden, f_e), (f_e, m.hidden)):
        x = torch.randn(local * rows, k, generator=g).to(dtype).requires_grad_()
        w = torch.randn(local, k, n, generator=g).requires_grad_()
        dy = torch.ones(local * rows, n, dtype=dtype)

        def step(x=x, w=w, dy=dy) -> None:
            wd = w.to(dtype)
            y = grouped_mm(x, wd, offs) if grouped else torch.cat(
                [x[e * rows:(e + 1) * rows] @ wd[e] for e in range(local)])
            y.backward(dy)

        seconds = _median_s(step, min_time_s=GEMM_MIN_TIME_S, fewest=GEMM_FEWEST_CALLS)
        out.append(MeasuredGemm(m=rows, k=k, n=n, groups=local,
                                tflops=round(6.0 * local * rows * k * n / max(seconds, 1e-9) / 1e12, 5)))
    return tuple(out)


def attention_flops(batch: int, heads: int, seq: int, head_dim: int, causal: bool) -> float:
    """Forward FLOPs of the attention core as the step model counts them: QK^T and PV,
    ``4 head_dim`` per query-key pair, ``s (s + 1) / 2`` pairs when causal
    (:func:`trainperf.accounting.flops.attention_pairs`)."""
    return 4.0 * batch * heads * head_dim * (seq * (seq + 1) / 2.0 if causal else seq * seq)


def attention_point(batch: int, heads: int, seq: int, head_dim: int, dtype: torch.dtype, causal: bool,
                    peak_tflops: float) -> MeasuredAttention:
    """SDPA at one shape, forward and backward, as fractions of ``peak_tflops``."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(batch, heads, seq, head_dim, generator=g).to(dtype).requires_grad_() for _ in range(3))
    grad = torch.ones(batch, heads, seq, head_dim, dtype=dtype)

    def fwd() -> torch.Tensor:
        with torch.no_grad():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def fwd_bwd() -> None:
        F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(grad)

    t_f, t_fb = _medians_s((fwd, fwd_bwd), min_time_s=0.3)
    t_b = max(t_fb - t_f, 1e-9)
    flops, peak = attention_flops(batch, heads, seq, head_dim, causal), peak_tflops * 1e12
    return MeasuredAttention(seq=seq, head_dim=head_dim, causal=causal, fwd_fraction=round(flops / t_f / peak, 5),
                             bwd_fraction=round(FLASH_BACKWARD_FACTOR * flops / t_b / peak, 5))


def elementwise_bytes(tokens: int, spec: ModelSpec, act_bytes: int) -> float:
    """Ideal bytes of one block's memory-bound ops forward, as the step model's
    ``elementwise_bytes_per_token`` counts them (in elements, times ``act_bytes``): two norms
    (read and write ``h``: 4h), two residual adds (read 2, write 1: 6h), RoPE on queries and keys
    (2 (q + kv)), the gated activation (read 2, write 1: 3 ffn; plain 2 ffn)."""
    h, hd = spec.hidden, spec.head_dim or spec.hidden // spec.heads
    q, kv = spec.heads * hd, (spec.kv_heads or spec.heads) * hd
    act = (3.0 if spec.gated_mlp else 2.0) * spec.ffn_hidden
    return tokens * act_bytes * (4.0 * h + 6.0 * h + 2.0 * (q + kv) + act)


def elementwise_GB_per_s(spec: ModelSpec, tokens: int, dtype: torch.dtype) -> float:
    """Ideal bytes per second of the bench's eager memory-bound ops of one block, forward and
    backward: the ops the step model counts and the layout copies around its attention that it
    does not, timed through autograd, over the bytes the step model charges for them (forward's
    ideal bytes, backward twice those). The rate so carries the eager extra passes and copies."""
    from trainperf.measure.model import ACTIVATIONS, apply_rope, rope_tables

    hd = spec.head_dim or spec.hidden // spec.heads
    g = torch.Generator().manual_seed(0)

    def leaf(*shape: int) -> torch.Tensor:
        return torch.randn(1, tokens, *shape, generator=g).to(dtype).requires_grad_()

    x, r, q, k = leaf(spec.hidden), leaf(spec.hidden), leaf(spec.heads, hd), leaf(spec.kv_heads or spec.heads, hd)
    a, b, out = leaf(spec.ffn_hidden), leaf(spec.ffn_hidden), leaf(spec.heads, hd)
    w = torch.ones(spec.hidden, dtype=dtype, requires_grad=True)
    cos, sin = (t.to(dtype) for t in rope_tables(hd, tokens))
    act, n_rep = ACTIVATIONS[spec.mlp], spec.heads // (spec.kv_heads or spec.heads)

    def ops() -> list[torch.Tensor]:
        outs = [F.rms_norm(x, (spec.hidden,), w) for _ in range(2)] + [torch.add(x, r) for _ in range(2)]
        outs += [apply_rope(q, cos, sin), apply_rope(k, cos, sin), act(a) * b if spec.gated_mlp else act(a)]
        # the attention's layout work in the bench's block: K and V repeated for grouped-query
        # heads, the output (SDPA's layout) transposed back to (batch, seq, hidden)
        if n_rep > 1:
            outs += [k.transpose(1, 2).repeat_interleave(n_rep, dim=1) for _ in range(2)]
        return [*outs, out.transpose(1, 2).reshape(1, tokens, -1)]

    grads = [torch.ones_like(t) for t in ops()]
    seconds = _median_s(lambda: torch.autograd.backward(ops(), grads))
    return 3.0 * elementwise_bytes(tokens, spec, torch.finfo(dtype).bits // 8) / seconds / 1e9


def block_step(block: torch.nn.Module, hidden: int, dtype: torch.dtype, tokens: int = PROBE_TOKENS,
               local_tokens: int | None = None, batch: int = 1) -> Callable[[], None]:
    """Forward and backward of one bench block (:class:`~trainperf.measure.model.TransformerBlock`,
    or one made tensor-parallel) on ``batch`` sequences of ``tokens`` (RoPE tables for them; an
    input of ``local_tokens`` rows each, a sequence-parallel rank's share, when given), under
    autocast to ``dtype`` as the bench runs it (fp32: no autocast)."""
    from trainperf.measure.model import rope_tables

    cos, sin = rope_tables(block.attention.head_dim, tokens)
    x = torch.randn(batch, local_tokens or tokens, hidden, requires_grad=True)
    amp = dtype if dtype != torch.float32 else None

    def step() -> None:
        with torch.autocast("cpu", dtype=amp or torch.float32, enabled=amp is not None):
            y = block(x, cos, sin)
        y.float().sum().backward()
    return step


def op_overhead(spec: ModelSpec, dtype: torch.dtype) -> tuple[float, float]:
    """(host microseconds per operator, top-level operators per layer) of one dense block of
    ``spec``'s width, forward and backward at :data:`PROBE_TOKENS` tokens (:func:`block_step`)."""
    from trainperf.measure.model import TransformerBlock

    dense = dataclasses.replace(spec, moe_experts=0, moe_topk=0, moe_shared_experts=0, moe_dense_layers=0)
    step = block_step(TransformerBlock(dense), spec.hidden, dtype)
    seconds = _median_s(step, min_time_s=0.2)
    with _OperatorCount() as count:
        step()
    return seconds * 1e6 / max(count.ops, 1), float(count.ops)


def moe_layer_ops(spec: ModelSpec, dtype: torch.dtype) -> float | None:
    """ATen operators one MoE block of ``spec`` runs forward and backward at :data:`PROBE_TOKENS`
    tokens, under autocast to ``dtype``, with the bench's MoE options and expert GEMM (routing,
    permutation, grouped or looped experts, shared experts, auxiliary loss); None for a dense
    model. Routing makes an MoE block run more operators than a dense one (368 against 256 for
    the debug-moe preset here, without expert parallelism's exchange), whose host cost a CPU
    pays in full."""
    from trainperf.measure.model import TransformerBlock
    from trainperf.measure.moe import MoEOptions, grouped_mm_runs

    layer = next((i for i in range(spec.layers) if spec.layer_is_moe(i)), None)
    if layer is None:
        return None
    block = TransformerBlock(spec, layer)
    assert block.moe is not None
    block.moe.options, block.moe.aux_scale = MoEOptions.for_model(spec), 1.0
    block.moe.experts.use_grouped = grouped_mm_runs(torch.device("cpu"), dtype)[0]
    step = block_step(block, spec.hidden, dtype)
    with _OperatorCount() as count:
        step()
    return float(count.ops)


class _OperatorCount(TorchDispatchMode):
    """Counts the ATen operators that reach the kernels (after autograd and composite
    decompositions), forward and backward: ``torch.profiler`` would count the same, but prints
    its start and stop on stderr."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def optimizer_GB_per_s(params: int) -> float:
    """Bytes per second of the bench's optimizer step over ``params`` fp32 parameters (clamped to
    :data:`OPTIMIZER_SAMPLE`, in 16 tensors): the bench's own calls, ``trainer.clip_grad_norm``
    then the step of ``trainer.make_optimizer``'s AdamW (fused; foreach where fused is refused),
    bytes counted as the step model charges them
    (:data:`OPTIMIZER_BYTES_PER_PARAM` per parameter)."""
    from trainperf.measure.trainer import GRAD_CLIP, clip_grad_norm, make_optimizer

    n = min(max(int(params), OPTIMIZER_SAMPLE[0]), OPTIMIZER_SAMPLE[1])
    g = torch.Generator().manual_seed(0)
    ps = torch.nn.ParameterList(torch.nn.Parameter(torch.randn(n // 16, generator=g)) for _ in range(16))
    for p in ps:
        p.grad = torch.randn(p.shape, generator=g)
    opt = make_optimizer(ps, lr=1e-6)

    def step() -> None:
        clip_grad_norm(list(ps), GRAD_CLIP)
        opt.step()

    return OPTIMIZER_BYTES_PER_PARAM * 16 * (n // 16) / _median_s(step, min_time_s=0.2, most=20) / 1e9


def measure_kernels(spec: ModelSpec, batch: int, heads: int, seq: int, dtype: torch.dtype, peak_tflops: float,
                    causal_only: bool, optimizer_params: int | None = None,
                    gemm_shapes: tuple[tuple[int, int, int], ...] = ()) -> MeasuredKernels:
    """Everything of the module docstring, at the run's shape; the optimizer's rate over
    ``optimizer_params`` (the parameters a run's process steps; None: not timed); the GEMMs of
    ``gemm_shapes`` (:func:`layer_gemm_shapes`), forward and backward."""
    hd = spec.head_dim or spec.hidden // spec.heads
    points = tuple(attention_point(batch, heads, seq, hd, dtype, c, peak_tflops)
                   for c in ((True,) if causal_only else (True, False)))
    per_op, ops = op_overhead(spec, dtype)
    rate = round(elementwise_GB_per_s(spec, batch * seq, dtype), 3)
    width = MeasuredWidth(spec.hidden, rate, round(per_op, 3), ops, moe_ops_per_layer=moe_layer_ops(spec, dtype))
    opt = None if optimizer_params is None else round(optimizer_GB_per_s(optimizer_params), 3)
    return MeasuredKernels(elementwise_GB_per_s=rate, op_overhead_us=round(per_op, 3), ops_per_layer=ops,
                           attention=points, widths=(width,), optimizer_GB_per_s=opt,
                           gemms=gemm_rates(gemm_shapes, dtype))


WINDOW = 8
"""Runs the cache's running means span (:func:`running_mean`): the mean of every run up to this
many, then each new run weighs ``1 / WINDOW``, so that the figures settle on what runs measure
(on this 2-core KVM host one run's gloo latencies and drift wait land anywhere in a 3x range)
and still follow the machine when its load changes."""


def running_mean(old: float, new: float, samples: int) -> float:
    """``old``, the mean of ``samples`` runs' figures, with the ``new`` run's added: weight
    ``1 / (samples + 1)``, at least ``1 / WINDOW``. (The best of all runs would ratchet: the
    fastest of many noisy measurements drifts above what a run gets, 15% on the default bench
    here after a few hundred runs; a fixed weight of a half left the figures at the last two
    runs' noise.)"""
    return round(old + (new - old) / min(samples + 1, WINDOW), 5)


def _mean_of(old: float | None, new: float | None, samples: int) -> tuple[float | None, int]:
    """:func:`running_mean` of figures either of which may be missing (the other stands), with
    the runs it now spans."""
    if old is None or new is None:
        return (new, 1) if old is None else (old, samples)
    return running_mean(old, new, samples), samples + 1


def _merge_attention(old: tuple[MeasuredAttention, ...], new: tuple[MeasuredAttention, ...]
                     ) -> tuple[MeasuredAttention, ...]:
    points = {(a.seq, a.head_dim, a.causal): a for a in old}
    for a in new:
        was = points.pop((a.seq, a.head_dim, a.causal), None)
        points[(a.seq, a.head_dim, a.causal)] = a if was is None else dataclasses.replace(
            a, fwd_fraction=running_mean(was.fwd_fraction, a.fwd_fraction, was.samples),
            bwd_fraction=running_mean(was.bwd_fraction, a.bwd_fraction, was.samples), samples=was.samples + 1)
    return tuple(points.values())[-_MAX_POINTS:]


def _merge_widths(old: tuple[MeasuredWidth, ...], new: tuple[MeasuredWidth, ...]) -> tuple[MeasuredWidth, ...]:
    widths = {w.hidden: w for w in old}
    for w in new:
        prior = widths.pop(w.hidden, None)
        widths[w.hidden] = w if prior is None else dataclasses.replace(
            w, elementwise_GB_per_s=running_mean(prior.elementwise_GB_per_s, w.elementwise_GB_per_s, prior.samples),
            op_overhead_us=running_mean(prior.op_overhead_us, w.op_overhead_us, prior.samples),
            moe_ops_per_layer=w.moe_ops_per_layer or prior.moe_ops_per_layer, samples=prior.samples + 1)
    return tuple(widths.values())[-_MAX_POINTS:]


def _merge_gemms(old: tuple[MeasuredGemm, ...], new: tuple[MeasuredGemm, ...]) -> tuple[MeasuredGemm, ...]:
    gemms = {(g.m, g.k, g.n, g.groups): g for g in old}
    for g in new:
        prev = gemms.pop((g.m, g.k, g.n, g.groups), None)
        gemms[(g.m, g.k, g.n, g.groups)] = g if prev is None else dataclasses.replace(
            g, tflops=running_mean(prev.tflops, g.tflops, prev.samples), samples=prev.samples + 1)
    return tuple(gemms.values())[-_MAX_GEMMS:]


def merge_kernels(old: MeasuredKernels | None, new: MeasuredKernels) -> MeasuredKernels:
    """``new`` (one run's measurements) merged into ``old``: per quantity the running mean over
    the runs that measured it (:func:`running_mean`), attention lengths, model widths and GEMM
    shapes pooled (the most recent :data:`_MAX_POINTS` / :data:`_MAX_GEMMS` of each), host times
    per module from whichever runs measured them."""
    if old is None:
        return new
    n = old.samples
    fsdp, fsdp_n = _mean_of(old.fsdp_module_us, new.fsdp_module_us, old.fsdp_module_samples)
    tp, tp_n = _mean_of(old.tp_module_us, new.tp_module_us, old.tp_module_samples)
    tp_ns, _ = _mean_of(old.tp_module_ns_per_element, new.tp_module_ns_per_element, old.tp_module_samples)
    opt, _ = _mean_of(old.optimizer_GB_per_s, new.optimizer_GB_per_s, n)
    return MeasuredKernels(elementwise_GB_per_s=running_mean(old.elementwise_GB_per_s, new.elementwise_GB_per_s, n),
                           op_overhead_us=running_mean(old.op_overhead_us, new.op_overhead_us, n),
                           ops_per_layer=new.ops_per_layer, samples=n + 1,
                           attention=_merge_attention(old.attention, new.attention),
                           widths=_merge_widths(old.widths, new.widths),
                           fsdp_module_us=fsdp, fsdp_module_samples=fsdp_n, tp_module_us=tp, tp_module_samples=tp_n,
                           tp_module_ns_per_element=tp_ns, optimizer_GB_per_s=opt, gemms=_merge_gemms(old.gemms, new.gemms))


_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
           "fp8": torch.bfloat16}
"""The dtype a run's attention and elementwise ops run in (fp8 runs keep them in bf16)."""


def calibrate_for_run(workload, threads: int, say: Callable[[str], None]) -> None:
    """Measure the kernels of the module docstring for ``workload`` on this CPU with ``threads``
    threads, and keep in the calibration cache the best of them and of what it held."""
    from trainperf.specs.cpu_calibration import load_calibration, save_calibration

    cal = load_calibration(threads=threads)
    prec, plan, m = workload.precision, workload.plan, workload.model
    dtype = _DTYPES.get(prec)
    attn_peak = None if cal is None else cal.peak_tflops.get("bf16" if prec == "fp8" else prec)
    if cal is None or dtype is None or attn_peak is None:
        return
    from trainperf.measure.trainer import tune_cpu_allocator

    tune_cpu_allocator()  # as the run's processes do: glibc's defaults page-fault every large output
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        new = measure_kernels(m, workload.micro_batch, max(1, m.heads // plan.tp), workload.seq_len // plan.cp,
                              dtype, attn_peak, plan.cp == 1, optimizer_params=stepped_params(workload),
                              gemm_shapes=() if prec == "fp8" else layer_gemm_shapes(workload))
        if prec != "fp8":
            new = dataclasses.replace(new, gemms=new.gemms + grouped_rates(workload, dtype))
    except ValueError as e:  # a figure out of bounds: a cached peak far below what this CPU does
        say(f"  note: this CPU's {prec} kernels not kept ({e}); `trainperf calibrate` measures the peak again")
        return
    finally:
        torch.set_num_threads(before)
    say(f"  this CPU's {prec} kernels: elementwise {new.elementwise_GB_per_s:.1f} GB/s, "
        f"{new.op_overhead_us:.1f} us per operator ({new.ops_per_layer:.0f} a layer), attention at "
        f"{workload.seq_len // plan.cp} tokens {new.attention[0].fwd_fraction:.0%} of the matmul peak forward")
    cal = load_calibration(threads=threads) or cal
    save_calibration(dataclasses.replace(cal, kernels={**cal.kernels, prec: merge_kernels(cal.kernels.get(prec), new)}))


def stepped_params(workload) -> int:
    """Parameters one process of the run steps: the trainable ones (a LoRA run's adapters) over
    the ways the plan shards the optimizer states, the pipeline stages and the tensor and expert
    parallel splits (an even split: the timing needs the order of magnitude, not the count)."""
    m, plan = workload.model, workload.plan
    trainable = workload.lora.adapter_params(m) if workload.lora is not None else m.total_params
    return max(1, int(trainable / (plan.shards_optimizer * plan.pp * plan.tp * max(plan.ep, 1))))


def calibrate_collectives(threads: int, workload, say: Callable[[str], None]) -> None:
    """In every process of a CPU run: time gloo's collectives over the run's group, and the host
    time FSDP2 and (with tp > 1) DTensor tensor parallelism add per module; rank 0 merges them into
    the cache's figures under the run's precision (running means: :func:`merge_collectives`,
    :func:`merge_kernels`)."""
    import torch.distributed as dist

    from trainperf.measure.collective_calibration import fsdp_module_us, measure_collectives, tp_host_cost
    from trainperf.specs.cpu_calibration import load_calibration, save_calibration

    precision, plan = workload.precision, workload.plan
    dtype = _DTYPES.get(precision, torch.float32)
    got = measure_collectives(dtype)
    hosts = {"fsdp_module_us": fsdp_module_us(dtype)}
    if plan.tp > 1:
        tp_host = tp_host_cost(workload.model, plan.tp, plan.sequence_parallel, dtype, workload.micro_batch,
                               workload.seq_len // plan.cp)
        hosts["tp_module_us"], hosts["tp_module_ns_per_element"] = tp_host.module_us, tp_host.ns_per_element
    cal = load_calibration(threads=threads) if dist.get_rank() == 0 else None
    if cal is None:
        return
    wait = next(iter(got.values())).sync_wait_us if got else None
    say(f"  gloo between the run's processes ({precision}): " + ", ".join(
        f"{k} {v.busbw_GB_per_s:.2f} GB/s + {v.latency_us:.0f} us" for k, v in got.items())
        + (f"; the ranks' drift adds {wait:.0f} us per collective in a step" if wait is not None else "")
        + "; host time per module: " + ", ".join(
            f"FSDP2 {us:.0f} us" if k.startswith("fsdp") else f"DTensor TP {us:.0f} us" if k == "tp_module_us"
            else f"+ {us:.2f} ns per activation element" for k, us in hosts.items()))
    merged = merge_collectives(cal.collectives.get(precision, {}), got)
    kernels = dict(cal.kernels)
    if precision in kernels:
        k = kernels[precision]
        fsdp, fsdp_n = _mean_of(k.fsdp_module_us, hosts.get("fsdp_module_us"), k.fsdp_module_samples)
        tp, tp_n = _mean_of(k.tp_module_us, hosts.get("tp_module_us"), k.tp_module_samples)
        tp_ns, _ = _mean_of(k.tp_module_ns_per_element, hosts.get("tp_module_ns_per_element"), k.tp_module_samples)
        kernels[precision] = dataclasses.replace(k, fsdp_module_us=fsdp, fsdp_module_samples=fsdp_n,
                                                 tp_module_us=tp, tp_module_samples=tp_n,
                                                 tp_module_ns_per_element=tp_ns)
    save_calibration(dataclasses.replace(cal, collectives={**cal.collectives, precision: merged}, kernels=kernels))


def merge_collectives(old: dict[str, MeasuredCollective], new: dict[str, MeasuredCollective]
                      ) -> dict[str, MeasuredCollective]:
    """Per kind, the running mean (:func:`running_mean`) of the cached and the new latency,
    bandwidth and drift wait over the runs that measured them (a wait never measured takes the
    new one); a new measurement replaces one over another number of ranks, or one of single
    calls (:attr:`~trainperf.specs.cpu_calibration.MeasuredCollective.averaged`: caches written
    before 2026-11-28), and is never replaced by one."""
    out = dict(old)
    for kind, m in new.items():
        was = old.get(kind)
        if was is None or was.ranks != m.ranks or not was.averaged:
            out[kind] = m
        elif m.averaged:
            n = was.samples
            wait = _mean_of(was.sync_wait_us, m.sync_wait_us, n)[0]
            out[kind] = dataclasses.replace(m, latency_us=running_mean(was.latency_us, m.latency_us, n),
                                            busbw_GB_per_s=running_mean(was.busbw_GB_per_s, m.busbw_GB_per_s, n),
                                            sync_wait_us=wait, samples=n + 1)
        # else: a single-call figure never replaces bursts
    return out
