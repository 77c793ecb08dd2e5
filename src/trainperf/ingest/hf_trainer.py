"""Hugging Face ``transformers.Trainer`` console output.

* the training progress bar (tqdm; ``\\r`` updates become lines)::

      45%|████▌     | 450/1000 [06:12<07:35,  1.21it/s]

  gives the step (``450``) and tqdm's smoothed rate (``1.21it/s`` or ``1.83s/it``): the step
  time of an update is ``1 / rate``. The training bar is the one whose total is ``Total
  optimization steps``; without that line, the longest-running bar with an it/s or s/it rate
  (weight loading, dataset maps and evaluation bars come and go in seconds). A pasted console
  keeps ``\r`` as a literal ``^M``, and a lost ``\r`` leaves two bars on one line: every bar
  on a line is read. A rate cut mid-number (no unit after it) is a cut line, not a step.
* log dicts ``{'loss': 2.3456, 'grad_norm': 1.2, 'learning_rate': 4.5e-05, 'epoch': 0.12}``
  (attached to the latest step; TRL's ``'num_tokens'`` and the Trainer's
  ``'num_input_tokens_seen'``, the tokens seen so far by every process, give the tokens per step:
  the median of their change over the bar's steps between two dicts, else their first value over
  its step) and the final
  ``{'train_runtime': 123.4, 'train_samples_per_second': 25.9, 'train_steps_per_second': 0.81,
  'train_loss': 2.1, 'epoch': 3.0}``, which are run-level claims: a mean over the whole run,
  start-up, warm-up, evaluation and checkpointing included.
* the ``***** train metrics *****`` block the example scripts print (``trainer.log_metrics``:
  ``  train_runtime            = 0:12:34.56``, ``  train_samples_per_second =     39.756``, ...;
  the runtime as ``H:MM:SS.ss``, ``total_flos`` in units of 2^30 FLOPs with a ``GF`` suffix):
  the same run-level claims as the final dict.
* the ``TrainingArguments(...)`` dump the example scripts log (one field a line): ``bf16=True``
  / ``fp16=True`` (the precision), ``gradient_checkpointing=True`` (every decoder layer re-run:
  full recomputation; ``False``: none), ``per_device_train_batch_size``.
* the ``***** Running training *****`` block: ``Total train batch size (w. parallel,
  distributed & accumulation) = 64`` (global batch), ``Instantaneous batch size per device``,
  ``Gradient Accumulation steps`` (devices = total / (per device x accumulation)).

Without a progress bar the run-level mean is the only timing: one aggregate record
(``extra["aggregate"]``) with ``train_runtime / steps``; warm-up cannot then be excluded.
"""

from __future__ import annotations

import re

from trainperf.ingest.base import LogParser, ParseState, make_step, to_float, to_int
from trainperf.records.run_record import StepRecord

_BAR = re.compile(r"(\d+)/(\d+)\s*\[(\d[\d:]*)<[\d:?]+,\s*([\d.]*)")
_IT_UNIT = re.compile(r"\s*(it/s|s/it)\s*[\],]")
_OTHER_UNIT = re.compile(r"\?it/s|\s*(?:[A-Za-z ]*/s|s/[A-Za-z ]+)\s*[\],]")
_DICT_KV = re.compile(r"'(\w+)':\s*(?:np\.float\d+\(|tensor\()?'?([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)")
_METRIC = re.compile(r"^\s*(train_runtime|train_samples_per_second|train_steps_per_second|train_tokens_per_second|"
                     r"train_loss|total_flos)\s+=\s+(\S+)\s*$")
# A field of the TrainingArguments(...) dump the example scripts log, one per line: "bf16=True,".
_TRAINING_ARG = re.compile(r"^\s*(bf16|fp16|gradient_checkpointing|per_device_train_batch_size)=(\w+),?\s*$")
_CLOCK = re.compile(r"^(?:(\d+) days?, )?(\d+):(\d\d):(\d\d(?:\.\d+)?)$")
_SETUP = {
    "Total train batch size (w. parallel, distributed & accumulation) =": "global_batch",
    "Instantaneous batch size per device =": "micro_batch",
    "Gradient Accumulation steps =": "grad_accum",
    "Total optimization steps =": "total_steps",
}


def _seconds(clock: str) -> int:
    """tqdm's elapsed ``[H:]MM:SS`` in seconds."""
    total = 0
    for part in clock.split(":"):
        total = total * 60 + int(part or 0)
    return total


