"""Words for the planner's output: why the best plan beats the runner-up, why the rest were
rejected, and what would make an infeasible request fit.

Every sentence is computed from the two plans' predicted breakdowns (seconds per component,
bytes per memory category) and from the vectorised evaluation of the plans between them; no
canned advice.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trainperf.plan.space import AC_POLICIES

COMPONENT_WORDS: dict[str, str] = {"forward": "forward compute", "backward": "backward compute",
                                   "recompute": "recomputation", "optimizer": "optimizer step"}
"""Components of a step's breakdown (:func:`trainperf.predict.step.breakdown`) said in other
words; the others are named as the breakdown names them."""

# Ordered by how much each degree changes memory per device (activation splits first).
_PLAN_FIELDS: tuple[tuple[str, str], ...] = (
    ("tp", "tp"), ("pp", "pp"), ("cp", "cp"), ("fsdp", "fsdp"), ("dp", "dp"), ("zero_stage", "ZeRO stage"),
    ("vpp", "vpp"), ("ep", "ep"),
)


def plan_differences(a: Any, b: Any) -> list[str]:
    """What differs between two workloads' plans, as ``name a vs b`` phrases."""
    out = []
    for attr, name in _PLAN_FIELDS:
        x, y = getattr(a.plan, attr), getattr(b.plan, attr)
        if x != y:
            out.append(f"{name} {x} vs {y}")
    if a.plan.pp > 1 and b.plan.pp > 1 and a.plan.pp_schedule != b.plan.pp_schedule:
        out.append(f"schedule {a.plan.pp_schedule} vs {b.plan.pp_schedule}")
    if a.plan.sequence_parallel != b.plan.sequence_parallel:
        out.append(f"sequence parallel {'on' if a.plan.sequence_parallel else 'off'} vs "
                   f"{'on' if b.plan.sequence_parallel else 'off'}")
    if a.micro_batch != b.micro_batch:
        out.append(f"micro batch {a.micro_batch} vs {b.micro_batch}")
    if a.activation_checkpointing != b.activation_checkpointing:
        out.append(f"checkpointing {a.activation_checkpointing} vs {b.activation_checkpointing}")
    if a.precision != b.precision:
        out.append(f"{a.precision} vs {b.precision}")
    if a.global_batch != b.global_batch:
        out.append(f"global batch {a.global_batch} vs {b.global_batch}")
    if a.num_devices != b.num_devices:
        out.append(f"{a.num_devices} vs {b.num_devices} devices")
    return out


def component_deltas(best: dict[str, float], other: dict[str, float]) -> list[tuple[str, float, float]]:
    """(component, best seconds, other seconds) for every component, largest |difference| first."""
    keys = sorted(set(best) | set(other))
    rows = [(k, float(best.get(k, 0.0)), float(other.get(k, 0.0))) for k in keys]
    rows = [r for r in rows if np.isfinite(r[1]) and np.isfinite(r[2])]
    return sorted(rows, key=lambda r: -abs(r[1] - r[2]))


def why_best(result: Any) -> str:
    """One paragraph: why ``result.top[0]`` beats ``result.top[1]``, from their breakdowns."""
    if not result.top:
        return ""
    best = result.top[0]
    if len(result.top) < 2:
        return f"{best.label} is the only plan that fits."
    run = result.top[1]
    a, b = best.workload, run.workload
    diffs = plan_differences(a, b)
    head = f"best ({best.label}) vs runner-up ({run.label})"
    if diffs:
        head += f": {', '.join(diffs)}"
    obj = result.objective
    if obj.name == "cost" and best.cost_usd is not None and run.cost_usd is not None:
        gain = f"costs {100 * (1 - best.cost_usd / run.cost_usd):.1f}% less (${best.cost_usd:,.0f} vs ${run.cost_usd:,.0f})"
    else:
        gain = (f"is {100 * (best.tokens_per_s / run.tokens_per_s - 1):.1f}% faster "
                f"({best.step_time_s:.3f} s vs {run.step_time_s:.3f} s per step)")
    tie = abs(best.step_time_s - run.step_time_s) <= 1e-9 * best.step_time_s
    if tie and obj.name != "cost":
        gain = (f"ties on step time ({best.step_time_s:.3f} s) and needs less memory "
                f"({best.memory_GiB:.1f} vs {run.memory_GiB:.1f} GiB per device)")
    sentences = [f"{head}. It {gain}."]
    parts = []
    step = best.step_time_s
    deltas = component_deltas(best.breakdown_s, run.breakdown_s)
    biggest = abs(deltas[0][1] - deltas[0][2]) if deltas else 0.0
    for key, x, y in deltas[:3]:
        d = abs(x - y)
        if d <= 1e-4 * step or d < 0.1 * biggest:
            continue
        if y > x:
            parts.append(f"{COMPONENT_WORDS.get(key, key)} {d:.3g} s less ({x:.3g} vs {y:.3g} s)")
        else:
            share = 100.0 * x / step if step > 0 else 0.0
            parts.append(f"{COMPONENT_WORDS.get(key, key)} {d:.3g} s more ({x:.3g} vs {y:.3g} s; {share:.0f}% of the step)")
    if parts:
        sentences.append("Per component, best vs runner-up: " + "; ".join(parts) + ".")
    sa = float(obj.score(best.tokens_per_s, a.num_devices))
    sb = float(obj.score(run.tokens_per_s, b.num_devices))
    if not tie and 0 < round(100 * abs(sb / sa - 1), 1) < 1.0:
        sentences.append("The margin is under 1%, inside the predictor's error: treat them as equals.")
    mem = "" if tie and obj.name != "cost" else memory_sentence(result, best, run)
    if mem:
        sentences.append(mem)
    return " ".join(sentences)


