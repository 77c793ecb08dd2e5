"""Named FLOP conventions, all derived from the exact breakdown of :mod:`.flops`.

Published MFU figures for the same run disagree by up to ~19% because they count model FLOPs
differently. Each convention here is named after who uses it, and says what it counts.
All return *training* model FLOPs (forward + backward) per token.

| name              | counts                                                                  |
|-------------------|-------------------------------------------------------------------------|
| exact             | 3 x forward matmuls, causal mask counted exactly (S(S+1)/2 pairs)       |
| megatron          | 3 x forward matmuls incl. LM head, excl. embedding; attention halved    |
| palm              | 6*N (N incl. LM head, excl. input embedding) + 12*L*H*Q*T, no halving   |
| torchtitan-2024   | 6*N (N = every parameter, embedding included) + 12*L*H*Q*T              |
| nemo-legacy       | 12*L*h^2*(1+G/A+S/h) + 18*L*F*h + 6*V*h (3 x forward, attention full)   |
| 6n                | 6*N, N = every (active) parameter; no attention term                    |
| llm.c             | 6*N (N = every parameter, embeddings included) + 6*L*H*Q*T: Kaplan et   |
|                   | al.'s attention term, half of PaLM's                                    |
| lora              | frozen base: forward + activation gradients (4*N, N as palm) + 6 per    |
|                   | adapter parameter (f x active params), plus the attention term          |

Sources: Megatron-LM ``num_floating_point_operations`` (training.py, causal halving since
2024/25; MaxText's ``calculate_tflops_training_per_device`` likewise); PaLM (Chowdhery et al.
2022) appendix B; torchtitan ``get_num_flop_per_token`` (2024 versions counted the embedding,
later ones exclude it, which is the ``palm`` row); NVIDIA DGX Cloud benchmarking recipe for
MaxText Llama-2-70B (2024); Kaplan et al. 2020 for 6N and, section 2.1 (forward 2N + 2 n_layer
n_ctx d_attn), for llm.c's ``gpt2_estimate_mfu`` (``6 * N + 6 * L * C * T``, N every parameter); the LoRA correction from a public forum
thread on a JAX LoRA fine-tune of Llama 3.1 405B on 8x MI300X (the base runs no weight gradient).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainperf.accounting.flops import forward_flops
from trainperf.errors import SpecError, UnknownNameError
from trainperf.specs.model import ModelSpec

if TYPE_CHECKING:
    from trainperf.specs.lora import LoraSpec


@dataclass(frozen=True)
class Convention:
    """A FLOP-counting convention: its name, what it counts and who uses it."""

    name: str
    description: str
    used_by: str
    attention_mask: str
    """Mask assumption used for the attention term and for recomputation (HFU)."""


CONVENTIONS: dict[str, Convention] = {
    c.name: c for c in (
        Convention("megatron", "matmul FLOPs incl. LM head, excl. input embedding; causal attention halved",
                   "Megatron-LM, MaxText, NeMo (after Aug 2025)", "causal-half"),
        Convention("palm", "6*N (N incl. LM head, excl. input embedding) + 12*L*H*Q*T, no causal halving",
                   "PaLM appendix B, torchtitan (2025), LLM Foundry, nanoGPT", "full"),
        Convention("torchtitan-2024", "6*N (N = all parameters incl. input embedding) + 12*L*H*Q*T",
                   "torchtitan performance.md (2024)", "full"),
        Convention("nemo-legacy", "12*L*h^2*(1+G/A+S/h) + 18*L*F*h + 6*V*h per token",
                   "NVIDIA DGX benchmarking recipes, NeMo before Aug 2025", "full"),
        Convention("6n", "6*N, N = all (active) parameters; attention ignored",
                   "quick estimates (Kaplan et al. 2020)", "full"),
        Convention("llm.c", "6*N (N = all parameters incl. embeddings) + 6*L*H*Q*T (Kaplan et al. 2020 sec. 2.1)",
                   "llm.c (gpt2_estimate_mfu)", "causal-half"),
        Convention("lora", "frozen base forward + activation-gradient (4*N, N as palm) + 6 per adapter "
                   "parameter, + attention term", "LoRA fine-tuning (no weight gradient in the frozen base)", "full"),
        Convention("exact", "3 x forward matmuls, causal mask counted exactly", "trainperf", "causal"),
    )
}
DEFAULT_CONVENTION = "megatron"
"""The convention of a full training run when none is named."""


def run_convention(convention: str | None, lora: bool) -> str:
    """The convention a run's figures are counted with: the one named, else ``lora`` for a LoRA
    fine-tune (its frozen base computes no weight gradients: 6 FLOPs per parameter would count a
    third of its base work twice over) and :data:`DEFAULT_CONVENTION` for any other run. The bench,
    ``predict`` and ``report`` all resolve an unnamed convention here, so that a run's own summary
    and the prediction made from its ``workload.toml`` count the same FLOPs."""
    if convention is not None:
        get_convention(convention)
        return str(convention).lower()
    return "lora" if lora else DEFAULT_CONVENTION


def lora_counted_in_full_note(name: str, lora: bool, convention: str) -> str | None:
    """For a LoRA fine-tune whose figures are counted under a full-training ``convention``: that
    its MFU is then above what it ran (the frozen base's weight gradients counted but not
    computed), and which convention counts what it ran; None otherwise."""
    if not lora or convention == "lora":
        return None
    return (f"{name} is a LoRA fine-tune: {convention} counts weight gradients its frozen base does not compute, "
            "so its MFU is above what it ran; --convention lora counts what it ran (the bench's own figure)")


def get_convention(name: str) -> Convention:
    key = str(name).lower()
    if key not in CONVENTIONS:
        raise UnknownNameError("convention", name, CONVENTIONS)
    return CONVENTIONS[key]


def palm_params(model: ModelSpec) -> int:
    """PaLM's N: every active parameter except the input embedding; the LM head is counted, also
    when it is tied to the embedding (its matmul runs either way)."""
    head = model.vocab * model.hidden if model.tied_embeddings else 0
    return model.active_params - model.embedding_params + head


def attention_term_per_token(model: ModelSpec, seq_len: int) -> float:
    """PaLM's 12*L*H*Q*T per token: 3 x forward attention core, no causal halving.

    Generalised to ``6 * heads * (qk_head_dim + v_head_dim) * context`` per layer, which is
    12*H*Q*T when query/key and value heads have the same width; windowed layers use the window.
    """
    return 3.0 * forward_flops(model, seq_len, "full").attention_core / seq_len


def _exact(model: ModelSpec, seq_len: int, lora_fraction: float) -> float:
    return 3.0 * forward_flops(model, seq_len, "causal").matmul / seq_len


def _megatron(model: ModelSpec, seq_len: int, lora_fraction: float) -> float:
    return 3.0 * forward_flops(model, seq_len, "causal-half").matmul / seq_len


def _nemo_legacy(model: ModelSpec, seq_len: int, lora_fraction: float) -> float:
    return 3.0 * forward_flops(model, seq_len, "full").matmul / seq_len


def _palm(model: ModelSpec, seq_len: int, lora_fraction: float) -> float:
    return 6.0 * palm_params(model) + attention_term_per_token(model, seq_len)


def _torchtitan_2024(model: ModelSpec, seq_len: int, lora_fraction: float) -> float:
    return 6.0 * model.active_params + attention_term_per_token(model, seq_len)


def _six_n(model: ModelSpec, seq_len: int, lora_fraction: float) -> float:
    return 6.0 * model.active_params


def _llmc(model: ModelSpec, seq_len: int, lora_fraction: float) -> float:
    """llm.c's ``gpt2_estimate_mfu``: ``6 * N + 6 * L * C * T`` with N every parameter (its
    comment: embeddings, norms and biases over-counted) and Kaplan et al.'s attention term, half
    of PaLM's ``12 * L * H * Q * T``."""
    return 6.0 * model.active_params + 0.5 * attention_term_per_token(model, seq_len)


