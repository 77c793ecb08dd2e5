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
token, no causal halving: the ``palm`` convention). The rates are printed with 4 decimals
(``batches_per_sec: 0.0027``), so facts come from the block's exact counters when it has them:
global batch = ``time/sample / time/batch`` (changes between blocks when there are two), tokens
per step = ``time/token / time/batch`` (non-padding tokens: no sequence length is derived from
them), and the step time = global batch / ``samples_per_sec`` (more significant digits than
``1 / batches_per_sec``). Without counters, global batch = samples_per_sec / batches_per_sec
and tokens per step = tokens_per_sec / batches_per_sec. Devices = tokens_per_sec /
device/tokens_per_sec, or ``num_gpus_per_node x num_nodes`` from the config dump; precision
from ``Using precision Precision.AMP_FP16``; micro batch from
``trainer/device_train_microbatch_size``. JSON lines: the same keys in one object,
the step in ``time/batch``, ``step``, ``batch`` or ``_step``.

Progress bar (``ProgressBarLogger``, Composer's default console output; tqdm, ``\r`` updates
become lines), counting batches (unit ``ba``)::

    train          Epoch   0:  10%|█▏        | 10/100 [00:30<04:30,  3.00s/ba, loss/train/total=7.1234]

The step is the batch within the epoch, numbered across epochs (``epoch x total + n``); its time
is tqdm's smoothed rate (``s/ba``, or ``1 / ba/s``); the postfix's ``loss/train/total`` is its
loss. Bars counting samples or tokens (units ``sp``, ``tok``) give no step time and are skipped.
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
    "memory/peak_allocated_mem", "time/batch", "time/sample", "time/token",
    "trainer/device_train_microbatch_size",
})
_CONFIG = re.compile(r"^\s*(global_train_batch_size|max_seq_len|device_train_microbatch_size|num_gpus_per_node|"
                     r"num_nodes):\s*(\d+)\s*$")
_CONFIG_FACTS = {"global_train_batch_size": "global_batch", "max_seq_len": "seq_len",
                 "device_train_microbatch_size": "micro_batch"}
_BAR = re.compile(r"^\s*train\s+Epoch\s+(\d+):\s*\d+%\|[^|]*\|\s*(\d+)/(\d+)\s*\[[\d:]+<[\d:?]+,\s*"
                  r"(\d+\.?\d*)\s*(s/ba|ba/s)\s*(?:,\s*([^\]]*))?\]")
_BAR_LOSS = re.compile(r"loss/train/total=([-+\d.eE]+|nan|inf)\b")
# LLM Foundry's YAML configuration (MPT's model keys, the run's precision and FSDP settings).
_FOUNDRY_KEYS = re.compile(r"^\s*(d_model|n_heads|n_layers|expansion_ratio|vocab_size|precision|"
                           r"activation_checkpointing|name):\s*(\S+)\s*$")
_FOUNDRY_FACTS = {"d_model": "hidden", "n_heads": "heads", "n_layers": "layers", "vocab_size": "vocab"}
_FOUNDRY_PRECISION = {"amp_bf16": "bf16", "amp_fp16": "fp16", "amp_fp8": "fp8", "fp32": "fp32"}
_PRECISION = re.compile(r"Using precision Precision\.(\w+)")
_PRECISIONS = {"AMP_FP16": "fp16", "AMP_BF16": "bf16", "AMP_FP8": "fp8", "FP32": "fp32", "FP16": "fp16",
               "BF16": "bf16"}


