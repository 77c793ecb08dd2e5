"""Typed access to a Hugging Face ``config.json`` dict, validated as transformers validates it.

transformers 5.x config classes are strict dataclasses: an ``int`` field rejects ``4096.0``,
``"4096"`` and ``true``; a ``bool`` field rejects ``"false"``. :class:`HFConfig` applies the same
rules and adds bounds (a vocabulary of 1e30 is a typo, not a model), raising a one-line
:class:`~trainperf.errors.SpecError` naming the key (``text_config.vocab_size`` inside a nested
config), the value and what is valid. A key that is absent or ``null`` takes the default of the
matching transformers config class, given by the family reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainperf.errors import SpecError
from trainperf.specs.bounds import (  # noqa: F401 (re-exported for the family readers)
    COUNT,
    EXPERTS,
    HEADS,
    LAYERS,
    LAYERS_OR_ZERO,
    LEARNED_POSITIONS,
    POSITIONS,
    RANK,
    VOCAB,
    WIDTH,
    WIDTH_OR_ZERO,
    Bound,
)

_MISSING: Any = object()


def _type_name(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


class HFConfig:
    """A config dict with its family name, the path to it and transformers' defaults."""

    def __init__(self, data: Mapping[str, Any], model_type: str, where: str,
                 defaults: Mapping[str, Any] | None = None, prefix: str = "") -> None:
        self.data = data
        self.model_type = model_type
        self.where = where
        self.defaults = dict(defaults or {})
        self.prefix = prefix

    # --- raw access -------------------------------------------------------------------------
    def field(self, key: str) -> str:
        """The key as the error messages name it (``text_config.vocab_size``)."""
        return f"{self.prefix}{key}"

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        """The value; when absent or null the class default, then ``default``."""
        value = self.data.get(key)
        if value is None:
            value = self.defaults.get(key)
        if value is None:
            value = None if default is _MISSING else default
        return value

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def _required(self, key: str) -> SpecError:
        return SpecError(self.field(key), None, f"required in a {self.model_type} config.json ({self.where})")

    # --- typed getters ----------------------------------------------------------------------
    def integer(self, key: str, default: Any = _MISSING, bound: Bound = WIDTH) -> int:
        """A required (or defaulted) integer within ``bound``."""
        value = self.raw(key, default)
        if value is None:
            raise self._required(key)
        return self.check_integer(key, value, bound)

    def opt_integer(self, key: str, bound: Bound = WIDTH) -> int | None:
        """An integer within ``bound``, or ``None`` when absent or null (and no class default)."""
        value = self.raw(key)
        return None if value is None else self.check_integer(key, value, bound)

    def check_integer(self, key: str, value: Any, bound: Bound) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(self.field(key), value,
                            f"an integer (got {_type_name(value)}; transformers rejects it too)")
        if not bound.lo <= value <= bound.hi:
            raise SpecError(self.field(key), value, bound.valid())
        return value

    def flag(self, key: str, default: bool) -> bool:
        """A JSON boolean (``"false"``, a string, is rejected as transformers rejects it)."""
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise SpecError(self.field(key), value, f"true or false (got {_type_name(value)})")
        return value

    def number(self, key: str, default: float) -> float:
        value = self.raw(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
            raise SpecError(self.field(key), value, f"a number (got {_type_name(value)})")
        return float(value)

    def text(self, key: str, default: str) -> str:
        value = self.raw(key, default)
        if not isinstance(value, str):
            raise SpecError(self.field(key), value, f"a string (got {_type_name(value)})")
        return value

    def items(self, key: str) -> list[Any] | None:
        """A JSON list, or ``None`` when absent or null."""
        value = self.raw(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise SpecError(self.field(key), value, f"a list (got {_type_name(value)})")
        return value

    def integer_list(self, key: str, bound: Bound, length: int | None = None) -> list[int] | None:
        """A list of integers within ``bound`` (of ``length`` items when given), or ``None``."""
        items = self.items(key)
        if items is None:
            return None
        if length is not None and len(items) != length:
            raise SpecError(self.field(key), _short(items), f"a list of {length} integers (one per layer)")
        for item in items:
            if isinstance(item, bool) or not isinstance(item, int) or not bound.lo <= item <= bound.hi:
                raise SpecError(self.field(key), _short(items),
                                f"a list of integers from {bound.lo} to {bound.hi:,}")
        return items

    def text_list(self, key: str, allowed: tuple[str, ...], length: int | None = None) -> list[str] | None:
        """A list of strings drawn from ``allowed`` (``length`` items when given), or ``None``."""
        items = self.items(key)
        if items is None:
            return None
        if length is not None and len(items) != length:
            raise SpecError(self.field(key), _short(items),
                            f"a list of {length} entries, one per layer (num_hidden_layers={length})")
        for item in items:
            if item not in allowed:
                raise SpecError(self.field(key), _short(items),
                                f"a list of {', '.join(repr(a) for a in allowed)}; {item!r} is not one")
        return items

    def sub(self, key: str, model_type: str, defaults: Mapping[str, Any] | None = None,
            required: bool = True) -> HFConfig | None:
        """A nested config object (``text_config``, ``vision_config``)."""
        value = self.data.get(key)
        if value is None:
            if required:
                raise self._required(key)
            return None
        if not isinstance(value, Mapping):
            raise SpecError(self.field(key), _short(value), f"a JSON object in a {self.model_type} config.json")
        return HFConfig(value, model_type, self.where, defaults, prefix=f"{self.prefix}{key}.")


def _short(value: Any, limit: int = 60) -> Any:
    """A value short enough for a one-line message (long lists are elided)."""
    text = repr(value)
    if len(text) <= limit:
        return value
    return f"{text[:limit]}... ({len(value)} items)" if hasattr(value, "__len__") else f"{text[:limit]}..."


# --- activations ----------------------------------------------------------------------------------
def gated_mlp(c: HFConfig, key: str, default: str) -> str:
    """``silu``/``swish`` -> SwiGLU, ``gelu*`` -> GeGLU, for a gated MLP."""
    act = c.text(key, default).lower()
    if act in ("silu", "swish"):
        return "swiglu"
    if act.startswith("gelu"):
        return "geglu"
    raise SpecError(c.field(key), act, "silu/swish (SwiGLU) or gelu* (GeGLU) for a gated MLP")


def plain_mlp(c: HFConfig, key: str, default: str) -> str:
    """``gelu*`` -> GELU, ``relu`` -> ReLU, ``relu2`` -> squared ReLU (Nemotron-4), for a two-matrix MLP."""
    act = c.text(key, default).lower()
    if act.startswith("gelu"):
        return "gelu"
    if act == "relu":
        return "relu"
    if act in ("relu2", "squared-relu", "squared_relu", "relu_squared"):  # Nemotron-4 (HF: "relu2")
        return "relu2"
    raise SpecError(c.field(key), act, "gelu*, relu or relu2 (squared ReLU)")


LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


def layer_types(c: HFConfig, layers: int, allowed: tuple[str, ...] = LAYER_TYPES) -> list[str] | None:
    """``layer_types`` validated: one known entry per layer, or ``None`` when absent."""
    return c.text_list("layer_types", allowed, length=layers)


def rope_decoder(c: HFConfig, *, tie_default: bool, max_seq_default: int,
                 act_default: str = "silu", act_key: str = "hidden_act") -> dict[str, Any]:
    """Fields shared by the Llama-like families (RMSNorm, RoPE, gated MLP)."""
    layers = c.integer("num_hidden_layers", bound=LAYERS)
    heads = c.integer("num_attention_heads", bound=HEADS)
    return {
        "layers": layers,
        "hidden": c.integer("hidden_size"),
        "heads": heads,
        "kv_heads": c.opt_integer("num_key_value_heads", HEADS),
        "head_dim": c.opt_integer("head_dim"),
        "ffn_hidden": c.integer("intermediate_size"),
        "vocab": c.integer("vocab_size", bound=VOCAB),
        "max_seq_len": c.integer("max_position_embeddings", max_seq_default, POSITIONS),
        "tied_embeddings": c.flag("tie_word_embeddings", tie_default),
        "mlp": gated_mlp(c, act_key, act_default),
        "norm": "rmsnorm",
        "position": "rope",
    }


def note(fields: dict[str, Any], text: str) -> None:
    """Append a note to ``extra["notes"]``."""
    extra = fields.setdefault("extra", {})
    extra["notes"] = f"{extra['notes']}; {text}" if extra.get("notes") else text
