"""nanoGPT (Karpathy) training logs.

Step line (every ``log_interval`` iterations, master process only)::

    iter 100: loss 3.2145, time 135.67ms, mfu 38.21%

``time`` is the wall time of that one iteration (``dt`` between consecutive iterations);
``mfu`` is a running average (0.9/0.1 EMA) of ``estimate_mfu``, which counts 6*N + 12*L*H*Q*T
per token (PaLM appendix B; N excludes the position embedding) for the process's own batch and
divides by a hard-coded A100 bf16 peak of 312 TFLOP/s. The first iterations print
``mfu -100.00%`` (not yet measured), which is read as missing. Facts: ``tokens per iteration
will be: 491,520`` (tokens per step, all ranks) and the config lines ``block_size = 1024``.

modded-nanogpt (KellerJordan/modded-nanogpt, the nanoGPT speedrun) prints, every step::

    step:125/1770 train_time:10000ms step_avg:80.00ms
    step:125/1770 val_loss:4.2681 train_time:10000ms step_avg:80.00ms

(older records also print ``train_loss:``). ``train_time`` is the cumulative training time,
paused during validation and reset once after the first warm-up steps; ``step_avg`` is its
running mean. A step's time is the difference of consecutive ``train_time`` values over the
steps between them (a reset, where the time goes down, gives none); a validation line gives no
step, only the time it was paused at. No tokens per step are printed.
"""

from __future__ import annotations

import re

from trainperf.ingest.base import LogParser, ParseState, make_step, to_float, to_int
from trainperf.records.run_record import StepRecord

_RE = re.compile(r"iter (\d+): loss ([^,]+), time ([-+\d.eE]+)\s*ms(?:, mfu ([-+\d.eE]+)%)?")
NANOGPT_PEAK_TFLOPS = 312.0
_MODDED = re.compile(r"step:(\d+)/\d+\s+(?:val_loss:(\S+)\s+)?(?:train_loss:(\S+)\s+)?train_time:([\d.]+)ms\b")


class NanoGptParser(LogParser):
    name = "nanogpt"
    step_marker = "iter "
    description = "nanoGPT: 'iter N: loss L, time Tms, mfu M%'; modded-nanogpt: 'step:N/T train_time:Xms step_avg:Yms'"
    markers = ("iter ", "train_time:", "tokens per iteration will be:", "block_size")
    claimed_convention = "palm"
    claimed_scope = "MFU per GPU against a hard-coded A100 bf16 peak of 312 TFLOP/s"

    def parse_line(self, line: str, state: ParseState) -> StepRecord | None:
        if "train_time:" in line:
            return _modded_step(line, state)
        i = line.find("iter ")
        if i < 0 or ": loss" not in line:
            if "tokens per iteration will be:" in line:
                n = to_int(line.rsplit(":", 1)[1].strip())
                if n and n > 0:
                    state.fact("tokens_per_step", n, line)
                    state.fact("claimed_peak_tflops", NANOGPT_PEAK_TFLOPS, line)
            elif "block_size" in line and "=" in line:
                m = re.match(r"\s*(?:Overriding:\s*)?block_size\s*=\s*(\d+)\s*$", line)
                if m:
                    state.fact("seq_len", int(m.group(1)), line)
            return None
        m = _RE.search(line, i)
        if m is None:
            state.malformed_lines += 1
            return None
        ms = to_float(m.group(3))
        mfu = to_float(m.group(4))
        return make_step(to_int(m.group(1)), ms / 1000.0 if ms is not None else None, state,
                         loss=to_float(m.group(2).strip()), tokens=state.facts.get("tokens_per_step"),
                         claimed_mfu_pct=mfu if mfu is not None and mfu >= 0 else None)


def _modded_step(line: str, state: ParseState) -> StepRecord | None:
    """A modded-nanogpt line: the step it ends, timed as the ``train_time`` gone by since the
    line before over the steps between them; ``None`` for the first line, a validation line or
    after the timer's reset (each remembered as the time the next step starts from)."""
    m = _MODDED.search(line)
    if m is None:
        state.malformed_lines += 1
        return None
    step, t_ms = int(m.group(1)), to_float(m.group(4))
    if t_ms is None:
        state.malformed_lines += 1
        return None
    prev = state.scratch.get("modded_prev")
    state.scratch["modded_prev"] = (step, t_ms)
    state.used = True
    if m.group(2) is not None or prev is None or step <= prev[0] or t_ms < prev[1]:
        return None
    loss = to_float(m.group(3)) if m.group(3) is not None else None
    return make_step(step, (t_ms - prev[1]) / 1000.0 / (step - prev[0]), state, loss=loss)
