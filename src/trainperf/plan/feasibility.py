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

from trainperf.errors import TrainperfError
from trainperf.plan.search import search
from trainperf.plan.space import AC_POLICIES, REASONS, SearchSpace, divisors, mesh_count, vpp_slot_pairs
from trainperf.predict.stack_capabilities import capabilities_of

MAX_DEVICE_FACTOR = 64
EXPLORE_MESH_ROWS = 20_000
"""The largest device-count factorisation (dp x fsdp x tp x pp x cp meshes) the "what would make
it fit" explorer searches: a few thousand for any power-of-two cluster, so it stays a fraction of
a second; counts with many divisors are not explored."""


def _fits(model: Any, hardware: Any, space: SearchSpace, calibration: Any) -> Any:
    try:
        r = search(model, hardware, space, top_k=1, rerank=0, calibration=calibration)
    except TrainperfError:  # a relaxation whose search is beyond the planner's bounds: not tried
        return None
    return r if r.feasible else None


def _limit_text(c: dict[str, Any], device: str) -> str:
    """The memory a proposed plan may use, named with the margin that set it."""
    if c["margin"] <= 0:
        return f"{c['capacity_GiB']:.1f} GiB of one {device}"
    return (f"{c['limit_GiB']:.1f} GiB the planner allows of one {device}'s {c['capacity_GiB']:.1f} GiB "
            f"(a {100 * c['margin']:g}% margin; --memory-margin 0 drops it)")


def tightest_constraint(result: Any) -> str:
    """One sentence: what stopped every plan."""
    if result.closest is not None:
        c = result.closest
        from trainperf.plan.search import describe_plan

        return (f"memory: even the leanest executable plan ({describe_plan(c['workload'])}) needs "
                f"{c['memory_GiB']:.1f} GiB per device, over the {_limit_text(c, result.hardware.id)} by "
                f"{c['memory_GiB'] - c['limit_GiB']:.1f} GiB")
    if not result.rejected:
        return "no candidate plan at all"
    key, n = result.rejected.most_common(1)[0]
    return (f"no executable plan: {REASONS.get(key, key)} "
            f"(rejected {n:,} of {result.considered:,} plans)")


def nearest_changes(result: Any, *, calibration: Any = None, max_tries: int = 6) -> list[str]:
    """Single relaxations of the request under which some plan fits, nearest first."""
    m, hw, sp = result.model, result.hardware, result.space
    found: list[str] = []
    if max(mesh_count(n) for n in sp.num_devices) > EXPLORE_MESH_ROWS:
        return found  # each relaxation would be as large a search as the request: not explored
    # 1. more devices (keeping devices per node and the global batch)
    factor = 2
    while factor <= MAX_DEVICE_FACTOR:
        devs = tuple(n * factor for n in sp.num_devices)
        if max(mesh_count(n) for n in devs) > EXPLORE_MESH_ROWS:
            break  # the relaxed searches would dwarf the request's own
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
    # 2-4. full checkpointing, tp across nodes, no pinned degrees: where the request ruled them out
    for wanted, change, text in (
            ("full" not in sp.checkpointing, {"checkpointing": (*sp.checkpointing, "full")},
             "with full checkpointing (e.g. {})"),
            (not sp.allow_cross_node_tp, {"allow_cross_node_tp": True},
             "with tp across nodes (--allow-cross-node-tp; e.g. {})"),
            (bool(sp.fixed), {"fixed": ()}, "without --fix (e.g. {})")):
        r = _fits(m, hw, dataclasses.replace(sp, **change), calibration) if wanted else None
        if r is not None:
            found.append(text.format(_short(r.ranked.row(0))))
    # 5. a larger global batch (more data-parallel freedom) when batch divisibility bit
    if result.rejected.get("batch_dp") and not result.closest:
        for mult in (2, 4, 8):
            gb = tuple(b * mult for b in sp.global_batches)
            r = _fits(m, hw, dataclasses.replace(sp, global_batches=gb), calibration)
            if r is not None:
                found.append(f"with global batch {', '.join(map(str, gb))}")
                break
    # 6. shorter sequences
    seq = sp.seq_len // 2
    while seq >= 128 and len(found) < max_tries:
        r = _fits(m, hw, dataclasses.replace(sp, seq_len=seq), calibration)
        if r is not None:
            found.append(f"at seq_len {seq}")
            break
        seq //= 2
    return found


