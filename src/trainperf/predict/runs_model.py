"""The model of a runs-table row: the model preset its model cell names, where every shape the
row states agrees with it, else the shape columns (layers, hidden, heads, ffn, vocab, experts)
with what the words of its cells add (MLP kind, positions and norms, multi-head latent
attention, shared experts and leading dense layers of a MoE), validated as a
:class:`~trainperf.specs.model.ModelSpec` so that a bad shape reads as the row's reason."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from trainperf.errors import TrainperfError
from trainperf.predict.runs_rows import RowSkip, row_cell, row_count
from trainperf.specs.model import MLP_KINDS, ModelSpec


def _mlp(arch: str) -> str:
    low = arch.lower()
    if "swiglu" in low:
        return "swiglu"
    if "squared-relu" in low:
        return "relu2" if "relu2" in MLP_KINDS else "relu"
    if "relu" in low:
        return "relu"
    if "moe" in low:
        return "geglu" if "geglu" in MLP_KINDS else "swiglu"
    return "gelu"


def _preset_named(name: str, notes: list[str] | None = None) -> Any:
    """The model preset a model cell names ("Llama 3.1 405B" -> llama3.1-405b), or ``None``
    (:func:`trainperf.specs.model_names.preset_for_name`); how a name that is not the preset id
    was read goes to ``notes``."""
    from trainperf.specs.model_names import preset_for_name
    from trainperf.specs.presets import get_model

    match = preset_for_name(name) if name else None
    if match is None:
        return None
    if match.how and notes is not None:
        notes.append(f"the model cell {name!r} read as the preset {match.preset}: {match.how}")
    return get_model(match.preset)


MLA_COLUMNS: tuple[str, ...] = ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
"""Optional columns stating multi-head latent attention (DeepSeek-V2/V3, Kimi K2): the
:class:`~trainperf.specs.model.ModelSpec` fields of the same names."""

_MLA_WORDS: dict[str, str] = {
    "q_lora_rank": r"q[ _-]?lora[ _-]?rank", "kv_lora_rank": r"kv[ _-]?lora[ _-]?rank",
    "qk_rope_head_dim": r"(?:qk[ _-]?)?rope[ _-]?(?:head[ _-]?)?dim|(?<![a-z])rope(?![a-z])",
    "qk_nope_head_dim": r"(?:qk[ _-]?)?nope[ _-]?(?:head[ _-]?)?dim|(?<![a-z])nope(?![a-z])",
    "v_head_dim": r"v[ _-]?head[ _-]?dim",
}
"""How the MLA sizes are written in an ``arch_type`` or ``model`` cell ("MLA (kv_lora_rank 512,
q_lora_rank 1536, rope 64, nope 128, v_head_dim 128)")."""


def _mla_preset(r: Mapping[str, str]) -> Any:
    """The MLA preset the model cell names, or whose family it names ("DeepSeek-V3 proxy (16
    layers)", "DeepSeek-V2"): the first MLA preset whose id's letters start the cell's."""
    from trainperf.specs.presets import get_model, model_ids

    cell = re.sub(r"[^a-z0-9]", "", row_cell(r, "model").lower())
    named = _preset_named(row_cell(r, "model"))
    if named is not None and named.attention == "mla":
        return named
    for pid in model_ids():
        key = re.sub(r"[^a-z0-9]", "", pid)
        fam = re.sub(r"v?\d.*$", "", key)  # deepseekv3 -> deepseek
        if fam and cell.startswith(fam) and get_model(pid).attention == "mla":
            return get_model(pid)
    return None


