"""Nemotron-H (``model_type`` ``nemotron_h``) config.json reader: hermetic configs built here.

The layer patterns below are constructed to have the published layer counts (Nemotron-H-8B: 24
Mamba-2, 4 attention, 24 MLP layers; 56B: 54, 10, 54); they are not copies of the released
``hybrid_override_pattern`` strings. Everything else follows transformers' ``NemotronHConfig``.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainperf.accounting.flops import forward_flops
from trainperf.errors import SpecError, TrainperfError
from trainperf.specs.hf_config import SUPPORTED_MODEL_TYPES
from trainperf.specs.hf_families.nemotron_h import blocks
from trainperf.specs.model import ModelSpec

PATTERN_8B = "M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M-M-M-M-M-"
# 44 Mamba-2 + MLP blocks, 10 Mamba-2 blocks without an MLP (each right before an attention layer),
# 10 attention + MLP blocks: 118 layers, 64 blocks
PATTERN_56B = ("M-" * 4 + "M*-") * 6 + ("M-" * 5 + "M*-") * 4


def nemotron_h_8b(**changes) -> dict:
    cfg = {
        "_name_or_path": "nvidia/Nemotron-H-8B-Base-8K",
        "architectures": ["NemotronHForCausalLM"],
        "model_type": "nemotron_h",
        "hybrid_override_pattern": PATTERN_8B,
        "num_hidden_layers": 52,
        "hidden_size": 4096,
        "intermediate_size": 21504,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "attention_bias": False,
        "mlp_bias": False,
        "mlp_hidden_act": "relu2",
        "vocab_size": 131072,
        "tie_word_embeddings": False,
        "max_position_embeddings": 8192,
        "mamba_num_heads": 128,
        "mamba_head_dim": 64,
        "ssm_state_size": 128,
        "n_groups": 8,
        "conv_kernel": 4,
        "chunk_size": 128,
        "expand": 2,
        "use_bias": False,
        "use_conv_bias": True,
        "layer_norm_epsilon": 1e-5,
        "rescale_prenorm_residual": True,
    }
    cfg.update(changes)
    return cfg


def nemotron_h_56b(**changes) -> dict:
    return nemotron_h_8b(**{
        "_name_or_path": "nvidia/Nemotron-H-56B-Base-8K", "hybrid_override_pattern": PATTERN_56B,
        "num_hidden_layers": 118, "hidden_size": 8192, "intermediate_size": 32768, "num_attention_heads": 64,
        "mamba_num_heads": 256, "ssm_state_size": 256, **changes})


def read(cfg: dict) -> ModelSpec:
    return ModelSpec.from_hf_config(cfg)


def test_registered():
    assert "nemotron_h" in SUPPORTED_MODEL_TYPES


@pytest.mark.parametrize(("build", "preset", "pattern_layers"),
                         [(nemotron_h_8b, "nemotron-h-8b", 52), (nemotron_h_56b, "nemotron-h-56b", 118)])
def test_configs_read_as_the_presets(build, preset, pattern_layers):
    cfg = build()
    spec = read(cfg)
    want = ModelSpec.preset(preset)
    assert spec == want  # every shape field (name and source aside)
    assert spec.total_params == want.total_params
    assert spec.pattern_layers == cfg["num_hidden_layers"] == pattern_layers
    assert spec.name == cfg["_name_or_path"]


def test_8b_fields():
    spec = read(nemotron_h_8b())
    assert (spec.layers, spec.mamba_layers, spec.mlp_free_layers, spec.attention_layers) == (28, 24, 4, 4)
    assert (spec.mamba_heads, spec.mamba_head_dim, spec.mamba_state_dim, spec.mamba_groups) == (128, 64, 128, 8)
    assert (spec.mamba_conv_kernel, spec.mamba_chunk, spec.max_seq_len) == (4, 128, 8192)
    assert (spec.mlp, spec.norm, spec.position, spec.tied_embeddings) == ("relu2", "rmsnorm", "none", False)
    assert round(spec.total_params / 1e9, 1) == 8.1


def test_56b_blocks():
    spec = read(nemotron_h_56b())
    assert (spec.layers, spec.mamba_layers, spec.mlp_free_layers) == (64, 54, 10)
    assert round(spec.total_params / 1e9) == 56


def test_transformers_5_layers_block_type():
    names = {"M": "linear_attention", "*": "full_attention", "-": "mlp"}
    cfg = nemotron_h_8b(layers_block_type=[names[ch] for ch in PATTERN_8B])
    del cfg["hybrid_override_pattern"], cfg["num_hidden_layers"]
    assert read(cfg) == ModelSpec.preset("nemotron-h-8b")
    legacy = {"M": "mamba", "*": "attention", "-": "mlp"}
    cfg = nemotron_h_8b(layer_types=[legacy[ch] for ch in PATTERN_8B])
    del cfg["hybrid_override_pattern"]
    assert read(cfg) == ModelSpec.preset("nemotron-h-8b")
    # both keys, the same layers: fine
    both = nemotron_h_8b(layers_block_type=[names[ch] for ch in PATTERN_8B])
    assert read(both) == ModelSpec.preset("nemotron-h-8b")


def test_remote_code_spellings():
    cfg = nemotron_h_8b(mamba_n_groups=8, mamba_d_conv=4, mamba_chunk_size=128, attention_head_dim=128,
                        mamba_conv_bias=True)
    for key in ("n_groups", "conv_kernel", "chunk_size", "head_dim", "use_conv_bias"):
        del cfg[key]
    assert read(cfg) == ModelSpec.preset("nemotron-h-8b")
    # both spellings, the same value: fine
    assert read(nemotron_h_8b(mamba_n_groups=8, attention_head_dim=128)) == ModelSpec.preset("nemotron-h-8b")


def test_absent_keys_take_the_nemotron_h_config_defaults():
    keep = ("model_type", "hybrid_override_pattern", "max_position_embeddings")
    cfg = {k: v for k, v in nemotron_h_8b().items() if k in keep}
    assert read(cfg) == ModelSpec.preset("nemotron-h-8b")


def test_blocks_pairing():
    assert blocks("M-M*-") == (3, 2, 1)
    assert blocks("*-M") == (2, 1, 1)
    assert blocks(PATTERN_8B) == (28, 24, 4)
    assert blocks(PATTERN_56B) == (64, 54, 10)
    assert (len(PATTERN_56B), PATTERN_56B.count("M"), PATTERN_56B.count("*")) == (118, 54, 10)


@pytest.mark.parametrize(("act", "mlp"), [("relu2", "relu2"), ("relu", "relu"), ("gelu_pytorch_tanh", "gelu")])
def test_activations(act, mlp):
    assert read(nemotron_h_8b(mlp_hidden_act=act)).mlp == mlp


def test_flags_and_notes():
    spec = read(nemotron_h_8b(mlp_bias=True, attention_bias=True))
    assert spec.mlp_bias and spec.attn_bias
    tied = read(nemotron_h_8b(tie_word_embeddings=True))  # NemotronHForCausalLM ties nothing
    assert not tied.tied_embeddings and "tie_word_embeddings" in tied.extra["notes"]
    assert _error(nemotron_h_8b(tie_word_embeddings="false")).field == "tie_word_embeddings"
    assert "use_bias" in read(nemotron_h_8b(use_bias=True)).extra["notes"]
    assert "use_conv_bias" in read(nemotron_h_8b(use_conv_bias=False)).extra["notes"]


def _error(cfg: dict) -> SpecError:
    with pytest.raises(SpecError) as info:
        read(cfg)
    assert "\n" not in str(info.value)
    return info.value


def test_other_char_is_rejected():
    err = _error(nemotron_h_8b(hybrid_override_pattern=PATTERN_8B.replace("*", "A", 1)))
    assert err.field == "hybrid_override_pattern" and "'A'" in err.valid


def test_leading_mlp_is_rejected():
    err = _error(nemotron_h_8b(hybrid_override_pattern="-" + PATTERN_8B[:-1]))
    assert err.field == "hybrid_override_pattern" and "not expressible as mixer+MLP blocks" in err.valid


def test_mlp_after_mlp_is_rejected():
    err = _error(nemotron_h_8b(hybrid_override_pattern=PATTERN_8B[:2] + "-" + PATTERN_8B[3:]))  # "M---M-..."
    assert err.field == "hybrid_override_pattern" and "not expressible" in err.valid
    assert "follows another MLP (position 2)" in err.valid


def test_length_mismatch_is_rejected():
    err = _error(nemotron_h_8b(num_hidden_layers=50))
    assert err.field == "num_hidden_layers" and err.value == 50 and "52" in err.valid


def test_missing_pattern_is_named():
    cfg = nemotron_h_8b()
    del cfg["hybrid_override_pattern"]
    assert _error(cfg).field == "hybrid_override_pattern"


def test_bad_layers_block_type_and_disagreeing_keys():
    cfg = nemotron_h_8b(layers_block_type=["linear_attention", "sliding_attention", "full_attention", "mlp"])
    del cfg["hybrid_override_pattern"], cfg["num_hidden_layers"]
    err = _error(cfg)
    assert err.field == "layers_block_type" and "'sliding_attention' is not one" in err.valid
    assert "'moe'" in err.valid
    names = {"M": "linear_attention", "*": "full_attention", "-": "mlp"}
    cfg = nemotron_h_8b(layers_block_type=[names[ch] for ch in PATTERN_56B])
    assert _error(cfg).field == "hybrid_override_pattern"


def test_conflicting_spellings_are_rejected():
    err = _error(nemotron_h_8b(mamba_n_groups=4))
    assert err.field == "mamba_n_groups" and "n_groups=8" in err.valid
    assert _error(nemotron_h_8b(attention_head_dim=64)).field == "attention_head_dim"


def test_bad_types_and_shapes():
    assert _error(nemotron_h_8b(mamba_num_heads=128.0)).field == "mamba_num_heads"
    assert _error(nemotron_h_8b(hybrid_override_pattern=["M", "-"])).field == "hybrid_override_pattern"
    assert _error(nemotron_h_8b(mlp_hidden_act="swish")).field == "mlp_hidden_act"
    assert _error(nemotron_h_8b(n_groups=3)).field == "mamba_groups"  # 128 heads do not split in 3 groups
    # all Mamba-2: ModelSpec wants an attention block in a hybrid
    assert _error(nemotron_h_8b(hybrid_override_pattern="M-M-", num_hidden_layers=4)).field == "mamba_layers"


def test_attention_only_pattern_has_no_mamba_fields():
    spec = read(nemotron_h_8b(hybrid_override_pattern="*-*-*", num_hidden_layers=5))
    assert (spec.layers, spec.mamba_layers, spec.mlp_free_layers, spec.mamba_heads) == (3, 0, 1, 0)


# --- against transformers on the meta device (a shrunk model) ---------------------------------------
SMALL = {"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 64, "vocab_size": 1024, "mamba_num_heads": 8, "mamba_head_dim": 32, "ssm_state_size": 16,
         "n_groups": 2, "conv_kernel": 4, "chunk_size": 64}


def _meta_model(cfg: dict):
    """transformers' NemotronHForCausalLM for ``cfg`` on the meta device (skips without it)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    data = {k: v for k, v in cfg.items() if k not in ("model_type", "_name_or_path", "architectures")}
    try:
        config = transformers.AutoConfig.for_model("nemotron_h", **data)
    except (ValueError, KeyError) as exc:  # model type absent in this transformers version
        pytest.skip(f"transformers cannot build nemotron_h: {exc}")
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config)


