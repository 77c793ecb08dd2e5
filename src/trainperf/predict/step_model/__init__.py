"""The step model: what one optimizer step costs on the slowest device, one module per component.

* :mod:`.layout` -- the one input: a workload as numbers (:class:`~.layout.Layout`), floats for
  one prediction or numpy arrays for the planner's candidate plans and the fit's rows;
  :mod:`.kernel_physics` fills its kernel part from the stack and the silicon;
* :mod:`.stage` -- the busiest pipeline stage: layers, parameters, checkpointing as numbers;
* :mod:`.compute` -- GEMMs by shape, fused attention, memory-bound ops, kernel launches;
* :mod:`.attention` -- the attention core: one causal kernel, or a context-parallel ring's
  blocks and their merges;
* :mod:`.tensor_parallel` -- TP/SP all-reduces, all-gathers and reduce-scatters, exposed;
* :mod:`.expert_parallel` -- MoE dispatch and combine by the dispatcher's kernels, exposed;
* :mod:`.data_parallel` -- FSDP/ZeRO gathers and reduce-scatters, DP gradient sync, overlapped;
* :mod:`.context_parallel` -- the stack's K/V exchange (ring, all-gather, Ulysses), what of it
  is exposed, and its buffers;
* :mod:`.pipeline` -- the bubble and the stages' sends;
* :mod:`.optimizer` -- the AdamW step;
* :mod:`.memory` -- memory per device by category;
* :mod:`.collectives` -- what every collective costs on the silicon's links;
* :mod:`.step` -- the sum (:func:`~.step.step_costs`).

docs/ARCHITECTURE.md draws how they fit together.
"""

from trainperf.predict.step_model.layout import Layout, layout_of
from trainperf.predict.step_model.step import StepCosts, memory_only, step_costs, step_time_s

__all__ = ["Layout", "StepCosts", "layout_of", "memory_only", "step_costs", "step_time_s"]
