"""What kernels a software stack runs: the ``[kernels]`` facts of a stack profile, resolved.

A stack profile (:mod:`trainperf.predict.stacks`) states, as facts with sources, which kernels
and features the stack uses; the step model then takes their speed from the silicon's kernel
physics (:mod:`trainperf.predict.kernels`), so a stack on silicon it was never measured on is
predicted from that silicon's kernels. The facts::

    [kernels]
    attention = "fa2"                      # fused-attention family (kernels.attention.FAMILIES)
    attention_by_silicon = {hopper = "cudnn", cdna3 = "ck"}   # where the stack picks another
    elementwise = "eager"                  # eager | fused | compiled: norms, activations, RoPE, loss
    compiled = false                       # the stack always compiles (JAX/XLA programs)
    fp8_recipe = "tensorwise"              # the stack's fp8 scaling when a run names none
    tp_overlap = "async-tp"                # never | async-tp (only with the run's async_tp) |
                                           # sequence-parallel (when sp is on) | always
    gpu_memory_fraction = 0.9              # share of a GPU's memory the runtime lets the program
                                           # use (JAX/XLA preallocation); 1: all of it
    grouped_gemm = "torch-grouped-mm"      # the routed experts' grouped GEMM (kernels.gemm.GROUPED_IMPLS)
    fp8_grouped_gemm = true                # an fp8 run's routed experts run their grouped GEMM in
                                           # fp8 (false: they stay 16-bit, as torchtitan's Float8
                                           # converter leaves them unless its MoE prototype is on)
    context_parallel = "ring-allgather"    # how cp attention exchanges K/V (CONTEXT_PARALLEL)
    context_parallel_load_balance = true   # causal load balancing (zigzag / head-tail chunks)
    moe_dispatcher = "nccl"                # MoE token dispatch/combine kernels
                                           # (kernels.expert_dispatch.FAMILIES)
    moe_host_sync = true                   # the dispatcher reads token counts on the host once per
                                           # MoE block forward (all-to-all split sizes)
    autocast_unsharded = false             # with no data or context parallelism (nothing for FSDP
                                           # to wrap), 16-bit runs by torch.autocast over fp32
                                           # weights (fp32 residual stream and norm outputs)
    data_parallel = "ddp"                  # how replicated data parallelism reduces gradients:
                                           # ddp (buckets) | fsdp2-replicas (per block, FSDP2's copies)
    grad_reduce = "fp32"                   # the dtype gradients are reduced in: fp32 | fp16-native
                                           # (an fp16 run's in fp16; bf16 and fp32 runs' in fp32)
                                           # | 16-bit (a 16-bit or fp8 run's in its 16-bit dtype)
    cross_entropy = "eager"                # the loss as separate PyTorch ops (eager) or one
                                           # fused kernel (fused); a compiled step fuses it
    eager_pass_share = 0.15                # share of unfused ops' extra passes (microbenchmark
                                           # eager / fused - 1) a step pays; absent: 0.15
    kernels_per_layer = 33.4               # GPU kernels one layer launches forward (measured);
                                           # absent: the step model's eager count (14)
    moe_kernels_per_layer = 103.7          # the same for an MoE layer, routing included
    kernels_per_step = 48.0                # GPU kernels per step outside the layers and the head
                                           # (embedding, clipping, optimizer); absent: 20
    host_us_per_kernel = 34.0              # host microseconds per kernel launched on a GPU
                                           # (measured); absent: the profile's fitted op_overhead_us
    cpu_optimizer_params_per_s = 4.14e9    # parameters a host steps per second with the
                                           # optimizer offloaded (every device of the node
                                           # stepping its shard at once)
    [kernels.sources]
    attention = "..."

A value missing from a stack is taken from ``generic``; a workload's own fields (``compile``,
``async_tp``, ``fp8_recipe``) win over the stack's facts. A run with another attention kernel
than its stack's (Megatron-DeepSpeed without ``--use-flash-attn``, say) is predicted with a
profile file that states it (``[kernels] attention = "eager"``, ``--stack FILE``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from trainperf.errors import SpecError, UnknownNameError
from trainperf.predict import stacks
from trainperf.predict.kernels import attention
from trainperf.predict.kernels.expert_dispatch import FAMILIES as DISPATCHERS
from trainperf.predict.kernels.gemm import GROUPED_IMPLS

ELEMENTWISE = ("eager", "fused", "compiled")
TP_OVERLAP = ("never", "async-tp", "sequence-parallel", "always")
CROSS_ENTROPY = ("eager", "fused")
DATA_PARALLEL = ("ddp", "fsdp2-replicas")
"""How a stack runs replicated data parallelism (``dp`` without FSDP shards): DDP's bucketed
all-reduce of the gradients, or FSDP2 over a replicate-only mesh (HSDP with one shard), which
all-reduces each wrapped block's gradients from its post-backward hook and casts the parameters
and gradients through its own copy-in and copy-out buffers, as for sharded FSDP."""
GRAD_REDUCE = ("fp32", "fp16-native", "16-bit")
"""The dtype a stack reduces (all-reduces, reduce-scatters) gradients in: fp32 (Megatron-Core's
``grad_reduce_in_fp32`` as NeMo's recipes set it, torchtitan's FSDP2 ``reduce_dtype``, DDP over
fp32 master weights), or ``fp16-native``: an fp16 run's gradients in fp16, a bf16 or fp32 run's
in fp32 (Megatron-LM 2021: ``--accumulate-allreduce-grads-in-fp32`` off unless bf16 forces it),
or ``16-bit``: a 16-bit (or fp8) run's gradients in its 16-bit dtype, an fp32 run's in fp32
(FSDP's mixed precision with ``reduce_dtype`` the parameters' 16-bit dtype: Composer's ``PURE``)."""
CONTEXT_PARALLEL = ("ring-p2p", "ring-allgather", "ring-alltoall", "allgather", "ulysses")
"""How a stack's context-parallel attention exchanges K/V
(:data:`trainperf.predict.step_model.context_parallel.FLAVOURS` says what each one costs)."""
KEYS = ("attention", "attention_by_silicon", "elementwise", "compiled", "fp8_recipe", "tp_overlap",
        "gpu_memory_fraction", "grouped_gemm", "fp8_grouped_gemm", "context_parallel", "context_parallel_load_balance",
        "moe_dispatcher", "moe_host_sync", "autocast_unsharded", "data_parallel", "grad_reduce", "cross_entropy",
        "eager_pass_share", "kernels_per_layer", "moe_kernels_per_layer", "kernels_per_step", "host_us_per_kernel", "cpu_optimizer_params_per_s", "sources")

CPU_ADAM_PARAMS_PER_S = 4.14e9
"""Parameters per second DeepSpeed's CPU Adam steps on a DGX H200 host, every GPU's shard at
once (the deepspeed profile's ``cpu_optimizer_params_per_s``, with its derivation): the only
offloaded optimizer step measured, so a stack that states none is taken to step as fast."""

EAGER_PASS_SHARE = 0.15
"""The share of an unfused op's extra passes a training step pays, for a stack that states none
(:attr:`StackKernels.eager_pass_share`). Liger-Kernel's isolated benchmarks put Hugging Face's
RMSNorm, RoPE and SwiGLU at 3.6x, 6.7x and 2.5x the time of fused kernels, which priced a
Llama-3.1-8B step at 8k tokens 9-10% slower eager than fused; end to end, swapping them (and the
cross-entropy) for Liger's changed that step by at most 1.5% on H200 and B200 (ZeRO-2, 8 GPUs),
and compiling the 8B step did not make it faster (0.94x on one B200): stas00/ml-engineering@744d01e
``insights/when-to-upgrade-gpus`` and ``training/performance/README.md``. 0.15 is the largest
round share that keeps the model's swap within the stated 1.5% on both (``tests/test_eager_in_step.py``).
Why the isolated kernels overstate a Hugging Face step is not known here. A stack whose unfused
code is known to pay more states its own share; none of the packaged ones does (trainperf's own
bench fits its H200 runs at 0.15 once its fp32 residual stream is priced: docs/KERNELS.md)."""

BUILTIN: dict[str, Any] = {
    "attention": "fa2", "attention_by_silicon": {}, "elementwise": "eager", "compiled": False,
    "fp8_recipe": "tensorwise", "tp_overlap": "async-tp", "gpu_memory_fraction": 1.0,
    "grouped_gemm": "other", "fp8_grouped_gemm": True, "context_parallel": "ring-p2p", "context_parallel_load_balance": True,
    "moe_dispatcher": "nccl", "moe_host_sync": True, "autocast_unsharded": False, "data_parallel": "ddp",
    "grad_reduce": "fp32", "cross_entropy": "eager", "eager_pass_share": EAGER_PASS_SHARE, "kernels_per_layer": 0.0,
    "moe_kernels_per_layer": 0.0, "kernels_per_step": 0.0, "host_us_per_kernel": 0.0, "cpu_optimizer_params_per_s": CPU_ADAM_PARAMS_PER_S,
}
"""What a stack with no facts at all is taken to run: PyTorch eager with FlashAttention-2, and
context parallelism as a load-balanced ring of point-to-point K/V transfers (Liu et al. 2023's
ring attention with zigzag chunks, as Megatron-Core runs it), and an offloaded optimizer stepping
as DeepSpeed's CPU Adam does (:data:`BUILTIN_SOURCES`)."""

BUILTIN_SOURCES: dict[str, str] = {
    "eager_pass_share": "stas00/ml-engineering@744d01e insights/when-to-upgrade-gpus: Liger-Kernel's fused RMSNorm, "
                        "RoPE, SwiGLU and cross-entropy change a Hugging Face Llama-3.1-8B step at 8k tokens by "
                        "<= 1.5% on H200 and B200 (EAGER_PASS_SHARE)",
    "cpu_optimizer_params_per_s": "DeepSpeed's CPU Adam, the only offloaded optimizer step measured (see the "
                                     "deepspeed profile's source): a stack that states none is taken to step as fast",
}
"""The source of a :data:`BUILTIN` value that is more than a default."""


@dataclass(frozen=True)
class StackKernels:
    """The kernels one stack runs on one silicon generation."""

    stack: str
    silicon: str
    attention: str
    """Fused-attention family used on this silicon (after the kernel library's own resolution)."""
    elementwise: str
    """How memory-bound ops run without ``compile``: eager, fused or compiled."""
    compiled: bool
    """The stack always compiles its step (XLA)."""
    fp8_recipe: str
    tp_overlap: str
    gpu_memory_fraction: float = 1.0
    """Share of a GPU's memory the stack's runtime lets the program allocate: JAX/XLA preallocates
    ``XLA_PYTHON_CLIENT_MEM_FRACTION`` of it and allocates inside that pool; 1 for a caching
    allocator that grows to what the device exposes (PyTorch). Not applied to TPUs or CPUs."""
    grouped_gemm: str = "other"
    """The grouped GEMM the routed experts of an MoE layer run
    (:data:`trainperf.predict.kernels.gemm.GROUPED_IMPLS`); its speed where measured is
    :func:`~trainperf.predict.kernels.gemm.grouped_fraction`, the dense GEMM law elsewhere."""
    fp8_grouped_gemm: bool = True
    """Under an fp8 run the routed experts' grouped GEMM runs in fp8 too (Transformer Engine's
    GroupedLinear); False: the experts stay in 16 bits while the dense Linears go fp8."""
    context_parallel: str = "ring-p2p"
    """How context-parallel attention exchanges K/V (:data:`CONTEXT_PARALLEL`)."""
    context_parallel_load_balance: bool = True
    """Causal load balancing of the cp ranks (every rank the same share of the causal triangle)."""
    moe_dispatcher: str = "nccl"
    """The kernels that carry an MoE layer's tokens to their experts and back
    (:data:`trainperf.predict.kernels.expert_dispatch.FAMILIES`); a run's ``moe_dispatcher`` wins."""
    moe_host_sync: bool = True
    """The dispatcher copies the tokens-per-expert counts to the host once per MoE block forward (to
    size the all-to-all), so the host has no lead over the device there and the kernels it launches
    after the copy wait for their launch (Megatron-Core's ``alltoall`` and ``flex`` dispatchers,
    torchtitan's ``all_to_all_single`` split sizes); False for a compiled XLA program (static
    shapes)."""
    autocast_unsharded: bool = False
    """Where the plan has no data or context parallelism (nothing for FSDP to wrap), 16-bit runs
    are by ``torch.autocast`` over fp32 weights: the residual stream and the norms' outputs are
    fp32, so the sequence-parallel all-gathers of a block's input (and their backward
    reduce-scatters) and the pipeline's sends move 4 bytes per element (trainperf's own bench);
    False where the 16-bit activations come from 16-bit parameters (FSDP's mixed-precision
    policy, Megatron-Core's bf16 modules)."""
    data_parallel: str = "ddp"
    """How replicated data parallelism reduces the gradients (:data:`DATA_PARALLEL`)."""
    grad_reduce: str = "fp32"
    """The dtype the gradients are reduced in (:data:`GRAD_REDUCE`)."""
    cross_entropy: str = "eager"
    """How the stack's loss runs when the step is not compiled: ``eager`` (separate PyTorch ops:
    the fp32 upcast, log-softmax, NLL and their backward) or ``fused`` (one kernel: Megatron-Core's
    ``cross_entropy_loss_fusion``, flash-attn's or Liger's cross-entropy)."""
    eager_pass_share: float = EAGER_PASS_SHARE
    """Of the extra HBM passes unfused PyTorch code makes over a fused kernel of the same op
    (:func:`trainperf.predict.kernels.memory_bound.eager_penalty`, measured on isolated kernels), the
    share a training step of the stack pays: an eager op moves ``1 + share x (penalty - 1)`` times
    its ideal bytes (:data:`EAGER_PASS_SHARE` where the stack states none)."""
    kernels_per_layer: float = 0.0
    """Kernels one transformer layer launches forward on a GPU, counted on the stack's own runs
    (its backward launches twice as many); 0: not counted, the step model's
    :data:`~trainperf.predict.step_model.compute.KERNELS_PER_LAYER_FWD`."""
    moe_kernels_per_layer: float = 0.0
    """The same for an MoE layer (router, token sort and permutation, grouped GEMMs, shared expert);
    0: the dense layer's count and the step model's extra expert kernels."""
    kernels_per_step: float = 0.0
    """Kernels a step launches on a GPU outside the layers and the LM head (embedding, gradient
    clipping, the optimizer, zeroing the gradients); 0: the step model's
    :data:`~trainperf.predict.step_model.optimizer.OPTIMIZER_KERNELS`."""
    host_us_per_kernel: float = 0.0
    """Host microseconds per kernel launched on a GPU, measured on the stack's own runs (Python,
    autograd and the dispatcher, not only the CUDA launch): what a step whose kernels are shorter
    than their launch takes per kernel; 0: the profile's fitted ``op_overhead_us``. A CPU's own
    operator cost comes from its calibration (:mod:`trainperf.predict.kernels.cpu`), not from here."""
    cpu_optimizer_params_per_s: float = CPU_ADAM_PARAMS_PER_S
    """Parameters per second a host steps when the stack offloads the optimizer to it (DeepSpeed's
    CPU Adam, Megatron-Core's ``--optimizer-cpu-offload``), every device of the node stepping its
    shard at once: a rate per host, not per device. Measured once, on a DGX H200 host; the B200
    node of the same page steps about as fast with 17% more DRAM bandwidth and the same cores, so
    it is not taken to scale with the host's memory bandwidth."""
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def elementwise_impl(self, compile_flag: bool) -> str:
        """``compiled`` when the run (or the stack) compiles, else the stack's own kind."""
        return "compiled" if (compile_flag or self.compiled) else self.elementwise


def validate_table(body: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Check a ``[kernels]`` table (unknown keys and bad values are one-line errors)."""
    choices = {"attention": attention.FAMILIES, "elementwise": ELEMENTWISE, "tp_overlap": TP_OVERLAP,
               "grouped_gemm": GROUPED_IMPLS, "context_parallel": CONTEXT_PARALLEL, "moe_dispatcher": DISPATCHERS,
               "cross_entropy": CROSS_ENTROPY, "data_parallel": DATA_PARALLEL, "grad_reduce": GRAD_REDUCE}
    for k, v in body.items():
        at = f"{where} [kernels].{k}"
        if k not in KEYS:
            raise UnknownNameError(at, k, KEYS)
        if k in choices:
            stacks.check_choice(at, v, choices[k])
        elif k in ("compiled", "context_parallel_load_balance", "moe_host_sync", "autocast_unsharded",
                   "fp8_grouped_gemm"):
            stacks.check_flag(at, v)
        elif k == "gpu_memory_fraction":
            stacks.check_number(at, v, 1.0)
        elif k in ("kernels_per_layer", "moe_kernels_per_layer", "kernels_per_step"):
            stacks.check_number(at, v, 10_000.0, " of kernels")
        elif k == "host_us_per_kernel":
            stacks.check_number(at, v, 10_000.0, " of microseconds")
        elif k == "eager_pass_share" and (isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 1):
            raise SpecError(at, v, "a share from 0 to 1")
        elif k == "cpu_optimizer_params_per_s":
            stacks.check_number(at, v, 1e13, " of parameters per second")
        elif k == "attention_by_silicon" and not isinstance(v, Mapping):
            raise SpecError(at, v, "a table of silicon = family")
    for sil, fam in body.get("attention_by_silicon", {}).items():
        stacks.check_choice(f"{where} [kernels].attention_by_silicon.{sil}", fam, attention.FAMILIES)
    return dict(body)


def resolve(profile: Any, silicon: str, generic: Any = None) -> StackKernels:
    """The kernels ``profile`` (a :class:`~trainperf.predict.stacks.Profile`) runs on ``silicon``,
    its missing facts taken from ``generic`` and then :data:`BUILTIN`."""

    facts: dict[str, Any] = dict(BUILTIN)
    sources: dict[str, str] = {k: BUILTIN_SOURCES.get(k, "trainperf default for a stack with no stated facts")
                               for k in BUILTIN}
    for prof in (generic, profile):
        if prof is None:
            continue
        body = validate_table(prof.kernels, f"stack {prof.name}")
        for k, v in body.items():
            if k == "sources":
                continue
            facts[k] = v
            sources[k] = str(body.get("sources", {}).get(k, f"stack profile {prof.name}"))
    fam = facts.get("attention_by_silicon", {}).get(silicon, facts["attention"])
    if fam != facts["attention"]:
        sources["attention"] = str((profile.kernels.get("sources", {}) if profile else {}).get(
            "attention_by_silicon", sources["attention"]))
    used, why = attention.resolve_family(silicon, fam)
    if used != fam:
        sources["attention"] = f"{sources['attention']}; {why}"
    return StackKernels(stack=getattr(profile, "name", "generic"), silicon=silicon, attention=used,
                        elementwise=str(facts["elementwise"]), compiled=bool(facts["compiled"]),
                        fp8_recipe=str(facts["fp8_recipe"]), tp_overlap=str(facts["tp_overlap"]),
                        gpu_memory_fraction=float(facts["gpu_memory_fraction"]),
                        grouped_gemm=str(facts["grouped_gemm"]), fp8_grouped_gemm=bool(facts["fp8_grouped_gemm"]),
                        context_parallel=str(facts["context_parallel"]),
                        context_parallel_load_balance=bool(facts["context_parallel_load_balance"]),
                        moe_dispatcher=str(facts["moe_dispatcher"]), moe_host_sync=bool(facts["moe_host_sync"]),
                        autocast_unsharded=bool(facts["autocast_unsharded"]),
                        data_parallel=str(facts["data_parallel"]), grad_reduce=str(facts["grad_reduce"]),
                        cross_entropy=str(facts["cross_entropy"]),
                        eager_pass_share=float(facts["eager_pass_share"]),
                        kernels_per_layer=float(facts["kernels_per_layer"]),
                        moe_kernels_per_layer=float(facts["moe_kernels_per_layer"]),
                        kernels_per_step=float(facts["kernels_per_step"]),
                        host_us_per_kernel=float(facts["host_us_per_kernel"]),
                        cpu_optimizer_params_per_s=float(facts["cpu_optimizer_params_per_s"]), sources=sources)


@lru_cache(maxsize=256)
def _cached(stack: str, silicon: str, mtime: float) -> StackKernels:
    prof = stacks.load_profile(stack)
    generic = stacks.packaged_profile(stacks.DEFAULT_STACK)
    return resolve(prof, silicon, generic if prof.name != stacks.DEFAULT_STACK or prof.path else None)


def for_stack(stack: Any, silicon: str) -> StackKernels:
    """The kernels of ``stack`` (a name, a profile file or a Profile) on ``silicon``."""
    if isinstance(stack, stacks.Profile):
        generic = stacks.packaged_profile(stacks.DEFAULT_STACK)
        return resolve(stack, silicon, generic if stack.name != stacks.DEFAULT_STACK else None)
    key, mtime = stacks.profile_cache_key(stack)
    return _cached(key, silicon, mtime)