@pytest.mark.parametrize("change", [
    {}, {"hybrid_override_pattern": "M*-M-M", "num_hidden_layers": 6}, {"tie_word_embeddings": True},
    {"mlp_bias": True}, {"mamba_d_conv": 3, "mamba_n_groups": 4}], ids=str)
def test_meta_device_cross_check(change):
    cfg = nemotron_h_8b(**SMALL, hybrid_override_pattern="M-M*-M-*M-", num_hidden_layers=10)
    for key in change:
        if key.startswith("mamba_"):  # the remote-code spelling replaces the transformers one
            cfg.pop({"mamba_d_conv": "conv_kernel", "mamba_n_groups": "n_groups"}[key], None)
    cfg.update(change)
    ours = read(cfg)
    assert ours.total_params == sum(p.numel() for p in _meta_model(cfg).parameters())


@pytest.mark.parametrize("change", [{"use_bias": True}, {"use_conv_bias": False}], ids=str)
def test_meta_device_noted_biases(change):
    """The biases the notes name are exactly the difference from transformers' count."""
    cfg = nemotron_h_8b(**SMALL, hybrid_override_pattern="M-M*-M-*M-", num_hidden_layers=10, **change)
    ours = read(cfg)
    theirs = sum(p.numel() for p in _meta_model(cfg).parameters())
    in_out = ours.mamba_matmuls()["in_proj"][1]
    if "use_bias" in change:
        assert theirs - ours.total_params == ours.mamba_layers * (in_out + ours.hidden)
        assert f"{in_out} + {ours.hidden} values" in ours.extra["notes"]
    else:
        assert ours.total_params - theirs == ours.mamba_layers * ours.mamba_conv_dim
        assert f"{ours.mamba_conv_dim} convolution biases" in ours.extra["notes"]


