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


def test_moe_layer_char_is_rejected():
    err = _error(nemotron_h_8b(hybrid_override_pattern=PATTERN_8B[:-2] + "E-"))
    assert err.field == "hybrid_override_pattern" and "'E'" in err.valid and "'M'" in err.valid
    assert "MoE" in err.valid


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
    cfg = nemotron_h_8b(layers_block_type=["linear_attention", "moe", "full_attention", "mlp"])
    del cfg["hybrid_override_pattern"], cfg["num_hidden_layers"]
    err = _error(cfg)
    assert err.field == "layers_block_type" and "'moe'" in err.valid
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


@pytest.mark.parametrize("change", [
    {}, {"hybrid_override_pattern": "M*-M-M", "num_hidden_layers": 6}, {"tie_word_embeddings": True},
    {"mlp_bias": True}, {"mamba_d_conv": 3, "mamba_n_groups": 4}], ids=str)
def test_meta_device_cross_check(change):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = nemotron_h_8b(**SMALL, hybrid_override_pattern="M-M*-M-*M-", num_hidden_layers=10)
    for key in change:
        if key.startswith("mamba_"):  # the remote-code spelling replaces the transformers one
            cfg.pop({"mamba_d_conv": "conv_kernel", "mamba_n_groups": "n_groups"}[key], None)
    cfg.update(change)
    ours = read(cfg)
    data = {k: v for k, v in cfg.items() if k not in ("model_type", "_name_or_path", "architectures")}
    try:
        config = transformers.AutoConfig.for_model("nemotron_h", **data)
    except (ValueError, KeyError) as exc:  # model type absent in this transformers version
        pytest.skip(f"transformers cannot build nemotron_h: {exc}")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert ours.total_params == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("change", [{"use_bias": True}, {"use_conv_bias": False}], ids=str)
def test_meta_device_noted_biases(change):
    """The biases the notes name are exactly the difference from transformers' count."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = nemotron_h_8b(**SMALL, hybrid_override_pattern="M-M*-M-*M-", num_hidden_layers=10, **change)
    ours = read(cfg)
    data = {k: v for k, v in cfg.items() if k not in ("model_type", "_name_or_path", "architectures")}
    try:
        config = transformers.AutoConfig.for_model("nemotron_h", **data)
    except (ValueError, KeyError) as exc:
        pytest.skip(f"transformers cannot build nemotron_h: {exc}")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    theirs = sum(p.numel() for p in model.parameters())
    in_out = ours.mamba_matmuls()["in_proj"][1]
    if "use_bias" in change:
        assert theirs - ours.total_params == ours.mamba_layers * (in_out + ours.hidden)
        assert f"{in_out} + {ours.hidden} values" in ours.extra["notes"]
    else:
        assert ours.total_params - theirs == ours.mamba_layers * ours.mamba_conv_dim
        assert f"{ours.mamba_conv_dim} convolution biases" in ours.extra["notes"]


# --- malformed configs: one-line errors or a sound spec ----------------------------------------------
KEYS = sorted({*nemotron_h_8b(), "layers_block_type", "layer_types", "mamba_n_groups", "mamba_d_conv",
               "mamba_chunk_size", "attention_head_dim", "mamba_conv_bias"})
JSON_SCALARS = (st.none() | st.booleans() | st.integers(-3, 300) | st.sampled_from([0, 1, 2, 4, 8, 64, 2**70])
                | st.floats(allow_nan=True) | st.sampled_from(["M-*-", "-M*", "M*-E", "relu2", "gelu", "mlp", "moe"])
                | st.text(max_size=6))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=6)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(st.sampled_from(KEYS), st.booleans(), JSON_VALUES), min_size=1, max_size=4),
       small=st.booleans())
def test_malformed_configs_give_one_line_errors(edits, small):
    cfg = nemotron_h_8b(**SMALL, hybrid_override_pattern="M-M*-M-*M-", num_hidden_layers=10) if small \
        else nemotron_h_8b()
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
