"""The bench's mixture-of-experts MLP: a top-k router, grouped expert GEMMs, expert parallelism.

The layer follows torchtitan's MoE (``torchtitan/models/moe``) and Megatron-Core's token
dispatcher, written in plain PyTorch:

* **router** -- a linear gate over ``moe_experts`` scores: softmax then top-k, the k weights
  renormalised (Mixtral, Qwen-MoE); with ``moe_router_bias`` (DeepSeek-V3) sigmoid scores, a
  per-expert bias added for the *choice* only (not for the weights), weights normalised;
* **load balancing** -- the auxiliary loss of Switch/GShard (Fedus et al. 2021, eq. 4:
  ``E * sum_i f_i * P_i``, f the fraction of assignments routed to expert i, P its mean router
  probability), its gradient injected in the backward with a coefficient as Megatron-Core's
  ``MoEAuxLossAutoScaler`` does (the logged loss stays the language-model loss); and/or
  DeepSeek's auxiliary-loss-free balancing (Wang et al. 2024, arXiv:2408.15664): after each
  step every expert's bias moves by ``rate * sign(mean load - its load)``;
* **dispatch** -- dropless by default (every assignment is computed); with a capacity factor
  ``c`` an expert takes at most ``ceil(c * tokens * k / experts)`` assignments of the rank's
  tokens, in token order, and the rest are dropped (weight 0, counted);
* **experts** -- the routed experts' SwiGLU MLPs as three ``[experts, in, out]`` weights, run as
  one grouped GEMM per projection (``torch._grouped_mm`` over the token groups, sorted by
  expert) where this build runs it for the device and dtype, else a loop over the experts;
* **expert parallelism** -- with ``ep > 1`` each rank holds ``experts / ep`` experts; the
  sorted token rows go to their expert's rank with ``all_to_all_single`` (counts first, then
  rows), are computed there and come back the same way (an autograd function: its backward
  is the reverse all-to-all). The time inside these calls is measured;
* **shared experts** -- always-active experts (DeepSeek), one MLP ``shared * expert_ffn`` wide
  (the same parameters and FLOPs as ``shared`` separate experts), with Qwen2-MoE's sigmoid
  gate when ``moe_shared_expert_gate``.

Per step the trainer reads :class:`MoEStats` (tokens per expert of every layer, dropped
assignments, all-to-all seconds, the auxiliary loss) and, for the auxiliary-loss-free rule,
updates the biases from the global loads (:func:`end_step`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from trainperf.errors import SpecError
from trainperf.specs.model import ModelSpec

GROUP_ALIGN_CUDA = 16
"""Rows each expert's group is padded to on CUDA: the grouped GEMM's TMA loads want 16-row
aligned groups (torchtitan pads to 8 for bf16 and 16 for fp8; 16 serves both)."""


@dataclass(frozen=True)
class MoEOptions:
    """How the bench trains an MoE model's router (recorded in the run's metadata)."""

    aux_loss_coef: float = 0.01
    """Weight of the load-balancing auxiliary loss (Switch Transformer's 0.01); 0 disables it."""
    bias_update_rate: float = 0.0
    """Step of DeepSeek's auxiliary-loss-free bias update (DeepSeek-V3: 0.001); 0 disables it."""
    capacity_factor: float | None = None
    """Assignments an expert takes, as a multiple of an even share; None: dropless."""
    grouped_gemm: str = "auto"
    """``auto`` (torch._grouped_mm where it runs here, else a loop), ``grouped`` or ``loop``."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.aux_loss_coef) and 0 <= self.aux_loss_coef <= 1):
            raise SpecError("--moe-aux-loss-coef", self.aux_loss_coef, "a number between 0 and 1")
        if not (math.isfinite(self.bias_update_rate) and 0 <= self.bias_update_rate <= 1):
            raise SpecError("--moe-bias-update-rate", self.bias_update_rate, "a number between 0 and 1")
        if self.capacity_factor is not None and not (math.isfinite(self.capacity_factor)
                                                     and 0 < self.capacity_factor <= 1000):
            raise SpecError("--moe-capacity-factor", self.capacity_factor,
                            "a positive number (e.g. 1.25), or omitted for dropless routing")
        if self.grouped_gemm not in ("auto", "grouped", "loop"):
            raise SpecError("--moe-grouped-gemm", self.grouped_gemm, "auto, grouped or loop")

    @classmethod
    def for_model(cls, spec: ModelSpec, **given: Any) -> MoEOptions:
        """Options with the model's own balancing: the bias update where the model has the
        correction bias (DeepSeek-V3's ``e_score_correction_bias``), unless given."""
        given = {k: v for k, v in given.items() if v is not None}
        if spec.moe_router_bias:
            given.setdefault("bias_update_rate", 0.001)
        return cls(**given)

    def to_dict(self) -> dict[str, Any]:
        return {"aux_loss_coef": self.aux_loss_coef, "bias_update_rate": self.bias_update_rate,
                "capacity_factor": self.capacity_factor, "grouped_gemm": self.grouped_gemm}


@dataclass
class MoEStats:
    """What the MoE layers did since the last :meth:`reset` (one optimizer step)."""

    tokens_per_expert: dict[int, torch.Tensor] = field(default_factory=dict)
    """Global layer index -> assignments routed to each expert by this rank (before capacity)."""
    dropped: dict[int, torch.Tensor] = field(default_factory=dict)
    """Global layer index -> assignments this rank dropped for want of capacity."""
    aux_loss: dict[int, torch.Tensor] = field(default_factory=dict)
    """Global layer index -> the auxiliary loss summed over micro-batches (unweighted)."""
    all_to_all_s: float = 0.0
    """Seconds this rank spent in dispatch/combine all-to-alls (CPU: wall; CUDA: see events)."""
    events: list[tuple[Any, Any]] = field(default_factory=list)
    """CUDA (start, end) event pairs around the all-to-alls, read at the step's end."""

    def reset(self) -> None:
        self.tokens_per_expert.clear()
        self.dropped.clear()
        self.aux_loss.clear()
        self.all_to_all_s = 0.0
        self.events.clear()

    def add(self, store: dict[int, torch.Tensor], layer: int, value: torch.Tensor) -> None:
        store[layer] = store[layer] + value if layer in store else value.clone()

    def all_to_all_seconds(self) -> float:
        """The step's all-to-all seconds (CUDA events synchronised and read here)."""
        total = self.all_to_all_s
        for start, end in self.events:
            end.synchronize()
            total += start.elapsed_time(end) / 1e3
        return total


def _in_backward() -> bool:
    """Whether autograd is running a backward (a checkpointed layer's forward is being re-run):
    the statistics then were already counted by the first forward."""
    return torch._C._current_graph_task_id() != -1


class _Timer:
    """Times one all-to-all into :class:`MoEStats`: wall clock on CPU (gloo's collectives are
    synchronous), CUDA events on a GPU (NCCL runs asynchronously to the host)."""

    def __init__(self, stats: MoEStats | None, device: torch.device) -> None:
        self.stats, self.cuda = stats, device.type == "cuda"

    def __enter__(self) -> _Timer:
        if self.stats is not None:
            if self.cuda:
                self.start = torch.cuda.Event(enable_timing=True)
                self.start.record()
            else:
                self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.stats is None:
            return
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.stats.events.append((self.start, end))
        else:
            self.stats.all_to_all_s += time.perf_counter() - self.t0


def _all_to_all_rows(x: torch.Tensor, out_splits: list[int], in_splits: list[int], group: Any) -> torch.Tensor:
    import torch.distributed as dist

    out = x.new_empty((sum(out_splits), *x.shape[1:]))
    dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
    return out


class _AllToAll(torch.autograd.Function):
    """Rows to their experts' ranks; the backward sends the gradients back the reverse way."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, out_splits: list[int], in_splits: list[int], group: Any,
                timer: _Timer) -> torch.Tensor:
        ctx.splits, ctx.group, ctx.timer = (out_splits, in_splits), group, timer
        with timer:
            return _all_to_all_rows(x, out_splits, in_splits, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        out_splits, in_splits = ctx.splits
        with ctx.timer:
            return _all_to_all_rows(grad, in_splits, out_splits, ctx.group), None, None, None, None


class _AuxLossGrad(torch.autograd.Function):
    """Identity on ``out``; its backward also starts the auxiliary loss's gradient, scaled by
    ``coef`` (Megatron-Core's ``MoEAuxLossAutoScaler``): the loss is trained, not logged."""

    @staticmethod
    def forward(ctx: Any, out: torch.Tensor, aux: torch.Tensor, coef: float) -> torch.Tensor:
        ctx.coef = coef
        ctx.aux_shape = aux.shape
        return out.view_as(out)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        return grad, torch.full(ctx.aux_shape, ctx.coef, dtype=torch.float32, device=grad.device), None


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward makes the incoming gradient contiguous: torch._grouped_mm's
    backward refuses a broadcast (stride-0) gradient, which a ``.sum()`` loss produces."""

    @staticmethod
    def forward(ctx: Any, y: torch.Tensor) -> torch.Tensor:
        return y.view_as(y)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.contiguous()


def grouped_mm(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """``x[rows of group g] @ w[g]`` for every group at once (``offsets``: int32 group ends)."""
    return _ContiguousGrad.apply(torch._grouped_mm(x, w, offs=offsets))


def grouped_mm_runs(device: torch.device, dtype: torch.dtype) -> tuple[bool, str]:
    """Whether ``torch._grouped_mm`` runs forward and backward here for ``dtype``, and why not.

    Tried on a tiny problem (two groups, one empty), checked against a loop of matmuls; this
    build may lack the op, or the device/dtype (CUDA's kernel takes bf16 on sm90 and later).
    """
    if not hasattr(torch, "_grouped_mm"):
        return False, f"torch {torch.__version__} has no torch._grouped_mm"
    try:
        g = torch.Generator(device="cpu").manual_seed(0)
        x = torch.randn(32, 16, generator=g).to(device, dtype).requires_grad_()
        w = torch.randn(2, 16, 16, generator=g).to(device, dtype).requires_grad_()
        offs = torch.tensor([0, 32], dtype=torch.int32, device=device)
        y = grouped_mm(x, w, offs)
        y.float().sum().backward()
        ref = x.detach().float() @ w.detach()[1].float()
        err = float((y.detach().float() - ref).abs().max())
    except (RuntimeError, NotImplementedError, TypeError) as e:
        return False, f"torch._grouped_mm fails here for {dtype}: {str(e).splitlines()[0][:120]}"
    if not err <= 1e-1 * max(1.0, float(ref.abs().max())):
        return False, f"torch._grouped_mm disagrees with a matmul here for {dtype} (max error {err:.3g})"
    return True, f"torch._grouped_mm runs here for {str(dtype).removeprefix('torch.')}"


class GroupedExperts(nn.Module):
    """``experts`` SwiGLU (or plain) MLPs as stacked weights ``w1, w3: [E, hidden, ffn]`` and
    ``w2: [E, ffn, hidden]``, applied to token rows sorted by expert."""

    def __init__(self, spec: ModelSpec, experts: int) -> None:
        super().__init__()
        from trainperf.measure.model import ACTIVATIONS

        h, f = spec.hidden, spec.moe_expert_ffn
        assert f is not None
        self.num_experts = experts
        self.act = ACTIVATIONS[spec.mlp]
        self.w1 = nn.Parameter(torch.empty(experts, h, f))
        self.w2 = nn.Parameter(torch.empty(experts, f, h))
        self.w3 = nn.Parameter(torch.empty(experts, h, f)) if spec.gated_mlp else None
        self.use_grouped = False
        """torch._grouped_mm (True) or a loop over the experts (False); set by the trainer."""
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Normal(0, 0.02), as every linear of the reference model."""
        from trainperf.measure.model import INIT_STD

        for w in (self.w1, self.w2, self.w3):
            if w is not None:
                nn.init.normal_(w, mean=0.0, std=INIT_STD)

    def _weights(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """x and the weights in the compute dtype: autocast's when it is on (the weights are
        fp32 masters there), else the weights' own (FSDP's bf16 parameters)."""
        dt = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) \
            else self.w1.dtype
        return x.to(dt), [None if w is None else w.to(dt) for w in (self.w1, self.w3, self.w2)]

    def forward(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Rows ``x`` (sorted by expert, ``counts[e]`` rows for expert e) through their experts."""
        x, (w1, w3, w2) = self._weights(x)
        if self.use_grouped:
            return self._grouped(x, counts, w1, w3, w2)
        return self._loop(x, counts.tolist(), w1, w3, w2)

    def _mlp(self, mm: Any, x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor | None,
             w2: torch.Tensor) -> torch.Tensor:
        a = self.act(mm(x, w1))
        if w3 is not None:
            a = a * mm(x, w3)
        return mm(a, w2)

    def _grouped(self, x: torch.Tensor, counts: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor | None,
                 w2: torch.Tensor) -> torch.Tensor:
        align = GROUP_ALIGN_CUDA if x.device.type == "cuda" else 1
        if align == 1:
            offs = torch.cumsum(counts, 0).to(torch.int32)
            return self._mlp(lambda a, w: grouped_mm(a, w, offs), x, w1, w3, w2)
        padded = (counts + align - 1) // align * align
        ends, pends = torch.cumsum(counts, 0), torch.cumsum(padded, 0)
        # row r of expert e goes to padded row (pends[e] - padded[e]) + (r - (ends[e] - counts[e]))
        expert = torch.repeat_interleave(torch.arange(len(counts), device=x.device), counts,
                                         output_size=x.shape[0])
        dest = torch.arange(x.shape[0], device=x.device) - (ends - counts)[expert] + (pends - padded)[expert]
        total = int(pends[-1]) if len(pends) else 0
        xp = x.new_zeros((total, x.shape[1])).index_copy(0, dest, x)
        offs = pends.to(torch.int32)
        return self._mlp(lambda a, w: grouped_mm(a, w, offs), xp, w1, w3, w2).index_select(0, dest)

    def _loop(self, x: torch.Tensor, counts: list[int], w1: torch.Tensor, w3: torch.Tensor | None,
              w2: torch.Tensor) -> torch.Tensor:
        outs, start = [], 0
        for e, n in enumerate(counts):
            if n:
                rows = x[start:start + n]
                outs.append(self._mlp(torch.matmul, rows, w1[e], None if w3 is None else w3[e], w2[e]))
            start += n
        return torch.cat(outs) if outs else x.new_zeros((0, w2.shape[-1]))


class Router(nn.Module):
    """Top-k gate (module docstring): returns the k experts of every token and their weights."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.experts, self.topk = spec.moe_experts, spec.moe_topk
        self.gate = nn.Linear(spec.hidden, spec.moe_experts, bias=False)
        self.sigmoid = bool(spec.moe_router_bias)
        if spec.moe_router_bias:
            # A buffer, not a parameter: moved by the balancing rule, never by gradients (DeepSeek-V3).
            self.register_buffer("expert_bias", torch.zeros(spec.moe_experts))
        else:
            self.expert_bias = None

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(weights [T, k] fp32, expert ids [T, k], auxiliary loss) for token rows ``x``."""
        logits = self.gate(x).float()
        scores = torch.sigmoid(logits) if self.sigmoid else torch.softmax(logits, dim=-1)
        choice = scores if self.expert_bias is None else scores + self.expert_bias
        idx = torch.topk(choice, self.topk, dim=-1).indices
        weights = scores.gather(-1, idx)
        if self.topk > 1 or self.sigmoid:
            weights = weights / weights.sum(-1, keepdim=True).clamp_min(1e-20)
        # Switch/GShard: E * sum_i f_i P_i, with f over all T*k assignments (no gradient through f)
        frac = torch.bincount(idx.flatten(), minlength=self.experts).float() / idx.numel()
        probs = scores / scores.sum(-1, keepdim=True) if self.sigmoid else scores
        aux = self.experts * (frac * probs.mean(0)).sum()
        return weights, idx, aux


@dataclass
class _Dispatch:
    """One micro-batch's routing: which assignment rows go to which expert, kept or dropped."""

    token: torch.Tensor
    """Token index of each kept assignment, sorted by expert."""
    weight: torch.Tensor
    """Router weight of each kept assignment (same order)."""
    counts: torch.Tensor
    """Kept assignments per expert (all experts)."""
    routed: torch.Tensor
    """Assignments per expert before capacity (for the load statistics)."""
    dropped: torch.Tensor
    """Assignments dropped (a 0-d count)."""


def route(weights: torch.Tensor, idx: torch.Tensor, experts: int, capacity_factor: float | None) -> _Dispatch:
    """Sort the T*k assignments by expert (stable: token order within an expert) and apply the
    capacity, if any: an expert keeps its first ``ceil(c * T * k / E)`` assignments."""
    t, k = idx.shape
    flat = idx.flatten()
    order = torch.argsort(flat, stable=True)
    routed = torch.bincount(flat, minlength=experts)
    token = order // k
    weight = weights.flatten()[order]
    if capacity_factor is None:
        return _Dispatch(token, weight, routed, routed, routed.new_zeros(()))
    cap = math.ceil(capacity_factor * t * k / experts)
    sorted_expert = flat[order]
    starts = torch.cumsum(routed, 0) - routed
    keep = (torch.arange(flat.numel(), device=flat.device) - starts[sorted_expert]) < cap
    counts = routed.clamp(max=cap)
    return _Dispatch(token[keep], weight[keep], counts, routed, (~keep).sum())


class MoE(nn.Module):
    """Router, routed experts (``experts / ep`` of them here) and shared experts of one layer."""

    def __init__(self, spec: ModelSpec, layer_id: int) -> None:
        super().__init__()
        from trainperf.measure.model import FeedForward

        self.layer_id = layer_id
        self.num_experts, self.topk = spec.moe_experts, spec.moe_topk
        self.router = Router(spec)
        self.experts = GroupedExperts(spec, spec.moe_experts)
        shared_ffn = spec.moe_shared_experts * (spec.moe_expert_ffn or spec.ffn_hidden)
        self.shared_experts = FeedForward(spec, shared_ffn) if spec.moe_shared_experts else None
        self.shared_gate = nn.Linear(spec.hidden, 1, bias=False) if spec.moe_shared_expert_gate else None
        self.options = MoEOptions()
        self.stats: MoEStats | None = None
        self.ep_group: Any = None
        self.ep_size, self.ep_rank = 1, 0

    def shard_experts(self, ep_group: Any, ep_size: int, ep_rank: int) -> None:
        """Keep only this rank's ``experts / ep_size`` experts (contiguous ids), for expert parallel."""
        local = self.num_experts // ep_size
        keep = slice(ep_rank * local, (ep_rank + 1) * local)
        ex = self.experts
        with torch.no_grad():
            for name in ("w1", "w2", "w3"):
                w = getattr(ex, name)
                if w is not None:
                    setattr(ex, name, nn.Parameter(w[keep].clone()))
        ex.num_experts = local
        self.ep_group, self.ep_size, self.ep_rank = ep_group, ep_size, ep_rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x.reshape(-1, shape[-1])
        weights, idx, aux = self.router(rows)
        d = route(weights, idx, self.num_experts, self.options.capacity_factor)
        self._record(d, aux)
        y = self._experts(rows.index_select(0, d.token), d.counts)
        out = torch.zeros_like(rows, dtype=y.dtype).index_add_(0, d.token, y * d.weight.to(y.dtype)[:, None])
        if self.shared_experts is not None:
            s = self.shared_experts(rows)
            if self.shared_gate is not None:
                s = s * torch.sigmoid(self.shared_gate(rows))
            out = out + s.to(out.dtype)
        out = out.to(x.dtype).reshape(shape)
        if self.options.aux_loss_coef > 0 and torch.is_grad_enabled():
            out = _AuxLossGrad.apply(out, aux, self.options.aux_loss_coef * self.aux_scale)
        return out

    aux_scale: float = 1.0
    """The loss's own scale (1 / micro-batches per step), so the auxiliary loss matches it."""

    def _record(self, d: _Dispatch, aux: torch.Tensor) -> None:
        if self.stats is None or _in_backward():
            return
        self.stats.add(self.stats.tokens_per_expert, self.layer_id, d.routed.detach())
        self.stats.add(self.stats.dropped, self.layer_id, d.dropped.detach())
        self.stats.add(self.stats.aux_loss, self.layer_id, aux.detach())

    def _experts(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        if self.ep_size == 1:
            return self.experts(x, counts)
        timer = _Timer(self.stats, x.device)  # a checkpointed layer's re-run all-to-alls take time too
        local = self.experts.num_experts
        with timer:
            recv_counts = _all_to_all_rows(counts, [local] * self.ep_size, [local] * self.ep_size, self.ep_group)
        send = counts.view(self.ep_size, local).sum(1).tolist()
        by_src = recv_counts.view(self.ep_size, local)
        recv = by_src.sum(1).tolist()
        xr = _AllToAll.apply(x, recv, send, self.ep_group, timer)
        # rows arrive by source rank, then local expert: group them by local expert
        local_expert = torch.repeat_interleave(torch.arange(local, device=x.device).repeat(self.ep_size),
                                               recv_counts, output_size=xr.shape[0])
        perm = torch.argsort(local_expert, stable=True)
        y = self.experts(xr.index_select(0, perm), by_src.sum(0))
        yr = torch.empty_like(y).index_copy(0, perm, y) if y.shape[0] else y
        return _AllToAll.apply(yr, send, recv, self.ep_group, timer)


def moe_layers(model: nn.Module) -> list[MoE]:
    """The MoE layers of ``model`` (of a pipeline stage: those it holds)."""
    return [m for m in model.modules() if isinstance(m, MoE)]


@dataclass(frozen=True)
class StepMoE:
    """An optimizer step's MoE figures over all ranks (what the step line and JSONL show)."""

    imbalance: float
    """Mean over MoE layers of max / mean assignments per expert (1.0 = perfectly balanced)."""
    imbalance_max: float
    """The worst layer's max / mean."""
    dropped_pct: float
    """Assignments dropped for want of capacity, % of all assignments (0 when dropless)."""
    aux_loss: float
    """The auxiliary loss, mean over layers and micro-batches (unweighted)."""
    all_to_all_s: float
    """Seconds in dispatch/combine all-to-alls, mean over ranks."""
    rank_imbalance: float = 1.0
    """Mean over MoE layers of max / mean assignments per expert-parallel rank (the experts a
    rank holds summed; 1.0 without expert parallelism): what the predictor's
    ``training.moe_imbalance`` states."""

    def extra(self) -> dict[str, float]:
        return {"moe_imbalance": self.imbalance, "moe_imbalance_max": self.imbalance_max,
                "moe_rank_imbalance": self.rank_imbalance, "moe_dropped_pct": self.dropped_pct,
                "moe_aux_loss": self.aux_loss}


def end_step(layers: list[MoE], stats: MoEStats, total_layers: int, micro_batches: int,
             options: MoEOptions, device: torch.device) -> StepMoE:
    """Reduce this step's statistics over all ranks, update the routers' biases
    (auxiliary-loss-free balancing, from the global loads), reset the statistics."""
    import torch.distributed as dist

    experts = layers[0].num_experts if layers else 1
    counts = torch.zeros(total_layers, experts, device=device)
    tail = torch.zeros(3, device=device)  # dropped, aux-loss sum, all-to-all seconds
    for i, c in stats.tokens_per_expert.items():
        counts[i] = c.float()
    tail[0] = sum((d.float() for d in stats.dropped.values()), torch.zeros((), device=device))
    tail[1] = sum((a.float() for a in stats.aux_loss.values()), torch.zeros((), device=device))
    tail[2] = stats.all_to_all_seconds()
    packed = torch.cat([counts.flatten(), tail])
    world = 1
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(packed)
        world = dist.get_world_size()
    counts = packed[:-3].view(total_layers, experts)
    dropped, aux_sum, a2a = packed[-3:].tolist()
    held = counts.sum(1) > 0
    load = counts[held]
    mean = load.mean(1).clamp_min(1e-9)
    ratio = load.max(1).values / mean
    ep = layers[0].ep_size if layers else 1
    ranks = load.view(len(load), ep, experts // ep).sum(2)
    rank_ratio = ranks.max(1).values / ranks.mean(1).clamp_min(1e-9)
    if options.bias_update_rate > 0:
        with torch.no_grad():
            for m in layers:
                if m.router.expert_bias is not None:
                    row = counts[m.layer_id]
                    m.router.expert_bias += options.bias_update_rate * torch.sign(row.mean() - row)
    stats.reset()
    n_layers = max(1, int(held.sum()))
    assignments = float(load.sum()) or 1.0
    # each layer's aux loss was summed over ranks and micro-batches
    return StepMoE(imbalance=float(ratio.mean()) if len(ratio) else 1.0,
                   imbalance_max=float(ratio.max()) if len(ratio) else 1.0,
                   dropped_pct=100.0 * dropped / assignments,
                   aux_loss=aux_sum / (n_layers * world * micro_batches), all_to_all_s=a2a / world,
                   rank_imbalance=float(rank_ratio.mean()) if len(rank_ratio) else 1.0)
