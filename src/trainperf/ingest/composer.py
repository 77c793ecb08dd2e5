"""Composer / LLM Foundry training logs (console logger blocks, or one JSON object per line).

Console (``ConsoleLogger``), one block per logged batch::

    [batch=10/100]:
        Train time/batch: 9
        Train loss/train/total: 7.1234
        Train throughput/batches_per_sec: 0.1264
        Train throughput/samples_per_sec: 64.73
        Train throughput/tokens_per_sec: 132564.1
        Train throughput/device/tokens_per_sec: 16570.5
        Train throughput/device/flops_per_sec: 1.6e14
        Train throughput/device/mfu: 0.4432

The ``SpeedMonitor`` rates are averages over its window (default 100 batches), so the step
time is ``1 / throughput/batches_per_sec`` -- a windowed mean, not one step's time. Blocks
before the window fills carry no throughput and give no record. ``device/mfu`` is a fraction
(x100 here). FLOPs are the model's ``flops_per_batch`` (LLM Foundry's MPT: 6*N + 12*L*d*S per
token, no causal halving: the ``palm`` convention). Facts derived from the rates: tokens per
step = tokens_per_sec / batches_per_sec, global batch = samples_per_sec / batches_per_sec,
devices = tokens_per_sec / device/tokens_per_sec. JSON lines: the same keys in one object,
the step in ``time/batch``, ``step``, ``batch`` or ``_step``.
"""

from __future__ import annotations

import re
from typing import Any

from trainperf.ingest.base import LogParser, ParseState, json_object, make_step, positive, to_float
from trainperf.records.run_record import StepRecord

_HEADER = re.compile(r"^\s*(?:\[epoch=\d+\])?\[batch=(\d+)(?:/\d+)?\]:\s*$")
_ITEM = re.compile(r"^\s*(?:Train |Eval )?([\w/\-.]+(?:/[\w\-.]+)*):\s*(\S+)\s*$")
_KEYS = frozenset({
    "throughput/batches_per_sec", "throughput/samples_per_sec", "throughput/tokens_per_sec",
    "throughput/device/tokens_per_sec", "throughput/device/flops_per_sec", "throughput/flops_per_sec",
    "throughput/device/mfu", "throughput/device/batches_per_sec", "loss/train/total",
    "memory/peak_allocated_mem", "time/batch",
})
_CONFIG = re.compile(r"^(global_train_batch_size|max_seq_len|device_train_microbatch_size):\s*(\d+)\s*$")
_CONFIG_FACTS = {"global_train_batch_size": "global_batch", "max_seq_len": "seq_len",
                 "device_train_microbatch_size": "micro_batch"}


class ComposerParser(LogParser):
    name = "composer"
    description = "Composer / LLM Foundry: '[batch=N/M]:' blocks or JSON with 'throughput/...' keys"
    markers = ("[batch=", "throughput/", "loss/train", "max_seq_len", "global_train_batch_size")
    claimed_convention = "palm"
    claimed_scope = "throughput/tokens_per_sec is global; throughput/device/* per device"

    def parse_line(self, line: str, state: ParseState) -> StepRecord | None:
        if "[batch=" in line:
            m = _HEADER.match(line)
            if m is None:
                return None
            rec = self._flush(state)
            state.scratch["block"] = {"step": int(m.group(1)), "line": line}
            state.used = True
            return rec
        if "throughput/" in line or "loss/train" in line or "memory/" in line or "time/batch" in line:
            s = line.lstrip()
            if s.startswith("{"):
                return self._json(s, state)
            block = state.scratch.get("block")
            if block is None:
                return None
            m = _ITEM.match(line)
            if m and m.group(1) in _KEYS:
                v = to_float(m.group(2))
                if v is not None:
                    block[m.group(1)] = v
                    state.used = True
            return None
        if ("max_seq_len" in line or "batch_size" in line) and ":" in line:
            m = _CONFIG.match(line)
            if m:
                state.fact(_CONFIG_FACTS[m.group(1)], int(m.group(2)), line)
        return None

    def _json(self, s: str, state: ParseState) -> StepRecord | None:
        obj = json_object(s, state)
        if obj is None:
            return None
        step = None
        for k in ("time/batch", "step", "batch", "_step"):
            v = obj.get(k)
            if isinstance(v, int | float) and not isinstance(v, bool) and v == v and v >= 0 and v == int(v):
                step = int(v)
                break
        block: dict[str, Any] = {k: float(v) for k, v in obj.items()
                                 if k in _KEYS and isinstance(v, int | float) and not isinstance(v, bool)}
        block["step"] = step
        block["line"] = s
        return self._record(block, state)

    def _flush(self, state: ParseState) -> StepRecord | None:
        block = state.scratch.pop("block", None)
        return self._record(block, state) if block else None

    def _record(self, b: dict[str, Any], state: ParseState) -> StepRecord | None:
        bps = positive(b.get("throughput/batches_per_sec"))
        if bps is None:
            return None  # speed monitor window not yet full
        step = b.get("step")
        tps = positive(b.get("throughput/tokens_per_sec"))
        tps_dev = positive(b.get("throughput/device/tokens_per_sec"))
        flops_dev = positive(b.get("throughput/device/flops_per_sec"))
        mfu = b.get("throughput/device/mfu")
        sps = positive(b.get("throughput/samples_per_sec"))
        line = str(b.get("line", ""))
        facts = state.facts
        gb = seq = None
        if sps:
            g = sps / bps
            gb = round(g) if round(g) >= 1 and abs(g - round(g)) < 0.02 * g else None
            if tps:
                q = tps / sps
                seq = round(q) if round(q) >= 1 and abs(q - round(q)) < 0.01 * q else None
        # Batch and sequence are integers: rounding each removes the rates' noise exactly.
        tokens = gb * seq if gb and seq else (round(tps / bps) if tps else None)
        if "num_devices" not in facts.values and tps and tps_dev:
            n = tps / tps_dev
            if round(n) >= 1 and abs(n - round(n)) < 0.02 * n:
                facts.set("num_devices", round(n), state.line_no, line)
        if "tokens_per_step" not in facts.values:
            facts.set("tokens_per_step", tokens, state.line_no, line)
            facts.set("global_batch", gb, state.line_no, line)
            facts.set("seq_len", seq, state.line_no, line)
        return make_step(step, 1.0 / bps, state, tokens=tokens,
                         loss=b.get("loss/train/total"),
                         memory_GiB=b.get("memory/peak_allocated_mem"),
                         claimed_tokens_per_s=tps, claimed_tokens_per_s_per_device=tps_dev,
                         claimed_tflops_per_device=flops_dev / 1e12 if flops_dev else None,
                         claimed_mfu_pct=100.0 * mfu if isinstance(mfu, float) and 0 <= mfu <= 10 else None)

    def finish(self, state: ParseState) -> list[StepRecord]:
        out = []
        for rank in list(state.all_scratch()):
            state.rank = rank
            rec = self._flush(state)
            if rec is not None:
                out.append(rec)
        return out
