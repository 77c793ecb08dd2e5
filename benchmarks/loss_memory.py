"""Live bytes per logit of PyTorch's cross-entropy on 16-bit logits, eager and compiled: the
figures behind the stack profiles' ``loss_bytes_per_logit`` and ``compiled_loss_bytes_per_logit``
(torchtitan, Hugging Face transformers and trainperf's own bench all call
``F.cross_entropy(logits.float(), labels)``).

A bf16 head ``h @ W.T`` makes the logits, the loss takes them, the caller drops its reference
(``del pred``, as torchtitan's train step does) and runs the backward. Each mode runs in a fresh
process; the process's peak resident memory (Linux ``VmHWM``, reset through
``/proc/self/clear_refs``) is read over the forward and then over the backward, relative to the
memory before the forward, per logit. The backward's peak is the one a training step pays: it
comes while every activation of the step is still held. The third of three iterations is
reported (the first ones warm up the allocator and the compiler).

    python benchmarks/loss_memory.py                  # 4096 tokens x 32768 vocabulary
    python benchmarks/loss_memory.py --tokens 8192 --vocab 65536
    python benchmarks/loss_memory.py --device cuda --json    # on a GPU (benchmarks/gpu_check.py runs it)

On a CPU it needs Linux's ``/proc/self/clear_refs`` (glibc's mmap threshold is fixed at 64 KiB
for the measuring process, so that every tensor is its own mapping); the tensors' lifetimes are
the autograd graph's and the compiled graph's, not the device's, which ``--device cuda`` checks
with CUDA's allocator statistics.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the tests load this file by path
from memory_meter import MemoryMeter


def measure(mode: str, tokens: int, vocab: int, width: int = 256, device: str = "cpu") -> dict[str, float]:
    """Bytes per logit live at the loss's forward peak and at its backward peak (one process)."""
    import gc

    import torch
    import torch.nn.functional as F

    def loss_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(x.flatten(0, 1).float(), y.flatten(0, 1))

    fn = torch.compile(loss_fn) if mode == "compiled" else loss_fn
    torch.manual_seed(0)
    h = torch.randn(1, tokens, width, dtype=torch.bfloat16, device=device, requires_grad=True)
    w = torch.randn(vocab, width, dtype=torch.bfloat16, device=device, requires_grad=True)
    y = torch.randint(0, vocab, (1, tokens), device=device)
    per_logit = 1.0 / (tokens * vocab)
    meter = MemoryMeter(device)
    out: dict[str, float] = {}
    for _ in range(3):
        gc.collect()
        meter.start()
        pred = h @ w.t()
        loss = fn(pred, y)
        del pred
        fwd = meter.peak()
        meter.restart_peak()
        loss.backward()
        bwd = meter.peak()
        h.grad = w.grad = None
        out = {"forward_bytes_per_logit": fwd * per_logit, "backward_bytes_per_logit": bwd * per_logit}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cpu: the process's resident memory; cuda: CUDA's allocated bytes (default cpu)")
    ap.add_argument("--json", action="store_true", help="print JSON for scripts")
    ap.add_argument("--mode", choices=("eager", "compiled"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.tokens <= 0 or args.vocab <= 0:
        ap.error(f"--tokens {args.tokens} / --vocab {args.vocab}: give positive counts")
    if args.mode:
        print(json.dumps(measure(args.mode, args.tokens, args.vocab, device=args.device)))
        return 0
    got: dict[str, dict[str, float] | str] = {}
    for mode in ("eager", "compiled"):
        r = subprocess.run([sys.executable, __file__, "--mode", mode, "--tokens", str(args.tokens),
                            "--vocab", str(args.vocab), "--device", args.device], capture_output=True, text=True,
                           check=False, env=dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536"))
        got[mode] = (json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0
                     else f"failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    if args.json:
        print(json.dumps({"device": args.device, "tokens": args.tokens, "vocab": args.vocab, **got}))
        return 0
    print(f"{args.tokens} tokens x {args.vocab} vocabulary, bf16 logits ({args.tokens * args.vocab * 2 / 2**20:.0f} "
          f"MiB) on {args.device}; bytes per logit live above the memory before the loss")
    print(f"{'loss':10s} {'forward peak':>13s} {'backward peak':>14s}")
    for mode, r in got.items():
        print(f"{mode:10s} {r}" if isinstance(r, str) else
              f"{mode:10s} {r['forward_bytes_per_logit']:13.1f} {r['backward_bytes_per_logit']:14.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
