"""When nothing fits: name the tightest constraint and the nearest change that makes a plan fit.

The tightest constraint is the last filter that emptied the search: memory (every executable
plan is over the device's capacity; the leanest one is named with its GiB) or, when no plan
can even be executed, the validity rule that rejected the most plans. The nearest feasible
changes are found by re-running the (vectorised, cheap) search with one thing relaxed at a
time: 2x, 4x, ... the devices, full checkpointing, tp across nodes, no pinned degrees, more
global batches, shorter sequences.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trainperf.plan.space import AC_POLICIES, REASONS, SearchSpace

MAX_DEVICE_FACTOR = 64


def _fits(model: Any, hardware: Any, space: SearchSpace, calibration: Any) -> Any:
    from trainperf.plan.search import search

    r = search(model, hardware, space, top_k=1, rerank=0, calibration=calibration)
    return r if r.feasible else None


def tightest_constraint(result: Any) -> str:
    """One sentence: what stopped every plan."""
    if result.closest is not None:
        c = result.closest
        from trainperf.plan.search import describe_plan

        return (f"memory: even the leanest executable plan ({describe_plan(c['workload'])}) needs "
                f"{c['memory_GiB']:.1f} GiB per device, over the {c['capacity_GiB']:.1f} GiB of one "
                f"{result.hardware.id} by {c['memory_GiB'] - c['capacity_GiB']:.1f} GiB")
    if not result.rejected:
        return "no candidate plan at all"
    key, n = result.rejected.most_common(1)[0]
    return (f"no executable plan: {REASONS.get(key, key)} "
            f"(rejected {n:,} of {result.considered:,} plans)")


def nearest_changes(result: Any, *, calibration: Any = None, max_tries: int = 6) -> list[str]:
    """Single relaxations of the request under which some plan fits, nearest first."""
    m, hw, sp = result.model, result.hardware, result.space
    found: list[str] = []
    # 1. more devices (keeping devices per node and the global batch)
    factor = 2
    while factor <= MAX_DEVICE_FACTOR:
        devs = tuple(n * factor for n in sp.num_devices)
        r = _fits(m, hw, dataclasses.replace(sp, num_devices=devs), calibration)
        if r is not None:
            best = r.ranked
            found.append(f"fits with {factor}x the devices ({', '.join(map(str, devs))}; e.g. "
                         f"{_short(best.row(0))})")
            break
        # more devices also need a global batch they can split; try scaling it too
        gb = tuple(b * factor for b in sp.global_batches)
        r = _fits(m, hw, dataclasses.replace(sp, num_devices=devs, global_batches=gb), calibration)
        if r is not None:
            found.append(f"fits with {factor}x the devices and {factor}x the global batch "
                         f"({', '.join(map(str, devs))} devices, global batch {', '.join(map(str, gb))})")
            break
        factor *= 2
    # 2. full checkpointing when it was not allowed
    if "full" not in sp.checkpointing:
        r = _fits(m, hw, dataclasses.replace(sp, checkpointing=(*sp.checkpointing, "full")), calibration)
        if r is not None:
            found.append(f"or with full checkpointing (e.g. {_short(r.ranked.row(0))})")
    # 3. tp across nodes
    if not sp.allow_cross_node_tp:
        r = _fits(m, hw, dataclasses.replace(sp, allow_cross_node_tp=True), calibration)
        if r is not None:
            found.append(f"or with tp across nodes (--allow-cross-node-tp; e.g. {_short(r.ranked.row(0))})")
    # 4. drop the user's pinned degrees
    if sp.fixed:
        r = _fits(m, hw, dataclasses.replace(sp, fixed=()), calibration)
        if r is not None:
            found.append(f"or without --fix (e.g. {_short(r.ranked.row(0))})")
    # 5. a larger global batch (more data-parallel freedom) when batch divisibility bit
    if result.rejected.get("batch_dp") and not result.closest:
        for mult in (2, 4, 8):
            gb = tuple(b * mult for b in sp.global_batches)
            r = _fits(m, hw, dataclasses.replace(sp, global_batches=gb), calibration)
            if r is not None:
                found.append(f"or with global batch {', '.join(map(str, gb))}")
                break
    # 6. shorter sequences
    seq = sp.seq_len // 2
    while seq >= 128 and len(found) < max_tries:
        r = _fits(m, hw, dataclasses.replace(sp, seq_len=seq), calibration)
        if r is not None:
            found.append(f"or at seq_len {seq}")
            break
        seq //= 2
    return found


def _short(row: dict[str, Any]) -> str:
    parts = [f"{k}={row[k]}" for k in ("dp", "fsdp", "tp", "pp", "cp", "ep") if int(row[k]) > 1]
    parts.append(f"mbs={row['micro_batch']}")
    parts.append(f"AC={row['ac'] if isinstance(row['ac'], str) else AC_POLICIES[int(row['ac'])]}")
    return " ".join(parts)


def infeasible_message(result: Any, *, calibration: Any = None) -> str:
    """The full one-paragraph message for a request where nothing fits."""
    tight = tightest_constraint(result)
    changes = nearest_changes(result, calibration=calibration)
    msg = f"no plan fits: {tight}."
    if changes:
        msg += " Nearest feasible change: " + "; ".join(changes) + "."
    else:
        msg += " No single change tried (up to 64x the devices, full checkpointing, tp across nodes, shorter sequences) makes it fit."
    return msg