# --- MoE layers ('E', 'moe'): Nemotron 3 Nano ------------------------------------------------------
# 23 Mamba-2 + MoE, 6 Mamba-2 without an MLP (each right before an attention layer), 6 attention + MoE
# layers: 52 layers, 29 blocks (the published layer counts; not a copy of the released pattern)
PATTERN_NANO = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
SMALL_MOE = {**SMALL, "hybrid_override_pattern": "ME*EM-*E", "num_hidden_layers": 8, "n_routed_experts": 8,
             "num_experts_per_tok": 2, "moe_intermediate_size": 128, "moe_shared_expert_intermediate_size": 256,
             "n_shared_experts": 1}


def nemotron_3_nano(**changes) -> dict:
    return nemotron_h_8b(**{
        "_name_or_path": "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "hybrid_override_pattern": PATTERN_NANO,
        "num_hidden_layers": 52, "hidden_size": 2688, "intermediate_size": 1856, "num_attention_heads": 32,
        "num_key_value_heads": 2, "mamba_num_heads": 64, "max_position_embeddings": 262144,
        "n_routed_experts": 128, "num_experts_per_tok": 6, "moe_intermediate_size": 1856,
        "moe_shared_expert_intermediate_size": 3712, "n_shared_experts": 1, "n_group": 1, "topk_group": 1,
        "routed_scaling_factor": 2.5, "norm_topk_prob": True, "moe_latent_size": None, **changes})


