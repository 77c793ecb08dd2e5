"""Llama-like decoders: RMSNorm, RoPE, GQA, gated MLP.

Families and the transformers modelling files their counts follow:

* ``llama`` (``models/llama/modeling_llama.py``): ``attention_bias`` puts a bias on q, k, v *and*
  o_proj (``LlamaAttention``); ``mlp_bias`` on gate/up/down (``LlamaMLP``).
* ``mistral``, ``mixtral`` (``modeling_mistral.py``, ``modeling_mixtral.py``): ``sliding_window``
  (when not null) on every layer; Mixtral's experts are ``intermediate_size`` wide.
* ``qwen2`` (``modeling_qwen2.py``): bias on q/k/v only; sliding windows only when
  ``use_sliding_window`` is true, on layers ``>= max_window_layers``.
* ``qwen2_moe`` (``modeling_qwen2_moe.py``): ``Qwen2MoeSparseMoeBlock`` holds a router, the
  experts, one shared expert ``shared_expert_intermediate_size`` wide and its sigmoid gate
  ``shared_expert_gate`` (``hidden x 1``). The shared expert becomes
  ``moe_shared_experts = shared_width / moe_intermediate_size`` experts (same counts and FLOPs).
* ``qwen3``, ``qwen3_moe`` (``modeling_qwen3.py``, ``modeling_qwen3_moe.py``): per-head q/k
  RMSNorm, ``head_dim`` default 128; ``attention_bias`` on q, k, v and o_proj.
* ``gpt_oss`` (``models/gpt_oss/modeling_gpt_oss.py``): ``GptOssAttention`` has biases on q, k, v
  and o_proj (``attention_bias``) and one learned attention-sink logit per head; ``layer_types``
  alternate sliding (``sliding_window`` tokens) and full attention; ``GptOssMLP`` is a router
  (``hidden x num_local_experts`` with a bias) and ``GptOssExperts``, each a gated MLP
  ``intermediate_size`` wide whose ``gate_up_proj`` and ``down_proj`` carry biases. Not counted:
  the sinks (``heads`` values a layer) and the router bias (``num_local_experts`` a layer), a few
  thousand parameters in all.
* ``phi3`` (``modeling_phi3.py``): fused ``qkv_proj`` and ``gate_up_proj``; the same weights as
  separate q/k/v and gate/up projections, so the Llama counts apply. ``sliding_window`` on every
  layer.
* ``granite`` (``modeling_granite.py``): Llama's modules (``attention_bias``, ``mlp_bias``); its
  embedding, residual, attention and logits multipliers are scalars (no weights, no matmuls).
* ``olmoe`` (``modeling_olmoe.py``): OLMo 2's whole-width q/k RMSNorm (counted per head, noted)
  in a pre-norm Llama layer whose MLP is ``num_experts`` gated experts ``intermediate_size`` wide,
  ``num_experts_per_tok`` of them a token, behind a router without bias.
* ``granitemoe`` (``modeling_granitemoe.py``): Granite's attention and a Mixtral-like sparse MLP (a
  router ``hidden x num_local_experts``, each expert's fused ``input_linear`` holding gate and up,
  ``intermediate_size`` wide, and its ``output_linear``): Mixtral's counts.
* ``smollm3`` (``modeling_smollm3.py``): Llama's modules; the layers that skip RoPE
  (``no_rope_layers``) change neither weights nor matmuls.
* ``olmo2`` (``modeling_olmo2.py``): Llama's projections (``attention_bias``), its two norms per
  layer after attention and after the MLP instead of before, and RMSNorm on the whole query and
  key projections (``q_norm`` ``heads x head_dim`` wide, ``k_norm`` ``kv_heads x head_dim``). The
  schema's q/k norm is per head (``2 x head_dim`` weights), so those layers' extra norm weights
  are left out, and the model notes say how many.
"""

from __future__ import annotations

from typing import Any

from trainperf.errors import SpecError
from trainperf.specs.hf_families.base import (
    EXPERTS,
    LAYERS,
    LAYERS_OR_ZERO,
    WIDTH_OR_ZERO,
    Bound,
    HFConfig,
    layer_types,
    note,
    rope_decoder,
)


def window_all_layers(c: HFConfig, f: dict[str, Any]) -> None:
    """A ``sliding_window`` (when set) on every layer, or on the ``layer_types`` that say so."""
    window = c.opt_integer("sliding_window")
    types = layer_types(c, f["layers"])
    if window:
        f["sliding_window"] = window
        f["sliding_window_layers"] = f["layers"] if types is None else types.count("sliding_attention")


def qwen_window(c: HFConfig, f: dict[str, Any]) -> None:
    layers = f["layers"]
    types = layer_types(c, layers)
    window = c.opt_integer("sliding_window")
    use = c.flag("use_sliding_window", False)
    max_window_layers = c.integer("max_window_layers", layers, LAYERS_OR_ZERO)
    if types is not None:
        n = types.count("sliding_attention")
    elif use and window:
        n = layers - min(max_window_layers, layers)
    else:
        return
    if n and window:
        f["sliding_window"] = window
        f["sliding_window_layers"] = n


