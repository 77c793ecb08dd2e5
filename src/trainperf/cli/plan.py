"""``trainperf plan``: the fastest (or cheapest) parallel plan that fits, and why.

Examples::

    trainperf plan --model llama3.1-405b --device h100-sxm --num-devices 128 --seq-len 8192 \\
        --global-batch 32 --explain
    trainperf plan --model llama2-70b --device h100-sxm --num-devices 64-1024 --seq-len 4096 \\
        --global-batch 128-2048 --objective cost --train-tokens 1e12 --usd-per-device-hour 2.5
    trainperf plan --model llama3-70b --device h100-sxm --seq-len 8192 --global-batch 1024 \\
        --target-days 30 --train-tokens 15e12

Exit codes: 0 a plan fits; 1 nothing fits (the message names the tightest constraint and the
nearest change that fits); 2 bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from trainperf.cli.common import (
    add_convention_argument,
    add_json_argument,
    add_software_arguments,
    print_json,
    table,
)
from trainperf.errors import MissingFieldError, SpecError
from trainperf.numbers import fmt
from trainperf.specs.bounds import (
    DAYS,
    MEMORY_MARGIN,
    MICRO_BATCH,
    NUM_DEVICES,
    SEARCH_RESULTS,
    SEARCH_VALUES,
    SEQ_LEN,
    TRAIN_TOKENS,
    USD_PER_DEVICE_HOUR,
    VPP,
    WORKLOAD_FIELD_BOUNDS,
    Bound,
)

HELP = ("search every parallel plan (dp/fsdp/zero, tp, sp, pp/vpp and the stack's pipeline schedules, cp, ep, micro "
        "batch, checkpointing) and rank them")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", nargs="?", help="workload file (.toml/.json): its model, hardware and "
                        "training sections are used; its [parallel] section is what the planner chooses")
    m = parser.add_argument_group("model")
    m.add_argument("--model", metavar="PRESET", help="model preset id (see `trainperf models`)")
    m.add_argument("--hf-config", metavar="PATH", help="Hugging Face config.json")
    h = parser.add_argument_group("cluster")
    h.add_argument("--device", metavar="ID", help="catalog id, e.g. h100-sxm (see `trainperf hw`)")
    h.add_argument("--num-devices", metavar="N|A,B,C|LO-HI",
                   help="device count, a list, or a range LO-HI (LO, 2LO, 4LO, ... and HI)")
    h.add_argument("--devices-per-node", type=int, metavar="N", help="default: the device's typical node (host)")
    h.add_argument("--scale-up-domain", type=int, metavar="N",
                   help="devices per NVLink/xGMI domain (default: the device's, e.g. 72 for gb200)")
    t = parser.add_argument_group("training")
    t.add_argument("--seq-len", type=int, metavar="N")
    t.add_argument("--global-batch", metavar="N|A,B|LO-HI",
                   help="acceptable global batch(es), sequences per optimizer step (list or LO-HI doubling)")
    t.add_argument("--precision", metavar="DTYPES", help="dtype(s) to try, comma-separated (default bf16)")
    t.add_argument("--activation-checkpointing", metavar="POLICIES",
                   help="policies to try, comma-separated (default none,selective,full, or every policy the "
                        "--stack runs; also minimal, minimal_flash, selective-op, save_dot_with_context_except_mlp, "
                        "save_dot_except_mlpwi, save_dot_except_mlp, save_qkv_proj, qkv_proj_offloaded, "
                        "save_out_proj, and Megatron-Core's recompute modules "
                        "selective:core_attn+layernorm, selective:core_attn+moe_act+layernorm(+mla_up_proj), "
                        "selective:core_attn+layernorm+moe)")
    s = parser.add_argument_group("search")
    s.add_argument("--max-micro-batch", type=int, default=8, metavar="N", help="largest micro batch tried (8)")
    s.add_argument("--max-vpp", type=int, default=0, metavar="N",
                   help="most virtual pipeline stages per rank tried (default: up to layers/pp, or the stack's limit)")
    s.add_argument("--allow-cross-node-tp", action="store_true", help="let tp span nodes")
    s.add_argument("--stack-release", metavar="TEXT", default="",
                   help="the stack's release, e.g. 'NeMo 24.09' or 'Megatron-Core 0.9': what the stack gained "
                        "later is not searched (default: the current release)")
    s.add_argument("--memory-margin", type=float, default=None, metavar="F",
                   help="fraction of device memory a proposed plan leaves free (default 0.10: the memory "
                        "model's error on measured peaks, and what published runs leave); 0 proposes every "
                        "plan predicted to fit")
    s.add_argument("--fix", metavar="K=V[,K=V]",
                   help="pin degrees, e.g. tp=8,pp=1 (keys: dp fsdp zero tp sp pp vpp cp ep etp micro_batch)")
    s.add_argument("--objective", choices=("throughput", "time", "cost"), default="throughput",
                   help="rank by tokens/s (default), days to train --train-tokens, or cost")
    s.add_argument("--train-tokens", type=float, metavar="T", help="tokens to train (time, cost, --target-days)")
    s.add_argument("--usd-per-device-hour", type=float, metavar="USD", help="price (for --objective cost)")
    s.add_argument("--target-days", type=float, metavar="D",
                   help="inverse question: smallest device count that trains --train-tokens in D days")
    s.add_argument("--top", type=int, default=5, metavar="K", help="plans to show (5)")
    s.add_argument("--rerank", type=int, default=20, metavar="R",
                   help="best plans re-predicted with the scalar predictor for the final ranking (20)")
    s.add_argument("--explain", action="store_true",
                   help="also print how many plans were considered and why the rest were rejected")
    s.add_argument("--calibration", metavar="FILE", help="calibration file from `trainperf calibrate-model`")
    add_software_arguments(parser)
    add_convention_argument(parser)
    add_json_argument(parser)


_COUNT_FLAGS: dict[str, tuple[str, str]] = {
    "training.global_batch": ("--global-batch N", "[training] global_batch"),
    "hardware.num_devices": ("--num-devices N", "[hardware] num_devices"),
}
"""The flag and the workload-file key of each count the planner needs, for the message that
says one is missing."""


def parse_counts(text: str | int | None, field: str) -> tuple[int, ...]:
    """``"64"``, ``"64,128"`` or ``"64-1024"`` (64, 128, ..., 1024: doubling, HI included)."""
    if text is None:
        flag, key = _COUNT_FLAGS.get(field, (field, field))
        raise MissingFieldError(field, f"give {flag} (a count, a comma-separated list A,B or a range LO-HI) "
                                       f"or {key} in the workload file")
    bound = WORKLOAD_FIELD_BOUNDS.get(field, NUM_DEVICES)
    assert isinstance(bound, Bound)  # counts are integer fields
    if isinstance(text, int):
        return (bound.check(field, text),)
    out: list[int] = []
    try:
        for part in str(text).split(","):
            part = part.strip()
            if "-" in part:
                lo_s, hi_s = part.split("-", 1)
                lo, hi = int(lo_s), int(hi_s)
                if lo < 1 or hi < lo:
                    raise ValueError
                bound.check(field, hi)  # before the range is expanded
                v = lo
                while v <= hi:
                    out.append(v)
                    v *= 2
                out.append(hi)
            else:
                out.append(int(part))
    except SpecError:
        raise
    except ValueError:
        raise SpecError(field, text, "a positive integer, a list A,B,C or a range LO-HI") from None
    for v in out:
        bound.check(field, v)
    out = sorted(set(out))
    SEARCH_VALUES.check(f"{field} (values)", len(out))
    return tuple(out)


def parse_fixed(text: str | None) -> tuple[tuple[str, int], ...]:
    """``"tp=8,pp=1"`` -> ``(("tp", 8), ("pp", 1))`` (``sp`` and booleans as 0/1)."""
    if not text:
        return ()
    out = []
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        key = key.strip().replace("-", "_")
        if key in ("mbs", "micro"):
            key = "micro_batch"
        if key == "zero_stage":
            key = "zero"
        if key == "sequence_parallel":
            key = "sp"
        v = {"true": "1", "false": "0", "on": "1", "off": "0"}.get(value.strip().lower(), value.strip())
        if not sep or not v.isdigit():
            raise SpecError("fix", part.strip(), "KEY=INTEGER pairs such as tp=8,pp=1")
        out.append((key, int(v)))
    return tuple(out)


def _inputs(args: argparse.Namespace) -> dict[str, Any]:
    from trainperf.plan.space import DEFAULT_CHECKPOINTING
    from trainperf.specs.workload_file import (
        hardware_from_section,
        merge_overrides,
        model_from_section,
        precision_with_recipe,
        read_workload_file,
    )

    data = read_workload_file(args.workload) if args.workload else {}
    over = {"model.preset": args.model, "model.hf_config": args.hf_config, "hardware.device": args.device,
            "hardware.devices_per_node": args.devices_per_node, "training.seq_len": args.seq_len}
    data = merge_overrides(data, over)
    model = model_from_section(data.get("model", {}), data.get("_base_dir"))
    tr = data.get("training", {})
    hw_body = dict(data.get("hardware", {}))
    precisions = tuple(p.strip() for p in (args.precision or str(tr.get("precision", "bf16"))).split(",") if p.strip())
    fp8_recipe, read = args.fp8_recipe or tr.get("fp8_recipe"), []
    for p in precisions:  # a name that states the recipe (mxfp8) sets it
        dtype, fp8_recipe = precision_with_recipe(p, fp8_recipe)
        read.append(dtype)
    precisions = tuple(dict.fromkeys(read))
    num_text = args.num_devices if args.num_devices is not None else hw_body.get("num_devices")
    hw_body.pop("num_devices", None)
    dpn = hw_body.pop("devices_per_node", None)
    hardware = hardware_from_section(hw_body, precisions[0])
    from trainperf.specs.model_notes import default_training_seq_len

    seq = SEQ_LEN.check("training.seq_len", tr.get("seq_len", default_training_seq_len(model)))
    gb_text = args.global_batch if args.global_batch is not None else tr.get("global_batch")
    software = {"compile": args.training_compile if args.training_compile is not None else tr.get("compile", False),
                "async_tp": args.async_tp if args.async_tp is not None else tr.get("async_tp", False),
                "fp8_recipe": fp8_recipe,
                "moe_dispatcher": args.moe_dispatcher or tr.get("moe_dispatcher"),
                "moe_imbalance": float(args.moe_imbalance if args.moe_imbalance is not None
                                       else tr.get("moe_imbalance", 1.0)),
                "offload_optimizer": _offload(args, tr, hardware),
                "stack": str(args.stack or tr.get("stack", "generic"))}
    release = getattr(args, "stack_release", "")
    if release:
        _check_release(software["stack"], release)
    ac, notes = _policies(args.activation_checkpointing, software["stack"], DEFAULT_CHECKPOINTING, release, model)
    if getattr(args, "scale_up_domain", None) is not None:
        dom = args.scale_up_domain
        if isinstance(dom, bool) or dom < 1:
            raise SpecError("hardware.scale_up_domain", dom, "a positive integer (devices per NVLink/xGMI domain)")
        hardware = dataclasses.replace(hardware, scale_up_domain=dom, sources={
            **hardware.sources, "scale_up_domain": "given by the user (--scale-up-domain)"})
    return {"model": model, "hardware": hardware, "num_text": num_text, "dpn": dpn, "seq": seq,
            "gb_text": gb_text, "precisions": precisions, "ac": ac, "software": software, "release": release,
            "notes": notes}


def _check_release(stack: str, release: str) -> None:
    """A ``--stack-release`` must name a version of a product the stack's profile dates its
    capabilities by; anything else would silently search the current release."""
    from trainperf.predict.stack_capabilities import (
        capabilities_of,
        describe_release,
        release_kind,
        release_named,
    )

    caps = capabilities_of(stack)
    firsts = {p: first for _key, _value, rels in caps.introduced for p, first in rels}
    if not firsts:
        raise SpecError("stack_release", release, f"nothing: the {caps.stack} stack dates none of its "
                        "capabilities (leave --stack-release out)")
    named = [v for v in (release_named(release, p) for p in firsts) if v is not None]
    if not named:
        product, first = next(iter(firsts.items()))
        raise SpecError("stack_release", release, f"a release of {' or '.join(sorted(firsts))} with its "
                        f"version or date, e.g. '{product} {describe_release(first)}'")
    if any(release_kind(v) == 2 and not (1 <= v[1] <= 12 and 0 <= v[2] <= 31) for v in named):
        raise SpecError("stack_release", release, "a date as YYYY-MM or YYYY-MM-DD with a month 1-12")


def _policies(text: str | None, stack: str, default: tuple[str, ...], release: str = "",
              model: Any = None) -> tuple[tuple[str, ...], list[str]]:
    """Checkpointing policies to try, and a note per framework name translated: the ones named
    (a framework's own names as :func:`~trainperf.specs.checkpointing.framework_policy` maps
    them), each checked against the stack's ``[capabilities]`` (as of ``release``); by default
    the generic three, or the searchable policies of a named stack
    (:func:`~trainperf.plan.space.searched_policies` for ``model``)."""
    from trainperf.plan.space import AC_POLICIES, searched_policies
    from trainperf.predict.stack_capabilities import capabilities_of
    from trainperf.specs.checkpointing import framework_policy, get_policy

    caps = capabilities_of(stack).as_of(release)
    if text:
        named, notes = [], []
        for given in (p.strip() for p in text.split(",") if p.strip()):
            p, mapping = framework_policy(given, stack)
            p = get_policy(p).name
            if mapping:
                notes.append(f"activation checkpointing: {mapping}")
            if not caps.allows_policy(p):
                have = ", ".join(caps.checkpointing)
                raise SpecError("training.activation_checkpointing", given,
                                f"one the {caps.stack} stack runs: {have}")
            named.append(p)
        return tuple(dict.fromkeys(named)), notes
    if stack == "generic" or not caps.checkpointing:
        return default, []
    if model is not None:
        return searched_policies(model, caps), []
    return tuple(p for p in AC_POLICIES if caps.allows_policy(p)), []


def _space(args: argparse.Namespace, inp: dict[str, Any], counts: tuple[int, ...]):
    from trainperf.plan.space import SearchSpace

    hw = inp["hardware"]
    dpn = inp["dpn"] or hw.devices_per_node
    for n in counts:
        if n > dpn and n % dpn:
            raise SpecError("hardware.num_devices", n, f"a multiple of devices_per_node={dpn} when it spans nodes")
    gbs = parse_counts(inp["gb_text"], "training.global_batch")
    margin = {} if args.memory_margin is None else {"memory_margin": args.memory_margin}
    return SearchSpace(num_devices=counts, devices_per_node=dpn, fixed=parse_fixed(args.fix),
                       seq_len=inp["seq"], global_batches=gbs, precisions=inp["precisions"],
                       checkpointing=inp["ac"], max_micro_batch=args.max_micro_batch, max_vpp=args.max_vpp,
                       allow_cross_node_tp=args.allow_cross_node_tp, release=inp["release"],
                       **margin, **inp["software"])


def check_search_bounds(args: argparse.Namespace) -> None:
    """The search's own numbers within their bounds (:mod:`trainperf.specs.bounds`), before any work."""
    MICRO_BATCH.check("max_micro_batch", args.max_micro_batch)
    if args.max_vpp != 0:  # 0: up to layers/pp, or the stack's limit
        VPP.check("max_vpp", args.max_vpp)
    SEARCH_RESULTS.check("top", args.top)
    if args.memory_margin is not None:
        MEMORY_MARGIN.check("memory_margin", args.memory_margin)
    SEARCH_RESULTS.check("rerank", args.rerank)
    for name, bound in (("train_tokens", TRAIN_TOKENS), ("usd_per_device_hour", USD_PER_DEVICE_HOUR),
                        ("target_days", DAYS)):
        if getattr(args, name) is not None:
            bound.check(name, getattr(args, name))


