"""ModelSpec: the shape of a decoder-only transformer, and its parameter counts.

Every count is derived from the shape, never typed in, so a preset cannot disagree with
itself. Covered architectures: dense GPT/Llama-style decoders (MHA, GQA, MQA), Multi-head
Latent Attention (DeepSeek-V2/V3), mixture-of-experts MLPs with routed and shared experts and
leading dense layers, gated (SwiGLU, GeGLU) and plain (GELU, ReLU, squared ReLU) MLPs, tied or untied
embeddings, learned or rotary positions, sliding-window or chunked attention on some layers,
hybrid models whose blocks mix Mamba-2 (SSD) mixers with attention and may lack an MLP
(Nemotron-H), and the small tensors a checkpoint holds besides the matmul weights (biases on any linear layer,
LayerNorm biases, extra norms per block, a shared-expert gate, a router correction bias).
Non-text towers of a multimodal checkpoint travel along as :class:`~trainperf.specs.towers.Tower`
counts; FLOPs are those of the text model.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from trainperf.errors import SpecError
from trainperf.specs.bounds import MODEL_FIELD_BOUNDS, shown

if TYPE_CHECKING:
    from trainperf.specs.towers import Tower

MlpKind = Literal["swiglu", "geglu", "gelu", "relu", "relu2"]
NormKind = Literal["rmsnorm", "layernorm"]
AttentionKind = Literal["mha", "mla"]
PositionKind = Literal["rope", "learned", "alibi", "none"]

MLP_KINDS: tuple[str, ...] = ("swiglu", "geglu", "gelu", "relu", "relu2")
GATED_MLPS: frozenset[str] = frozenset({"swiglu", "geglu"})
NORM_KINDS: tuple[str, ...] = ("rmsnorm", "layernorm")
ATTENTION_KINDS: tuple[str, ...] = ("mha", "mla")
POSITION_KINDS: tuple[str, ...] = ("rope", "learned", "alibi", "none")


def _all_towers(items: tuple[Any, ...]) -> bool:
    if not items:  # a text model: no need to import the Tower class
        return True
    from trainperf.specs.towers import Tower

    return all(isinstance(t, Tower) for t in items)


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SpecError(name, value, "a positive integer")


def _non_negative(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(name, value, "an integer >= 0")


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a decoder-only transformer language model.

    Dimension fields are plain integers; counts derived from them are properties. ``heads *
    head_dim`` may differ from ``hidden`` (Gemma, Qwen3); ``kv_heads < heads`` is GQA,
    ``kv_heads == 1`` MQA.
    """

    layers: int
    """Number of transformer blocks."""
    hidden: int
    """Residual stream width (d_model)."""
    heads: int
    """Query heads per layer."""
    ffn_hidden: int
    """Intermediate width of a dense MLP layer (per matrix, not counting the gate twice)."""
    vocab: int
    """Vocabulary size as the embedding table is allocated (padded size if the model pads)."""
    kv_heads: int | None = None
    """Key/value heads (GQA); ``None`` means equal to ``heads``."""
    head_dim: int | None = None
    """Per-head dimension; ``None`` means ``hidden // heads``."""
    name: str = field(default="custom", compare=False)
    """Preset id or a free label; not used in any computation (nor in equality: two specs of the
    same shape are equal)."""
    tied_embeddings: bool = False
    """Whether the LM head reuses the input embedding matrix."""
    mlp: MlpKind = "swiglu"
    """MLP kind: gated (``swiglu``, ``geglu``: 3 matrices) or plain (``gelu``, ``relu``, and
    ``relu2`` = squared ReLU, relu(x)^2, of Nemotron-4 / Primer: 2 matrices)."""
    norm: NormKind = "rmsnorm"
    """Normalisation layer kind; LayerNorm carries a bias only when ``bias`` is true."""
    bias: bool = False
    """Whether every linear layer and norm carries a bias (GPT-2, GPT-3, GPT-NeoX)."""
    qkv_bias: bool = False
    """Bias on the query/key/value projections only (Qwen2); implied by ``bias``."""
    qk_norm: bool = False
    """Per-head RMSNorm on queries and keys (Qwen3, OLMo2): 2 * head_dim weights per layer."""
    position: PositionKind = "rope"
    """Position encoding; ``learned`` adds a ``max_seq_len x hidden`` table."""
    max_seq_len: int = 4096
    """Longest sequence the model was built for (sizes the learned position table)."""
    parallel_residual: bool = False
    """Attention and MLP read the same input (GPT-NeoX, GPT-J); shapes and counts are unchanged."""
    # --- mixture of experts -------------------------------------------------------------
    moe_experts: int = 0
    """Routed experts per MoE layer; 0 means a dense model."""
    moe_topk: int = 0
    """Routed experts each token visits."""
    moe_expert_ffn: int | None = None
    """Intermediate width of one expert; ``None`` means ``ffn_hidden``."""
    moe_shared_experts: int = 0
    """Always-active shared experts per MoE layer (DeepSeek), each ``moe_expert_ffn`` wide."""
    moe_dense_layers: int = 0
    """Layers that keep a dense MLP of width ``ffn_hidden``: the leading ones (DeepSeek-V3: 3)
    unless ``moe_dense_interleaved``."""
    moe_dense_interleaved: bool = False
    """The dense layers are spread among the MoE layers (Llama 4's ``interleave_moe_layer_step``,
    Qwen-MoE's ``decoder_sparse_step``, DeepSeek's ``moe_layer_freq``), not leading. Counts and
    FLOPs are the same; a pipeline stage's mix of dense and MoE layers is not: leading dense
    layers all sit on the first stage, interleaved ones on every stage alike."""
    mtp_layers: int = 0
    """Multi-token-prediction modules (DeepSeek-V3's ``num_nextn_predict_layers``, Megatron-Core's
    ``--mtp-num-layers``): each predicts one more future token from the previous depth's hidden
    state and the next token's embedding, through an RMSNorm of each, a ``2*hidden -> hidden``
    projection, one transformer block (an MoE block in an MoE model) and the shared output head
    (DeepSeek-AI 2024, arXiv:2412.19437, section 2.2). Counted in parameters (block, projection
    and three norms; the embedding and head are shared), FLOPs (block, projection, one more head)
    and, on the last pipeline stage, time and memory. 0: none."""
    # --- multi-head latent attention (DeepSeek-V2/V3) -----------------------------------------
    attention: AttentionKind = "mha"
    """``mha`` covers MHA/GQA/MQA; ``mla`` is DeepSeek's multi-head latent attention."""
    q_lora_rank: int = 0
    """MLA: rank of the query down-projection (0: queries projected directly)."""
    kv_lora_rank: int = 0
    """MLA: rank of the joint key/value latent."""
    qk_rope_head_dim: int = 0
    """MLA: rotary part of each query/key head."""
    qk_nope_head_dim: int = 0
    """MLA: non-rotary part of each query/key head."""
    v_head_dim: int = 0
    """MLA: value head dimension."""
    # --- sliding-window attention ------------------------------------------------------------
    sliding_window: int = 0
    """Window of local attention layers, in tokens; 0 means none."""
    sliding_window_layers: int = 0
    """How many layers use the sliding window (the rest attend to the full context)."""
    # --- checkpoint-exact extras (issue 12): small tensors that do not change the matmuls -------
    attn_bias: bool = False
    """Bias on the query, key, value *and* output projections (Llama ``attention_bias``, Phi);
    implied by ``bias``. For MLA: on the query/KV down-projections and the output projection."""
    mlp_bias: bool = False
    """Bias on every MLP / expert linear layer (Llama ``mlp_bias``); implied by ``bias``."""
    norm_bias: bool | None = None
    """Whether LayerNorms carry a bias; ``None`` follows ``bias`` (Falcon-7B: no linear biases but
    LayerNorm biases). Ignored for RMSNorm."""
    lm_head_bias: bool = False
    """Bias on the LM head (``vocab`` values; Phi-1/1.5/2)."""
    norms_per_layer: int = 2
    """Norms over ``hidden`` in one block: 2 (pre-attention, pre-MLP), 4 for Gemma 2/3 (plus
    post-attention and post-feedforward norms), 1 for parallel blocks with one shared norm
    (Falcon-7B, Phi-2)."""
    moe_shared_expert_gate: bool = False
    """Qwen2-MoE: a sigmoid gate (``hidden x 1`` linear) scales the shared expert in every MoE layer."""
    moe_router_bias: bool = False
    """DeepSeek-V3/Kimi-K2 ``e_score_correction_bias``: ``moe_experts`` values per MoE layer, a buffer
    (``nn.Buffer`` in transformers) moved by the load-balancing rule, not by gradients: counted in
    ``total_params`` (the checkpoint holds it) and in ``buffer_params``, not in ``trainable_params``."""
    moe_router_linear_bias: bool = False
    """GPT-OSS: the router's linear layer has a bias (``GptOssTopKRouter.bias``): ``moe_experts``
    values per MoE layer, trained by gradients (unlike ``moe_router_bias``)."""
    attention_sinks: bool = False
    """GPT-OSS: one learned logit per head joins every query's softmax (``GptOssAttention.sinks``):
    ``heads`` trained values a layer. Their FLOPs (one more exponent per query and head) are not
    counted."""
    attention_chunk: int = 0
    """Chunk of chunked local attention, in tokens (Llama 4: 8192); 0 means none. A query sees only
    the keys of its own chunk (block-diagonal causal mask), not a sliding window."""
    chunked_attention_layers: int = 0
    """How many layers use chunked attention (Llama 4: 3 of every 4)."""
    # --- hybrid Mamba-2 / attention models (Nemotron-H) -------------------------------------------
    mamba_layers: int = 0
    """Of ``layers``, the blocks whose mixer is a Mamba-2 (SSD) layer instead of attention (Dao & Gu
    2024, arXiv:2405.21060; Nemotron-H, arXiv:2504.03624). A hybrid model is counted as ``layers``
    blocks of a mixer (attention or Mamba-2) and an MLP, with ``mlp_free_layers`` of them having no
    MLP: Nemotron-H's pattern of single-op layers (``M``, ``*``, ``-``) pairs each MLP with the mixer
    before it, so its 118 layers (54 Mamba-2, 10 attention, 54 MLP) are 64 blocks, 10 without an MLP
    (:attr:`pattern_layers` gives back the 118). 0: every block attends."""
    mamba_heads: int = 0
    """Mamba-2 heads (``mamba_num_heads``); heads x ``mamba_head_dim`` is the inner width."""
    mamba_head_dim: int = 0
    """Channels per Mamba-2 head (``mamba_head_dim``, P)."""
    mamba_state_dim: int = 0
    """SSM state per head and channel (``ssm_state_size``, N)."""
    mamba_groups: int = 0
    """Groups sharing the B and C projections (``n_groups``, G; like key/value heads)."""
    mamba_conv_kernel: int = 4
    """Width of the causal depthwise convolution (``conv_kernel``)."""
    mamba_chunk: int = 128
    """Chunk length of the SSD algorithm (``chunk_size``)."""
    mlp_free_layers: int = 0
    """Of ``layers``, the blocks without an MLP (see :attr:`mamba_layers`): one norm fewer each."""
    towers: tuple[Tower, ...] = field(default=(), compare=False, repr=False)
    """Non-text parts of a multimodal checkpoint (vision encoder, projector), as parameter counts
    only; they are in ``checkpoint_params``, never in the text counts or the FLOPs."""
    source: str = field(default="", compare=False)
    """Where the shape comes from (paper, config.json URL); not part of equality."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """Free-form notes that travel with a preset; never used in computations."""

    def __post_init__(self) -> None:
        self._check_sizes()
        self._fill_heads()
        self._check_kinds()
        self._check_counts_and_flags()
        self._check_moe()
        self._check_attention_layers()
        self._check_mamba()
        if (self.moe_shared_expert_gate or self.moe_router_bias or self.moe_router_linear_bias) \
                and not self.moe_experts:
            raise SpecError("moe_experts", 0, "a positive number of experts when moe_shared_expert_gate, "
                            "moe_router_bias or moe_router_linear_bias is set")

    def _check_sizes(self) -> None:
        """The core dimensions are positive, and no bounded field exceeds its bound."""
        for name in ("layers", "hidden", "heads", "ffn_hidden", "vocab", "max_seq_len"):
            _positive(name, getattr(self, name))
        for name, bound in MODEL_FIELD_BOUNDS.items():  # before any work that grows with them
            value = getattr(self, name)
            if isinstance(value, int) and value > bound.hi:
                raise SpecError(name, shown(value), bound.valid())

    def _fill_heads(self) -> None:
        """Default ``kv_heads`` and ``head_dim`` from ``heads`` and ``hidden``, and check they fit."""
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        assert self.kv_heads is not None  # filled from heads just above
        _positive("kv_heads", self.kv_heads)
        if self.head_dim is None:
            if self.hidden % self.heads:
                raise SpecError(
                    "heads", self.heads,
                    f"must divide hidden={self.hidden} when head_dim is not given "
                    f"(divisors near it: {_near_divisors(self.hidden, self.heads)})",
                )
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        _positive("head_dim", self.head_dim)
        if self.heads % self.kv_heads:
            raise SpecError("kv_heads", self.kv_heads, f"must divide heads={self.heads}")

    def _check_kinds(self) -> None:
        """``mlp``, ``norm``, ``position`` and ``attention`` name known kinds."""
        if self.mlp not in MLP_KINDS:
            raise SpecError("mlp", self.mlp, f"one of {', '.join(MLP_KINDS)}")
        if self.norm not in NORM_KINDS:
            raise SpecError("norm", self.norm, f"one of {', '.join(NORM_KINDS)}")
        if self.position not in POSITION_KINDS:
            raise SpecError("position", self.position, f"one of {', '.join(POSITION_KINDS)}")
        if self.attention not in ATTENTION_KINDS:
            raise SpecError("attention", self.attention, f"one of {', '.join(ATTENTION_KINDS)}")

    def _check_counts_and_flags(self) -> None:
        """Optional counts are integers >= 0, flags are booleans, ``towers`` a tuple of Tower."""
        for name in ("moe_experts", "moe_topk", "moe_shared_experts", "moe_dense_layers",
                     "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                     "v_head_dim", "sliding_window", "sliding_window_layers", "norms_per_layer",
                     "attention_chunk", "chunked_attention_layers", "mtp_layers", "mamba_layers",
                     "mamba_heads", "mamba_head_dim", "mamba_state_dim", "mamba_groups", "mamba_conv_kernel",
                     "mamba_chunk", "mlp_free_layers"):
            _non_negative(name, getattr(self, name))
        for name in ("attn_bias", "mlp_bias", "lm_head_bias", "moe_shared_expert_gate", "moe_router_bias",
                     "moe_router_linear_bias", "attention_sinks", "moe_dense_interleaved"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(name, getattr(self, name), "true or false")
        if self.norm_bias is not None and not isinstance(self.norm_bias, bool):
            raise SpecError("norm_bias", self.norm_bias, "true, false or absent (follow bias)")
        if isinstance(self.towers, list):
            object.__setattr__(self, "towers", tuple(self.towers))
        if not isinstance(self.towers, tuple) or not _all_towers(self.towers):
            raise SpecError("towers", self.towers, "a tuple of Tower (set by the Hugging Face reader)")

    def _check_moe(self) -> None:
        """An MoE model's routing fits its experts and layers; a dense one sets no MoE count."""
        if self.moe_experts:
            if not 1 <= self.moe_topk <= self.moe_experts:
                raise SpecError("moe_topk", self.moe_topk, f"between 1 and moe_experts={self.moe_experts}")
            if self.moe_expert_ffn is None:
                object.__setattr__(self, "moe_expert_ffn", self.ffn_hidden)
            _positive("moe_expert_ffn", self.moe_expert_ffn)
            if self.moe_dense_layers >= self.layers:
                raise SpecError("moe_dense_layers", self.moe_dense_layers,
                                f"fewer than layers={self.layers}")
        elif self.moe_topk or self.moe_shared_experts or self.moe_dense_layers:
            raise SpecError("moe_experts", 0, "a positive number of experts when moe_topk, "
                            "moe_shared_experts or moe_dense_layers is set")

    def _check_attention_layers(self) -> None:
        """MLA has its head dimensions; sliding-window and chunked layers fit in the model."""
        if self.attention == "mla":
            for name in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
                _positive(name, getattr(self, name))
            if self.kv_heads != self.heads:
                raise SpecError("kv_heads", self.kv_heads, "equal to heads for attention='mla'")
        if self.sliding_window_layers > self.layers:
            raise SpecError("sliding_window_layers", self.sliding_window_layers,
                            f"at most layers={self.layers}")
        if self.sliding_window_layers and not self.sliding_window:
            raise SpecError("sliding_window", 0, "a positive window when sliding_window_layers > 0")
        if self.chunked_attention_layers and not self.attention_chunk:
            raise SpecError("attention_chunk", 0, "a positive chunk when chunked_attention_layers > 0")
        if self.sliding_window_layers + self.chunked_attention_layers > self.layers:
            raise SpecError("chunked_attention_layers", self.chunked_attention_layers,
                            f"at most layers - sliding_window_layers = "
                            f"{self.layers - self.sliding_window_layers}")

    def _check_mamba(self) -> None:
        """A hybrid model's Mamba-2 mixers have their shape, and its block counts fit in ``layers``."""
        if self.mamba_layers:
            for name in ("mamba_heads", "mamba_head_dim", "mamba_state_dim", "mamba_groups", "mamba_chunk"):
                _positive(name, getattr(self, name))
            if self.mamba_layers >= self.layers:
                raise SpecError("mamba_layers", self.mamba_layers,
                                f"fewer than layers={self.layers} (a hybrid keeps an attention block)")
            if self.mamba_heads % self.mamba_groups:
                raise SpecError("mamba_groups", self.mamba_groups, f"a divisor of mamba_heads={self.mamba_heads}")
            if self.attention == "mla" or self.sliding_window_layers or self.chunked_attention_layers:
                raise SpecError("mamba_layers", self.mamba_layers,
                                "0 with MLA, sliding-window or chunked attention (not modelled together)")
        elif self.mamba_heads or self.mamba_head_dim or self.mamba_state_dim or self.mamba_groups:
            raise SpecError("mamba_layers", 0, "a positive number of Mamba-2 blocks when the mamba_* shape is set")
        if self.mlp_free_layers >= self.layers - (self.moe_dense_layers if self.is_moe else 0):
            raise SpecError("mlp_free_layers", self.mlp_free_layers,
                            f"fewer than the {self.layers} layers less the dense-MLP ones of an MoE model")

    # ---------------------------------------------------------------------------------------
    @property
    def gated_mlp(self) -> bool:
        """True for SwiGLU/GeGLU (three matrices per MLP)."""
        return self.mlp in GATED_MLPS

    @property
    def is_moe(self) -> bool:
        return self.moe_experts > 0

    @property
    def attention_layout(self) -> str:
        """The attention as people name it: ``mla`` (DeepSeek's latent attention), ``mha`` (a
        key/value head per query head), ``mqa`` (one key/value head) or ``gqa`` (groups of query
        heads share one; :attr:`attention` says ``mha`` for all three)."""
        if self.attention == "mla":
            return "mla"
        kv = self.kv_heads or self.heads
        if kv == self.heads:
            return "mha"
        return "mqa" if kv == 1 else "gqa"

    @property
    def moe_layers(self) -> int:
        """Number of layers whose MLP is a mixture of experts."""
        return self.layers - self.moe_dense_layers - self.mlp_free_layers if self.is_moe else 0

    @property
    def attention_layers(self) -> int:
        """Blocks whose mixer is attention (all of them but a hybrid's Mamba-2 blocks)."""
        return self.layers - self.mamba_layers

    @property
    def mlp_layers(self) -> int:
        """Blocks with an MLP, dense or MoE (all of them but a hybrid's MLP-free blocks)."""
        return self.layers - self.mlp_free_layers

    @property
    def pattern_layers(self) -> int:
        """Layers as a hybrid's pattern counts them, a mixer and an MLP apart (Megatron-Core's
        ``hybrid_override_pattern``, Hugging Face ``num_hidden_layers`` of Nemotron-H): ``layers``
        for a model without Mamba-2 blocks."""
        return self.layers + self.mlp_layers if self.mamba_layers else self.layers

    @property
    def mamba_inner(self) -> int:
        """Inner width of a Mamba-2 mixer: heads x head dim (``2 * hidden`` at ``expand = 2``)."""
        return self.mamba_heads * self.mamba_head_dim

    @property
    def mamba_conv_dim(self) -> int:
        """Channels the causal convolution runs over: x, B and C (``inner + 2 * groups * state``)."""
        return self.mamba_inner + 2 * self.mamba_groups * self.mamba_state_dim

    def mamba_matmuls(self) -> dict[str, tuple[int, int]]:
        """Linear layers of one Mamba-2 mixer: name -> (in, out). ``in_proj`` makes z (the gate), x,
        B, C and dt (one per head) in one GEMM; ``out_proj`` maps the gated, normed output back
        (Megatron-Core ``MambaMixer``; state-spaces/mamba ``Mamba2``). Empty without Mamba-2 blocks."""
        if not self.mamba_layers:
            return {}
        return {"in_proj": (self.hidden, self.mamba_inner + self.mamba_conv_dim + self.mamba_heads),
                "out_proj": (self.mamba_inner, self.hidden)}

    @property
    def mamba_params_per_layer(self) -> int:
        """Parameters of one Mamba-2 mixer: its two projections, the convolution's weights and bias,
        per-head ``dt_bias``, ``A_log`` and ``D``, and the gated RMSNorm's weight (block norms are
        in :attr:`norm_params_per_layer`)."""
        if not self.mamba_layers:
            return 0
        conv = self.mamba_conv_dim * (self.mamba_conv_kernel + 1)
        return sum(i * o for i, o in self.mamba_matmuls().values()) + conv + 3 * self.mamba_heads + self.mamba_inner

    def ssd_flops_per_token(self) -> float:
        """Forward FLOPs per token of one Mamba-2 mixer's state-space scan by the chunked SSD
        algorithm (Dao & Gu 2024, section 6): inside each chunk of Q tokens, ``C B^T`` per group
        (2QN) and the masked scores times x per head (2QP, every block of the chunk computed); the
        chunk states ``B^T x`` and the output from the carried state ``C h`` per head (2NP each).
        Left out: the recurrence between chunks (H N P per chunk), the convolution, the gate and
        the norm (memory-bound). 0 without Mamba-2 blocks."""
        if not self.mamba_layers:
            return 0.0
        q, n, p = self.mamba_chunk, self.mamba_state_dim, self.mamba_head_dim
        return float(self.mamba_groups * 2 * q * n + self.mamba_heads * (2 * q * p + 4 * n * p))

    def layer_is_moe(self, i: int) -> bool:
        """Whether layer ``i`` (0-based) has an MoE MLP: after the ``moe_dense_layers`` leading
        dense layers, or, with ``moe_dense_interleaved``, spread evenly among the dense ones:
        layer i is MoE when ``floor((i+1) m / L) > floor(i m / L)`` for m MoE of L layers (every
        second layer for Llama 4 Maverick's ``interleave_moe_layer_step = 2``)."""
        if not self.is_moe:
            return False
        if not self.moe_dense_interleaved:
            return i >= self.moe_dense_layers
        m, n = self.moe_layers, self.layers
        return (i + 1) * m // n > i * m // n

    @property
    def dense_layers(self) -> int:
        """Number of layers with a dense MLP."""
        return self.layers - self.mlp_free_layers - self.moe_layers

    @property
    def q_dim(self) -> int:
        """Total query width (heads x per-head query/key dim)."""
        if self.attention == "mla":
            return self.heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        return self.heads * self.head_dim  # type: ignore[operator]

    @property
    def kv_dim(self) -> int:
        """Width of the key projection (= value projection for MHA/GQA)."""
        return self.kv_heads * self.head_dim  # type: ignore[operator]

    @property
    def qk_head_dim(self) -> int:
        """Dimension of the dot product in the attention scores."""
        if self.attention == "mla":
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim  # type: ignore[return-value]

    @property
    def kept_kv_dim(self) -> float:
        """Width of the keys a layer keeps for its backward, equal to the values' (their mean under
        MLA, whose up-projected keys are ``heads x qk_head_dim`` and values ``heads x v_head_dim``
        wide): ``kv_dim`` otherwise."""
        if self.attention == "mla":
            return self.heads * (self.qk_head_dim + self.v_dim_per_head) / 2.0
        return float(self.kv_dim)

    @property
    def context_dim(self) -> int:
        """Width of the attention output, the output projection's input (heads x value head dim;
        the query width except under MLA, whose value heads are narrower than its query heads)."""
        return self.heads * self.v_dim_per_head

    @property
    def v_dim_per_head(self) -> int:
        """Value dimension per head."""
        return self.v_head_dim if self.attention == "mla" else self.head_dim  # type: ignore[return-value]

    # --- weight matrices, as (in_features, out_features) per layer -------------------------------
    def attention_matmuls(self) -> dict[str, tuple[int, int]]:
        """Linear layers of one attention block: name -> (in, out)."""
        h = self.hidden
        if self.attention == "mla":
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            mats: dict[str, tuple[int, int]] = {}
            if self.q_lora_rank:
                mats["q_down"] = (h, self.q_lora_rank)
                mats["q_up"] = (self.q_lora_rank, self.heads * qk)
            else:
                mats["q_proj"] = (h, self.heads * qk)
            mats["kv_down"] = (h, self.kv_lora_rank + self.qk_rope_head_dim)
            mats["kv_up"] = (self.kv_lora_rank, self.heads * (self.qk_nope_head_dim + self.v_head_dim))
            mats["o_proj"] = (self.heads * self.v_head_dim, h)
            return mats
        return {
            "q_proj": (h, self.q_dim),
            "k_proj": (h, self.kv_dim),
            "v_proj": (h, self.kv_dim),
            "o_proj": (self.q_dim, h),
        }

    def dense_mlp_matmuls(self, ffn: int | None = None) -> dict[str, tuple[int, int]]:
        """Linear layers of one dense MLP of width ``ffn`` (default ``ffn_hidden``)."""
        f = self.ffn_hidden if ffn is None else ffn
        mats = {"up_proj": (self.hidden, f), "down_proj": (f, self.hidden)}
        if self.gated_mlp:
            mats = {"gate_proj": (self.hidden, f), **mats}
        return mats

    # --- parameter counts -------------------------------------------------------------------------
    @property
    def has_norm_bias(self) -> bool:
        """LayerNorm with a bias (``norm_bias``, or ``bias`` when ``norm_bias`` is unset)."""
        return self.norm == "layernorm" and (self.bias if self.norm_bias is None else self.norm_bias)

    def _norm_params(self, width: int) -> int:
        return width * (2 if self.has_norm_bias else 1)

    def _mlp_params(self, ffn: int) -> int:
        weights = sum(i * o for i, o in self.dense_mlp_matmuls(ffn).values())
        if self.bias or self.mlp_bias:
            weights += ffn * (2 if self.gated_mlp else 1) + self.hidden
        return weights

    @property
    def attention_params_per_layer(self) -> int:
        """Attention weights (and biases, norms inside attention) of one layer."""
        n = sum(i * o for i, o in self.attention_matmuls().values())
        if self.attention == "mla":
            # RMSNorms on the latents (DeepSeek-V3 config: q_a_layernorm, kv_a_layernorm).
            n += self.kv_lora_rank + (self.q_lora_rank or 0)
        all_bias = self.bias or self.attn_bias
        if self.attention == "mha":
            if all_bias or self.qkv_bias:
                n += self.q_dim + 2 * self.kv_dim
            if all_bias:
                n += self.hidden
        elif all_bias:  # DeepSeek-V2/V3 attention_bias: q_a_proj, kv_a_proj_with_mqa, o_proj
            n += (self.q_lora_rank or 0) + self.kv_lora_rank + self.qk_rope_head_dim + self.hidden
        if self.qk_norm:
            n += 2 * self._norm_params(self.qk_head_dim)
        return n + (self.heads if self.attention_sinks else 0)

    @property
    def dense_mlp_params_per_layer(self) -> int:
        """Parameters of one dense MLP."""
        return self._mlp_params(self.ffn_hidden)

    @property
    def expert_params(self) -> int:
        """Parameters of one routed (or shared) expert."""
        return self._mlp_params(self.moe_expert_ffn) if self.is_moe else 0  # type: ignore[arg-type]

    @property
    def router_params_per_layer(self) -> int:
        """Router logits matrix (with its bias: GPT-OSS), the shared-expert gate (Qwen2-MoE) and the
        correction bias buffer (DeepSeek-V3) of one MoE layer."""
        if not self.is_moe:
            return 0
        return (self.hidden * self.moe_experts + (self.hidden if self.moe_shared_expert_gate else 0)
                + (self.moe_experts if self.moe_router_bias else 0)
                + (self.moe_experts if self.moe_router_linear_bias else 0))

    @property
    def moe_params_per_layer(self) -> int:
        """All parameters of one MoE MLP: router, every routed expert, shared experts."""
        if not self.is_moe:
            return 0
        return (self.router_params_per_layer
                + (self.moe_experts + self.moe_shared_experts) * self.expert_params)

    @property
    def moe_active_params_per_layer(self) -> int:
        """Parameters one token touches in an MoE MLP: router, top-k and shared experts."""
        if not self.is_moe:
            return 0
        return (self.router_params_per_layer
                + (self.moe_topk + self.moe_shared_experts) * self.expert_params)

    @property
    def norm_params_per_layer(self) -> int:
        """The ``norms_per_layer`` norms over ``hidden`` of a block (usually the two pre-norms)."""
        return self.norms_per_layer * self._norm_params(self.hidden)

    @property
    def embedding_params(self) -> int:
        """Input token embedding (plus the learned position table, if any)."""
        n = self.vocab * self.hidden
        if self.position == "learned":
            n += self.max_seq_len * self.hidden
        return n

    @property
    def lm_head_params(self) -> int:
        """Output projection weights (0 when tied to the input embedding) and its bias, if any."""
        return (0 if self.tied_embeddings else self.vocab * self.hidden) + (
            self.vocab if self.lm_head_bias else 0)

    @property
    def final_norm_params(self) -> int:
        return self._norm_params(self.hidden)

    @property
    def total_params(self) -> int:
        """Every parameter stored once (tied matrices counted once), all experts and the
        multi-token-prediction modules included."""
        return (self.mixer_and_norm_params
                + self.dense_layers * self.dense_mlp_params_per_layer
                + self.moe_layers * self.moe_params_per_layer
                + self.embedding_params + self.lm_head_params + self.final_norm_params + self.mtp_params)

    @property
    def mixer_and_norm_params(self) -> int:
        """Attention (or Mamba-2) mixers and block norms of every layer (an MLP-free block has one
        norm fewer)."""
        return (self.attention_layers * self.attention_params_per_layer
                + self.mamba_layers * self.mamba_params_per_layer
                + self.layers * self.norm_params_per_layer - self.mlp_free_layers * self._norm_params(self.hidden))

    @property
    def mtp_block_params(self) -> int:
        """Parameters of one multi-token-prediction module beyond the shared embedding and head: a
        transformer block like the model's last one (MoE in an MoE model), the ``2h -> h``
        projection (``eh_proj``) and three RMSNorms (``enorm``, ``hnorm``, the head's ``norm``)."""
        mlp = self.moe_params_per_layer if self.is_moe else self.dense_mlp_params_per_layer
        return (self.attention_params_per_layer + self.norm_params_per_layer + mlp
                + 2 * self.hidden * self.hidden + 3 * self._norm_params(self.hidden))

    @property
    def mtp_params(self) -> int:
        """Parameters of every multi-token-prediction module (0 without them)."""
        return self.mtp_layers * self.mtp_block_params

    @property
    def buffer_params(self) -> int:
        """Checkpoint tensors that are not trained by gradients (DeepSeek-V3's router correction
        bias, in the MTP blocks' MoE too), included in ``total_params``."""
        return (self.moe_layers + self.mtp_layers) * self.moe_experts if self.moe_router_bias else 0

    @property
    def trainable_params(self) -> int:
        """``total_params`` less ``buffer_params``: what an optimizer updates."""
        return self.total_params - self.buffer_params

    @property
    def tower_params(self) -> int:
        """Parameters of the non-text towers of a multimodal checkpoint (0 for a text model)."""
        return sum(t.params for t in self.towers)

    @property
    def checkpoint_params(self) -> int:
        """Every tensor of the checkpoint: the text model and its towers (vision, projector)."""
        return self.total_params + self.tower_params

    @property
    def active_params(self) -> int:
        """Parameters used per token: like ``total_params`` with only top-k + shared experts."""
        return (self.total_params - (self.moe_layers + (self.mtp_layers if self.is_moe else 0))
                * (self.moe_params_per_layer - self.moe_active_params_per_layer))

    @property
    def non_embedding_params(self) -> int:
        """``total_params`` less the input embedding (and learned positions).

        A tied LM head is *kept* out too, since its only copy is the embedding; this is the
        Kaplan et al. (2020) "non-embedding" N.
        """
        return self.total_params - self.embedding_params

    @property
    def matmul_params(self) -> int:
        """Weights that take part in a matmul for every token (active experts only).

        Counts every linear layer of every block, the MoE router and the LM head (a tied head is
        still a matmul), and per multi-token-prediction module its block, projection and one more
        pass through the head; leaves out the input embedding lookup, norms and biases. 6x this is the
        'N' of the 6N rule in the PaLM convention.
        """
        attn = sum(i * o for i, o in self.attention_matmuls().values())
        dense = sum(i * o for i, o in self.dense_mlp_matmuls().values())
        expert = (sum(i * o for i, o in self.dense_mlp_matmuls(self.moe_expert_ffn).values())
                  if self.is_moe else 0)
        router = self.hidden * (self.moe_experts + (1 if self.moe_shared_expert_gate else 0))
        moe = router + (self.moe_topk + self.moe_shared_experts) * expert
        # each multi-token-prediction module: a block like the last, its 2h -> h projection, the
        # shared head once more
        mtp = attn + (moe if self.is_moe else dense) + 2 * self.hidden * self.hidden + self.vocab * self.hidden
        mamba = sum(i * o for i, o in self.mamba_matmuls().values())
        return (self.attention_layers * attn + self.mamba_layers * mamba + self.dense_layers * dense
                + self.moe_layers * moe
                + self.vocab * self.hidden + self.mtp_layers * mtp)

    def attention_context(self, seq_len: int) -> list[int]:
        """Keys each layer's queries may see at most: window for SWA layers, chunk for chunked
        layers, else ``seq_len``. Order: sliding, chunked, full (counts do not depend on it)."""
        w = min(self.sliding_window, seq_len) if self.sliding_window else seq_len
        c = min(self.attention_chunk, seq_len) if self.attention_chunk else seq_len
        full = self.attention_layers - self.sliding_window_layers - self.chunked_attention_layers
        return [w] * self.sliding_window_layers + [c] * self.chunked_attention_layers + [seq_len] * full

    # --- construction helpers -------------------------------------------------------------------
    def replace(self, **changes: Any) -> ModelSpec:
        """A copy with some fields changed (validated again).

        A new ``layers`` (a reduced-depth proxy: ``--layers 2`` on Llama 4 Scout) keeps the layer
        mix unless the change gives the counts itself: sliding-window and chunked-attention layers
        and interleaved dense-MLP layers in the same proportion (rounded half up), leading dense
        layers (DeepSeek-V3's first 3) as they are, and always one MoE layer at least.
        """
        layers = changes.get("layers")
        if isinstance(layers, int) and not isinstance(layers, bool) and 0 < layers != self.layers:
            def scaled(n: int) -> int:
                return math.floor(n * layers / self.layers + 0.5)

            if self.sliding_window_layers and "sliding_window_layers" not in changes:
                changes["sliding_window_layers"] = min(layers, scaled(self.sliding_window_layers))
            if self.chunked_attention_layers and "chunked_attention_layers" not in changes:
                window = changes.get("sliding_window_layers", self.sliding_window_layers)
                changes["chunked_attention_layers"] = min(layers - window, scaled(self.chunked_attention_layers))
            if self.mamba_layers and layers < 2 and "mamba_layers" not in changes:
                raise SpecError("layers", layers, "at least 2 for a hybrid (an attention and a Mamba-2 block)")
            for name in ("mamba_layers", "mlp_free_layers"):
                if getattr(self, name) and name not in changes:
                    changes[name] = min(layers - 1, max(1, scaled(getattr(self, name))))
            if self.moe_dense_layers and "moe_dense_layers" not in changes:
                kept = scaled(self.moe_dense_layers) if self.moe_dense_interleaved else self.moe_dense_layers
                changes["moe_dense_layers"] = min(layers - 1, kept)
        if "heads" in changes and "head_dim" not in changes and self.head_dim == self.hidden // self.heads:
            changes.setdefault("head_dim", None)
        if "hidden" in changes and "head_dim" not in changes and self.head_dim == self.hidden // self.heads:
            changes.setdefault("head_dim", None)
        if "heads" in changes and "kv_heads" not in changes and self.kv_heads == self.heads:
            changes.setdefault("kv_heads", None)
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the fields (for JSON/TOML); ``extra`` and ``towers`` left out."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
             if f.name not in ("extra", "towers")}
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, where: str = "model") -> ModelSpec:
        """Build from a dict of field values; unknown keys are an error naming them."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            from trainperf.errors import UnknownNameError

            raise UnknownNameError(f"{where}.{unknown[0]}", unknown[0], names)
        missing = [n for n in ("layers", "hidden", "heads", "ffn_hidden", "vocab") if n not in data]
        if missing:
            raise SpecError(f"{where}.{missing[0]}", None, "required (or give a preset or hf_config)")
        return cls(**data)

    @staticmethod
    def from_hf_config(path_or_dict: Any) -> ModelSpec:
        """Read a Hugging Face ``config.json`` (path or dict); see :mod:`trainperf.specs.hf_config`."""
        from trainperf.specs.hf_config import model_from_hf_config

        return model_from_hf_config(path_or_dict)

    @staticmethod
    def preset(name: str) -> ModelSpec:
        """A catalog model by id (``llama2-70b``); see :mod:`trainperf.specs.presets`."""
        from trainperf.specs.presets import get_model

        return get_model(name)


def _near_divisors(n: int, k: int) -> str:
    divs = [d for d in range(1, n + 1) if n % d == 0]
    divs.sort(key=lambda d: abs(d - k))
    return ", ".join(str(d) for d in sorted(divs[:4]))
