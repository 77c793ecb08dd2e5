"""The step model's one input: a workload as numbers, for one plan or for millions at once.

A :class:`Layout` holds what a step costs depends on, in five typed parts: the model's shape
(:class:`ModelShape`), the parallel plan (:class:`Mesh`), the run's settings (:class:`Run`), the
device's datasheet physics (:class:`DevicePhysics`) and the kernels the stack runs on that
silicon with their measured speed (:class:`KernelPhysics`). Every numeric field is a ``float``
for one workload (:func:`layout_of`), or a numpy array with one element per candidate plan (the
planner replaces :attr:`Layout.mesh` with arrays) or per published row (the fit stacks rows); the
cost components (:mod:`trainperf.predict.step_model`) are written once for both. Categorical
fields (strings, the GEMM list's structure) are Python values; rows that differ in them are
priced in separate calls.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from trainperf import vec
from trainperf.accounting.flops import attention_pairs
from trainperf.predict.kernels.collectives import LevelModel
from trainperf.predict.kernels.expert_dispatch import DispatchModel
from trainperf.predict.stack_kernels import CPU_ADAM_PARAMS_PER_S

if TYPE_CHECKING:
    from trainperf.predict.step_model.context_parallel import Flavour

Num: TypeAlias = Any
"""A float, or a numpy array of floats (one element per plan or per row)."""
Flag: TypeAlias = Any
"""A bool, or a numpy array of bools."""

COLUMN, ROW, KV, REPLICA = 0, 1, 2, 3
"""How tensor parallelism splits a weight GEMM: its output (column-parallel), its input
(row-parallel), a key/value projection (column-parallel over kv heads, which replicate when
tp exceeds them), or not at all (every tp rank computes it whole: MLA's query and key/value
down-projections, which Megatron-Core builds as ``duplicated`` linears and torchtitan leaves
unsharded)."""

MLA_REPLICATED = ("q_down", "kv_down")
"""MLA's down-projections, replicated over tensor parallelism (:data:`REPLICA`): Megatron-Core
``MLASelfAttention`` (``linear_q_down_proj``, ``linear_kv_down_proj``, parallel_mode
"duplicated"); torchtitan's DeepSeek-V3 plan shards only ``wq``/``wq_b``/``wkv_b``/``wo``. Read from
memory of both repositories."""

ATTENTION_PEAK_PRECISION = {"fp8": "bf16", "fp4": "bf16"}
"""Attention runs in 16-bit even when the GEMMs run in fp8/fp4 (torchtitan's performance page,
2024, footnote 2: its fused attention is not done in fp8)."""

HEAD_16BIT_UNDER_FP8 = True
"""The LM head (output projection) runs in 16 bits when the transformer layers' GEMMs run in
fp8/fp4: Megatron-Core's ``output_layer`` is its own ``ColumnParallelLinear``, not a Transformer
Engine module, so TE's ``fp8_autocast`` leaves it in bf16 (megatron/core/models/gpt/gpt_model.py);
torchtitan's float8 conversion skips the ``output`` linear (torchtitan float8 docs: the final
output layer is excluded for numerics). Read from memory of both repositories; assumed for the
other stacks."""


@dataclass(frozen=True, slots=True)
class Matmul:
    """One weight GEMM of a layer, ``in_features -> out_features``."""

    in_features: Num
    out_features: Num
    split: int
    """:data:`COLUMN`, :data:`ROW` or :data:`KV`."""


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The model's numbers a step depends on, at one sequence length (plan-independent)."""

    layers: Num
    hidden: Num
    heads: Num
    kv_heads: Num
    head_dim: Num
    q_dim: Num
    """Width of the queries (heads x query head dim)."""
    kv_dim: Num
    """Width of the keys (= of the values) a layer keeps, whole model: ``kv_heads x head_dim``; for
    MLA the mean of the up-projected keys and values, ``heads x (qk_head_dim + v_head_dim) / 2``."""
    rope_q: Num
    """Width of the queries RoPE rotates (MLA: only ``heads x qk_rope_head_dim``)."""
    rope_k: Num
    """Width of the keys RoPE rotates (MLA: the one shared ``qk_rope_head_dim`` part)."""
    mla: bool
    """Multi-head latent attention (DeepSeek-V2/V3)."""
    qk_head_dim: Num
    v_head_dim: Num
    ffn: Num
    """Dense MLP hidden width."""
    gated: bool
    """The MLP is gated (SwiGLU, GeGLU): three matrices, an activation reading two inputs."""
    rope: bool
    """Rotary position embeddings are applied to queries and keys."""
    vocab: Num
    moe_layers: Num
    dense_layers: Num
    """Layers with a dense MLP (all of a dense model's; an MoE model's leading or interleaved ones)."""
    dense_interleaved: bool
    """An MoE model's dense layers are interleaved (Llama 4), not leading (DeepSeek-V3)."""
    moe_experts: Num
    moe_topk: Num
    moe_shared: Num
    expert_ffn: Num
    mtp_layers: Num
    """Multi-token-prediction modules (run on the last pipeline stage after the LM head)."""
    attn_mats: tuple[Matmul, ...]
    mlp_mats: tuple[Matmul, ...]
    expert_mats: tuple[Matmul, ...]
    """One routed expert's MLP matrices (empty for a dense model)."""
    attn_names: tuple[str, ...]
    mlp_names: tuple[str, ...]
    params_attn_layer: Num
    """Mixer (attention, or a hybrid's mean of attention and Mamba-2) and norm parameters of the
    average layer."""
    params_dense_mlp_layer: Num
    params_expert: Num
    params_router_layer: Num
    params_embedding: Num
    params_head: Num
    """LM head and final norm parameters."""
    kv_avg: Num
    """Mean keys per query a block-sparse causal kernel computes, over the attention layers
    (:func:`~trainperf.accounting.flops.attention_pairs`)."""
    seq_len: Num
    attn_frac: Num = 1.0
    """Share of the blocks whose mixer is attention (a hybrid's others are Mamba-2 mixers; every
    pipeline stage is taken to hold the model's mix)."""
    mamba_mats: tuple[Matmul, ...] = ()
    """One Mamba-2 mixer's projections (empty without Mamba-2 blocks)."""
    ssd_flops: Num = 0.0
    """Forward FLOPs per token of one Mamba-2 mixer's SSD scan
    (:meth:`~trainperf.specs.model.ModelSpec.ssd_flops_per_token`)."""
    mamba_inner: Num = 0.0
    """Mamba-2 inner width (heads x head dim)."""
    mamba_conv_dim: Num = 0.0
    """Channels of the Mamba-2 convolution (x, B, C)."""
    mamba_heads: Num = 0.0
    mamba_head_dim: Num = 0.0
    mamba_chunk: Num = 0.0
    """SSD chunk length, in tokens."""
    mlp_frac: Num = 1.0
    """Share of the blocks with an MLP (a hybrid's others have none)."""

    def __post_init__(self) -> None:
        _check_positive(self, ("layers", "hidden", "heads", "head_dim", "vocab", "seq_len"))