def _lora(model: ModelSpec, seq_len: int, lora_fraction: float) -> float:
    """PaLM's count with the frozen base's weight-gradient matmuls removed, plus the adapters.

    The frozen base runs its forward (2 FLOPs per matmul weight) and the activation gradient
    (2 more); it skips the weight gradient (the correction made in the forum thread on a 405B
LoRA fine-tune on MI300X). Its N is PaLM's: every
    matmul weight incl. the LM head, not the input embedding (a gather, no matmul). The
    adapters (``lora_fraction`` x the active parameters, see
    :meth:`trainperf.specs.lora.LoraSpec.trainable_fraction`) do all three passes, 6 FLOPs per
    parameter, and the attention core (no weights) costs 3x its forward as in training.

    This short form counts every activation gradient; autograd computes none upstream of the
    first trainable parameter (about 1/(4L) of the count). Given the adapters (``lora=``),
    :func:`trainperf.accounting.lora.lora_flops_per_token` counts exactly what runs.
    """
    return (4.0 * palm_params(model) + 6.0 * lora_fraction * model.active_params
            + attention_term_per_token(model, seq_len))


_FUNCS: dict[str, Callable[[ModelSpec, int, float], float]] = {
    "exact": _exact, "megatron": _megatron, "nemo-legacy": _nemo_legacy, "palm": _palm,
    "torchtitan-2024": _torchtitan_2024, "6n": _six_n, "lora": _lora, "llm.c": _llmc,
}


