"""Time a CPU workload's collectives between its processes on this machine, without training it.

A bench run of several CPU processes times gloo's collectives over its group, and FSDP2's and
DTensor's host time per module, in every process before it trains
(:func:`~trainperf.measure.kernel_calibration.calibrate_collectives`). ``trainperf calibrate
WORKLOAD`` does the same for a workload it does not run: it starts the workload's processes on
this machine (``torch.multiprocessing``, gloo over the loopback), each with the workload's threads,
and has them measure exactly that, so that ``predict`` of a multi-process CPU workload stands on
this machine's figures before any run of it. A workload that spans several nodes is measured over
one node's processes (the intra-node figures; nothing here reaches the other nodes).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any


def processes_here(workload: Any) -> int:
    """The workload's processes on one machine: its devices per node (at most its devices)."""
    return max(1, min(int(workload.devices_per_node), int(workload.num_devices)))


def calibrate_collectives_here(workload: Any, threads: int, say: Callable[[str], None], rounds: int = 1) -> None:
    """Start :func:`processes_here` gloo processes of ``threads`` threads each and have them time
    ``rounds`` times what a bench run of ``workload`` times between its processes, into the
    calibration cache (each round merged into its running means, as a run's is)."""
    import torch.multiprocessing as mp

    from trainperf.specs.workload_file import workload_to_dict

    n = processes_here(workload)
    if n < 2:
        return
    if n < workload.num_devices:
        say(f"  the collectives timed over this machine's {n} processes (the workload's other nodes are not here)")
    mp.spawn(_worker, args=(n, _free_port(), threads, workload_to_dict(workload), rounds), nprocs=n, join=True)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, world: int, port: int, threads: int, workload: dict[str, Any], rounds: int = 1) -> None:
    """One process: join the gloo group, then time as a bench run's process does before training."""
    import torch
    import torch.distributed as dist

    from trainperf.measure.kernel_calibration import calibrate_collectives
    from trainperf.measure.trainer import tune_cpu_allocator
    from trainperf.specs.workload_file import workload_from_dict

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    torch.set_num_threads(threads)
    tune_cpu_allocator()
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        w = workload_from_dict(workload)
        for _ in range(rounds):
            calibrate_collectives(threads, w, print if rank == 0 else _quiet)
    finally:
        dist.destroy_process_group()


def _quiet(_: str) -> None:
    """The other ranks' ``say``: rank 0 speaks for the group."""