@dataclass(frozen=True, slots=True)
class Mesh:
    """The parallel plan and batch of a step, as numbers (see
    :class:`~trainperf.specs.parallel.ParallelPlan` for each degree)."""

    micro_batch: Num
    grad_accum: Num
    """Micro-batches per optimizer step on one data-parallel rank."""
    dp: Num
    fsdp: Num
    zero_stage: Num
    tp: Num
    sp: Flag
    """Sequence parallelism over the tp group."""
    pp: Num
    vpp: Num
    interleaved: Flag
    """Interleaved 1F1B schedule."""
    gpipe: Flag
    """GPipe schedule (plain or circular) with pp > 1."""
    cp: Num
    ep: Num
    etp: Num
    """Tensor-parallel degree of the routed experts."""
    shards_params: Num
    shards_grads: Num
    shards_optimizer: Num
    layers_first: Num
    """Transformer layers on the first pipeline rank."""
    layers_mid: Num
    """Layers on the busiest middle rank."""
    layers_last: Num
    scale_up_domain: Num
    """Devices per NVLink/xGMI/ICI domain, at most the run's devices."""
    dualpipe: Flag = False
    """DualPipe schedule with pp > 1 (:mod:`.pipeline`): rank ``i`` runs stage ``i`` of one copy of
    the model and stage ``pp - 1 - i`` of another, half the micro-batches each, and holds both."""
    dualpipev: Flag = False
    """DualPipeV (PyTorch's ``ScheduleDualPipeV``) with pp > 1: ``2 * pp`` stages in a V, rank ``i``
    holding stages ``i`` and ``2 * pp - 1 - i`` (the embedding and the head both on rank 0)."""

    def __post_init__(self) -> None:
        _check_positive(self, ("micro_batch", "grad_accum", "dp", "fsdp", "tp", "pp", "vpp", "cp", "ep", "etp",
                               "scale_up_domain"))