def _calibration(args: argparse.Namespace):
    if not args.calibration:
        return None
    from trainperf.predict.step import load_calibration

    return load_calibration(args.calibration)


def run(args: argparse.Namespace) -> int:
    from trainperf.plan.search import Objective, search

    check_search_bounds(args)
    inp = _inputs(args)
    cal = _calibration(args)
    if args.target_days is not None:
        return _run_inverse(args, inp, cal)
    counts = parse_counts(inp["num_text"], "hardware.num_devices")
    space = _space(args, inp, counts)
    if inp["dpn"] is None:  # the catalog's devices per node: on a CPU, one process per machine
        from trainperf.specs.workload import cpu_machines_note

        note = cpu_machines_note(inp["hardware"].kind, max(counts), space.devices_per_node)
        if note:
            inp["notes"].append(note)
    obj = Objective(args.objective, train_tokens=args.train_tokens, usd_per_device_hour=args.usd_per_device_hour)
    result = search(inp["model"], inp["hardware"], space, obj, top_k=args.top, rerank=args.rerank,
                    calibration=cal, convention=args.convention, per_stack=True)
    return _report(args, result, cal, extra={"notes": inp["notes"]} if inp["notes"] else None)


def _report(args: argparse.Namespace, result: Any, cal: Any, extra: dict[str, Any] | None = None) -> int:
    from trainperf.plan import explain, feasibility

    top = result.top[: args.top]
    header = (f"{result.model.name} on {'/'.join(map(str, result.space.num_devices))}x {result.hardware.id} "
              f"({result.space.devices_per_node} per node), seq {result.space.seq_len}, global batch "
              f"{'/'.join(map(str, result.space.global_batches))}; objective: {result.objective.name}")
    message = None if top else feasibility.infeasible_message(result, calibration=cal)
    why = explain.why_best(result) if top else ""
    costs = [_time_and_cost(args, p) for p in top]
    if args.json:
        out = {"model": result.model.name, "device": result.hardware.id,
               "num_devices": list(result.space.num_devices),
               "devices_per_node": result.space.devices_per_node, "seq_len": result.space.seq_len,
               "global_batches": list(result.space.global_batches), "objective": result.objective.name,
               "memory_margin": result.space.memory_margin,
               "considered": result.considered, "feasible": result.feasible,
               "rejected": dict(result.rejected.most_common()), "elapsed_s": result.elapsed_s,
               "plans": [_plan_dict(p, c) for p, c in zip(top, costs, strict=True)], "why": why,
               "message": message}
        if extra:
            out.update(extra)
        print_json(out)
    else:
        print(header)
        for note in (extra or {}).get("notes", []):
            print(f"note: {note}")
        if extra and "inverse" in extra:
            print(extra["inverse"])
        if top:
            print(_plans_table(result, top, costs, timed=args.train_tokens is not None))
            if costs[0] is not None and args.train_tokens:
                print(f"#1 trains {costs[0].sentence()}")
            print(f"capacity {top[0].capacity_GiB:.1f} GiB per device; {explain.memory_breakdown_line(top[0])} (#1)")
            print("why #1: " + why)
        if args.explain:
            for line in explain.rejection_lines(result):
                print(line)
    if message:
        print(f"trainperf plan: {message}", file=sys.stderr)
        return 1
    return 0