def model_flops_per_token(model: ModelSpec, seq_len: int, convention: str = DEFAULT_CONVENTION,
                          lora_fraction: float = 0.0, lora: LoraSpec | None = None) -> float:
    """Training model FLOPs per token under ``convention`` (forward + backward, no recompute).

    ``lora_fraction`` is the trainable (adapter) parameters as a fraction of the base model's,
    used only by the ``lora`` convention. ``lora`` (the adapters themselves) makes the ``lora``
    convention count per matmul, as autograd runs the step
    (:func:`trainperf.accounting.lora.lora_flops_per_token`); it replaces ``lora_fraction``.
    """
    conv = get_convention(convention)
    if not 0.0 <= lora_fraction <= 1.0:
        raise SpecError("lora_fraction", lora_fraction, "a fraction between 0 and 1")
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0:
        raise SpecError("seq_len", seq_len, "a positive integer")
    if conv.name == "lora" and lora is not None:
        from trainperf.accounting.lora import lora_flops_per_token

        return lora_flops_per_token(model, seq_len, lora)
    return _counted(conv.name, model, seq_len, lora_fraction)


@functools.lru_cache(maxsize=512)
def _counted(convention: str, model: ModelSpec, seq_len: int, lora_fraction: float) -> float:
    """:data:`_FUNCS`' count, kept per (convention, model, length): the count is a pure function
    of them, and a prediction or a planner's rerank asks for the same one many times."""
    return _FUNCS[convention](model, seq_len, lora_fraction)


def recompute_flops_per_token(model: ModelSpec, seq_len: int, policy: str,
                              convention: str = DEFAULT_CONVENTION, pipeline_chunks: int = 1) -> float:
    """Forward FLOPs per token redone by activation checkpointing, with the convention's mask.

    ``selective`` redoes the attention core (Korthikanti et al. 2022); ``full`` the forward of
    every block (not the LM head); every other policy (``full:K``, ``selective-op``, MaxText's
    remat policies) as :mod:`trainperf.accounting.recompute` derives it from the per-matrix
    breakdown. ``pipeline_chunks`` (pp * vpp) matters only for ``full:K`` (K layers per chunk).
    """
    mask = get_convention(convention).attention_mask
    return _recompute_per_token(model, seq_len, policy, mask, pipeline_chunks)


@functools.lru_cache(maxsize=4096)
def _recompute_per_token(model: ModelSpec, seq_len: int, policy: str, mask: str, pipeline_chunks: int) -> float:
    # Pure in its (hashable, frozen) arguments; cached because the predictor and the planner's
    # re-rank call it once per prediction with the same model.
    from trainperf.accounting.recompute import recompute_flops

    return recompute_flops(model, seq_len, policy, mask, pipeline_chunks) / seq_len


def hardware_flops_per_token(model: ModelSpec, seq_len: int, policy: str,
                             convention: str = DEFAULT_CONVENTION, lora_fraction: float = 0.0,
                             pipeline_chunks: int = 1, lora: LoraSpec | None = None) -> float:
    """Model FLOPs plus recomputation: the numerator of HFU."""
    return (model_flops_per_token(model, seq_len, convention, lora_fraction, lora)
            + recompute_flops_per_token(model, seq_len, policy, convention, pipeline_chunks))


def nemo_legacy_terms(model: ModelSpec, seq_len: int) -> dict[str, float]:
    """The three per-token terms of the NeMo-legacy formula, as the DGX recipe writes them.

    attention = 12*L*h^2*(1 + G/A + S/h), mlp = 18*L*F*h, embedding = 6*V*h (really the LM
    head). Exact integers for the Llama shapes the recipe targets; for other shapes they are
    the literal formula, which :func:`model_flops_per_token` generalises via the breakdown.
    """
    assert model.kv_heads is not None  # ModelSpec.__post_init__ resolves it
    L, h, a, g, f, v = model.layers, model.hidden, model.heads, model.kv_heads, model.ffn_hidden, model.vocab
    # Integer arithmetic so the recipe's digits come out exactly: 12*L*h^2*(1+G/A+S/h)
    attention = (12 * L * h * h * a * h + 12 * L * h * h * g * h + 12 * L * h * h * seq_len * a) / (a * h)
    return {"attention": attention, "mlp": float(18 * L * f * h), "embedding": float(6 * v * h)}


def all_conventions(model: ModelSpec, seq_len: int, lora_fraction: float = 0.0) -> dict[str, float]:
    """Per-token training FLOPs under every convention, in table order."""
    return {name: model_flops_per_token(model, seq_len, name, lora_fraction) for name in CONVENTIONS}
