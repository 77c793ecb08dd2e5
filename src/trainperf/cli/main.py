"""``trainperf`` entry point: one module per subcommand, imported only when it runs.

Each subcommand module defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``. The table below is the only list of commands (``TASKS`` groups them for
``--help``); a test keeps it and the modules in sync. User mistakes (:class:`TrainperfError`)
become one line on stderr and exit code 2; a run interrupted with Ctrl-C exits 130.
``trainperf --help`` imports no command module.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from collections.abc import Iterator, Sequence

from trainperf import __version__
from trainperf.errors import TrainperfError, one_line

# command -> (module, one-line help). Help lives here so `trainperf --help` imports nothing.
COMMANDS: dict[str, tuple[str, str]] = {
    "flops": ("trainperf.cli.flops", "FLOPs per token and per sequence under every convention, with the per-op breakdown"),
    "mfu": ("trainperf.cli.mfu", "tokens/s, TFLOP/s per device, MFU, HFU and time to train from a step time or a rate"),
    "hw": ("trainperf.cli.hw", "list the hardware catalog, or show one device with its sources"),
    "models": ("trainperf.cli.models", "list the model presets, or show one with its parameter counts"),
    "scaling": ("trainperf.cli.scaling", "weak or strong scaling efficiency between two runs"),
    "predict": ("trainperf.cli.predict", "predict step time (with a breakdown), tokens/s, MFU and memory per device of a workload"),
    "calibrate-model": ("trainperf.cli.calibrate_model", "fit a software-stack profile (.toml, for --stack) or device knobs (.json) to measured runs"),
    "published": ("trainperf.cli.published", "list published runs (filter by model, device, framework, precision) with MFU on one convention"),
    "validate": ("trainperf.cli.validate", "predict every published run: MAPE, mean signed error, worst row; in-sample, leave-one-table-out and leave-one-(stack, silicon)-out"),
    "bench": ("trainperf.cli.bench", "train a Llama-family model here (CPU or GPU, 1..N processes) and measure every step"),
    "calibrate": ("trainperf.cli.calibrate", "measure this machine's matmul TFLOP/s per dtype and memory bandwidth (the CPU peak for MFU); given a CPU workload file, the kernels predict prices it with too"),
    "sweep": ("trainperf.cli.sweep", "run the bench at several process counts and print the scaling-efficiency table"),
    "slurm": ("trainperf.cli.slurm", "write (and optionally submit) an sbatch script that runs the bench on K nodes"),
    "report": ("trainperf.cli.report", "write a self-contained HTML report (plus Markdown and PNGs) of runs, sweeps and published comparisons"),
    "parse": ("trainperf.cli.parse", "parse another framework's training log and recompute its metrics on one basis"),
    "compare": ("trainperf.cli.compare", "several runs (logs, trainperf runs, published records) side by side"),
    "plan": ("trainperf.cli.plan", "search every parallel plan (dp/fsdp/zero, tp, sp, pp/vpp and the stack's pipeline "
                                   "schedules, cp, ep, micro batch, checkpointing) and rank them"),
}


# The commands by what a user wants to do, in the order `trainperf --help` lists them.
TASKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("count and convert (no measurement needed)", ("flops", "mfu", "scaling")),
    ("catalogs", ("hw", "models", "published")),
    ("predict and plan", ("predict", "plan", "validate", "calibrate-model")),
    ("measure on this machine (the bench extra: torch)", ("bench", "sweep", "slurm", "calibrate")),
    ("read and compare other runs", ("parse", "compare", "report")),
)

DESCRIPTION = """\
Measure, explain and predict the performance of LLM training: FLOPs, MFU, tokens/s,
TFLOP/s per device, step time, memory per device and time to train, from one CPU to
thousands of GPUs. Every MFU names its FLOP convention and its peak."""

EXAMPLES = """\
examples:
  trainperf mfu --model llama2-70b --device h100-sxm --num-devices 64 --fsdp 64 \\
      --seq-len 4096 --global-batch 128 --micro-batch 2 --step-time 7.908
  trainperf predict --model llama3.1-405b --device h100-sxm --num-devices 128 --fsdp 16 --tp 8 \\
      --sequence-parallel --seq-len 8192 --global-batch 32 --micro-batch 2 --activation-checkpointing full
  trainperf bench      # train a small Llama on this CPU for 20 steps and measure every step

