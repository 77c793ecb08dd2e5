"""Float8 training of the bench's linears with torchao, as torchtitan does.

torchtitan's ``Float8Converter`` (``torchtitan/components/quantization/float8.py``) swaps every
``nn.Linear`` for torchao's ``Float8Linear`` (``torchao.float8.convert_to_float8_training``)
before any parallelism is applied, with the recipe's config
(``Float8LinearConfig.from_recipe_name``):

* ``tensorwise`` -- one dynamic scale per tensor for inputs, weights and gradients (e4m3
  forward, e5m2 for the gradients);
* ``rowwise`` -- one scale per row (e4m3 throughout), more accurate, slower without compile.

Left in 16-bit: the LM head (``output``: torchtitan skips it; its logits feed the loss) and
every linear whose dimensions are not multiples of 16 (``torch._scaled_mm``'s requirement;
an MoE router's gate over 8 experts, for instance). The routed experts' grouped GEMMs stay bf16
(torchao's float8 MoE training is a separate prototype). Everything else runs in the run's
16-bit dtype (bf16; fp32 on a CPU without native bf16, where bf16 is emulated).

torchao is an optional dependency (``pip install 'trainperf[fp8]'``). On a CPU the fp8 matmuls
run through ``torch._scaled_mm``'s reference kernel: right for checking correctness, not speed.
On CUDA they need fp8 tensor cores (compute capability 8.9 or later: Ada, Hopper, Blackwell).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from trainperf.errors import SpecError

RECIPES: tuple[str, ...] = ("tensorwise", "rowwise")
"""The torchao recipes the bench trains with (the predictor also knows Transformer Engine's)."""
DEFAULT_RECIPE = "tensorwise"
"""torchtitan's default ``float8.recipe_name``."""
SKIPPED_BY_NAME: tuple[str, ...] = ("output",)
"""Linears kept in 16-bit by name (torchtitan's ``filter_fqns`` default)."""
MIN_CUDA_CAPABILITY = (8, 9)


def check_recipe(recipe: str | None) -> None:
    """Raise SpecError for a recipe the bench cannot train with."""
    if recipe is not None and recipe not in RECIPES:
        raise SpecError("training.fp8_recipe", recipe,
                        f"{' or '.join(RECIPES)} for the bench (torchao's float8 training recipes)")


def torchao_version() -> str | None:
    """torchao's version, or None when it is not installed (checked without importing it)."""
    from importlib import metadata

    try:
        return metadata.version("torchao")
    except metadata.PackageNotFoundError:
        return None


def check_available(device_type: str) -> None:
    """Raise SpecError when fp8 training cannot run here: no torchao, a torch without
    ``_scaled_mm``, or a GPU without fp8 tensor cores."""
    if torchao_version() is None:
        raise SpecError("--fp8-recipe", "given", "an installed torchao (pip install 'trainperf[fp8]' or "
                        "pip install torchao) for Float8 training")
    import torch

    if not hasattr(torch, "_scaled_mm"):
        raise SpecError("--fp8-recipe", "given", f"a torch with torch._scaled_mm (this is {torch.__version__})")
    if device_type == "cuda":
        cap = torch.cuda.get_device_capability()
        if cap < MIN_CUDA_CAPABILITY and not torch.version.hip:
            raise SpecError("--fp8-recipe", "given", f"a GPU with fp8 tensor cores (compute capability >= 8.9; "
                            f"{torch.cuda.get_device_name()} is {cap[0]}.{cap[1]})")


@dataclass
class Fp8Conversion:
    """What :func:`convert` did (the summary and ``summary.json`` list it)."""

    recipe: str
    converted: list[str] = field(default_factory=list)
    """Names of the linears now ``Float8Linear``."""
    kept: dict[str, str] = field(default_factory=dict)
    """Linears left in 16-bit -> why."""
    torchao: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"recipe": self.recipe, "converted_linears": len(self.converted), "kept_16bit": self.kept,
                "torchao": self.torchao}

    def describe(self) -> str:
        kept = ", ".join(group_names(self.kept)) or "none"
        return (f"Float8 {self.recipe} (torchao {self.torchao}): {len(self.converted)} linears converted; "
                f"kept in 16-bit: {kept}")


def group_names(kept: dict[str, str]) -> list[str]:
    """``layers.1.moe.router.gate``, ``layers.2.moe.router.gate`` (same reason) ->
    ``layers.*.moe.router.gate x2 (reason)``."""
    import re

    groups: dict[tuple[str, str], int] = {}
    for name, why in kept.items():
        key = (re.sub(r"^layers\.\d+\.", "layers.*.", name), why)
        groups[key] = groups.get(key, 0) + 1
    return [f"{name}{f' x{n}' if n > 1 else ''} ({why})" for (name, why), n in groups.items()]


@contextlib.contextmanager
def _quiet_import() -> Iterator[None]:
    """Importing torchao logs that it skips its CUDA extensions (on purpose here) and torch warns
    about an enum torchao registers: neither concerns a user of the bench."""
    names = ("torchao", "torch.utils._pytree")
    levels = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.ERROR)
    try:
        yield
    finally:
        for n, level in levels.items():
            logging.getLogger(n).setLevel(level)


def _why_kept(name: str, module: Any) -> str | None:
    if name in SKIPPED_BY_NAME:
        return "the LM head, as torchtitan"
    if module.in_features % 16 or module.out_features % 16:
        return f"{module.in_features}x{module.out_features} not multiples of 16"
    return None


def convert(model: Any, recipe: str, device_type: str) -> Fp8Conversion:
    """Swap ``model``'s linears for ``Float8Linear`` with ``recipe``'s config, in place."""
    import torch

    if device_type == "cpu":
        # torchao's compiled CUDA kernels cannot load on a CPU build of torch; fp8 training needs none.
        os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")
    with _quiet_import():
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    result = Fp8Conversion(recipe=recipe, torchao=torchao_version() or "")
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            why = _why_kept(name, module)
            if why:
                result.kept[name] = why
            else:
                result.converted.append(name)
    config = Float8LinearConfig.from_recipe_name(recipe)
    convert_to_float8_training(model, config=config,
                               module_filter_fn=lambda m, fqn: _why_kept(fqn, m) is None)
    return result
