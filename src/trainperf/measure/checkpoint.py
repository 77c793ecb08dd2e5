"""Checkpoint and resume with ``torch.distributed.checkpoint`` (DCP).

Layout: ``CHECKPOINT_DIR/step-<N>/`` holds the DCP shards of the model and optimizer state after
step ``N`` (every rank writes its own shards; works with FSDP2/DTensor and in one process
without a process group). A directory is complete once its ``.done`` marker exists, written by
rank 0 after ``dcp.save`` returns on every rank, so a run killed mid-save resumes from the
previous complete step. Nothing else needs saving: the data order and the learning rate are
functions of the step index (see :mod:`trainperf.measure.data`, :mod:`trainperf.measure.trainer`).

Before the ``.done`` marker, rank 0 writes a signed manifest of every file the save wrote
(:mod:`trainperf.measure.checkpoint_manifest`), and :func:`load` verifies it before torch opens
anything: DCP reads its metadata with ``pickle``, so a checkpoint trainperf did not write, or
one changed since, is refused in one line rather than unpickled.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainperf.measure.checkpoint_manifest import DONE, latest_complete_step, verify, write_manifest


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_initialized() else 0


def latest_step(directory: str | Path) -> int | None:
    """The highest step with a complete checkpoint under ``directory``, or None."""
    return latest_complete_step(directory)


EXPERTS = ".moe.experts."
"""Where the routed experts' names start (``layers.N.moe.experts.w1``, and the optimizer's
``state.layers.N.moe.experts.w1.exp_avg``...)."""


def rename_experts(state: dict[str, Any], tag: str | None, *, back: bool = False) -> dict[str, Any]:
    """``state`` with the routed experts' keys made this expert-parallel rank's own (``tag``,
    e.g. ``ep1of2``: ``layers.1.moe.experts_ep1of2.w1``), or back (``back=True``).

    Under expert parallel every rank holds *different* experts under the *same* names; DCP takes
    tensors of one name on several ranks for shards of one tensor (or copies of it) and would
    keep one rank's experts. Named per rank, each expert group is saved and loaded as its own
    tensors (by the ranks that hold it), so a checkpoint resumes under the same ``ep`` layout.
    """
    if not tag:
        return state
    old, new = (f".moe.experts_{tag}.", EXPERTS) if back else (EXPERTS, f".moe.experts_{tag}.")
    return {k.replace(old, new): v for k, v in state.items()}


def save(directory: str | Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
         expert_tag: str | None = None) -> Path:
    """Save model + optimizer state after ``step`` (collective: every rank must call it);
    ``expert_tag``: this rank's experts' own names under expert parallel (:func:`rename_experts`)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    path = Path(directory) / f"step-{step}"
    model_sd, optim_sd = get_state_dict(model, optimizer, options=_options())
    state = {"model": rename_experts(model_sd, expert_tag), "optim": rename_experts(optim_sd, expert_tag)}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*assuming the intent is to save in a single process.*")
        dcp.save(state, checkpoint_id=str(path))
    _barrier()
    if _rank() == 0:
        write_manifest(path, step)  # what every rank wrote, signed; then the checkpoint is complete
        from trainperf.locked_update import write_replace

        write_replace(path / DONE, f"{step}\n".encode())
    _barrier()
    return path


def load(directory: str | Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
         expert_tag: str | None = None) -> None:
    """Load the state saved after ``step`` into ``model`` and ``optimizer`` in place
    (``expert_tag`` as :func:`save` was given it)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    path = Path(directory) / f"step-{step}"
    verify(path, step)  # before torch unpickles its metadata: trainperf wrote it, and nothing changed since
    model_sd, optim_sd = get_state_dict(model, optimizer, options=_options())
    state = {"model": rename_experts(model_sd, expert_tag), "optim": rename_experts(optim_sd, expert_tag)}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*assuming the intent is to load in a single process.*")
        dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=rename_experts(state["model"], expert_tag, back=True),
                   optim_state_dict=rename_experts(state["optim"], expert_tag, back=True), options=_options())


def _options():
    """Flattened optimizer state: every entry (param-group settings too) keyed by parameter name.

    DCP saves non-tensor values once, as if every rank held the same; under pipeline parallel
    each rank's optimizer covers different parameters, so its param groups must be per name.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=True)
