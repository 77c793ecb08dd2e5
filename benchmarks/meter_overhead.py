"""ThroughputMeter overhead as a fraction of a training step (goal: under 1%).

Two measurements, in one process:

1. direct: the cost of one ``meter.step()`` call as the bench makes it (clock read, rates, RSS
   high-water read, a StepRecord, one flushed JSONL line, the console line formatted into a
   buffer), median over many calls; divided by the median step time of the default bench model
   (``debug`` preset, 8 x 256 tokens, bf16 autocast) measured in the same run;
2. end to end: the same training loop with and without the meter, alternated in blocks; the
   difference of the medians. On a shared machine this is dominated by noise (a few %), so it is
   a sanity check, not the figure to quote.

    python benchmarks/meter_overhead.py                # ~1 minute
    python benchmarks/meter_overhead.py --rounds 6 --steps 10
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time

import torch


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000, help="meter.step() calls for the direct measurement")
    p.add_argument("--steps", type=int, default=6, help="training steps per block")
    p.add_argument("--rounds", type=int, default=4, help="alternated (with, without) blocks")
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--threads", type=int, default=None)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    from trainperf.measure.meter import ThroughputMeter
    from trainperf.measure.model import build_model
    from trainperf.measure.sinks import ConsoleSink
    from trainperf.measure.trainer import cross_entropy, make_optimizer
    from trainperf.specs.model import ModelSpec

    spec = ModelSpec.preset("debug")
    tokens = a.micro_batch * a.seq_len
    tmp = tempfile.TemporaryDirectory()
    sink_buf = io.StringIO()

    def new_meter(name: str) -> ThroughputMeter:
        return ThroughputMeter(f"{tmp.name}/{name}.jsonl", flops_per_token=6 * spec.total_params, peak_tflops=1.0,
                               total_steps=10**6, sinks=[ConsoleSink(stream=sink_buf)], source="bench")

    # 1. direct cost of meter.step()
    meter = new_meter("direct")
    loss = torch.tensor(3.0)
    costs = []
    for _ in range(a.calls):
        t = time.perf_counter()
        meter.step(tokens=tokens, loss=loss, grad_norm=1.0)
        costs.append(time.perf_counter() - t)
    meter.close()
    call_s = statistics.median(costs)

    # 2. the training loop with / without the meter
    model = build_model(spec, seq_len=a.seq_len)
    opt = make_optimizer(model, 1e-3)
    g = torch.Generator().manual_seed(0)

    def train_step() -> torch.Tensor:
        x = torch.randint(0, spec.vocab, (a.micro_batch, a.seq_len + 1), generator=g)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(x[:, :-1])
        loss = cross_entropy(logits, x[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    for _ in range(3):
        train_step()
    with_m, without = [], []
    metered = new_meter("loop")
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        metered.start()
        for _ in range(a.steps):
            metered.step(tokens=tokens, loss=train_step())
        with_m.append((time.perf_counter() - t0) / a.steps)
        t0 = time.perf_counter()
        for _ in range(a.steps):
            float(train_step())
        without.append((time.perf_counter() - t0) / a.steps)
    metered.close()
    step_s = statistics.median(without)
    print(f"model: debug preset ({spec.total_params / 1e6:.2f}M params), {a.micro_batch} x {a.seq_len} tokens, "
          f"bf16 autocast, {torch.get_num_threads()} threads")
    print(f"direct: meter.step() median {call_s * 1e6:.1f} us over {a.calls} calls "
          f"(p90 {sorted(costs)[int(0.9 * len(costs))] * 1e6:.1f} us); step median {step_s * 1e3:.1f} ms "
          f"-> overhead {100 * call_s / step_s:.3f}% of a step")
    print(f"end to end (noisy): with meter {statistics.median(with_m) * 1e3:.1f} ms/step, without "
          f"{step_s * 1e3:.1f} ms/step -> {100 * (statistics.median(with_m) / step_s - 1):+.2f}% "
          f"({a.rounds} alternated blocks of {a.steps} steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