@dataclass(frozen=True, slots=True)
class Run:
    """How the step runs: checkpointing, software switches, precision, what trains."""

    policy: str
    """Activation-checkpointing policy (:mod:`trainperf.accounting.recompute`)."""
    async_tp: Flag
    fp8: bool
    """The GEMMs run in fp8 or fp4."""
    state_kind: str
    """``mixed`` (16-bit weights, fp32 master and optimizer states) or ``fp32``."""
    act_bytes: Num
    """Bytes per activation element."""
    trainable_fraction: Num
    """Share of the parameters that train (1; < 1 for LoRA: frozen weights get no weight
    gradients, gradient buffers or optimizer states)."""
    moe_imbalance: Num = 1.0
    """Tokens the busiest expert-parallel rank receives over the mean
    (:attr:`~trainperf.specs.workload.Workload.moe_imbalance`)."""
    adapters: tuple[tuple[float, float], ...] = ()
    """(in, out) of each matrix of a layer with a LoRA adapter (:class:`~trainperf.specs.lora.LoraSpec`)."""
    adapter_rank: float = 0.0
    offload_optimizer: Flag = False
    """Master weights and optimizer states live on the host and the host CPU steps them
    (:attr:`~trainperf.specs.workload.Workload.offload_optimizer`)."""

    def __post_init__(self) -> None:
        _check_positive(self, ("act_bytes", "trainable_fraction", "moe_imbalance"))


@dataclass(frozen=True, slots=True)
class DevicePhysics:
    """Datasheet figures of the device (:class:`~trainperf.specs.hardware.Hardware`)."""

    peak_flops: Num
    """Dense peak of the GEMM dtype at the clock the part sustains under its power cap."""
    attn_peak_flops: Num
    """The same for the dtype attention runs in (:data:`ATTENTION_PEAK_PRECISION`)."""
    hbm_bytes_per_s: Num
    intra_bytes_per_s: Num
    """Scale-up link bandwidth per device and direction."""
    inter_bytes_per_s: Num
    """Scale-out (NIC) bandwidth per device and direction."""
    hbm_capacity_bytes: Num
    """Memory the device exposes to a process."""
    host_link_bytes_per_s: Num = 0.0
    """Device-host copy bandwidth, one direction (0: not stated)."""
    devices_per_host: Num = 1.0
    """The run's devices on one host (sharing its CPUs)."""

    def __post_init__(self) -> None:
        _check_positive(self, ("peak_flops", "attn_peak_flops", "hbm_bytes_per_s"))