def _mla(r: Mapping[str, str], heads: int, kv: int | None, notes: list[str]) -> dict[str, Any] | None:
    """The MLA fields of a row that states multi-head latent attention (in ``arch_type`` or
    ``model``, in the MLA columns, or by a ``kv_heads`` that is no head count of a model of an
    MLA family), else None. Sizes come from the MLA columns, then the cells' words, then
    ``kv_heads`` read as the KV latent rank (tables write it there), then the named MLA preset,
    then DeepSeek-V3's (its Hugging Face config); the row's assumptions say which."""
    from trainperf.specs.presets import get_model

    text = f"{row_cell(r, 'arch_type')} {row_cell(r, 'model')}".lower()
    stated = {c: row_count(r, c) for c in MLA_COLUMNS if c in r and row_count(r, c) is not None}
    for c, pat in _MLA_WORDS.items():
        m = re.search(rf"(?:{pat})\W{{0,3}}(\d+)", text)
        if c not in stated and m:
            stated[c] = int(m.group(1))
    family = _mla_preset(r)
    odd_kv = kv is not None and (kv > heads or heads % kv != 0)
    if not (stated or re.search(r"(?<![a-z])mla(?![a-z])|latent attention", text) or (odd_kv and family)):
        return None
    if odd_kv and "kv_lora_rank" not in stated:
        stated["kv_lora_rank"] = kv
        notes.append(f"kv_heads {kv} read as MLA's KV latent rank (kv_lora_rank): MLA keeps one latent per token, "
                     f"every one of the {heads} heads reads it")
    base = family if family is not None else get_model("deepseek-v3")
    missing = [c for c in MLA_COLUMNS if c not in stated]
    if missing:
        notes.append(f"MLA {', '.join(missing)} not stated: {base.name}'s taken "
                     f"({', '.join(f'{c}={getattr(base, c)}' for c in missing)}; {base.source})")
    return {"attention": "mla", "kv_heads": heads, "head_dim": None,
            **{c: stated.get(c, getattr(base, c)) for c in MLA_COLUMNS}}


_SHAPE_COLUMNS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "moe_experts", "moe_topk",
                  "moe_expert_ffn")
"""Shape columns of a runs table that must agree with a named preset for the preset to stand in."""


def _preset_values(preset: Any, column: str) -> tuple[Any, ...]:
    """The values of a shape ``column`` that agree with ``preset``: its field, the effective one
    where the field defaults (kv heads = heads; an expert as wide as the dense MLP), and for a MoE
    model whose every layer is MoE, ``ffn_hidden`` may name the experts' width; a hybrid's layers
    may be its blocks or its pattern's layers (:attr:`~trainperf.specs.model.ModelSpec.pattern_layers`)."""
    if column == "kv_heads":  # an MLA model's table may write its KV latent rank as kv_heads
        return (preset.kv_heads or preset.heads, *((preset.kv_lora_rank,) if preset.attention == "mla" else ()))
    if column == "layers":  # a hybrid's table may count its pattern's single-op layers
        return (preset.layers, preset.pattern_layers)
    if column == "moe_expert_ffn":
        return (preset.moe_expert_ffn or preset.ffn_hidden,)
    if column == "ffn_hidden" and preset.is_moe and not preset.moe_dense_layers:
        return (preset.ffn_hidden, preset.moe_expert_ffn)
    return (getattr(preset, column),)


_OTHER_ARCHITECTURES = re.compile(
    r"\b(mamba\d?|ssm|state[ -]space|rwkv\d*|hyena|retnet|xlstm|griffin|recurrentgemma|jamba|zamba\d?|"
    r"nemotron[ -]?h|falcon[ -]?h1|linear[ -]attention|lightning[ -]attention|gated[ -]?delta(?:net)?|deltanet|"
    r"encoder[ -]decoder|t5|ul2|vit|vision[ -]transformer|diffusion|conformer|bert)\b")
"""Words of a model or architecture cell naming a network that is not a decoder-only transformer
(attention and MLP/MoE blocks): state-space, recurrent, linear-attention and hybrid models,
encoder-decoders and encoders. trainperf does not model them (but for a Nemotron-H row whose
shape is its preset's, :func:`_refuse_other_architectures`), so such a row is left unread rather
than predicted as a transformer of its width."""


