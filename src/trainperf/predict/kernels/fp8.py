"""fp8 recipes: what scaling and quantisation add to an fp8 GEMM.

``recipe_gemm_factor`` is the time of an fp8 GEMM including its scaling/quantisation under a
recipe over the pre-quantised fp8 kernel (whose speed is ``gemm.peak_fraction(silicon, "fp8")``
and the shape law), from Transformer Engine's GEMM profiling (12 GEMMs of a 5B layer: fprop,
dgrad and wgrad of QKV, attention out, MLP up and down; autocast vs --pre-quantize):

* tensorwise: one scale per tensor computed from the current amax (TE Float8CurrentScaling,
  torchao tensorwise);
* delayed: scale from an amax history (TE DelayedScaling): no amax pass before the GEMM;
* blockwise: 1x128 / 128x128 blocks (TE Float8BlockScaling, DeepSeek-V3 style);
* rowwise: one scale per row (torchao rowwise), derived from torchao's end-to-end Llama3-8B
  speedups (no GEMM-level profile exists);
* mxfp8: 32-element blocks with e8m0 scales, Blackwell and CDNA4 only.

``e2e_checks`` lists the end-to-end fp8-vs-bf16 speedups (torchao Llama3-8B, torchtitan) with
the factor each implies, for checking a step model. Data and fallbacks: docs/KERNELS.md.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from trainperf.errors import SpecError, UnknownNameError
from trainperf.predict.kernels._params import check_silicon, params, source_text

RECIPES = ("tensorwise", "rowwise", "delayed", "blockwise", "mxfp8")


@cache
def recipe_gemm_factor(silicon: str, recipe: str) -> float:
    """Time of an fp8 GEMM including its scaling/quantisation under ``recipe`` (tensorwise |
    rowwise | delayed | blockwise | mxfp8) relative to the pre-quantised fp8 kernel; >= 1."""
    check_silicon(silicon)
    if recipe not in RECIPES:
        raise UnknownNameError("fp8 recipe", recipe, RECIPES)
    table = params()["fp8"].get(silicon)
    if table is None and silicon == "cpu":
        # A CPU has no fp8 units: its fp8 peak is the calibrated rate of torch._scaled_mm itself
        # (trainperf calibrate / the bench), so no factor on top of it (the recipes' casts are
        # not measured there).
        return 1.0
    if table is None:
        raise SpecError("training.fp8_recipe", recipe,
                        f"none: silicon {silicon!r} has no fp8 tensor/matrix cores (no fp8 peak in the catalog)")
    if recipe not in table["recipes"]:
        raise SpecError("training.fp8_recipe", recipe, f"one {silicon} silicon runs ({silicon} has no MX-format "
                        f"cores): {', '.join(sorted(table['recipes']))}")
    return table["recipes"][recipe]["value"]


def e2e_checks(silicon: str) -> list[dict[str, Any]]:
    """End-to-end fp8 (and MXFP8) vs bf16 speedups measured on ``silicon``, each with the GEMM
    factor it implies under the module's step decomposition; empty where none was measured."""
    check_silicon(silicon)
    table = params()["fp8"].get(silicon)
    if table is None:
        return []
    return [{"recipe": c["recipe"], "speedup": c["speedup"], "implied_factor": c["implied_factor"],
             "source": source_text(c)} for c in table["e2e_checks"]]