class ComposerParser(LogParser):
    name = "composer"
    description = "Composer / LLM Foundry: '[batch=N/M]:' blocks or JSON with 'throughput/...' keys"
    markers = ("[batch=", "throughput/", "loss/train", "max_seq_len", "global_train_batch_size", "s/ba", "ba/s")
    claimed_convention = "palm"
    claimed_scope = "throughput/tokens_per_sec is global; throughput/device/* per device"

    def parse_line(self, line: str, state: ParseState) -> StepRecord | None:
        if ("s/ba" in line or "ba/s" in line) and "Epoch" in line:
            return _bar_step(line, state)
        if "[batch=" in line:
            m = _HEADER.match(line)
            if m is None:
                return None
            rec = self._flush(state)
            state.scratch["block"] = {"step": int(m.group(1)), "line": line}
            state.used = True
            return rec
        if "throughput/" in line or "loss/train" in line or "memory/" in line or "time/" in line:
            s = line.lstrip()
            if s.startswith("{"):
                return self._json(s, state)
            block = state.scratch.get("block")
            if block is None:
                return None
            m = _ITEM.match(line)
            if m and m.group(1) in _KEYS:
                if state.partial:
                    state.cut(line)  # the file's last line, with no newline: the value may be cut
                    return None
                v = to_float(m.group(2))
                if v is not None:
                    block[m.group(1)] = v
                    state.used = True
            return None
        if "trainer/device_train_microbatch_size" in line:
            m = _ITEM.match(line)
            v = to_float(m.group(2)) if m else None
            if v and v == int(v):
                state.fact("micro_batch", int(v), line)
            return None
        if "Using precision" in line:
            m = _PRECISION.search(line)
            if m and m.group(1) in _PRECISIONS:
                state.fact("precision", _PRECISIONS[m.group(1)], line)
            return None
        if ": " in line and _FOUNDRY_KEYS.match(line):
            _foundry_config(line, state)
            return None
        if ("max_seq_len" in line or "batch_size" in line or "num_" in line) and ":" in line:
            m = _CONFIG.match(line)
            if m:
                key, v = m.group(1), int(m.group(2))
                if key in _CONFIG_FACTS:
                    state.fact(_CONFIG_FACTS[key], v, line)
                else:
                    state.scratch[key] = v
                    state.used = True
                    g, nodes = state.scratch.get("num_gpus_per_node"), state.scratch.get("num_nodes")
                    if g and nodes:
                        state.fact("num_devices", g * nodes, line)
                        state.facts.where["num_devices"] = (f"line {state.line_no}: num_gpus_per_node {g} x "
                                                            f"num_nodes {nodes}")
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
        gb, tokens = self._exact_batch(b, state)
        seq = None
        if gb is None and sps:  # no counters: the rates' ratios, rounded (batch and sequence are integers)
            g = sps / bps
            gb = round(g) if round(g) >= 1 and abs(g - round(g)) < 0.02 * g else None
            if tps:
                q = tps / sps
                seq = round(q) if round(q) >= 1 and abs(q - round(q)) < 0.01 * q else None
            if gb and seq:
                tokens = gb * seq
        if tokens is None and tps:
            tokens = round(tps / bps)
        # The step time: samples/s has more significant digits than a 4-decimal batches/s, so with
        # the exact batch it gives the time (1024 / 2.7330 = 374.7 s, not 1 / 0.0027 = 370.4 s).
        step_time = gb / sps if gb and sps and facts.get("global_batch", gb) == gb else 1.0 / bps
        if "num_devices" not in facts.values and tps and tps_dev:
            n = tps / tps_dev
            if round(n) >= 1 and abs(n - round(n)) < 0.02 * n:
                facts.set("num_devices", round(n), state.line_no, line)
        if "tokens_per_step" not in facts.values and tokens:
            facts.set("tokens_per_step", tokens, state.line_no, line)
        if gb and "global_batch" not in facts.values:
            facts.set("global_batch", gb, state.line_no, line)
            facts.where["global_batch"] = (f"{b['exact']} (line {state.line_no})" if b.get("exact") else
                                           f"derived: samples_per_sec / batches_per_sec (line {state.line_no})")
        if seq and "seq_len" not in facts.values:
            facts.set("seq_len", seq, state.line_no, line)
            facts.where["seq_len"] = f"derived: tokens_per_sec / samples_per_sec (line {state.line_no})"
        return make_step(step, step_time, state, tokens=tokens,
                         loss=b.get("loss/train/total"),
                         memory_GiB=b.get("memory/peak_allocated_mem"),
                         claimed_tokens_per_s=tps, claimed_tokens_per_s_per_device=tps_dev,
                         claimed_tflops_per_device=flops_dev / 1e12 if flops_dev else None,
                         claimed_mfu_pct=100.0 * mfu if isinstance(mfu, float) and 0 <= mfu <= 10 else None)

    @staticmethod
    def _exact_batch(b: dict[str, Any], state: ParseState) -> tuple[int | None, int | None]:
        """Global batch and tokens per step from the block's exact counters (``time/batch``,
        ``time/sample``, ``time/token``: totals so far), as differences from the previous block
        when there is one. The tokens are the non-padding tokens Composer counts, so no
        sequence length is derived from them."""
        batch, sample, token = b.get("time/batch"), b.get("time/sample"), b.get("time/token")
        if not batch or not sample:
            return None, None
        prev = state.scratch.get("counters")
        state.scratch["counters"] = (batch, sample, token)
        db, ds, dt = batch, sample, token
        how = "time/sample / time/batch"
        if prev is not None and batch > prev[0] and sample > prev[1]:
            db, ds = batch - prev[0], sample - prev[1]
            dt = token - prev[2] if token is not None and prev[2] is not None else None
            how = "change in time/sample / change in time/batch"
        g = ds / db
        if g != int(g):
            return None, None
        b["exact"] = f"exact counters: {how}"
        return int(g), round(dt / db) if dt else None

    def finish(self, state: ParseState) -> list[StepRecord]:
        out = []
        for rank in list(state.all_scratch()):
            state.rank = rank
            rec = self._flush(state)
            if rec is not None:
                out.append(rec)
        return out