@dataclass(frozen=True, slots=True)
class KernelPhysics:
    """What the stack runs on this silicon and how fast the silicon runs it
    (:mod:`trainperf.predict.kernels`, :mod:`trainperf.predict.stack_kernels`)."""

    silicon: str
    attn_family: str
    gemm_peak_fraction: Num
    """Best measured fraction of peak of the GEMM dtype."""
    gemm_half_dim: Num
    """GEMM dimension at which the shape law halves the efficiency."""
    head_gemm_peak_fraction: Num
    """The LM head's fraction: 16-bit under fp8 (:data:`HEAD_16BIT_UNDER_FP8`)."""
    grouped_fraction: Num
    """The routed experts' grouped GEMM speed over the dense law (of their dtype: 16-bit under
    :attr:`experts_16bit`)."""
    grouped_impl: str
    """The grouped GEMM the stack runs (:data:`~trainperf.predict.kernels.gemm.GROUPED_IMPLS`): one
    kernel per matrix, or one per local expert (:data:`~trainperf.predict.step_model.compute.PER_EXPERT_LAUNCHES`)."""
    dispatch: DispatchModel
    """How the MoE dispatcher's kernels move tokens on this silicon (kernel physics)."""
    moe_host_sync: bool
    """The dispatcher syncs the host with the device once per MoE block forward."""
    hbm_fraction: Num
    """STREAM-like fraction of HBM bandwidth (the optimizer step)."""
    tp_overlap_rule: str
    """When the stack overlaps TP collectives with GEMMs (:data:`~trainperf.predict.stack_kernels.TP_OVERLAP`)."""
    memory_fraction: Num
    """Share of a GPU's memory a preallocating runtime lets the program use."""
    link_up: LevelModel
    """Measured collective behaviour within the scale-up domain
    (:func:`trainperf.predict.kernels.collectives.level_model`)."""
    link_out: LevelModel
    """The same across domains."""
    compiled: bool
    elementwise_impl: str
    """How memory-bound ops run: eager, fused or compiled."""
    fp8_recipe: str
    fp8_recipe_factor: Num
    """Slow-down of an fp8 GEMM by the recipe's quantisation (1 without fp8)."""
    elementwise_fraction: Num
    """Achieved fraction of HBM bandwidth of the memory-bound implementation."""
    norm_passes: Num
    """Times unfused code moves a norm's ideal bytes (1 fused or compiled)."""
    rope_passes: Num
    act_passes: Num
    loss_bytes_per_logit: Num
    """Live bytes per logit at the loss."""
    frozen_weight_bytes: Num
    """Bytes per parameter the stack holds a frozen weight (a LoRA base) in."""
    loss_traffic_bytes: Num
    """HBM bytes the cross-entropy moves per logit, forward and backward (the stack's ``[kernels]
    cross_entropy``: :data:`~trainperf.predict.step_model.compute.EAGER_LOSS_BYTES_PER_LOGIT`
    eager, :data:`~trainperf.predict.step_model.compute.LOSS_BYTES_PER_LOGIT` fused or compiled)."""
    fp8_gemm_input_bytes: float | None
    """Bytes kept per element of a matmul input under fp8 (None: as the other activations)."""
    fsdp_grad_per_tensor: bool
    """FSDP reduce-scatters each weight's gradient on its own (GSPMD), not a block's at once."""
    cp_flavour: Flavour
    """How the stack's context-parallel attention exchanges K/V, merges and buffers
    (:class:`~trainperf.predict.step_model.context_parallel.Flavour`)."""
    grad_reduce_bytes: float = 4.0
    """Bytes per gradient element the data-parallel reductions move (the stack's ``[kernels]
    grad_reduce`` for the run's precision: 4 in fp32, 2 for an fp16 run that reduces in fp16)."""
    moe_probs_in_activation: bool = False
    """The stack weights routed rows by the router probabilities inside the experts' activation
    (its ``[capabilities] moe_probs_in_activation``): no row is kept for the probabilities' gradient."""
    attn_table: Any = None
    """Measured attention curves replacing the kernel tables' (this CPU's, :mod:`trainperf.predict.kernels.cpu`)."""
    host_bound: bool = False
    """Operators' host cost adds to their compute instead of hiding behind it (a CPU)."""
    link_measured_here: bool = False
    """On a CPU: :attr:`link_up` is gloo's between this machine's processes, as a bench run or
    ``trainperf calibrate WORKLOAD`` timed it (False: the catalog's placeholders)."""
    experts_16bit: bool = False
    """An fp8 run's routed experts stay in 16 bits: the stack's fp8 leaves its grouped GEMM out
    (``[kernels] fp8_grouped_gemm = false``, torchtitan); their GEMMs at the 16-bit peak and
    :attr:`head_gemm_peak_fraction`, their inputs kept in 16 bits."""
    gemm_table: tuple[tuple[float, float, float, float], ...] = ()
    """GEMMs timed on this device at given shapes, forward and backward: ``(m, n, k, fraction of
    the peak)`` (a CPU's calibration); a GEMM is priced at its nearest measured shape's fraction,
    scaled by the shape law between the two (:func:`~trainperf.predict.step_model.compute.measured_efficiency`);
    empty: the shape law alone."""
    grouped_table: tuple[tuple[float, float, float, float], ...] = ()
    """The routed experts' grouped GEMMs timed as :attr:`gemm_table` (``m``: rows per expert, the
    fraction over all of them, the stack's grouped implementation's cost included); empty: the
    dense GEMMs' at :attr:`grouped_fraction`."""
    fsdp_module_s: Num = 0.0
    """Host seconds FSDP2 adds per sharded module and step where the host computes (a CPU's, measured)."""
    tp_module_s: Num = 0.0
    """Host seconds DTensor tensor parallelism adds per sharded module (a norm or a Linear) and
    step where the host computes (a CPU's, measured)."""
    tp_element_s: Num = 0.0
    """Host seconds DTensor tensor parallelism adds on top of :attr:`tp_module_s` per sharded
    module, step and element of a rank's micro-batch activation ``[tokens, hidden]`` (a CPU's,
    measured: the copies and casts around the collectives); 0: not measured, the
    sequence-parallel copies priced from the elementwise rate instead
    (:func:`~trainperf.predict.step_model.tensor_parallel.sequence_copies_s`)."""
    ops_per_layer_fwd: Num = 0.0
    """Operators a layer launches forward where measured (a CPU's eager operators, or the GPU
    kernels the stack's profile counted: its ``[kernels] kernels_per_layer``); 0:
    :data:`~trainperf.predict.step_model.compute.KERNELS_PER_LAYER_FWD`."""
    fused_loss_chunk_bytes: Num = 0.0
    """Bytes of fp32 logits one chunk holds where the stack fuses the LM head into a chunked loss
    on a device alone (its ``[capabilities] fused_loss_chunk_bytes``); 0: it does not."""
    step_kernels: Num = 0.0
    """Kernels a step launches outside the layers and the head where the stack's profile counted
    them on a GPU (``[kernels] kernels_per_step``); 0:
    :data:`~trainperf.predict.step_model.optimizer.OPTIMIZER_KERNELS`."""
    host_us_per_kernel: Num = 0.0
    """Host microseconds per kernel launched where the stack's profile measured it on a GPU host
    (``[kernels] host_us_per_kernel``); 0: the fitted ``op_overhead_us`` knob (a CPU's measured
    operator cost reaches that knob instead)."""
    moe_ops_per_layer_fwd: Num = 0.0
    """Operators an MoE layer launches forward where counted (a CPU's, routing included, or the
    GPU kernels of the stack's ``[kernels] moe_kernels_per_layer``); 0: the
    dense layer's and :func:`~trainperf.predict.step_model.compute.moe_launches`."""
    optimizer_bytes_per_s: Num = 0.0
    """Rate of the optimizer step where the device measured it (a CPU's calibration: clipping and
    fused AdamW timed by the bench), bytes counted as
    :data:`~trainperf.predict.step_model.optimizer.OPTIMIZER_BYTES_PER_PARAM`; 0: the silicon's
    memory bandwidth times the stack's memory-bound share."""
    cpu_optimizer_params_per_s: Num = CPU_ADAM_PARAMS_PER_S
    """Parameters a host steps per second when the optimizer is offloaded to it, every device of
    the node stepping its shard at once (the stack's ``[kernels] cpu_optimizer_params_per_s``)."""
    autocast_unsharded: bool = False
    """Where the plan leaves nothing for FSDP to wrap, the stack runs 16-bit by ``torch.autocast``
    over fp32 weights, so the residual stream and the norms' outputs are fp32: a block's input
    gathered by tensor parallelism (and its gradient) and the activation pipeline stages send move
    4 bytes per element, not the 16-bit dtype's 2 (:func:`residual_width`; the stack's ``[kernels]
    autocast_unsharded``, :class:`~trainperf.predict.stack_kernels.StackKernels`)."""
    dp_fsdp2_replicas: bool = False
    """Replicated data parallelism runs as FSDP2 over replicas (the stack's ``[kernels]
    data_parallel = "fsdp2-replicas"``): one gradient all-reduce per wrapped block and the root,
    and, where the host computes, FSDP2's casts of the parameters and gradients through its
    copy-in and copy-out buffers (:func:`~trainperf.predict.step_model.data_parallel.replica_copies_s`)."""