def _refuse_other_architectures(r: Mapping[str, str], preset: Any) -> None:
    """Skip a row whose model or architecture cell names a network trainperf does not model,
    unless ``preset``, the preset that stands in for the row, is a hybrid trainperf does model
    (Nemotron-H's Mamba-2 blocks)."""
    if preset is not None and preset.mamba_layers:
        return
    for col in ("arch_type", "model"):
        m = _OTHER_ARCHITECTURES.search(row_cell(r, col).lower())
        if m:
            raise RowSkip("model", f"{col} {row_cell(r, col)[:40]!r} names {m.group(0)!r}: trainperf models "
                                   "decoder-only transformers (attention with MLP or MoE blocks) and the Nemotron-H "
                                   "hybrids its presets name with their shape, not other state-space, recurrent, "
                                   "linear-attention, hybrid or encoder models")


_WINDOW = re.compile(r"sliding[ _-]?window(?:\s*(?:of|=|:|size))?\s*(\d[\d,]*)\s*(k)?\b")
_SOME_LAYERS = re.compile(r"alternat|interleav|every other|half|local[ /-]+global|global[ /-]+local")


def _window_words(arch: str, layers: int, notes: list[str]) -> dict[str, int]:
    """A sliding window an architecture cell states ("sliding window 4096", "sliding window 4k,
    alternating with global"): on every layer, or on half of them where the cell says they
    alternate; noted."""
    low = arch.lower()
    m = _WINDOW.search(low)
    if not m:
        return {}
    window = int(m.group(1).replace(",", "")) * (1024 if m.group(2) else 1)
    n = layers // 2 if _SOME_LAYERS.search(low) else layers
    notes.append(f"sliding window of {window:,} tokens on {n} of {layers} layers, read from {arch[:60]!r}")
    return {"sliding_window": window, "sliding_window_layers": n}


def read_model(r: Mapping[str, str], notes: list[str]) -> dict[str, Any]:
    """The ModelSpec fields of a row: the preset its model cell names where every shape it states
    agrees with it, else its shape columns and words; a network trainperf does not model, or a
    shape that is not given or does not validate, skips the row."""
    read_as: list[str] = []
    preset = _preset_named(row_cell(r, "model"), read_as)
    layers, hidden, ffn, vocab = (row_count(r, c) for c in ("layers", "hidden", "ffn_hidden", "vocab"))
    fields = None
    if preset is not None and (not layers or layers in _preset_values(preset, "layers")) \
            and (not hidden or hidden == preset.hidden):
        fields = _from_preset(r, preset, (layers, hidden, ffn, vocab), read_as, notes)
    # a hybrid preset standing in is modelled; a hybrid whose stated shape is not the preset's is not
    _refuse_other_architectures(r, preset if fields is not None else None)
    if fields is not None:
        return fields
    if not layers or not hidden:
        raise RowSkip("model", "model shape (layers, hidden) not given")
    if not ffn or not vocab:
        raise RowSkip("model", "model shape (ffn_hidden, vocab) not given")
    return _from_shape(r, layers, hidden, ffn, vocab, notes)


def _from_preset(r: Mapping[str, str], preset: Any, shape: tuple[int | None, ...], read_as: list[str],
                 notes: list[str]) -> dict[str, Any] | None:
    """The preset's fields where the row leaves shapes out or every shape it states agrees with
    the preset; None otherwise (the row's own shape is read instead)."""
    missing = [c for c, v in zip(("layers", "hidden", "ffn_hidden", "vocab"), shape, strict=True) if not v]
    # every shape the row states agrees with the preset it names: the preset's architecture
    # (attention kind such as MLA, shared experts, dense layers of a MoE, norms, positions,
    # biases, tied embeddings) is what the row's model has, which the columns cannot say
    agrees = (all(not row_count(r, c) or row_count(r, c) in _preset_values(preset, c) for c in _SHAPE_COLUMNS)
              and all(row_count(r, c) in (None, getattr(preset, c)) for c in MLA_COLUMNS if c in r))
    if not (missing or agrees):
        return None
    notes.extend(read_as)
    notes.append(f"{', '.join(missing)} not stated: from the model preset {preset.name} "
                 f"(the model cell {row_cell(r, 'model')!r})" if missing else
                 f"architecture from the model preset {preset.name}: every shape column agrees with it")
    fields: dict[str, Any] = {f.name: getattr(preset, f.name) for f in dataclasses.fields(ModelSpec)
                              if f.name != "extra"}
    fields["max_seq_len"] = max(row_count(r, "seq_len") or 2048, 2048, fields.get("max_seq_len") or 0)
    try:
        ModelSpec(**fields)
    except TrainperfError as e:
        raise RowSkip("model", f"model does not validate: {e}") from None
    return fields