def memory_sentence(result: Any, best: Any, run: Any) -> str:
    """Memory comparison; when the best runs a bigger micro batch or lighter checkpointing than
    the runner-up, say whether the runner-up's layout could have afforded it."""
    a, b = best.workload, run.workload
    cap = best.capacity_GiB
    text = f"Memory per device {best.memory_GiB:.1f} vs {run.memory_GiB:.1f} GiB (of {cap:.1f} GiB)."
    lighter = AC_POLICIES.index(a.activation_checkpointing) < AC_POLICIES.index(b.activation_checkpointing)
    if (a.micro_batch > b.micro_batch or lighter) and result.all_eval is not None:
        c = result.all_cands
        p = b.plan
        want = {"dp": p.dp, "fsdp": p.fsdp, "zero": p.zero_stage, "tp": p.tp, "sp": int(p.sequence_parallel),
                "pp": p.pp, "vpp": p.vpp, "cp": p.cp, "ep": p.ep, "num_devices": b.num_devices,
                "global_batch": b.global_batch, "micro_batch": a.micro_batch,
                "ac": AC_POLICIES.index(a.activation_checkpointing),
                "precision": c.precisions.index(a.precision)}
        mask = np.ones(len(c), dtype=bool)
        for k, v in want.items():
            mask &= c[k] == v
        idx = np.flatnonzero(mask)
        what = (f"micro batch {a.micro_batch}" if a.micro_batch > b.micro_batch else "")
        if lighter:
            what = (what + " and " if what else "") + f"checkpointing {a.activation_checkpointing}"
        layout = [d for d in plan_differences(a, b) if not d.startswith(("micro batch", "checkpointing"))]
        change = ", ".join(layout[:3]) or "the best layout"
        local = b.global_batch // b.plan.data_parallel
        if idx.size and result.all_eval.memory_GiB[idx[0]] > result.space.memory_limit_GiB(result.all_eval.capacity_GiB):
            need = float(result.all_eval.memory_GiB[idx[0]])
            text += (f" The runner-up's layout with {what} would need {need:.1f} GiB and does not fit; "
                     f"{change} brings it to {best.memory_GiB:.1f} GiB so it fits.")
        elif not idx.size and a.micro_batch > b.micro_batch and local % a.micro_batch:
            text += (f" The runner-up's layout leaves a local batch of {local} sequences per data-parallel "
                     f"rank (dp*fsdp={b.plan.data_parallel}), too few for micro batch {a.micro_batch}; "
                     f"{change} makes room for it.")
    return text


def rejection_lines(result: Any) -> list[str]:
    """``--explain``: how many plans were considered and why the rest were rejected."""
    total = result.considered
    lines = [f"considered {total:,} plans in {result.elapsed_s:.2f} s; {result.feasible:,} fit "
             f"({100.0 * result.feasible / total if total else 0:.2g}%); rejected:"]
    for _, text, n in result.reasons():
        lines.append(f"  {n:>12,}  {text}")
    if result.collapsed:
        lines.append(f"of the {result.feasible:,} that fit, {result.collapsed:,} differ from a better-ranked plan "
                     "only in ZeRO stage and are not listed")
    return lines


def memory_breakdown_line(plan: Any) -> str:
    return "memory GiB: " + ", ".join(f"{k} {v:.1f}" for k, v in plan.memory_breakdown_GiB.items() if v >= 0.05)