@dataclass(frozen=True, slots=True)
class Layout:
    """Everything one step's cost depends on (see the module docstring)."""

    model: ModelShape
    mesh: Mesh
    run: Run
    device: DevicePhysics
    kernels: KernelPhysics


def _check_positive(obj: Any, names: tuple[str, ...]) -> None:
    """Raise for a field that is not positive (every element, for an array)."""
    for name in names:
        v = getattr(obj, name)
        ok = v > 0 if type(v) is float or type(v) is int else bool((v > 0).all())
        if not ok:
            raise ValueError(f"{type(obj).__name__}.{name} must be positive, not {v!r}")


# ------------------------------------------------------------------------- from a workload
def _matmuls(named: dict[str, tuple[int, int]], row: str, kv: tuple[str, ...] = ()) -> tuple[Matmul, ...]:
    return tuple(Matmul(float(i), float(o), ROW if name == row else (KV if name in kv else (
        REPLICA if name in MLA_REPLICATED else COLUMN))) for name, (i, o) in named.items())


def _attention_widths(model: Any) -> tuple[float, float, float]:
    """(kv_dim, rope_q, rope_k) of :class:`ModelShape`."""
    if model.attention == "mla":
        return model.kept_kv_dim, float(model.heads * model.qk_rope_head_dim), float(model.qk_rope_head_dim)
    return model.kept_kv_dim, float(model.q_dim), float(model.kv_dim)