def small_moe(**changes) -> dict:
    return nemotron_h_8b(**{**SMALL_MOE, **changes})


def test_nemotron_3_nano_shape():
    spec = read(nemotron_3_nano())
    assert (spec.layers, spec.mamba_layers, spec.mlp_free_layers, spec.attention_layers) == (29, 23, 6, 6)
    assert (spec.moe_layers, spec.moe_dense_layers, spec.pattern_layers) == (23, 0, 52)
    assert (spec.moe_experts, spec.moe_topk, spec.moe_expert_ffn, spec.moe_shared_experts) == (128, 6, 1856, 2)
    assert spec.moe_router_bias and not spec.moe_router_linear_bias and not spec.moe_dense_interleaved
    assert (spec.mlp, spec.mtp_layers) == ("relu2", 0)
    # the model card's 31.6B total, 3.6B active with the embeddings (3.2B without)
    assert round(spec.total_params / 1e9, 1) == 31.6 and round(spec.active_params / 1e9, 1) == 3.6
    assert spec.extra["notes"] == "1 shared expert 3712 wide counted as 2 of the routed experts' 1856"
    assert spec.buffer_params == 23 * 128


def test_moe_char_joins_the_block_like_an_mlp():
    assert blocks("ME*EM-*E") == (4, 2, 0)
    assert blocks("MEM*E") == (3, 2, 1)
    spec = read(small_moe())
    assert (spec.layers, spec.mamba_layers, spec.mlp_free_layers) == (4, 2, 0)
    assert (spec.moe_layers, spec.moe_dense_layers, spec.moe_dense_interleaved) == (3, 1, True)
    assert (spec.ffn_hidden, spec.moe_expert_ffn) == (512, 128)
    # the same layers as transformers 5.x names them
    names = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
    cfg = small_moe(layers_block_type=[names[ch] for ch in "ME*EM-*E"])
    del cfg["hybrid_override_pattern"], cfg["num_hidden_layers"]
    assert read(cfg) == spec
    cfg = small_moe(num_local_experts=8)  # transformers' attribute_map spelling
    del cfg["n_routed_experts"]
    assert read(cfg) == spec