def _bar_step(line: str, state: ParseState) -> StepRecord | None:
    """A ``ProgressBarLogger`` training-bar update (:data:`_BAR`): the batch, numbered across
    epochs, timed by tqdm's smoothed rate; ``None`` for a redraw of the batch before."""
    m = _BAR.match(line)
    if m is None:
        return None
    epoch, n, total = int(m.group(1)), int(m.group(2)), int(m.group(3))
    rate = to_float(m.group(4))
    step = epoch * total + n
    if n <= 0 or not rate or state.scratch.get("bar_step") == step:
        state.used = True
        return None
    state.scratch["bar_step"] = step
    loss = _BAR_LOSS.search(m.group(6) or "")
    return make_step(step, rate if m.group(5) == "s/ba" else 1.0 / rate, state,
                     loss=to_float(loss.group(1)) if loss else None)


def _foundry_config(line: str, state: ParseState) -> None:
    """A line of LLM Foundry's YAML configuration: ``name: mpt_causal_lm`` (MPT's defaults: LayerNorm,
    no biases, ALiBi, tied embeddings), MPT's ``d_model``, ``n_heads``, ``n_layers``,
    ``vocab_size``, its MLP (``expansion_ratio`` x ``d_model``, GeLU: MPT's ``MPTMLP``),
    ``precision: amp_bf16`` and ``fsdp_config``'s ``activation_checkpointing: true`` (every
    block re-run: full)."""
    m = _FOUNDRY_KEYS.match(line)
    if m is None:
        return
    key, value = m.group(1), m.group(2)
    if key in _FOUNDRY_FACTS:
        state.count_fact(_FOUNDRY_FACTS[key], value, line)
    elif key == "expansion_ratio":
        ratio, d = to_float(value), state.facts.values.get("hidden")
        if ratio and d and ratio * d == int(ratio * d):
            state.fact("ffn_hidden", int(ratio * d), line)
            state.fact("mlp", "gelu", line)
    elif key == "name" and value == "mpt_causal_lm":  # MPT's defaults (llmfoundry/models/mpt/configuration_mpt.py)
        defaults: tuple[tuple[str, object], ...] = (("norm", "layernorm"), ("bias", False), ("position", "alibi"),
                                                    ("tied_embeddings", True))
        for fact, default in defaults:
            state.fact(fact, default, line)
    elif key == "precision" and value.lower() in _FOUNDRY_PRECISION:
        state.fact("precision", _FOUNDRY_PRECISION[value.lower()], line)
    elif key == "activation_checkpointing" and value.lower() in ("true", "false"):
        state.fact("activation_checkpointing", "full" if value.lower() == "true" else "none", line)
