"""The bench's MoE layer: experts as one grouped GEMM (torch._grouped_mm) against a loop over experts.

Times the whole MoE layer of :mod:`trainperf.measure.moe` (router, sort, experts, combine),
forward and backward, on the same tokens and weights with the experts computed both ways, at
8 and 64 experts (top-2 of 8; top-8 of 64, Qwen3-MoE's routing), in alternation so that load
from other processes hits both alike. Prints the median step time of each and the ratio
loop / grouped (> 1: the grouped GEMM is faster), and checks that both give the same output.

    python benchmarks/moe_speed.py                # this CPU, fp32
    python benchmarks/moe_speed.py --device cuda  # a GPU, bf16
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from trainperf.measure.moe import MoE, grouped_mm_runs
from trainperf.specs.model import ModelSpec

CASES = ((8, 2), (64, 8))
"""(experts, top-k)."""


def build(experts: int, topk: int, hidden: int, expert_ffn: int, device: str, dtype: torch.dtype) -> MoE:
    spec = ModelSpec(name="moe-speed", layers=2, hidden=hidden, heads=8, kv_heads=8, ffn_hidden=4 * hidden,
                     vocab=256, moe_experts=experts, moe_topk=topk, moe_expert_ffn=expert_ffn,
                     moe_dense_layers=1)
    torch.manual_seed(0)
    layer = MoE(spec, layer_id=1).to(device=device, dtype=dtype)
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0.0, 0.02)
    return layer


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def step_time(layer: MoE, x: torch.Tensor, grouped: bool, device: str) -> float:
    layer.experts.use_grouped = grouped
    _sync(device)
    t = time.perf_counter()
    layer(x).float().square().mean().backward()
    _sync(device)
    return time.perf_counter() - t


def compare(experts: int, topk: int, args: argparse.Namespace, dtype: torch.dtype) -> dict[str, float]:
    layer = build(experts, topk, args.hidden, args.expert_ffn, args.device, dtype)
    x = torch.randn(args.tokens, args.hidden, device=args.device, dtype=dtype, requires_grad=True)
    with torch.no_grad():
        layer.experts.use_grouped = True
        a = layer(x)
        layer.experts.use_grouped = False
        b = layer(x)
    err = float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-12))
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(2):  # warm-up
        for g in (True, False):
            step_time(layer, x, g, args.device)
    for _ in range(args.repeats):
        for g in (True, False):
            times[g].append(step_time(layer, x, g, args.device))
    grouped, loop = statistics.median(times[True]), statistics.median(times[False])
    return {"experts": experts, "topk": topk, "grouped_ms": 1e3 * grouped, "loop_ms": 1e3 * loop,
            "ratio": loop / grouped, "max_rel_diff": err}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--tokens", type=int, default=2048, help="token rows per step (default 2048)")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--expert-ffn", type=int, default=256)
    p.add_argument("--repeats", type=int, default=15, help="timed steps of each (default 15)")
    a = p.parse_args(argv)
    dtype = torch.float32 if a.device == "cpu" else torch.bfloat16
    runs, why = grouped_mm_runs(torch.device(a.device), dtype)
    if not runs:
        print(f"torch._grouped_mm does not run here: {why}")
        return 1
    print(f"MoE layer forward+backward, {a.tokens} tokens, hidden {a.hidden}, expert ffn {a.expert_ffn}, "
          f"{str(dtype).removeprefix('torch.')} on {a.device} (torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads); median of {a.repeats}, alternated")
    for experts, topk in CASES:
        r = compare(experts, topk, a, dtype)
        print(f"  {experts:3d} experts top-{topk}: grouped {r['grouped_ms']:8.2f} ms, loop {r['loop_ms']:8.2f} ms, "
              f"loop/grouped {r['ratio']:.2f}x (outputs agree to {r['max_rel_diff']:.1e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
