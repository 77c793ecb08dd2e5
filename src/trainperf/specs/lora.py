"""LoRA fine-tuning of a dense model: which projections get adapters, their rank and scaling.

Low-rank adaptation (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models",
arXiv:2106.09685): a frozen weight ``W`` (``in -> out``) is used as ``W x + (alpha / r) B A x``
with trainable ``A`` (``in -> r``) and ``B`` (``r -> out``, initialised to zero, so training
starts from the base model). Each adapted matrix adds ``r * (in + out)`` trainable parameters;
everything else is frozen. The scaling ``alpha / r`` keeps the update's size roughly independent
of ``r`` (the paper sets ``alpha`` to the first ``r`` tried and does not tune it, so the default
here is ``alpha = r``).

Target names are the projections' roles, independent of any framework's module names:
``q, k, v, o`` (attention) and ``gate, up, down`` (MLP; ``gate`` exists only in a gated MLP).
Pure Python: the accounting and the predictor use it without torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainperf.errors import SpecError
from trainperf.specs.model import ModelSpec

TARGETS: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down")
"""Adaptable projections, in the order of a layer's forward."""
DEFAULT_TARGETS: tuple[str, ...] = TARGETS
"""Every linear layer of the blocks (QLoRA's choice, Dettmers et al. 2023); Hu et al. used q, v."""

_MATRIX = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj",
           "gate": "gate_proj", "up": "up_proj", "down": "down_proj"}


def parse_targets(text: str | Iterable[str]) -> tuple[str, ...]:
    """``"q,v"`` or ``["q", "v"]`` -> ``("q", "v")`` in forward order; unknown or empty -> SpecError."""
    items = [t.strip().lower() for t in (text.split(",") if isinstance(text, str) else text)]
    items = [t for t in items if t]
    unknown = [t for t in items if t not in TARGETS]
    if unknown or not items:
        raise SpecError("lora.targets", ",".join(unknown) if unknown else text,
                        f"a comma-separated subset of {','.join(TARGETS)}")
    return tuple(t for t in TARGETS if t in items)


@dataclass(frozen=True)
class LoraSpec:
    """Low-rank adapters on some projections of every block; the rest of the model is frozen."""

    rank: int
    """``r``: inner width of each adapter (``A: in -> r``, ``B: r -> out``)."""
    alpha: float | None = None
    """Scaling numerator: the update is ``(alpha / r) B A x``; None: ``alpha = rank`` (Hu et al.)."""
    targets: tuple[str, ...] = DEFAULT_TARGETS
    """Adapted projections (see :data:`TARGETS`), in forward order."""

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank <= 0:
            raise SpecError("lora.rank", self.rank, "a positive integer")
        alpha = float(self.rank) if self.alpha is None else self.alpha
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not alpha > 0:
            raise SpecError("lora.alpha", alpha, "a positive number")
        object.__setattr__(self, "alpha", float(alpha))
        object.__setattr__(self, "targets", parse_targets(self.targets))

    @property
    def scaling(self) -> float:
        """``alpha / r``, the factor on the adapter's output (Hu et al. 2021, section 4.1)."""
        return self.alpha / self.rank  # type: ignore[operator]

    def matrices(self, model: ModelSpec) -> dict[str, tuple[int, int]]:
        """The adapted weight matrices of one layer: target -> (in, out)."""
        if model.attention != "mha" or model.is_moe or model.mamba_layers or model.mlp_free_layers:
            raise SpecError("lora", "targets", "a dense model with standard attention (LoRA on MLA, "
                            "MoE experts or a hybrid's Mamba-2 blocks is not modelled)")
        mats = {**model.attention_matmuls(), **model.dense_mlp_matmuls()}
        out = {}
        for t in self.targets:
            if _MATRIX[t] not in mats:
                raise SpecError("lora.targets", t, f"one of {','.join(k for k in TARGETS if _MATRIX[k] in mats)} "
                                f"for {model.name} (its MLP has no gate)")
            out[t] = mats[_MATRIX[t]]
        return out

    def adapter_params(self, model: ModelSpec) -> int:
        """Trainable parameters: ``r * (in + out)`` per adapted matrix, over all layers."""
        return model.layers * sum(self.rank * (i + o) for i, o in self.matrices(model).values())

    def trainable_fraction(self, model: ModelSpec) -> float:
        """Adapter parameters / the base model's (active) parameters: the ``lora`` convention's f."""
        return self.adapter_params(model) / model.active_params

    def describe(self) -> str:
        return f"LoRA r={self.rank} alpha={self.alpha:g} on {','.join(self.targets)}"

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "alpha": self.alpha, "targets": list(self.targets)}

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> LoraSpec:
        """From a workload file's ``[lora]`` table (``targets`` a list or a comma-separated string)."""
        unknown = set(body) - {"rank", "alpha", "targets"}
        if unknown:
            raise SpecError(f"lora.{sorted(unknown)[0]}", body[sorted(unknown)[0]], "one of rank, alpha, targets")
        if "rank" not in body:
            raise SpecError("lora.rank", None, "a positive integer (the [lora] table needs one)")
        return cls(rank=body["rank"], alpha=body.get("alpha"), targets=body.get("targets", DEFAULT_TARGETS))