@functools.lru_cache(maxsize=1024)
def model_shape(model: Any, seq_len: int) -> ModelShape:
    """The :class:`ModelShape` of a :class:`~trainperf.specs.model.ModelSpec` at ``seq_len``."""
    experts = (_matmuls(model.dense_mlp_matmuls(model.moe_expert_ffn), "down_proj") if model.is_moe else ())
    kv_dim, rope_q, rope_k = _attention_widths(model)
    return ModelShape(
        **_hybrid_fields(model),
        layers=float(model.layers), hidden=float(model.hidden), heads=float(model.heads),
        kv_heads=float(model.kv_heads), head_dim=float(model.head_dim), q_dim=float(model.q_dim), kv_dim=kv_dim,
        rope_q=rope_q, rope_k=rope_k, mla=model.attention == "mla", mtp_layers=float(model.mtp_layers),
        qk_head_dim=float(model.qk_head_dim), v_head_dim=float(model.v_dim_per_head), ffn=float(model.ffn_hidden),
        gated=bool(model.gated_mlp), rope=model.position == "rope", vocab=float(model.vocab),
        moe_layers=float(model.moe_layers), dense_layers=float(model.dense_layers),
        dense_interleaved=bool(model.moe_dense_interleaved), moe_experts=float(model.moe_experts),
        moe_topk=float(model.moe_topk), moe_shared=float(model.moe_shared_experts),
        expert_ffn=float(model.moe_expert_ffn or 0),
        attn_mats=_matmuls(model.attention_matmuls(), "o_proj", ("k_proj", "v_proj")),
        mlp_mats=_matmuls(model.dense_mlp_matmuls(), "down_proj"), expert_mats=experts,
        attn_names=tuple(model.attention_matmuls()), mlp_names=tuple(model.dense_mlp_matmuls()),
        params_attn_layer=float(model.mixer_and_norm_params / model.layers),
        params_dense_mlp_layer=float(model.dense_mlp_params_per_layer), params_expert=float(model.expert_params),
        params_router_layer=float(model.router_params_per_layer), params_embedding=float(model.embedding_params),
        params_head=float(model.lm_head_params + model.final_norm_params),
        kv_avg=attention_pairs(model, seq_len, "causal") / (seq_len * model.attention_layers), seq_len=float(seq_len))


def _hybrid_fields(model: Any) -> dict[str, Any]:
    """The :class:`ModelShape` fields of a hybrid's Mamba-2 mixers and MLP-free blocks (none for a
    transformer)."""
    out: dict[str, Any] = {"mlp_frac": model.mlp_layers / model.layers} if model.mlp_free_layers else {}
    if not model.mamba_layers:
        return out
    mats = model.mamba_matmuls()
    return out | {"attn_frac": model.attention_layers / model.layers, "mamba_mats": _matmuls(mats, "out_proj"),
                  "ssd_flops": model.ssd_flops_per_token(), "mamba_inner": float(model.mamba_inner),
                  "mamba_conv_dim": float(model.mamba_conv_dim), "mamba_heads": float(model.mamba_heads),
                  "mamba_head_dim": float(model.mamba_head_dim), "mamba_chunk": float(model.mamba_chunk)}