def test_moe_mlp_without_a_mixer_is_rejected():
    assert "the 'E' that leads the pattern" in _error(small_moe(hybrid_override_pattern="EM*EM-*E")).valid
    err = _error(small_moe(hybrid_override_pattern="ME*E-M*E"))
    assert err.field == "hybrid_override_pattern" and "the '-' that follows another MLP (position 4)" in err.valid


def test_moe_keys_are_not_read_without_moe_layers():
    spec = read(nemotron_h_8b(moe_latent_size=1024, n_shared_experts=0, moe_shared_expert_intermediate_size=1000))
    assert spec == ModelSpec.preset("nemotron-h-8b") and not spec.is_moe


@pytest.mark.parametrize("change", [
    {}, {"hybrid_override_pattern": "ME*EME", "num_hidden_layers": 6}, {"moe_shared_expert_intermediate_size": 128},
    {"moe_shared_expert_intermediate_size": 384}, {"n_shared_experts": 2}, {"n_group": 2, "topk_group": 1},
    {"mlp_hidden_act": "relu"}, {"hybrid_override_pattern": "M*EM-*-ME", "num_hidden_layers": 9}], ids=str)
def test_meta_device_cross_check_moe(change):
    cfg = small_moe(**change)
    ours = read(cfg)
    model = _meta_model(cfg)
    params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
    assert buffers == sum(b.numel() for b in model.buffers()) > 0  # the router's correction bias only
    assert ours.total_params == params + buffers
    assert (ours.buffer_params, ours.trainable_params) == (buffers, params)
    # active: the router, top-k routed experts and the shared-expert MLP of every MoE layer
    expert = 2 * cfg["hidden_size"] * cfg["moe_intermediate_size"]
    idle = (cfg["n_routed_experts"] - cfg["num_experts_per_tok"]) * expert
    moe_layers = sum(type(layer.mixer).__name__ == "NemotronHMoE" for layer in model.model.layers)
    assert ours.moe_layers == moe_layers and ours.active_params == params + buffers - moe_layers * idle


def test_shared_expert_width_notes():
    assert "notes" not in read(small_moe(moe_shared_expert_intermediate_size=128)).extra
    assert read(small_moe(moe_shared_expert_intermediate_size=384)).extra["notes"] == \
        "1 shared expert 384 wide counted as 3 of the routed experts' 128"
    spec = read(small_moe(n_shared_experts=2))
    assert spec.moe_shared_experts == 2 and "n_shared_experts=2" in spec.extra["notes"]
    assert "one shared-expert MLP moe_shared_expert_intermediate_size=256 wide" in spec.extra["notes"]


def test_moe_refusals_name_the_field():
    err = _error(small_moe(moe_latent_size=64))
    assert err.field == "moe_latent_size" and "latent MoE projections" in err.valid and "not modelled" in err.valid
    err = _error(small_moe(moe_shared_expert_intermediate_size=200))
    assert err.field == "moe_shared_expert_intermediate_size" and err.value == 200
    assert "moe_intermediate_size=128" in err.valid and "not expressible" in err.valid
    err = _error(small_moe(mlp_bias=True))
    assert err.field == "mlp_bias" and "NemotronHExperts has no biases" in err.valid
    err = _error(small_moe(n_shared_experts=0))
    assert err.field == "n_shared_experts" and "whatever n_shared_experts says" in err.valid
    assert _error(small_moe(num_experts_per_tok=9)).field == "moe_topk"  # more than the 8 experts
    assert _error(small_moe(num_local_experts=16)).field == "num_local_experts"  # two spellings disagree
    assert _error(small_moe(n_routed_experts=8.0)).field == "n_routed_experts"


