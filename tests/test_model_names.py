"""Model names as tables and logs write them, read as presets only where the network is the same."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainperf.specs.model_names import preset_for_name
from trainperf.specs.presets import model_ids


@pytest.mark.parametrize(("name", "preset"), [
    ("meta-llama/Llama-3.1-8B", "llama3.1-8b"),
    ("Meta Llama 3 8B", "llama3-8b"),
    ("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3-30b-a3b"),
    ("mistralai/Mixtral-8x7B-v0.1", "mixtral-8x7b"),
    ("Mistral AI Mixtral 8x22B", "mixtral-8x22b"),
    ("NVIDIA Nemotron-4 340B", "nemotron4-340b"),
    ("xAI Grok-1 314B", "grok-1"),
    ("DeepSeek-V3 671B", "deepseek-v3"),
    ("DeepSeek-V3-0324", "deepseek-v3"),
    ("deepseek-ai/DeepSeek-R1", "deepseek-v3"),
    ("Llama 3.3 70B Instruct", "llama3.1-70b"),
    ("Llama 3 405B", "llama3.1-405b"),
    ("Moonshot AI Kimi-K2-Instruct", "kimi-k2"),
    ("OpenAI gpt-oss-120b", "gpt-oss-120b"),
    ("Qwen2-7B", "qwen2.5-7b"),
    ("Llama 4 Scout 17B-16E", "llama4-scout"),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", "llama4-maverick"),
    ("Qwen3-235B", "qwen3-235b-a22b"),
    ("NVIDIA Llama-3.1-Nemotron-70B-Instruct", "llama3.1-70b"),
    ("GPT-2 1.5B", "gpt2-xl"),  # the one GPT-2 of 1.5B (1,557,611,200): gpt2 itself is 124M
    ("GPT-2 (355M)", "gpt2-medium"),  # a size in parentheses is a stated size (it was dropped: gpt2)
    ("GPT-2 774M", "gpt2-large"),
    ("Mixtral 8x7B (47B)", "mixtral-8x7b"),
])
def test_names_as_written_read_as_their_preset(name, preset):
    match = preset_for_name(name)
    assert match is not None and match.preset == preset
    assert match.how  # every reading that is not the id itself says how it was read


def test_a_name_spelled_as_the_id_needs_no_explanation():
    assert preset_for_name("Llama 3.1 405B (BF16)") == preset_for_name("llama3.1-405b")
    assert preset_for_name("LLaMA-2 70B").how is None


@pytest.mark.parametrize("name", [
    "GPT-2 (2B)",  # no GPT-2 of that size: gpt2 is 124M, gpt2-xl 1.56B
    "GPT-2 350M params",  # "params" after a size is not read as a size: not the 124M gpt2
    "Mistral-7B-v0.3",  # no sliding window and a larger vocabulary than the v0.1 preset
    "DeepSeek-V3.2",  # sparse attention: not DeepSeek-V3's network
    "Gemma 2 2B",
    "Llama 4 Scout 17B-128E",  # Scout has 16 experts: the tag names another network
    "Llama 4 Maverick 40B-128E",  # Maverick has 17B active
    "Qwen3-236B",  # no Qwen3 MoE of that total size
    "Llama 3.1 8B LoRA-merged 13B",
    "",
])
def test_names_of_other_networks_stay_unread(name):
    assert preset_for_name(name) is None


@given(st.sampled_from(model_ids()))
def test_every_preset_id_reads_as_itself(pid):
    match = preset_for_name(pid)
    assert match is not None and match.preset == pid and match.how is None
    assert preset_for_name(pid.upper()).preset == pid


def test_a_same_network_release_has_the_presets_shapes():
    """Qwen2-7B's published config (a fixture) is Qwen2.5-7B's network, shape for shape."""
    from pathlib import Path

    from trainperf.specs.hf_config import model_from_hf_config
    from trainperf.specs.presets import get_model

    fixture = Path(__file__).parent / "fixtures" / "hf_configs" / "qwen2-7b.json"
    ours = model_from_hf_config(fixture).to_dict()
    preset = get_model(preset_for_name("Qwen2-7B").preset).to_dict()
    assert {k: v for k, v in ours.items() if k not in ("name", "source")} == \
        {k: v for k, v in preset.items() if k not in ("name", "source")}


def test_an_unknown_preset_id_suggests_the_preset_the_name_reads_as():
    from trainperf.errors import UnknownNameError
    from trainperf.specs.presets import get_model

    with pytest.raises(UnknownNameError, match=r"did you mean llama3\.1-8b \(the repository id's model name\)\?"):
        get_model("meta-llama/Llama-3.1-8B")
    with pytest.raises(UnknownNameError, match="did you mean llama3-8b"):
        get_model("llama3-8B-xx")