def qwen_moe(c: HFConfig, f: dict[str, Any]) -> None:
    """Experts, top-k and expert width; dense layers from ``mlp_only_layers``/``decoder_sparse_step``."""
    layers = f["layers"]
    f["moe_experts"] = c.integer("num_experts", bound=EXPERTS)
    f["moe_topk"] = c.integer("num_experts_per_tok", bound=EXPERTS)
    f["moe_expert_ffn"] = c.integer("moe_intermediate_size")
    step = c.integer("decoder_sparse_step", 1, Bound(1, LAYERS.hi, LAYERS.why))
    mlp_only = set(c.integer_list("mlp_only_layers", Bound(0, layers - 1, "a layer index")) or [])
    dense_at = [i for i in range(layers) if i in mlp_only or (i + 1) % step != 0]
    dense = len(dense_at)
    if dense >= layers:
        raise SpecError(c.field("mlp_only_layers"), sorted(mlp_only),
                        "leave at least one MoE layer (else use a dense model_type)")
    if dense:
        f["moe_dense_layers"] = dense
        leading = dense_at == list(range(dense))
        f["moe_dense_interleaved"] = not leading
        note(f, f"{dense} dense-MLP layers (mlp_only_layers/decoder_sparse_step), "
                + ("the leading ones" if leading else "interleaved with the MoE layers"))


def local_experts(c: HFConfig, f: dict[str, Any], key: str = "num_local_experts") -> None:
    """Every layer an MoE of ``key`` experts, ``num_experts_per_tok`` a token, each as wide as the
    ``intermediate_size`` (Mixtral's layout, and its followers')."""
    f["moe_experts"] = c.integer(key, bound=EXPERTS)
    f["moe_topk"] = c.integer("num_experts_per_tok", bound=EXPERTS)
    f["moe_expert_ffn"] = f["ffn_hidden"]


def llama(c: HFConfig, *, tie_default: bool = False, max_seq_default: int = 2048) -> dict[str, Any]:
    f = rope_decoder(c, tie_default=tie_default, max_seq_default=max_seq_default)
    f["attn_bias"] = c.flag("attention_bias", False)
    f["mlp_bias"] = c.flag("mlp_bias", False)
    return f


def mistral(c: HFConfig) -> dict[str, Any]:
    f = rope_decoder(c, tie_default=False, max_seq_default=4096 * 32)
    window_all_layers(c, f)
    return f


def mixtral(c: HFConfig) -> dict[str, Any]:
    f = rope_decoder(c, tie_default=False, max_seq_default=4096 * 32)
    window_all_layers(c, f)
    local_experts(c, f)
    return f


def qwen2(c: HFConfig) -> dict[str, Any]:
    f = rope_decoder(c, tie_default=False, max_seq_default=32768)
    f["qkv_bias"] = True
    qwen_window(c, f)
    return f


def qwen2_moe(c: HFConfig) -> dict[str, Any]:
    f = rope_decoder(c, tie_default=False, max_seq_default=32768)
    f["qkv_bias"] = True
    qwen_window(c, f)
    qwen_moe(c, f)
    shared = c.integer("shared_expert_intermediate_size", 0, WIDTH_OR_ZERO)
    if shared:
        expert = f["moe_expert_ffn"]
        count = max(1, round(shared / expert))
        f["moe_shared_experts"] = count
        f["moe_shared_expert_gate"] = True
        if count * expert != shared:
            note(f, f"shared expert width {shared} approximated as {count} x {expert}")
    return f


def qwen3(c: HFConfig) -> dict[str, Any]:
    c.defaults.setdefault("head_dim", 128)
    f = rope_decoder(c, tie_default=False, max_seq_default=32768)
    f["attn_bias"] = c.flag("attention_bias", False)  # Qwen3Attention: q, k, v and o_proj
    f["qk_norm"] = True
    qwen_window(c, f)
    return f


def qwen3_moe(c: HFConfig) -> dict[str, Any]:
    f = qwen3(c)
    qwen_moe(c, f)
    return f


def gpt_oss(c: HFConfig) -> dict[str, Any]:
    f = rope_decoder(c, tie_default=False, max_seq_default=131072)
    f["attn_bias"] = c.flag("attention_bias", True)
    f["mlp_bias"] = True  # GptOssExperts: gate_up_proj_bias and down_proj_bias on every expert
    window_all_layers(c, f)
    local_experts(c, f)
    f["moe_router_linear_bias"] = True
    f["attention_sinks"] = True
    return f


def phi3(c: HFConfig) -> dict[str, Any]:
    f = rope_decoder(c, tie_default=False, max_seq_default=4096)
    window_all_layers(c, f)
    return f


def granite(c: HFConfig) -> dict[str, Any]:
    return llama(c)


def granitemoe(c: HFConfig) -> dict[str, Any]:
    f = rope_decoder(c, tie_default=False, max_seq_default=2048)
    f["attn_bias"] = c.flag("attention_bias", False)
    local_experts(c, f)
    return f


def smollm3(c: HFConfig) -> dict[str, Any]:
    return llama(c, tie_default=True, max_seq_default=65536)


def olmo2(c: HFConfig) -> dict[str, Any]:
    f = rope_decoder(c, tie_default=False, max_seq_default=4096)
    f["attn_bias"] = c.flag("attention_bias", False)
    _whole_width_qk_norm(f)
    return f


def olmoe(c: HFConfig) -> dict[str, Any]:
    f = olmo2(c)
    local_experts(c, f, "num_experts")
    return f


def _whole_width_qk_norm(f: dict[str, Any]) -> None:
    """OLMo's q/k RMSNorm over the whole projections, as the schema's per-head q/k norm; the
    weights that leaves out are noted."""
    f["qk_norm"] = True
    heads = f["heads"]
    kv = f["kv_heads"] or heads
    head_dim = f["head_dim"] or f["hidden"] // heads
    left_out = (heads + kv - 2) * head_dim * f["layers"]
    note(f, f"q/k RMSNorm over the whole projections ({heads * head_dim} + {kv * head_dim} weights a layer) "
            f"counted per head ({2 * head_dim}): {left_out:,} norm weights left out")