def _short(row: dict[str, Any]) -> str:
    parts = [f"{k}={row[k]}" for k in ("dp", "fsdp", "tp", "pp", "cp", "ep") if int(row[k]) > 1]
    parts.append(f"mbs={row['micro_batch']}")
    parts.append(f"AC={row['ac'] if isinstance(row['ac'], str) else AC_POLICIES[int(row['ac'])]}")
    return " ".join(parts)


_REASON_FIELD: dict[str, tuple[str, ...]] = {
    "tp_cross_node": ("tp",), "tp_heads": ("tp",), "tp_kv_heads": ("tp",), "tp_ffn": ("tp",),
    "tp_mamba_groups": ("tp",),
    "pp_layers": ("pp",), "cp_seq": ("cp",), "batch_dp": ("dp", "fsdp"), "mbs_local": ("micro_batch",),
    "vpp_layers": ("vpp", "pp"), "vpp_microbatches": ("vpp", "micro_batch", "pp"),
    "dualpipe_microbatches": ("micro_batch", "pp"), "ep_ranks": ("ep", "etp"),
    "etp_ffn": ("etp", "tp"),
    "stack": ("dp", "fsdp", "tp", "sp", "pp", "vpp", "cp", "ep", "etp", "zero"), "no_stack": (),
}
"""Which fixable columns a rejection reason is about (the first fixed one is blamed)."""


def _fixed_text(fixed: dict[str, int], keys: tuple[str, ...] | None = None) -> str:
    return ",".join(f"{k}={v}" for k, v in fixed.items() if keys is None or k in keys)


def _direct_check(model: Any, hardware: Any, space: SearchSpace, fixed: dict[str, int]) -> str | None:
    """A fixed value that no plan can have, judged from the value alone (one phrase), or None."""

    caps = capabilities_of(space.stack).as_of(space.release)
    ns = space.num_devices
    mesh = 1
    for k in ("dp", "fsdp", "tp", "pp", "cp"):
        mesh *= fixed.get(k, 1)
    if all(n % mesh for n in ns):
        return (f"{_fixed_text(fixed, ('dp', 'fsdp', 'tp', 'pp', 'cp'))}: the fixed degrees multiply to {mesh}, "
                f"which does not divide {'/'.join(map(str, ns))} devices")
    for k in ("dp", "fsdp", "tp", "pp", "cp", "ep", "vpp"):
        if fixed.get(k, 1) > 1 and k not in caps.parallelisms:
            return f"{k}={fixed[k]}: the {caps.stack} stack has no {k} (it runs {', '.join(caps.parallelisms)})"
    if "micro_batch" in fixed and fixed["micro_batch"] > space.max_micro_batch:
        return f"micro_batch={fixed['micro_batch']}: above --max-micro-batch {space.max_micro_batch}"
    if fixed.get("micro_batch", 1) < 1:
        return f"micro_batch={fixed['micro_batch']}: must be at least 1"
    if fixed.get("sp") and fixed.get("tp", 2) == 1:
        return "sp=1: sequence parallelism needs tp > 1"
    if "etp" in fixed:
        etp = fixed["etp"]
        if not model.is_moe:
            return f"etp={etp}: the model has no experts (etp splits the routed experts)"
        if etp > 1 and fixed.get("tp", etp) != etp:
            return f"etp={etp}: routed experts are split like the dense layers (etp = tp) or not at all (etp = 1)"
        if etp == 1 and fixed.get("tp", 2) > 1 and "1" not in caps.expert_tp:
            return (f"etp=1: the {caps.stack} stack splits routed experts like the dense layers (etp = tp); "
                    "unsplit experts beside tp > 1 are Megatron-Core's MoE parallel folding")
    if "zero" in fixed and fixed["zero"] not in space.zero_stages:
        return f"zero={fixed['zero']}: the stages searched are {', '.join(map(str, space.zero_stages))} (ZeRO-3 is fsdp)"
    if "zero" in fixed and fixed["zero"] not in caps.zero_stages:
        return f"zero={fixed['zero']}: the {caps.stack} stack runs ZeRO stage {'/'.join(map(str, caps.zero_stages))}"
    if fixed.get("ep", 1) > 1 and (not model.is_moe or fixed["ep"] not in divisors(model.moe_experts)):
        return (f"ep={fixed['ep']}: " + ("the model has no experts" if not model.is_moe
                                         else f"must divide the {model.moe_experts} experts"))
    vpp = fixed.get("vpp", 1)
    if vpp > 1 or fixed.get("slots"):
        pps = [fixed["pp"]] if "pp" in fixed else [p for p in divisors(max(ns)) if 1 < p <= model.layers]
        slot_opts = (0, 1, 2, 3) if caps.pipeline_slots and space.pipeline_slots else (0,)
        ok = False
        for p in pps:
            limit = caps.vpp_limit(model.layers, p)
            if space.max_vpp:
                limit = min(limit, space.max_vpp)
            pairs = vpp_slot_pairs(model.layers, p, limit, slot_opts)
            ok |= bool(((pairs[:, 0] == vpp) & ((pairs[:, 1] == fixed["slots"]) if "slots" in fixed else True)).any())
        if not ok:
            where = f"pp={fixed['pp']}" if "pp" in fixed else "any pp"
            slots = " (+1 or +2 with Megatron's embedding/loss slots)" if len(slot_opts) > 1 else ""
            return (f"vpp={vpp}: with {where}, pp*vpp must divide the {model.layers} layers{slots} "
                    f"and stay within the stack's vpp limit")
    return None