class HfTrainerParser(LogParser):
    name = "hf-trainer"
    step_marker = "it/s]"
    description = "Hugging Face Trainer: tqdm bar 'N/M [..., R it/s]', {'loss': ...} dicts, final train_runtime"
    markers = ("it/s]", "s/it]", "{'", " = ")
    claimed_convention = "6n"
    claimed_scope = "train_samples_per_second / train_steps_per_second are global means over the whole run"
    stack = "hf-transformers"

    def __init__(self) -> None:
        self._bars: dict[int, list[list[object]]] = {}
        """bar total -> updates ``[n, step time, line number, rank, loss, grad_norm]``."""
        self._elapsed: dict[int, int] = {}
        self._last: list[object] | None = None
        self._last_total: int | None = None
        """The total of the bar ``_last`` belongs to (a dataset map's, or the training bar's)."""

    def parse_line(self, line: str, state: ParseState) -> StepRecord | None:
        if "it/s" in line or "s/it" in line:
            self._bars_in(line, state)
        if "{'" in line:
            self._dict(line, state)
            return None
        if "=" in line and " = " not in line:
            _training_argument(line, state)
            return None
        if " = " in line:
            if line.lstrip().startswith(("train_", "total_flos")):
                _metric(line, state)
                return None
            for key, fact in _SETUP.items():
                j = line.find(key)
                if j >= 0:
                    v = to_int(line[j + len(key):].strip())
                    if v and v > 0:
                        state.fact(fact, v, line)
                    break
        return None

    def _bars_in(self, line: str, state: ParseState) -> None:
        """Every bar update on the line: a console paste keeps ``\\r`` as a literal ``^M``, and a
        lost ``\\r`` leaves two bars on one line. Records are made in :meth:`finish`, once it is
        known which bar is the training bar."""
        for piece in line.split("^M") if "^M" in line else (line,):
            for m in _BAR.finditer(piece):
                rest = piece[m.end():m.end() + 16]
                unit = _IT_UNIT.match(rest)
                if unit is None:
                    if not m.group(4) or _OTHER_UNIT.match(rest):
                        continue  # no rate yet ("?it/s") or another unit (examples/s, MB/s)
                    state.cut(piece[m.start():])  # the rate was cut mid-number
                    continue
                state.used = True
                n, total = int(m.group(1)), int(m.group(2))
                rate = to_float(m.group(4))
                elapsed = _seconds(m.group(3))
                if elapsed > self._elapsed.get(total, -1):
                    self._elapsed[total] = elapsed
                updates = self._bars.setdefault(total, [])
                if n <= 0 or not rate or (updates and updates[-1][0] == n):
                    continue
                t = rate if unit.group(1) == "s/it" else 1.0 / rate
                self._last = [n, t, state.line_no, state.rank, None, None]
                self._last_total = total
                updates.append(self._last)

    def _training_total(self, state: ParseState) -> int | None:
        """The training bar: the one whose total is ``Total optimization steps``; without that
        line, the longest-running bar with a rate (weight loading and dataset maps are short)."""
        totals = [t for t, ups in self._bars.items() if ups]
        if not totals:
            return None
        want = state.facts.values.get("total_steps")
        if want in totals:
            return int(want)
        return max(totals, key=lambda t: (self._elapsed.get(t, 0), len(self._bars[t])))

    def _dict(self, line: str, state: ParseState) -> None:
        kv = {k: to_float(v) for k, v in _DICT_KV.findall(line)}
        if not kv:
            return
        state.used = True
        if "train_runtime" in kv:
            for key in ("train_runtime", "train_samples_per_second", "train_steps_per_second",
                        "train_tokens_per_second", "train_loss"):
                if kv.get(key) is not None:
                    state.fact(f"claimed_{key}", kv[key], line)
            if kv.get("epoch"):
                state.scratch["final_epoch"] = kv["epoch"]
            return
        seen = kv.get("num_tokens", kv.get("num_input_tokens_seen"))
        if seen and seen > 0:
            at = (self._last_total, self._last[0]) if self._last is not None else (None, None)
            state.scratch.setdefault("tokens_seen", []).append((kv.get("epoch"), *at, seen, state.line_no, line))
        if "loss" in kv and kv["loss"] is not None:
            last = self._last
            if last is not None and last[4] is None:
                last[4] = kv["loss"]
                last[5] = kv.get("grad_norm")
            state.scratch["losses"] = state.scratch.get("losses", 0) + 1

    def finish(self, state: ParseState) -> list[StepRecord]:
        f = state.facts.values
        gb, micro, acc = f.get("global_batch"), f.get("micro_batch"), f.get("grad_accum")
        if gb and micro and acc and gb % (micro * acc) == 0:
            state.facts.set("num_devices", gb // (micro * acc), 0, "derived")
            state.facts.where["num_devices"] = ("derived: Total train batch size / (batch size per device x "
                                                "gradient accumulation steps)")
        sps, stps = f.get("claimed_train_samples_per_second"), f.get("claimed_train_steps_per_second")
        if sps and stps and "global_batch" not in f:
            g = sps / stps
            if round(g) >= 1 and abs(g - round(g)) < 0.02 * g:
                state.facts.set("global_batch", round(g), 0, "derived")
                state.facts.where["global_batch"] = "derived: train_samples_per_second / train_steps_per_second"
        total = self._training_total(state)
        if total is not None:
            _tokens_per_step(state, total)
            others = sorted(t for t, ups in self._bars.items() if ups and t != total)
            if others:
                state.note(f"training bar: the one with total {total} "
                           + ("(Total optimization steps)" if state.facts.values.get("total_steps") == total
                              else "(the longest-running bar with a rate; no 'Total optimization steps' line)")
                           + f"; other bars (totals {others[:5]}) are not training steps")
            out = []
            for n, t, line_no, rank, loss, gn in self._bars[total]:
                state.rank = rank  # type: ignore[assignment]
                rec = make_step(n, t, state, loss=loss, grad_norm=gn, extra={"line": line_no})  # type: ignore[arg-type]
                if rec is not None:
                    out.append(rec)
            return out
        runtime = f.get("claimed_train_runtime")
        steps = f.get("total_steps") or (round(runtime * stps) if runtime and stps else None)
        if runtime and steps:
            state.note("no progress bar in the log: one aggregate record from train_runtime / steps "
                       "(a whole-run mean; warm-up is not excluded)")
            state.rank = None
            return [r for r in [make_step(int(steps), runtime / steps, state,
                                          extra={"aggregate": True, "steps_covered": int(steps)})] if r]
        return []


def _tokens_per_step(state: ParseState, total: int) -> None:
    """The ``tokens_per_step`` fact from the cumulative token counts the log dicts carry: the median
    change per step between consecutive dicts, else the first count over its step. A dict's step
    is its ``epoch`` x ``total`` / the run's last epoch (the final dict's) where the log gives both
    (a console log redraws the bar rarely, so the last bar printed can lag the step by hundreds),
    else the training bar's last printed position."""
    import itertools
    import statistics

    seen = [x for sc in state.all_scratch().values() for x in sc.get("tokens_seen", [])]
    final = next((sc["final_epoch"] for sc in state.all_scratch().values() if "final_epoch" in sc), None)
    if not seen or "tokens_per_step" in state.facts.values:
        return
    if final and all(e for e, *_ in seen):
        at = [(e * total / final, n, ln, line) for e, _, _, n, ln, line in seen]
        where = f"at epoch x {total} steps / {final:g} epochs"
    else:
        at = [(float(step), n, ln, line) for _, bar, step, n, ln, line in seen if bar == total and step]
        where = "at the training bar's last printed step"
    if not at:
        return
    rates = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in itertools.pairwise(at) if b[0] > a[0] and b[1] > a[1]]
    step, count, line_no, line = at[0]
    per = statistics.median(rates) if rates else count / step
    if per >= 1:
        state.facts.set("tokens_per_step", round(per), line_no, line)
        how = "the median change per step between log lines" if rates else "the first count over its step"
        state.facts.where["tokens_per_step"] = f"derived: tokens seen (num_tokens), {how}, {where} (line {line_no})"