def mesh_of(w: Any) -> Mesh:
    """The :class:`Mesh` of a :class:`~trainperf.specs.workload.Workload`."""
    p = w.plan
    first, mid, last = p.stage_layers(w.model.layers)
    return Mesh(
        micro_batch=float(w.micro_batch), grad_accum=float(w.grad_accum_steps), dp=float(p.dp or 1),
        fsdp=float(p.fsdp), zero_stage=float(p.zero_stage), tp=float(p.tp), sp=bool(p.sequence_parallel),
        pp=float(p.pp), vpp=float(p.vpp), interleaved=p.pp_schedule == "interleaved",
        gpipe=p.pp > 1 and p.pp_schedule == "gpipe", cp=float(p.cp), ep=float(p.ep), etp=float(p.expert_tp),
        shards_params=float(p.shards_params), shards_grads=float(p.shards_grads),
        shards_optimizer=float(p.shards_optimizer), layers_first=float(first), layers_mid=float(mid),
        layers_last=float(last), scale_up_domain=float(min(w.hardware.scale_up_domain or w.devices_per_node,
                                                           w.num_devices)),
        dualpipe=p.pp > 1 and p.pp_schedule == "dualpipe", dualpipev=p.pp > 1 and p.pp_schedule == "dualpipev")


def run_of(w: Any, trainable_fraction: float = 1.0) -> Run:
    """The :class:`Run` of a workload."""
    full = w.precision in ("fp32", "tf32")
    return Run(policy=w.activation_checkpointing, async_tp=bool(w.async_tp), fp8=w.precision in ("fp8", "fp4"),
               state_kind="fp32" if full else "mixed", act_bytes=4.0 if full else 2.0,
               trainable_fraction=float(trainable_fraction), moe_imbalance=float(getattr(w, "moe_imbalance", 1.0)),
               offload_optimizer=bool(getattr(w, "offload_optimizer", False)), **adapters_of(w))


def adapters_of(w: Any) -> dict[str, Any]:
    """The :class:`Run` fields of a workload's LoRA adapters (none without ``[lora]``)."""
    lora = getattr(w, "lora", None)
    if lora is None:
        return {}
    return {"adapters": tuple((float(i), float(o)) for i, o in lora.matrices(w.model).values()),
            "adapter_rank": float(lora.rank)}


def device_of(hw: Any, precision: str, devices_per_host: int = 1) -> DevicePhysics:
    """The :class:`DevicePhysics` of a device at a precision: compute at the clock the part
    sustains under its power cap; ``devices_per_host`` of the run share a host."""
    attn_prec = ATTENTION_PEAK_PRECISION.get(precision, precision)
    if not hw.supports(attn_prec):
        attn_prec = precision
    return DevicePhysics(
        peak_flops=hw.sustained_peak_flops(precision), attn_peak_flops=hw.sustained_peak_flops(attn_prec),
        hbm_bytes_per_s=hw.hbm_bandwidth_GB_per_s * 1e9, intra_bytes_per_s=hw.intra_node_link_GB_per_s * 1e9,
        inter_bytes_per_s=hw.inter_node_link_GB_per_s * 1e9, hbm_capacity_bytes=hw.usable_memory_bytes,
        host_link_bytes_per_s=hw.host_link_GB_per_s * 1e9, devices_per_host=float(devices_per_host))


def layout_of(w: Any, trainable_fraction: float = 1.0) -> Layout:
    """The :class:`Layout` of a :class:`~trainperf.specs.workload.Workload`."""
    from trainperf.predict.step_model.kernel_physics import kernels_of

    return Layout(model=model_shape(w.model, w.seq_len), mesh=mesh_of(w), run=run_of(w, trainable_fraction),
                  device=device_of(w.hardware, w.precision, w.devices_per_node or 1), kernels=kernels_of(w))


def residual_width(lay: Layout) -> Num:
    """Bytes of the residual stream (a block's input, the activation pipeline stages send) per
    byte of a 16-bit activation: 2 where the stack runs 16-bit by autocast over fp32 weights and
    the plan leaves nothing for FSDP to wrap (no data or context parallelism; the stack's
    ``autocast_unsharded``), since the residual stream and the norms' outputs stay fp32 there;
    else 1."""
    m = lay.mesh
    alone = m.dp * m.fsdp * m.cp <= 1.0
    return vec.where(lay.kernels.autocast_unsharded & alone & (lay.run.state_kind == "mixed"), 2.0, 1.0)