def _time_and_cost(args: argparse.Namespace, p: Any) -> Any:
    """How long and how much ``--train-tokens`` take on plan ``p`` (priced with
    ``--usd-per-device-hour``); with a price but no token count, the price of 1e9 tokens;
    ``None`` with neither."""
    from trainperf.accounting.throughput import time_and_cost

    if args.train_tokens is None and args.usd_per_device_hour is None:
        return None
    return time_and_cost(args.train_tokens or 1e9, p.tokens_per_s, p.workload.num_devices,
                         args.usd_per_device_hour)


def _plan_dict(p: Any, cost: Any) -> dict[str, Any]:
    """A ranked plan for ``--json``: its fields, the stack it was predicted with, and its time
    and cost (``days_to_train``/``cost_usd`` also when the objective is throughput)."""
    d = p.to_dict()
    d["stack"] = p.workload.stack
    if cost is not None:
        d["time_and_cost"] = cost.to_dict()
        d["days_to_train"], d["device_hours"], d["cost_usd"] = cost.days, cost.device_hours, cost.cost_usd
    return d


def _plans_table(result: Any, top: list[Any], costs: list[Any], *, timed: bool) -> str:
    """The ranked plans: layout, figures, time and cost when asked for (``timed``: a token count
    was given), bottleneck, stack."""
    headers = ["#", "plan", "devices", "GBS", "step s (80% range)", "tokens/s", "MFU %", "GiB/device"]
    priced = costs[0] is not None and costs[0].usd_per_device_hour is not None
    if timed:
        headers += ["days", "device-hours"]
    if priced:
        headers.append("USD" if timed else "USD per 1e9 tokens")
    headers.append("bottleneck")
    generic = result.space.stack == "generic"
    if generic:
        headers.append("predicted with stack (others that run it)")
    rows = []
    for p, c in zip(top, costs, strict=True):
        band = f" ({p.interval_s[0]:.3g}-{p.interval_s[1]:.3g})" if p.interval_s else ""
        row = [p.rank, p.label, p.workload.num_devices, p.workload.global_batch, f"{p.step_time_s:.4g}{band}",
               fmt(p.tokens_per_s), f"{p.mfu_pct:.1f}", f"{p.memory_GiB:.1f}"]
        if timed:
            row += [f"{c.days:,.2f}", f"{c.device_hours:,.0f}"]
        if priced:
            row.append(f"{c.cost_usd:,.0f}" if timed else f"{c.usd_per_billion_tokens:,.2f}")
        row.append(p.bottleneck)
        if generic:
            row.append(_stack_cell(p))
        rows.append(row)
    return table(rows, headers)


