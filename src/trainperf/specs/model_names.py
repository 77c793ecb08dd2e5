"""Which model preset a model name written by someone else means.

Tables and logs name models as their authors write them: "Llama 3.1 405B", a Hugging Face repo
id ("meta-llama/Llama-3.1-8B-Instruct"), with the vendor in front ("Mistral AI Mixtral 8x22B"),
with a release tag ("Qwen3-30B-A3B-Instruct-2507", "DeepSeek-V3-0324"), or by a later release
of the same network ("Llama 3.3 70B", "DeepSeek-R1"), an MoE by its active size and expert count
("Llama 4 Scout 17B-16E") or by its total size alone ("Qwen3-235B"). :func:`preset_for_name` reads such a name
as a preset id, and says how when the name is not the id itself. It only removes what does not
change the network (the organisation, the vendor, a fine-tuning or date tag, the size after a
name that already fixes it) and maps releases whose published config has the same shapes
(:data:`SAME_ARCHITECTURE`); a version tag that does change the network ("Mistral-7B-v0.3": no
sliding window, a larger vocabulary) is not removed, so such a name stays unread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

SAME_ARCHITECTURE: dict[str, tuple[str, str]] = {
    "llama30b": ("llama-33b", "the LLaMA paper's 33B model, which the converted checkpoints "
                 "(huggyllama/llama-30b) call 30B"),
    "llama165b": ("llama-65b", "Llama 1 is the first LLaMA release (arXiv:2302.13971)"),
    "llama133b": ("llama-33b", "Llama 1 is the first LLaMA release (arXiv:2302.13971)"),
    "llama130b": ("llama-33b", "Llama 1 is the first LLaMA release; its 33B model's checkpoints are called 30B"),
    "llama113b": ("llama-13b", "Llama 1 is the first LLaMA release (arXiv:2302.13971)"),
    "llama17b": ("llama-7b", "Llama 1 is the first LLaMA release (arXiv:2302.13971)"),
    "llama3405b": ("llama3.1-405b", "Meta released Llama 3's 405B model only as Llama 3.1"),
    "llama3370b": ("llama3.1-70b", "Llama 3.3 70B's config.json (meta-llama/Llama-3.3-70B-Instruct) has "
                   "Llama 3.1 70B's shapes"),
    "deepseekr1": ("deepseek-v3", "DeepSeek-R1 is trained from DeepSeek-V3-Base; its config.json "
                   "(deepseek-ai/DeepSeek-R1) has DeepSeek-V3's shapes"),
    "deepseekv25": ("deepseek-v2", "DeepSeek-V2.5 merges DeepSeek-V2-Chat and DeepSeek-Coder-V2-Instruct; its "
                    "config.json (deepseek-ai/DeepSeek-V2.5) has DeepSeek-V2's shapes"),
    "deepseekcoderv2": ("deepseek-v2", "DeepSeek-Coder-V2 (236B) is trained on from a DeepSeek-V2 checkpoint; its "
                        "config.json (deepseek-ai/DeepSeek-Coder-V2-Base) has DeepSeek-V2's shapes"),
    "deepseekv31": ("deepseek-v3", "DeepSeek-V3.1's config.json (deepseek-ai/DeepSeek-V3.1) has "
                    "DeepSeek-V3's shapes"),
    "llama31nemotron70b": ("llama3.1-70b", "NVIDIA's Llama-3.1-Nemotron-70B is Llama 3.1 70B Instruct fine-tuned; "
                           "its config.json (nvidia/Llama-3.1-Nemotron-70B-Instruct-HF) has Llama 3.1 70B's shapes"),
    "qwen27b": ("qwen2.5-7b", "Qwen2-7B's config.json (Qwen/Qwen2-7B) has Qwen2.5-7B's shapes"),
    "qwen272b": ("qwen2.5-72b", "Qwen2-72B's config.json (Qwen/Qwen2-72B) has Qwen2.5-72B's shapes"),
    "mistral7bv01": ("mistral-7b", "the preset is Mistral-7B-v0.1"),
    "mixtral8x7bv01": ("mixtral-8x7b", "the preset is Mixtral-8x7B-v0.1"),
    "mixtral8x22bv01": ("mixtral-8x22b", "the preset is Mixtral-8x22B-v0.1"),
    "mistralnemo": ("mistral-nemo-12b", "Mistral NeMo was released in one size, 12B"),
    "deepseek67b": ("deepseek-llm-67b", "DeepSeek 67B is the first DeepSeek LLM's 67B model (arXiv:2401.02954)"),
    "deepseek7b": ("deepseek-llm-7b", "DeepSeek 7B is the first DeepSeek LLM's 7B model (arXiv:2401.02954)"),
    "megatronturingnlg530b": ("mt-nlg-530b", "Megatron-Turing NLG 530B is MT-NLG 530B (arXiv:2201.11990)"),
    "mtnlg": ("mt-nlg-530b", "MT-NLG was trained in one size, 530B"),
    "bloom": ("bloom-176b", "BLOOM without a size names the 176B model; the smaller BLOOM models carry their size"),
}
"""A model name (letters and digits only) -> (the preset whose network it is, why)."""

VENDORS: tuple[str, ...] = (
    "meta", "mistral ai", "mistralai", "deepseek ai", "deepseekai", "nvidia", "google", "openai", "xai",
    "alibaba", "moonshot ai", "moonshotai", "moonshot", "microsoft", "tiiuae", "tii", "mosaicml",
    "databricks", "eleutherai", "ibm", "allenai", "01 ai", "01ai",
)
"""Organisations written before a model's own name ("NVIDIA Nemotron-4 340B")."""

