"""MLP-wide tensors a gated MLP keeps for its backward, eager and compiled: the figure behind the
memory model's :data:`~trainperf.predict.step_model.memory.GATED_MLP_KEPT` and
:func:`~trainperf.predict.step_model.memory.eager_activation_kept`.

The MLP is the bench's (``trainperf.measure.model.FeedForward``: ``w2(silu(w1(x)) * w3(x))``,
the same code as torchtitan's ``FeedForward`` and transformers' ``LlamaMLP``), in bf16, on
16,384 tokens. Each mode runs in a fresh process with glibc's mmap threshold fixed at 64 KiB
(``MALLOC_MMAP_THRESHOLD_``), so that every tensor of the measurement is its own mapping and the
process's resident memory after the forward, less before it, is what the forward left live: the
tensors autograd keeps, and the output. It is read at two MLP widths; the difference over the
width difference is the number of MLP-wide tensors kept per token.

    python benchmarks/activation_memory.py
    python benchmarks/activation_memory.py --device cuda --json   # on a GPU (benchmarks/gpu_check.py runs it)

On a CPU it needs Linux's ``/proc/self/status``; the tensors kept are autograd's and Inductor's
choice, which ``--device cuda`` checks with CUDA's allocated bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the tests load this file by path
from memory_meter import MemoryMeter

TOKENS = 16384
HIDDEN = 1024
WIDTHS = (2048, 4096)


def live_elements_per_token(mode: str, ffn: int, tokens: int = TOKENS, hidden: int = HIDDEN,
                            device: str = "cpu") -> float:
    """bf16 elements per token the MLP's forward leaves live (kept tensors and the output); the
    third of three iterations (the first ones warm up the allocator and the compiler)."""
    import dataclasses
    import gc

    import torch

    from trainperf.measure.model import FeedForward
    from trainperf.specs.presets import get_model

    spec = dataclasses.replace(get_model("debug"), hidden=hidden, ffn_hidden=ffn)
    mlp: torch.nn.Module = FeedForward(spec).to(device=device, dtype=torch.bfloat16)
    if mode == "compiled":
        mlp = torch.compile(mlp)
    live, meter = 0.0, MemoryMeter(device)
    for _ in range(3):
        x = torch.randn(tokens, hidden, dtype=torch.bfloat16, device=device, requires_grad=True)
        gc.collect()
        meter.start()
        y = mlp(x)
        live = meter.live() / tokens / 2
        y.float().sum().backward()
        del y
    return live


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cpu: the process's resident memory; cuda: CUDA's allocated bytes (default cpu)")
    ap.add_argument("--json", action="store_true", help="print JSON for scripts")
    ap.add_argument("--mode", choices=("eager", "compiled"), help=argparse.SUPPRESS)
    ap.add_argument("--ffn", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--tokens", type=int, default=TOKENS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.mode:
        print(json.dumps(live_elements_per_token(args.mode, args.ffn, tokens=args.tokens, device=args.device)))
        return 0
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    got: dict[str, Any] = {}
    for mode in ("eager", "compiled"):
        live = []
        for ffn in WIDTHS:
            r = subprocess.run([sys.executable, __file__, "--mode", mode, "--ffn", str(ffn), "--device", args.device],
                               env=env, capture_output=True, text=True, check=False)
            if r.returncode != 0:
                got[mode] = f"failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}"
                break
            live.append(json.loads(r.stdout.strip().splitlines()[-1]))
        else:
            got[mode] = {"mlp_wide_kept": (live[1] - live[0]) / (WIDTHS[1] - WIDTHS[0]), "live_per_token": live}
    if args.json:
        print(json.dumps({"device": args.device, "hidden": HIDDEN, "tokens": TOKENS, "ffn": WIDTHS, **got}))
        return 0
    print(f"gated MLP (SwiGLU), hidden {HIDDEN}, {TOKENS} tokens, bf16, on {args.device}: MLP-wide tensors kept "
          "per token")
    for mode, r in got.items():
        print(f"{mode:9s} {r}" if isinstance(r, str) else
              f"{mode:9s} {r['mlp_wide_kept']:.2f}  (live elements per token at ffn {WIDTHS[0]} / {WIDTHS[1]}: "
              f"{r['live_per_token'][0]:.0f} / {r['live_per_token'][1]:.0f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