def _stack_cell(p: Any) -> str:
    """The stack a plan was predicted with, and the other packaged stacks that run it."""
    stack = p.workload.stack
    others = [s for s in p.stacks if s != stack]
    if stack == "generic":
        return "generic (no packaged stack runs it)" if not p.stacks else "generic"
    return stack + (f" ({', '.join(others)})" if others else "")


def _run_inverse(args: argparse.Namespace, inp: dict[str, Any], cal: Any) -> int:
    from trainperf.plan.inverse import smallest_device_count

    if args.train_tokens is None:
        raise MissingFieldError("train_tokens", "give --train-tokens T with --target-days")
    hw = inp["hardware"]
    dpn = inp["dpn"] or hw.devices_per_node
    template = _space(args, inp, (dpn,))
    inv = smallest_device_count(inp["model"], hw, template, target_days=args.target_days,
                                train_tokens=args.train_tokens, top_k=args.top, calibration=cal,
                                convention=args.convention, per_stack=True)
    tried, why_slower = tried_line(inv.tried, inp["gb_text"])
    if inv.num_devices is None:
        line = (f"no device count up to {max(inv.tried) if inv.tried else 0} trains {args.train_tokens:.3g} tokens "
                f"in {args.target_days:g} days (needs {inv.required_tokens_per_s:,.0f} tokens/s; tried {tried}"
                + (f"; {why_slower})" if why_slower else ")"))
        fastest = max(inv.tried.items(), key=lambda kv: kv[1]) if inv.tried else (0, 0.0)
        if fastest[1] > 0:
            line += (f"; the fastest is {fastest[0]} devices at {fastest[1]:,.0f} tokens/s "
                     f"({args.train_tokens / fastest[1] / 86400:,.1f} days): a larger global batch allows "
                     "more data parallelism")
        if args.json:
            print_json({"inverse": inv.to_dict(), "message": line})
        print(f"trainperf plan: {line}", file=sys.stderr)
        return 1
    assert inv.result is not None  # smallest_device_count searched the count it found
    best = inv.result.top[0]
    line = (f"smallest device count: {inv.num_devices} ({inv.num_devices // dpn} nodes) trains "
            f"{args.train_tokens:.3g} tokens in {best.days_to_train:.2f} days "
            f"(target {args.target_days:g}; needs {inv.required_tokens_per_s:,.0f} tokens/s)\ntried: {tried}"
            + (f"\nnote: {why_slower}" if why_slower else ""))
    extra: dict[str, Any] = {"inverse": line} if not args.json else {"inverse": inv.to_dict()}
    return _report(args, inv.result, cal, extra={**extra, "notes": inp["notes"]} if inp["notes"] else extra)


