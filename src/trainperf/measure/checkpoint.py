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


def save(directory: str | Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> Path:
    """Save model + optimizer state after ``step`` (collective: every rank must call it)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    path = Path(directory) / f"step-{step}"
    model_sd, optim_sd = get_state_dict(model, optimizer, options=_options())
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*assuming the intent is to save in a single process.*")
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(path))
    _barrier()
    if _rank() == 0:
        write_manifest(path, step)  # what every rank wrote, signed; then the checkpoint is complete
        from trainperf.locked_update import write_replace

        write_replace(path / DONE, f"{step}\n".encode())
    _barrier()
    return path


def load(directory: str | Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Load the state saved after ``step`` into ``model`` and ``optimizer`` in place."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    path = Path(directory) / f"step-{step}"
    verify(path, step)  # before torch unpickles its metadata: trainperf wrote it, and nothing changed since
    model_sd, optim_sd = get_state_dict(model, optimizer, options=_options())
    state = {"model": model_sd, "optim": optim_sd}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*assuming the intent is to load in a single process.*")
        dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"],
                   options=_options())


def _options():
    """Flattened optimizer state: every entry (param-group settings too) keyed by parameter name.

    DCP saves non-tensor values once, as if every rank held the same; under pipeline parallel
    each rank's optimizer covers different parameters, so its param groups must be per name.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=True)