_TAG = r"(?:instruct|chat|base|it|pt|hf|thinking|\d{4}|\d+k)"
"""Words after a model's name that name a fine-tune, a dated release or a trained context length
("Nemotron-H-56B-Base-8K") of the same network."""


@dataclass(frozen=True)
class NameMatch:
    """A preset a model name was read as."""

    preset: str
    how: str | None = None
    """How the name was read, when it is not the preset id itself (None when it is)."""


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text)


@lru_cache(maxsize=1)
def _ids() -> dict[str, str]:
    from trainperf.specs.presets import model_ids

    return {_key(i): i for i in model_ids()}


def _forms(name: str) -> list[tuple[str, str | None, str | None]]:
    """Readings of the name, each without one more thing that does not change the network:
    (reading, how it was read, the size it dropped: the last reading only)."""
    text = name.lower()
    # A size in parentheses ("GPT-2 (355M)") is a stated size like one after the name; any other
    # parenthesised words (a precision, a note) are dropped.
    sizes = re.findall(r"\(\s*(\d+(?:\.\d+)?\s*[bm])(?:\s*param\w*)?\s*\)", text)
    text = re.sub(r"\(.*?\)", "", text).strip()
    if len(sizes) == 1 and not re.search(r"[\s_-]+\d+(?:\.\d+)?\s*[bm]$", text):
        text = f"{text} {sizes[0].replace(' ', '')}"
    forms: list[tuple[str, str | None, str | None]] = [(text, None, None)]
    if "/" in text:
        text = text.rsplit("/", 1)[1].strip()
        forms.append((text, "the repository id's model name", None))
    for vendor in VENDORS:
        m = re.match(r"[\s_-]+".join(map(re.escape, vendor.split())) + r"[\s_-]+", text)
        if m:
            text = text[m.end():]
            forms.append((text, f"without the organisation '{vendor}'", None))
            break
    untagged = re.sub(rf"(?:[\s_.-]+{_TAG})+$", "", text)
    if untagged != text:
        forms.append((untagged, f"without the release tag '{text[len(untagged):].strip(' _.-')}'", None))
        text = untagged
    experts = re.search(r"[\s_-]+(\d+(?:\.\d+)?)b[\s_-]*(\d+)e$", text)
    if experts:  # "Llama 4 Scout 17B-16E": the active size and the expert count
        forms.append((text[:experts.start()], f"{MOE_TAG_DROPPED} {text[experts.start():].strip(' _-')}",
                      f"{experts.group(1)}b-{experts.group(2)}e"))
        return forms
    unsized = re.sub(r"[\s_-]+\d+(?:\.\d+)?\s*[bm]$", "", text)
    if unsized != text:  # "DeepSeek-V3 671B": a name that already fixes the size
        size = text[len(unsized):].strip(" _-")
        forms.append((unsized, f"{SIZE_DROPPED} {size}", size))
    return forms


