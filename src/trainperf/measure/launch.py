"""The bench's command lines: torchrun's arguments for one or several nodes, or an sbatch script.

The launcher runs torchrun with them in its own process (:mod:`trainperf.measure.agent`); the
sbatch script runs the same on each node of a Slurm job, where stop signals reach every process
of the job step, which finishes its step and stops (:func:`sbatch_script` explains the timings).
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass

from trainperf.errors import SpecError
from trainperf.measure.limits import check_bound
from trainperf.measure.stop import DEFAULT_GRACE_S
from trainperf.specs.bounds import BENCH_NNODES, BENCH_NPROC, Bound

DEFAULT_RDZV_PORT = 29500
SLURM_SIGNAL_MARGIN_S = 30
"""Seconds beyond the stop grace that the job's time-limit signal comes early: torchrun's and
the script's own exit, and the summary (``#SBATCH --signal=TERM@<grace + margin>``)."""


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
        check_bound("--nproc", self.nproc_per_node, BENCH_NPROC)
        check_bound("--nnodes", self.nnodes, BENCH_NNODES)
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


def torchrun_args(config_path: str, spec: LaunchSpec) -> list[str]:
    """torchrun's arguments (what follows ``torchrun``) for the trainer on this node."""
    args = [f"--nproc-per-node={spec.nproc_per_node}"]
    if spec.rdzv_endpoint is None:
        args.append("--standalone")  # local c10d rendezvous on a free port
    else:
        args += [f"--nnodes={spec.nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={spec.rdzv_endpoint}",
                 f"--rdzv-id={spec.rdzv_id}"]
        if spec.node_rank is not None:
            args.append(f"--node-rank={spec.node_rank}")
    return [*args, "--max-restarts=0", "-m", "trainperf.measure.trainer", config_path]


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
    stop_grace_s: float = DEFAULT_GRACE_S
    """Seconds a stopped worker's step in progress may take (``bench --stop-grace``)."""

    def __post_init__(self) -> None:
        check_bound("--nodes", self.nodes, BENCH_NNODES)
        check_bound("--gpus-per-node", self.gpus_per_node, BENCH_NPROC)
        check_bound("--port", self.port, Bound(1, 65535, "a TCP port"))
        check_slurm_values(job_name=self.job_name, time_limit=self.time_limit, partition=self.partition,
                           account=self.account, out_dir=self.out_dir, config_path=self.config_path)

    @property
    def signal_lead_s(self) -> int:
        """How long before the time limit the job's processes get SIGTERM."""
        return max(60, math.ceil(self.stop_grace_s) + SLURM_SIGNAL_MARGIN_S)


_SLURM_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+@:=,-]{0,127}")
_SLURM_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}"
_SLURM_PARTITION = re.compile(rf"{_SLURM_NAME}(?:,{_SLURM_NAME}){{0,31}}")
_SLURM_ACCOUNT = re.compile(_SLURM_NAME)
_SLURM_TIME = re.compile(r"(?:(\d{1,5})-(\d{1,2})(?::(\d{1,2})(?::(\d{1,2}))?)?"  # days-hours[:minutes[:seconds]]
                         r"|(\d{1,7})(?::(\d{1,2})(?::(\d{1,2}))?)?)")  # minutes[:seconds] | hours:minutes:seconds
_PATH_REFUSED = re.compile(r'[\x00-\x1f\x7f-\x9f\u2028\u2029"\\]')


def check_slurm_values(*, job_name: str, time_limit: str, partition: str | None, account: str | None,
                       out_dir: str, config_path: str | None = None) -> None:
    """Refuse, in one line, a value the sbatch script would write that Slurm does not accept or
    that could end its line: every value of an ``#SBATCH`` line is checked against Slurm's own
    syntax (job name, time limit, partition list, account), and paths may not hold a control
    character (a newline would start a command of its own), a double quote or a backslash
    (the ``#SBATCH`` parser's quote and escape). The script quotes every path besides."""
    if not isinstance(job_name, str) or not _SLURM_JOB_NAME.fullmatch(job_name):
        raise SpecError("--job-name", job_name, "1 to 128 letters, digits and ._+@:=,- (starting with a letter "
                                                "or digit)")
    if not isinstance(time_limit, str) or not _valid_time(time_limit):
        raise SpecError("--time", time_limit, "a Slurm time limit: MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, "
                                              "DAYS-HOURS, DAYS-HOURS:MINUTES or DAYS-HOURS:MINUTES:SECONDS, e.g. "
                                              "00:30:00, or UNLIMITED")
    if partition is not None and not _SLURM_PARTITION.fullmatch(partition):
        raise SpecError("--partition", partition, "a Slurm partition name (letters, digits and _.-), or several "
                                                  "joined by commas")
    if account is not None and not _SLURM_ACCOUNT.fullmatch(account):
        raise SpecError("--account", account, "a Slurm account name (letters, digits and _.-)")
    for field, path in (("--out", out_dir), ("--out", config_path)):
        if path is not None and _PATH_REFUSED.search(path):
            raise SpecError(field, path, "a path without control characters (a newline), double quotes or "
                                         "backslashes: the sbatch script's #SBATCH lines cannot hold them")