def fixed_refusal(result: Any) -> str | None:
    """When ``--fix`` leaves no plan that fits: which fixed value is infeasible and why, in one
    phrase (``None`` when nothing was fixed or some plan fits)."""
    sp = result.space
    if not sp.fixed or result.feasible:
        return None
    fixed = dict(sp.fixed)
    direct = _direct_check(result.model, result.hardware, sp, fixed)
    if direct:
        return direct
    if result.closest is not None:  # executable plans exist; every one is over memory
        from trainperf.plan.search import describe_plan

        c = result.closest
        return (f"{_fixed_text(fixed)}: every plan with these values runs out of memory; the leanest "
                f"({describe_plan(c['workload'])}) needs {c['memory_GiB']:.1f} GiB, over the "
                f"{_limit_text(c, result.hardware.id)}")
    reasons = [(k, n) for k, n in result.rejected.most_common() if k not in ("fixed", "oom")]
    if not reasons:
        return f"{_fixed_text(fixed)}: no plan has all of these values"
    # a rule about a fixed value says more than the stack's space, which names every column
    about_fixed = [k for k, _ in reasons if k != "stack" and set(_REASON_FIELD.get(k, ())) & set(fixed)]
    key = about_fixed[0] if about_fixed else reasons[0][0]
    blamed = [k for k in _REASON_FIELD.get(key, ()) if k in fixed]
    what = _fixed_text(fixed, tuple(blamed)) if blamed else _fixed_text(fixed)
    extra = ""
    if key == "mbs_local":
        extra = f" for any dp*fsdp (global batch {'/'.join(map(str, sp.global_batches))})"
    return f"{what}: {REASONS.get(key, key)}{extra}"


def infeasible_message(result: Any, *, calibration: Any = None) -> str:
    """The full one-paragraph message for a request where nothing fits."""
    refusal = fixed_refusal(result)
    tight = f"--fix {refusal}" if refusal else tightest_constraint(result)
    changes = nearest_changes(result, calibration=calibration)
    msg = f"no plan fits: {tight}."
    if changes:
        msg += " Nearest feasible change: " + "; or ".join(changes) + "."
    else:
        msg += " No single change tried (up to 64x the devices, full checkpointing, tp across nodes, shorter sequences) makes it fit."
    return msg