def tried_line(tried: dict[int, float], global_batch: Any) -> tuple[str, str | None]:
    """The device counts the inverse search evaluated, each with its best tokens/s or "no plan
    fits", and, when a count is slower than a smaller one, a note saying why: the best plan
    depends on how the count factors (dp x tp x pp x cp, dp a divisor of the global batch), not
    only on its size."""
    pairs = sorted(tried.items())
    shown = pairs if len(pairs) <= 8 else [*pairs[:3], *pairs[-5:]]
    text = ", ".join(f"{n}: {_rate(t)}" for n, t in shown)
    if len(pairs) > len(shown):
        text = f"{len(pairs)} counts, e.g. " + text
    best = 0.0
    slower = []
    for n, t in pairs:
        if t < best:
            slower.append(n)
        best = max(best, t)
    if not slower:
        return text, None
    return text, (f"{', '.join(map(str, slower[:4]))}{' ...' if len(slower) > 4 else ''} "
                  f"{'is' if len(slower) == 1 else 'are'} slower than a smaller count: a count's plans split it "
                  f"as dp x tp x pp x cp with dp dividing the global batch {global_batch}, so a count with few "
                  "such factors has few plans, or none")


def _rate(tokens_per_s: float) -> str:
    """Tokens/s in millions, or "no plan fits" for a count where none does."""
    if tokens_per_s <= 0:
        return "no plan fits"
    return f"{tokens_per_s / 1e6:.3g}M tok/s"



def _offload(args: argparse.Namespace, training: dict[str, Any], hardware: Any) -> bool:
    """``--offload-optimizer`` or ``training.offload_optimizer``, checked as a workload checks it."""
    from trainperf.specs.workload import check_offload

    on = args.offload_optimizer if args.offload_optimizer is not None else training.get("offload_optimizer", False)
    check_offload(hardware, on)
    return bool(on)