def _metric(line: str, state: ParseState) -> None:
    """A line of the ``***** train metrics *****`` block: a run-level claim, the runtime from its
    ``H:MM:SS.ss`` (``D days, H:MM:SS``) form, ``total_flos`` from its ``GF`` (2^30 FLOPs) units."""
    m = _METRIC.match(line)
    if m is None:
        return
    key, text = m.group(1), m.group(2)
    if key == "train_runtime":
        c = _CLOCK.match(text)
        value = (int(c.group(1) or 0) * 86400 + int(c.group(2)) * 3600 + int(c.group(3)) * 60 + float(c.group(4))
                 if c else to_float(text))
    elif key == "total_flos":
        gf = to_int(text[:-2]) if text.endswith("GF") else None
        value = gf * 2.0**30 if gf is not None else None
    else:
        value = to_float(text)
    if value is not None and f"claimed_{key}" not in state.facts.values:  # the final dict's is exact
        state.fact(f"claimed_{key}", value, line)


def _training_argument(line: str, state: ParseState) -> None:
    """A field of the ``TrainingArguments(...)`` dump: precision, gradient checkpointing (the
    Trainer re-runs every decoder layer's forward: full), the per-device batch."""
    m = _TRAINING_ARG.match(line)
    if m is None:
        return
    key, value = m.group(1), m.group(2)
    if key in ("bf16", "fp16") and value == "True":
        state.fact("precision", key, line)
    elif key == "gradient_checkpointing" and value in ("True", "False"):
        state.fact("activation_checkpointing", "full" if value == "True" else "none", line)
    elif key == "per_device_train_batch_size" and to_int(value):
        state.fact("micro_batch", to_int(value), line)
