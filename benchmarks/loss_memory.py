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

Needs torch and Linux's ``/proc/self/clear_refs``; on a CPU the figures hold for a GPU too: the
tensors' lifetimes are the autograd graph's and the compiled graph's, not the device's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys


def _rss_MiB(field: str) -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")


def measure(mode: str, tokens: int, vocab: int, width: int = 256) -> dict[str, float]:
    """Bytes per logit live at the loss's forward peak and at its backward peak (one process)."""
    import gc

    import torch
    import torch.nn.functional as F

    def loss_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(x.flatten(0, 1).float(), y.flatten(0, 1))

    fn = torch.compile(loss_fn) if mode == "compiled" else loss_fn
    torch.manual_seed(0)
    h = torch.randn(1, tokens, width, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(vocab, width, dtype=torch.bfloat16, requires_grad=True)
    y = torch.randint(0, vocab, (1, tokens))
    per_logit = 2**20 / (tokens * vocab)
    out: dict[str, float] = {}
    for _ in range(3):
        gc.collect()
        base = _rss_MiB("VmRSS:")
        _reset_peak()
        pred = h @ w.t()
        loss = fn(pred, y)
        del pred
        fwd = _rss_MiB("VmHWM:") - base
        _reset_peak()
        loss.backward()
        bwd = _rss_MiB("VmHWM:") - base
        h.grad = w.grad = None
        out = {"forward_bytes_per_logit": fwd * per_logit, "backward_bytes_per_logit": bwd * per_logit}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--mode", choices=("eager", "compiled"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.tokens <= 0 or args.vocab <= 0:
        ap.error(f"--tokens {args.tokens} / --vocab {args.vocab}: give positive counts")
    if args.mode:
        print(json.dumps(measure(args.mode, args.tokens, args.vocab)))
        return 0
    print(f"{args.tokens} tokens x {args.vocab} vocabulary, bf16 logits "
          f"({args.tokens * args.vocab * 2 / 2**20:.0f} MiB); bytes per logit live above the memory before the loss")
    print(f"{'loss':10s} {'forward peak':>13s} {'backward peak':>14s}")
    for mode in ("eager", "compiled"):
        r = subprocess.run([sys.executable, __file__, "--mode", mode, "--tokens", str(args.tokens),
                            "--vocab", str(args.vocab)], capture_output=True, text=True, check=False)
        if r.returncode != 0:
            print(f"{mode:10s} failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
            continue
        got = json.loads(r.stdout.strip().splitlines()[-1])
        print(f"{mode:10s} {got['forward_bytes_per_logit']:13.1f} {got['backward_bytes_per_logit']:14.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
