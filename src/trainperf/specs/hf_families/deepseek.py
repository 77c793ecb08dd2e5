"""DeepSeek-V2/V3 and Kimi-K2: multi-head latent attention and fine-grained MoE.

Counts follow ``models/deepseek_v2/modeling_deepseek_v2.py`` and
``models/deepseek_v3/modeling_deepseek_v3.py``:

* MLA: ``q_proj`` (``q_lora_rank`` null) or ``q_a_proj`` + ``q_a_layernorm`` + ``q_b_proj``;
  ``kv_a_proj_with_mqa`` (``kv_lora_rank + qk_rope_head_dim``), ``kv_a_layernorm``, ``kv_b_proj``,
  ``o_proj``. ``attention_bias`` adds biases to q_a, kv_a and o.
* MoE from layer ``first_k_dense_replace`` on (and, as in DeepSeek's own modelling code, on layers
  that are multiples of ``moe_layer_freq``): router ``n_routed_experts x hidden``, the experts,
  and ``n_shared_experts`` shared experts (one MLP ``n_shared_experts * moe_intermediate_size``
  wide: the same count).
* V3 (and Kimi-K2, ``model_type`` ``kimi_k2``, ``DeepseekV3ForCausalLM``): the router's
  ``e_score_correction_bias`` (``n_routed_experts`` per MoE layer) is a buffer in transformers
  (``nn.Buffer``), held in the checkpoint and moved by the auxiliary-loss-free balancing rule,
  not by gradients: counted in ``total_params`` and ``buffer_params``, not ``trainable_params``.
* The multi-token-prediction module (``num_nextn_predict_layers``; V3's 14B of its 685B
  checkpoint) is not built by transformers and is not counted.
* GLM-4.5 (``glm4_moe``, ``models/glm4_moe/modeling_glm4_moe.py``): grouped-query attention with
  biases on q, k and v (``attention_bias``), per-head q/k RMSNorm (``use_qk_norm``) and partial
  rotary embeddings (no weights), under DeepSeek-V3's MoE: the same routed and shared experts,
  leading dense layers and router correction bias (a buffer); its MTP layers are not built either.
"""

from __future__ import annotations

from typing import Any

from trainperf.errors import SpecError
from trainperf.specs.hf_families.base import (
    COUNT,
    EXPERTS,
    LAYERS,
    LAYERS_OR_ZERO,
    RANK,
    WIDTH,
    HFConfig,
    note,
    rope_decoder,
)

_V2_DEFAULTS = {"n_routed_experts": 64, "n_shared_experts": 2, "first_k_dense_replace": 0,
                "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                "v_head_dim": 128, "moe_intermediate_size": 1407, "num_experts_per_tok": 6}
_V3_DEFAULTS = {"n_routed_experts": 256, "n_shared_experts": 1, "first_k_dense_replace": 3,
                "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                "v_head_dim": 128, "moe_intermediate_size": 2048, "num_experts_per_tok": 8}


def _mla_moe(c: HFConfig, *, router_bias: bool) -> dict[str, Any]:
    f = rope_decoder(c, tie_default=False, max_seq_default=4096)
    kv = f.pop("kv_heads")
    if kv is not None and kv != f["heads"]:
        raise SpecError(c.field("num_key_value_heads"), kv,
                        f"equal to num_attention_heads={f['heads']} (MLA has one latent per head)")
    f["head_dim"] = None
    # q_lora_rank: null means "project queries directly"; absent means the class default.
    q_rank = 0 if ("q_lora_rank" in c.data and c.data["q_lora_rank"] is None) else c.integer("q_lora_rank", bound=RANK)
    f.update(
        attention="mla",
        q_lora_rank=q_rank,
        kv_lora_rank=c.integer("kv_lora_rank", bound=WIDTH),
        qk_rope_head_dim=c.integer("qk_rope_head_dim"),
        qk_nope_head_dim=c.integer("qk_nope_head_dim"),
        v_head_dim=c.integer("v_head_dim"),
        attn_bias=c.flag("attention_bias", False),
        mlp_bias=c.flag("mlp_bias", False),
    )
    return fine_grained_moe(c, f, router_bias=router_bias)


def fine_grained_moe(c: HFConfig, f: dict[str, Any], *, router_bias: bool) -> dict[str, Any]:
    """DeepSeek's MoE fields into ``f``: ``n_routed_experts`` routed and ``n_shared_experts``
    shared experts ``moe_intermediate_size`` wide, ``num_experts_per_tok`` a token, on the layers
    from ``first_k_dense_replace`` on that are multiples of ``moe_layer_freq``; the router's
    correction bias where ``router_bias``."""
    experts = c.integer("n_routed_experts", bound=EXPERTS)
    layers = f["layers"]
    first = c.integer("first_k_dense_replace", bound=LAYERS_OR_ZERO)
    freq = c.integer("moe_layer_freq", 1, LAYERS)
    moe = sum(1 for i in range(layers) if i >= first and i % freq == 0)
    if moe == 0:
        note(f, "no MoE layer (first_k_dense_replace >= num_hidden_layers): a dense model")
        return f
    f.update(
        moe_experts=experts,
        moe_topk=c.integer("num_experts_per_tok", bound=EXPERTS),
        moe_expert_ffn=c.integer("moe_intermediate_size"),
        moe_shared_experts=c.integer("n_shared_experts", bound=COUNT),
        moe_dense_layers=layers - moe,
        moe_router_bias=router_bias,
    )
    if freq != 1:
        f["moe_dense_interleaved"] = True
        note(f, f"moe_layer_freq={freq}: dense layers interleaved with the MoE layers")
    return f


def deepseek_v2(c: HFConfig) -> dict[str, Any]:
    c.defaults = {**_V2_DEFAULTS, **c.defaults}
    return _mla_moe(c, router_bias=False)


def deepseek_v3(c: HFConfig) -> dict[str, Any]:
    c.defaults = {**_V3_DEFAULTS, **c.defaults}
    return _mla_moe(c, router_bias=True)


def glm4_moe(c: HFConfig) -> dict[str, Any]:
    f = rope_decoder(c, tie_default=False, max_seq_default=131072)
    f["qkv_bias"] = c.flag("attention_bias", False)
    f["qk_norm"] = c.flag("use_qk_norm", False)
    return fine_grained_moe(c, f, router_bias=True)
