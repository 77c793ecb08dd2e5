"""``trainperf`` entry point: one module per subcommand, imported only when it runs.

Each subcommand module defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``. The table below is the only list of commands; a test keeps it and the
modules in sync. User mistakes (:class:`TrainperfError`) become one line on stderr and exit
code 2; a run interrupted with Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

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
    "calibrate": ("trainperf.cli.calibrate", "measure this machine's matmul TFLOP/s per dtype and memory bandwidth (the CPU peak for MFU)"),
    "sweep": ("trainperf.cli.sweep", "run the bench at several process counts and print the scaling-efficiency table"),
    "slurm": ("trainperf.cli.slurm", "write (and optionally submit) an sbatch script that runs the bench on K nodes"),
    "report": ("trainperf.cli.report", "write a self-contained HTML report (plus Markdown and PNGs) of runs, sweeps and published comparisons"),
    "parse": ("trainperf.cli.parse", "parse another framework's training log and recompute its metrics on one basis"),
    "compare": ("trainperf.cli.compare", "several runs (logs, trainperf runs, published records) side by side"),
    "plan": ("trainperf.cli.plan", "search every parallel plan (dp/fsdp/zero, tp, sp, pp/vpp, cp, ep, micro batch, checkpointing) and rank them"),
}


# Optional dependencies -> the extra that installs them (a missing one is a one-line error, exit 2).
OPTIONAL_EXTRAS: dict[str, str] = {"torch": "bench", "matplotlib": "plot"}


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (exit 2), not the usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(prog="trainperf", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"trainperf {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command is not None and command not in COMMANDS:
        command = None  # let argparse report the unknown command
    parser = build_parser(command)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    module = importlib.import_module(COMMANDS[args.command][0])
    try:
        return int(module.run(args) or 0)
    except ImportError as e:  # ModuleNotFoundError included
        extra = OPTIONAL_EXTRAS.get((e.name or "").split(".")[0])
        if extra is None:
            raise
        print(f"trainperf {args.command}: error: this command needs {e.name.split('.')[0]}, which is not "
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