def _valid_time(text: str) -> bool:
    """A Slurm ``--time`` value (``UNLIMITED``/``INFINITE`` too), hours below 24 after days and
    minutes and seconds below 60 after a larger unit."""
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return True
    m = _SLURM_TIME.fullmatch(text)
    if m is None:
        return False
    days, hours, minutes, seconds, _minutes_or_hours, mid, last = m.groups()
    if days is not None:
        if int(hours) >= 24:
            return False
        below_60 = [minutes, seconds]
    else:  # MINUTES | MINUTES:SECONDS | HOURS:MINUTES:SECONDS
        below_60 = [mid, last] if last is not None else [mid]
    return all(x is None or int(x) < 60 for x in below_60)


def _sbatch_path(directory: str, pattern: str) -> str:
    """The file ``pattern`` (a Slurm filename pattern, e.g. ``slurm-%j.out``) in ``directory``, for
    an ``#SBATCH`` line: double-quoted (a space stays in it) and the directory's ``%`` doubled (a
    literal percent sign, not a pattern); :func:`check_slurm_values` refused the rest."""
    return '"' + directory.replace("%", "%%") + "/" + pattern + '"'


def sbatch_script(spec: SlurmSpec, python: str = "python") -> str:
    """The sbatch script text: ``srun`` one torchrun (:mod:`trainperf.measure.agent`) per node, c10d
    rendezvous on the first node.

    Stopping (see docs/BENCH.md): ``#SBATCH --signal=TERM@<lead>`` sends SIGTERM to every process
    of the job step that long before the time limit; ``scancel`` and the time limit itself send
    SIGTERM to every process of the job, then SIGKILL after Slurm's KillWait (30 s by default).
    Each worker finishes its step in progress, writes its ``end`` line and exits; torchrun
    stops too; the batch shell traps SIGTERM (it would otherwise die before writing the summary),
    waits for ``srun`` and writes ``summary.json``. ``srun --kill-on-bad-exit=1`` ends the step
    when any node's torchrun fails, so no node trains alone. The run directory is locked for the
    job's life (``flock``, where the util-linux tool exists).
    """
    grace = math.ceil(spec.stop_grace_s)
    lines = [*_sbatch_directives(spec), *_sbatch_setup(spec, grace), *_sbatch_run(spec, shlex.quote(python), grace)]
    return "\n".join(lines)


def _sbatch_directives(spec: SlurmSpec) -> list[str]:
    """The script's first line and its ``#SBATCH`` lines (values checked by :func:`check_slurm_values`)."""
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={spec.job_name}",
        f"#SBATCH --nodes={spec.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --time={spec.time_limit}",
        f"#SBATCH --output={_sbatch_path(spec.out_dir, 'slurm-%j.out')}",
        f"#SBATCH --signal=TERM@{spec.signal_lead_s}",
    ]
    if not spec.cpu:
        lines.append(f"#SBATCH --gpus-per-node={spec.gpus_per_node}")
    if spec.partition:
        lines.append(f"#SBATCH --partition={spec.partition}")
    if spec.account:
        lines.append(f"#SBATCH --account={spec.account}")
    return lines


def _sbatch_setup(spec: SlurmSpec, grace: int) -> list[str]:
    """The shell's setup before the run: strict mode, ``$OUT``, the directory's lock and the
    SIGTERM trap."""
    return [
        "# Written by `trainperf slurm`; submit with `sbatch` (or re-run with --submit).",
        f"# Stopping: {spec.signal_lead_s} s before the time limit (--signal above), on scancel, or at the",
        "# limit, every process of the step gets SIGTERM: each worker finishes its step in progress",
        f"# (at most {grace} s), writes its end line and exits; this script then writes summary.json.",
        "set -euo pipefail",
        f"OUT={shlex.quote(spec.out_dir)}",
        "# One run per directory: hold its lock for the job's life (skipped where flock is missing).",
        "if command -v flock >/dev/null 2>&1; then",
        '    exec 9>>"$OUT/.trainperf-run.lock"',
        '    flock -n 9 || { echo "trainperf: $OUT is in use by another run; not starting" >&2; exit 2; }',
        "fi",
        "# SIGTERM to this shell (scancel, time limit) must not end it before the summary is written.",
        "trap 'echo \"trainperf: SIGTERM; the run stops after its step in progress\" >&2' TERM",
    ]


def _sbatch_run(spec: SlurmSpec, py: str, grace: int) -> list[str]:
    """The run: ``srun`` of torchrun on every node (c10d rendezvous on the head node), then the
    summary and the run's exit status; ``py`` is the shell-quoted interpreter."""
    return [
        'HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        f"RDZV_PORT={spec.port}",
        "# On each node, torchrun (in trainperf's agent): each rank's output in $OUT/rank<k>.log, the",
        f"# workers still running {grace + 1} s after a stop signal killed, failed workers in failures-<host>.json.",
        "status=0",
        f"srun --kill-on-bad-exit=1 {py} -m trainperf.measure.agent --report \"$OUT/failures-{{host}}.json\" -- \\",
        "    --nnodes=\"$SLURM_NNODES\" "
        f"--nproc-per-node={spec.gpus_per_node} --max-restarts=0 \\",
        "    --rdzv-backend=c10d --rdzv-endpoint=\"$HEAD_NODE:$RDZV_PORT\" --rdzv-id=\"$SLURM_JOB_ID\" \\",
        f"    -m trainperf.measure.trainer {shlex.quote(spec.config_path)} || status=$?",
        "# Summary from the run record (also after a failure or a stop: the finished steps are kept),",
        "# with one line naming a worker that died (rank, signal or exit code, its log rank<k>.log).",
        f'{py} -m trainperf.measure.results "$OUT" --exit-code "$status"',
        'exit "$status"',
        "",
    ]