# --- multi-token prediction (transformers builds none; not counted, as DeepSeek-V3's) ----------------
def test_mtp_is_noted_and_counted_as_megatron_holds_it_when_trained():
    cfg = small_moe(num_nextn_predict_layers=2)  # mtp_layers_block_type absent: ['full_attention', 'moe']
    ours = read(cfg)
    assert ours.mtp_layers == 0 and "num_nextn_predict_layers=2" in ours.extra["notes"]
    assert "--mtp-layers 2" in ours.extra["notes"]
    model = _meta_model(cfg)
    params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() for b in model.buffers())
    assert not any(name.startswith("mtp") or ".mtp" in name for name, _ in model.named_parameters())
    assert ours.total_params == params + buffers
    # trained (--mtp-layers 2): one MTP module is an attention layer and an MoE layer as the
    # model's (norms included), eh_proj (2h -> h, no bias) and enorm, hnorm, final_layernorm
    layers = model.model.layers
    attn = sum(p.numel() for p in layers[2].parameters())  # '*'
    moe = sum(p.numel() for p in layers[1].parameters()) + sum(b.numel() for b in layers[1].buffers())  # 'E'
    h = cfg["hidden_size"]
    trained = ours.replace(mtp_layers=2)
    assert trained.total_params == params + buffers + 2 * (attn + moe + 2 * h * h + 3 * h)
    assert trained.buffer_params == buffers + 2 * cfg["n_routed_experts"]


@pytest.mark.parametrize("layout", [{"mtp_layers_block_type": ["full_attention", "moe", "moe"]},
                                    {"mtp_hybrid_override_pattern": "M*E"}], ids=str)
def test_an_mtp_layout_unlike_trainperfs_module_is_noted(layout):
    spec = read(small_moe(num_nextn_predict_layers=1, **layout))
    assert spec.mtp_layers == 0 and "is not trainperf's MTP module" in spec.extra["notes"]


def test_mtp_layout_is_not_read_without_mtp():
    assert read(small_moe(mtp_hybrid_override_pattern="M*E")).mtp_layers == 0


# --- malformed configs: one-line errors or a sound spec ----------------------------------------------
KEYS = sorted({*nemotron_h_8b(), *SMALL_MOE, "layers_block_type", "layer_types", "mamba_n_groups", "mamba_d_conv",
               "mamba_chunk_size", "attention_head_dim", "mamba_conv_bias", "num_local_experts", "moe_latent_size",
               "num_nextn_predict_layers", "mtp_layers_block_type", "mtp_hybrid_override_pattern"})
JSON_SCALARS = (st.none() | st.booleans() | st.integers(-3, 300) | st.sampled_from([0, 1, 2, 4, 8, 64, 2**70])
                | st.floats(allow_nan=True) | st.sampled_from(["M-*-", "-M*", "M*-E", "ME*E", "*E", "*-", "relu2", "gelu", "mlp", "moe"])
                | st.text(max_size=6))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=6)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(st.sampled_from(KEYS), st.booleans(), JSON_VALUES), min_size=1, max_size=4),
       base=st.sampled_from(["8b", "small", "small_moe"]))
def test_malformed_configs_give_one_line_errors(edits, base):
    cfg = {"8b": nemotron_h_8b, "small_moe": small_moe,
           "small": lambda: nemotron_h_8b(**SMALL, hybrid_override_pattern="M-M*-M-*M-", num_hidden_layers=10)}[base]()
    for key, delete, value in edits:
        if delete:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    try:
        spec = read(cfg)
    except TrainperfError as exc:
        assert "\n" not in str(exc)
        return
    assert spec.total_params > 0 and spec.layers >= 2
    assert forward_flops(spec, 64).matmul > 0