SIZE_DROPPED = "without its stated size"
MOE_TAG_DROPPED = "without its active size and expert count"
ACTIVE_FORM = re.compile(r"a\d+(?:\.\d+)?b")
"""The active-parameter part of an MoE preset id ("qwen3-235b-a22b")."""
SIZE_TOLERANCE = 0.1
"""How far a preset's parameter count may be from the size a name states when the name is read
without it: "Grok-1 314B" is grok-1 (316.5B), "GPT-2 1.5B" is not gpt2 (124M)."""


def _size_agrees(preset: str, size: str) -> bool:
    """The preset's parameter count is within :data:`SIZE_TOLERANCE` of ``size`` ("314b", "1.5b");
    for an MoE tag ("17b-16e"), its active count is, and it has that many routed experts."""
    from trainperf.specs.presets import get_model

    spec = get_model(preset)
    moe = re.fullmatch(r"(\d+(?:\.\d+)?)b-(\d+)e", size)
    if moe:
        return spec.moe_experts == int(moe.group(2)) and \
            abs(spec.active_params / (float(moe.group(1)) * 1e9) - 1.0) <= SIZE_TOLERANCE
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([bm])", size)
    stated = float(m.group(1)) * (1e9 if m.group(2) == "b" else 1e6) if m else None
    return stated is not None and abs(spec.total_params / stated - 1.0) <= SIZE_TOLERANCE


def _with_active_size(key: str, ids: dict[str, str]) -> str | None:
    """The one MoE preset whose id is ``key`` followed by an active size ("qwen3235b" ->
    qwen3-235b-a22b): a name giving the total size alone, which fixes the network when one
    preset of that family has it."""
    found = [pid for k, pid in ids.items() if k.startswith(key) and ACTIVE_FORM.fullmatch(k[len(key):])]
    return found[0] if len(found) == 1 and re.search(r"\d+b$", key) else None


def _by_size(key: str, size: str, ids: dict[str, str]) -> str | None:
    """The one preset of the family ``key`` whose id names its size by a word or not at all
    (gpt2, gpt2-medium, gpt2-large, gpt2-xl) and whose parameter count agrees with the stated
    ``size`` ("GPT-2 1.5B" -> gpt2-xl). An id with a number of its own after the family
    (qwen3-235b-a22b) is not one: a name giving another number means another network."""
    found = [pid for k, pid in ids.items()
             if k.startswith(key) and not re.search(r"\d", k[len(key):]) and _size_agrees(pid, size)]
    return found[0] if len(found) == 1 else None


def preset_for_name(name: str) -> NameMatch | None:
    """The preset a model name means, or ``None`` when no reading of it names one."""
    ids = _ids()
    hows: list[str] = []
    for form, how, size in _forms(str(name)):
        if how:
            hows.append(how)
        key = _key(form)
        preset, why = (ids[key], None) if key in ids else SAME_ARCHITECTURE.get(key, (None, None))
        if preset is None and (active := _with_active_size(key, ids)) is not None:
            preset, why = active, f"the one preset of that total size ({active})"
        if preset is not None and size is not None and not _size_agrees(preset, size):
            preset = None  # "GPT-2 1.5B" is not gpt2 (124M); another preset of the family may be
        if preset is None and size is not None and (sized := _by_size(key, size, ids)) is not None:
            preset, why = sized, f"the one {form.strip()} preset of that size ({sized})"
        if preset is None:
            continue
        return NameMatch(preset, "; ".join([*hows, why] if why else hows) or None)
    return None