Every command takes a workload file (TOML or JSON) and flags named after its fields, and
--json for scripts. `trainperf COMMAND --help` lists a command's options; `python -m trainperf`
is the same program."""


def _commands_text() -> str:
    """The commands grouped by task, each with its one-line help wrapped to the terminal (as
    argparse wraps its own help)."""
    import shutil
    import textwrap

    lines = ["commands:"]
    indent = " " * (4 + max(len(c) for c in COMMANDS) + 2)
    width = max(60, min(shutil.get_terminal_size().columns - 2, 110))
    for title, names in TASKS:
        lines.append(f"  {title}")
        for name in names:
            first = f"    {name:<{len(indent) - 4}}{COMMANDS[name][1]}"
            lines.extend(textwrap.wrap(first, width, subsequent_indent=indent, break_on_hyphens=False))
    return "\n".join(lines)


# Optional dependencies -> the extra that installs them (a missing one is a one-line error, exit 2).
OPTIONAL_EXTRAS: dict[str, str] = {"torch": "bench", "matplotlib": "plot"}


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (exit 2), not the usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


class _TopParser(_Parser):
    """The ``trainperf`` parser: its help lists the commands grouped by task (built only when
    the help is printed)."""

    def format_help(self) -> str:
        if self.description is None:
            self.description = f"{DESCRIPTION}\n\n{_commands_text()}"
        return super().format_help()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; with ``command``, only that command's sub-parser is built (and its
    module imported), which is all a run of it needs."""
    parser = _TopParser(prog="trainperf", usage="%(prog)s COMMAND [options]", epilog=EXAMPLES,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"trainperf {__version__}",
                        help="print the version and exit")
    # The grouped list in the description replaces argparse's flat one.
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser, prog="trainperf",
                                help=argparse.SUPPRESS)
    for name, (module, help_text) in COMMANDS.items():
        if command is None or name == command:
            p = sub.add_parser(name, description=help_text)
        if name == command:
            importlib.import_module(module).add_arguments(p)
    return parser


LIGHT_COMMANDS = frozenset({"flops", "mfu", "hw", "models", "scaling", "predict"})
"""Commands that only compute and print: in their own process the cyclic garbage collector is off
and the interpreter's final collections are skipped (~10-15 ms of a ~100 ms command); they create
no garbage cycles worth collecting and hold nothing that needs finalizing."""


def main(argv: Sequence[str] | None = None) -> int:
    own_process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if own_process and (command in LIGHT_COMMANDS or command is None):
        import atexit
        import gc

        # a short-lived process that builds a few thousand long-lived objects: the collector's
        # passes over them (during the imports and at exit) find nothing to free
        gc.disable()
        atexit.register(gc.freeze)
    if command is not None and command not in COMMANDS:
        command = None  # let argparse report the unknown command
    with terminal_streams():
        parser = build_parser(command)
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        return _run_command(args)


@contextlib.contextmanager
def terminal_streams() -> Iterator[None]:
    """Everything the command prints goes through the terminal's escaper
    (:class:`~trainperf.safe_text.TerminalStream`): a name holding an escape sequence is shown,
    not sent to the terminal. JSON output is unchanged (it escapes control characters itself)."""
    from trainperf.safe_text import TerminalStream

    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = TerminalStream(out), TerminalStream(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


def _run_command(args: argparse.Namespace) -> int:
    """Run the parsed command; a user mistake is one line on stderr and its exit code.

    SIGTERM and SIGHUP stop the command as Ctrl-C does (:func:`~trainperf.measure.stop.stop_signals_raise`):
    an exception, so every file being written is removed by the code writing it (a temporary
    file, a report's temporary directory) and what was there before stays whole; the exit code
    is 128 + the signal's number. ``bench`` and ``sweep`` handle the signals their own way."""
    from trainperf.measure.stop import RunStopped, signal_name, stop_signals_raise

    module = importlib.import_module(COMMANDS[args.command][0])
    try:
        with stop_signals_raise():
            return int(module.run(args) or 0)
    except RunStopped as e:
        why = "interrupted" if e.signum == 2 else f"stopped by {signal_name(e.signum)}"
        print(f"trainperf {args.command}: {why}; no partial output was left", file=sys.stderr)
        return e.exit_code
    except ImportError as e:  # ModuleNotFoundError included
        missing = (e.name or "").split(".")[0]
        extra = OPTIONAL_EXTRAS.get(missing)
        if extra is None:
            raise
        print(f"trainperf {args.command}: error: this command needs {missing}, which is not "
              f"installed: pip install 'trainperf[{extra}]'", file=sys.stderr)
        return 2
    except TrainperfError as e:
        print(f"trainperf {args.command}: error: {one_line(str(e))}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"trainperf {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
