"""``trainperf hw``: the hardware catalog, or one device with the source of every number."""

from __future__ import annotations

import argparse

from trainperf.cli.common import add_json_argument, print_json

HELP = "list the hardware catalog, or show one device with its sources"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="device id (e.g. h100-sxm); omit to list all")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from trainperf.specs.hardware import (
        format_hardware_detail,
        format_hardware_table,
        get_hardware,
        list_hardware,
    )

    if args.name:
        hw = get_hardware(args.name)
        if args.json:
            print_json(hw.to_dict())
        else:
            print(format_hardware_detail(hw))
        return 0
    devices = list_hardware()
    if args.json:
        print_json([hw.to_dict() for hw in devices])
    else:
        print(format_hardware_table(devices))
    return 0
