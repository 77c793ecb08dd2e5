"""Start the bench's processes: ``torchrun`` for one or several nodes, or an sbatch script.

``torchrun`` runs as a child in its own session (process group), so Ctrl-C and failures are
handled here deliberately: on Ctrl-C the launcher sends SIGINT to torchrun (which stops its
workers), waits a grace period, then kills the whole process group; nothing is left running.
When a worker dies, torchrun's agent stops the others and exits non-zero; the run record keeps
every finished step and :mod:`trainperf.measure.results` marks the summary interrupted.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from trainperf.errors import SpecError

GRACE_S = 20.0
DEFAULT_RDZV_PORT = 29500


@dataclass(frozen=True)
class LaunchSpec:
    """How many processes where: ``nproc_per_node`` on each of ``nnodes`` nodes."""

    nproc_per_node: int = 1
    nnodes: int = 1
    node_rank: int | None = None
    """This node's rank (static rendezvous); with c10d rendezvous torchrun assigns it."""
    rdzv_endpoint: str | None = None
    """``host:port`` of the c10d rendezvous (the head node); required for ``nnodes > 1``."""
    rdzv_id: str = "trainperf"
    """Job id shared by every node of one run."""
    own_process: bool = False
    """Run even a single process under torchrun, in a process of its own (its memory high-water
    mark is then its own: ``trainperf sweep --compare-lora`` compares peak memory)."""

    def __post_init__(self) -> None:
        for name in ("nproc_per_node", "nnodes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise SpecError(f"--{name.replace('_', '-')}", v, "a positive integer")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise SpecError("--rdzv-endpoint", None, "host:port of the head node when --nnodes > 1")
        if self.rdzv_endpoint and ":" not in self.rdzv_endpoint:
            raise SpecError("--rdzv-endpoint", self.rdzv_endpoint, "host:port, e.g. 10.0.0.1:29500")
        if self.node_rank is not None and not 0 <= self.node_rank < self.nnodes:
            raise SpecError("--node-rank", self.node_rank, f"between 0 and nnodes-1={self.nnodes - 1}")

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    @property
    def distributed(self) -> bool:
        return self.world_size > 1 or self.rdzv_endpoint is not None or self.own_process


def torchrun_command(config_path: str, spec: LaunchSpec, python: str | None = None) -> list[str]:
    """The ``torchrun`` command line that runs the trainer on this node."""
    cmd = [python or sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={spec.nproc_per_node}"]
    if spec.rdzv_endpoint is None:
        cmd.append("--standalone")  # local c10d rendezvous on a free port
    else:
        cmd += [f"--nnodes={spec.nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={spec.rdzv_endpoint}",
                f"--rdzv-id={spec.rdzv_id}"]
        if spec.node_rank is not None:
            cmd.append(f"--node-rank={spec.node_rank}")
    cmd += ["--max-restarts=0", "-m", "trainperf.measure.trainer", config_path]
    return cmd


def run_torchrun(cmd: Sequence[str], env: dict[str, str] | None = None) -> int:
    """Run ``cmd`` to completion; Ctrl-C stops it and every process it started.

    Returns torchrun's exit code; re-raises KeyboardInterrupt after cleaning up.
    """
    proc = subprocess.Popen(list(cmd), env={**os.environ, **(env or {})}, start_new_session=True)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        _stop(proc)
        raise
    finally:
        if proc.poll() is None:  # pragma: no cover - only on an unexpected exception
            _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """SIGINT to torchrun (it forwards SIGTERM to its workers), then SIGKILL the whole group."""
    try:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:  # pragma: no cover
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=GRACE_S)


# --------------------------------------------------------------------------- slurm
@dataclass(frozen=True)
class SlurmSpec:
    """An sbatch job: one task per node, each running torchrun for the node's devices."""

    nodes: int
    gpus_per_node: int
    """Processes per node (GPUs; 1 for a CPU node)."""
    config_path: str
    """The BenchConfig JSON every node reads (on a shared filesystem)."""
    out_dir: str
    job_name: str = "trainperf-bench"
    time_limit: str = "00:30:00"
    partition: str | None = None
    account: str | None = None
    port: int = DEFAULT_RDZV_PORT
    cpu: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.nodes, bool) or not isinstance(self.nodes, int) or self.nodes < 1:
            raise SpecError("--nodes", self.nodes, "a positive integer")


def sbatch_script(spec: SlurmSpec, python: str = "python") -> str:
    """The sbatch script text: ``srun torchrun`` with c10d rendezvous on the job's first node."""
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={spec.job_name}",
        f"#SBATCH --nodes={spec.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --time={spec.time_limit}",
        f"#SBATCH --output={spec.out_dir}/slurm-%j.out",
    ]
    if not spec.cpu:
        lines.append(f"#SBATCH --gpus-per-node={spec.gpus_per_node}")
    if spec.partition:
        lines.append(f"#SBATCH --partition={spec.partition}")
    if spec.account:
        lines.append(f"#SBATCH --account={spec.account}")
    lines += [
        "# Written by `trainperf slurm`; submit with `sbatch` (or re-run with --submit).",
        "set -euo pipefail",
        'HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        f"RDZV_PORT={spec.port}",
        f"srun --kill-on-bad-exit=1 {python} -m torch.distributed.run \\",
        "    --nnodes=\"$SLURM_NNODES\" "
        f"--nproc-per-node={spec.gpus_per_node} --max-restarts=0 \\",
        "    --rdzv-backend=c10d --rdzv-endpoint=\"$HEAD_NODE:$RDZV_PORT\" --rdzv-id=\"$SLURM_JOB_ID\" \\",
        f"    -m trainperf.measure.trainer {q(spec.config_path)} || status=$?",
        "# Summary from the run record (also after a failure: the finished steps are kept).",
        f"{python} -m trainperf.measure.results {q(spec.out_dir)} --exit-code \"${{status:-0}}\"",
        'exit "${status:-0}"',
        "",
    ]
    return "\n".join(lines)