def _from_shape(r: Mapping[str, str], layers: int, hidden: int, ffn: int, vocab: int,
                notes: list[str]) -> dict[str, Any]:
    """The fields of a row's shape columns and the words of its architecture cell (positions,
    norms, MLP kind, MLA, experts, a sliding window)."""
    heads = row_count(r, "heads")
    if not heads:
        heads = hidden // 128
        notes.append(f"heads not stated: {heads} assumed (head_dim 128; MHA FLOPs and params do not "
                     "depend on the head count)")
    kv = row_count(r, "kv_heads") or heads
    arch = row_cell(r, "arch_type")
    low = arch.lower()
    fields: dict[str, Any] = {
        "name": row_cell(r, "model") or "custom", "layers": layers, "hidden": hidden, "heads": heads,
        "kv_heads": kv, "ffn_hidden": ffn, "vocab": vocab, "mlp": _mlp(arch),
        "max_seq_len": max(row_count(r, "seq_len") or 2048, 2048), **_window_words(arch, layers, notes),
    }
    if "alibi" in low:
        fields.update(position="alibi", norm="layernorm")
    elif "gpt" in low or "gelu" in low or "relu mlp" in low:
        fields.update(position="learned", norm="layernorm", bias=True)
    if "head_dim 128" in low:
        fields["head_dim"] = 128
    mla = _mla(r, heads, row_count(r, "kv_heads"), notes)
    if mla:
        fields.update(mla)
    experts = row_count(r, "moe_experts")
    if experts:
        fields.update(moe_experts=experts, moe_topk=row_count(r, "moe_topk") or 1,
                      moe_expert_ffn=row_count(r, "moe_expert_ffn") or ffn, **_moe_words(r, layers, notes))
    try:
        ModelSpec(**fields)  # validates here, so a bad shape reads as this row's reason
    except TrainperfError as e:
        raise RowSkip("model", f"model shape does not validate: {e}") from None
    return fields


_SHARED = re.compile(r"(\d+)\s*(?:x\s*)?shared(?:[ _-]?experts?)?\b")
_DENSE_FIRST = re.compile(r"(?:first|leading)\s*(\d+)\s*(?:layers?\s*)?(?:are\s*)?dense|(\d+)\s*dense\s*layers?")


def _moe_words(r: Mapping[str, str], layers: int, notes: list[str]) -> dict[str, int]:
    """What an MoE row's words state beyond its columns: shared experts ("64 routed + 2 shared",
    "2 shared experts") and leading dense layers ("first 3 layers dense"), from the MoE, arch and
    model cells, noted."""
    text = " ".join(row_cell(r, c) for c in ("moe_experts", "arch_type", "model")).lower()
    out: dict[str, int] = {}
    m = _SHARED.search(text)
    if m and int(m.group(1)) > 0:
        out["moe_shared_experts"] = int(m.group(1))
        notes.append(f"{m.group(1)} shared expert(s) per MoE layer, read from {m.group(0)!r}")
    d = _DENSE_FIRST.search(text)
    if d and 0 < int(d.group(1) or d.group(2)) < layers:
        out["moe_dense_layers"] = int(d.group(1) or d.group(2))
        notes.append(f"the first {out['moe_dense_layers']} layers dense (no experts), read from {d.group(0)!r}")
    return out
