"""LoRA fine-tuning of the reference model with ``peft``'s LoRA layers (Hu et al. 2021).

:func:`apply_lora` freezes every base parameter and wraps the targeted projections with
``peft``'s ``lora.Linear`` (``W x + (alpha / r) B A x``; ``A`` Kaiming-uniform, ``B`` zero, no
dropout), before :func:`trainperf.measure.parallelize.parallelize` runs, so the optimizer (built
from the parameters that require gradients) holds the adapters only.

Composition with torch.distributed (both checked by the tests):

* FSDP2 ``fully_shard`` shards frozen and trainable parameters alike; only the adapters get
  gradients, so only theirs are reduce-scattered.
* DTensor tensor parallel: torch's ``ColwiseParallel``/``RowwiseParallel`` accept only
  ``nn.Linear``, so :func:`lora_tp_plan` rewrites the plan entry of a wrapped projection into
  entries for peft's sub-layers. Column-parallel base (q, k, v, gate, up): ``A`` replicated,
  ``B`` column-parallel (its output is sharded like the base's). Row-parallel base (o, down):
  ``A`` row-parallel, its rank-``r`` output reduced to the base's output layout (an all-reduce
  of ``r`` values per token, or a reduce-scatter under sequence parallel), ``B`` replicated.
  No collective of hidden-size activations is added.

Pipeline stages, activation checkpointing and ``torch.compile`` apply unchanged (the wrappers
live inside the blocks).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.tensor.parallel.style import ParallelStyle

from trainperf.errors import SpecError
from trainperf.specs.lora import LoraSpec


def module_paths(gated_mlp: bool) -> dict[str, str]:
    """Target role -> the reference model's module name inside a block (torchtitan naming)."""
    mlp = {"gate": "feed_forward.w1", "up": "feed_forward.w3", "down": "feed_forward.w2"} if gated_mlp \
        else {"up": "feed_forward.w1", "down": "feed_forward.w2"}
    return {"q": "attention.wq", "k": "attention.wk", "v": "attention.wv", "o": "attention.wo", **mlp}


def peft_available() -> bool:
    try:
        import peft  # noqa: F401
    except ImportError:
        return False
    return True


def apply_lora(model: nn.Module, spec: LoraSpec) -> int:
    """Freeze ``model`` and add peft LoRA adapters on ``spec.targets`` of every block, in place.

    Returns the number of adapter (trainable) parameters, which equals
    ``spec.adapter_params(model.spec)``. Adapters are initialised from torch's global RNG, so
    every rank that built the model from the same seed gets the same adapters.
    """
    try:
        from peft import LoraConfig, inject_adapter_in_model
    except ImportError:
        raise SpecError("lora", f"rank {spec.rank}", "needs the peft package (pip install peft)") from None
    paths = module_paths(model.spec.gated_mlp)
    names = [paths[t] for t in spec.targets]
    for p in model.parameters():
        p.requires_grad_(False)
    pattern = r"layers\.\d+\.(" + "|".join(n.replace(".", r"\.") for n in names) + ")"
    config = LoraConfig(r=spec.rank, lora_alpha=spec.alpha, target_modules=pattern, lora_dropout=0.0,
                        bias="none")
    inject_adapter_in_model(config, model)
    trainable = [p for n, p in model.named_parameters() if p.requires_grad]
    if not trainable or any("lora_" not in n for n, p in model.named_parameters() if p.requires_grad):
        raise SpecError("lora.targets", ",".join(spec.targets), "projections of the reference model")
    return sum(p.numel() for p in trainable)


def is_lora_layer(module: nn.Module) -> bool:
    """A peft LoRA wrapper (``base_layer`` plus ``lora_A``/``lora_B`` dicts)."""
    return hasattr(module, "base_layer") and hasattr(module, "lora_A") and hasattr(module, "lora_B")


class ReplicateParallel(ParallelStyle):
    """A tensor-parallel style (``parallelize_module``) for a small layer kept whole on every rank:
    parameters replicated, the input read as (or redistributed to) ``input_layout``, the output
    left in the layout the op produces (a local tensor when ``use_local_output``)."""

    def __init__(self, input_layout: Any, *, use_local_output: bool) -> None:
        super().__init__()
        self.input_layout = input_layout
        self.use_local_output = use_local_output

    def _apply(self, module: nn.Module, device_mesh: Any) -> nn.Module:
        from torch.distributed.tensor import DTensor, distribute_module

        layout = (self.input_layout,)

        def prepare_input(mod: nn.Module, inputs: tuple, mesh: Any) -> tuple:
            x = inputs[0]
            if not isinstance(x, DTensor):
                x = DTensor.from_local(x, mesh, layout, run_check=False)
            elif tuple(x.placements) != layout:
                x = x.redistribute(placements=layout)
            return (x, *inputs[1:])

        def prepare_output(mod: nn.Module, out: Any, mesh: Any) -> Any:
            return out.to_local() if self.use_local_output else out

        return distribute_module(module, device_mesh, None, prepare_input, prepare_output)


def lora_tp_plan(block: nn.Module, plan: dict[str, Any]) -> dict[str, Any]:
    """``plan`` (block-relative names -> styles) with each LoRA-wrapped projection's entry split
    into entries for its base layer and adapters (see the module docstring). No-op without LoRA."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    out: dict[str, Any] = {}
    for name, style in plan.items():
        module = block.get_submodule(name)
        if not is_lora_layer(module):
            out[name] = style
            continue
        out[f"{name}.base_layer"] = style
        for adapter in module.lora_A:
            a, b = f"{name}.lora_A.{adapter}", f"{name}.lora_B.{adapter}"
            if isinstance(style, ColwiseParallel):
                out[a] = ReplicateParallel(Replicate(), use_local_output=False)
                out[b] = ColwiseParallel(input_layouts=Replicate())
            elif isinstance(style, RowwiseParallel):
                act = style.output_layouts[0]
                out[a] = RowwiseParallel(output_layouts=act, use_local_output=False)
                out[b] = ReplicateParallel(act, use_local_output=True)
            else:  # pragma: no cover - the bench's plan uses only these two for projections
                raise SpecError("parallel.tp", type(style).__name__, "ColwiseParallel or RowwiseParallel for LoRA")
    return out


def adapter_parameters(model: nn.Module) -> dict[str, torch.nn.Parameter]:
    """The trainable parameters by name (the adapters, after :func:`apply_lora`)."""
    return {n: p for n, p in model.named_parameters() if p.requires_grad}
