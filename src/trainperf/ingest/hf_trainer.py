"""Hugging Face ``transformers.Trainer`` console output.

* the training progress bar (tqdm; ``\\r`` updates become lines)::

      45%|████▌     | 450/1000 [06:12<07:35,  1.21it/s]

  gives the step (``450``) and tqdm's smoothed rate (``1.21it/s`` or ``1.83s/it``): the step
  time of an update is ``1 / rate``. Bars with another total (evaluation) are ignored; the
  training bar's total is ``Total optimization steps`` or the first bar's total.
* log dicts ``{'loss': 2.3456, 'grad_norm': 1.2, 'learning_rate': 4.5e-05, 'epoch': 0.12}``
  (attached to the latest step) and the final
  ``{'train_runtime': 123.4, 'train_samples_per_second': 25.9, 'train_steps_per_second': 0.81,
  'train_loss': 2.1, 'epoch': 3.0}``, which are run-level claims: a mean over the whole run,
  start-up, warm-up, evaluation and checkpointing included.
* the ``***** Running training *****`` block: ``Total train batch size (w. parallel,
  distributed & accumulation) = 64`` (global batch), ``Instantaneous batch size per device``,
  ``Gradient Accumulation steps`` (devices = total / (per device x accumulation)).

Without a progress bar the run-level mean is the only timing: one aggregate record
(``extra["aggregate"]``) with ``train_runtime / steps``; warm-up cannot then be excluded.
"""

from __future__ import annotations

import re

from trainperf.ingest.base import LogParser, ParseState, make_step, positive, to_float, to_int
from trainperf.records.run_record import StepRecord

_BAR = re.compile(r"\|\s*(\d+)/(\d+)\s*\[[\d:]+<[\d:?]+,\s*([\d.]+)\s*(it/s|s/it)")
_DICT_KV = re.compile(r"'(\w+)':\s*(?:np\.float\d+\(|tensor\()?'?([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)")
_SETUP = {
    "Total train batch size (w. parallel, distributed & accumulation) =": "global_batch",
    "Instantaneous batch size per device =": "micro_batch",
    "Gradient Accumulation steps =": "grad_accum",
    "Total optimization steps =": "total_steps",
}


class HfTrainerParser(LogParser):
    name = "hf-trainer"
    description = "Hugging Face Trainer: tqdm bar 'N/M [..., R it/s]', {'loss': ...} dicts, final train_runtime"
    markers = ("it/s]", "s/it]", "{'", " = ")
    claimed_convention = "6n"
    claimed_scope = "train_samples_per_second / train_steps_per_second are global means over the whole run"

    def parse_line(self, line: str, state: ParseState) -> StepRecord | None:
        if "it/s]" in line or "s/it]" in line:
            return self._bar(line, state)
        if "{'" in line:
            self._dict(line, state)
            return None
        if " = " in line:
            for key, fact in _SETUP.items():
                j = line.find(key)
                if j >= 0:
                    v = to_int(line[j + len(key):].strip())
                    if v and v > 0:
                        state.fact(fact, v, line)
                    break
        return None

    def _bar(self, line: str, state: ParseState) -> StepRecord | None:
        m = _BAR.search(line)
        if m is None:
            return None
        n, total = int(m.group(1)), int(m.group(2))
        rate = positive(to_float(m.group(3)))
        sc = state.scratch
        want = state.facts.values.get("total_steps") or sc.setdefault("bar_total", total)
        if total != want:
            return None  # an evaluation or prediction bar
        state.used = True
        if rate is None or n <= 0 or n == sc.get("last_n"):
            return None
        sc["last_n"] = n
        rec = make_step(n, rate if m.group(4) == "s/it" else 1.0 / rate, state)
        sc["last_rec"] = rec
        return rec

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
            return
        if "loss" in kv and kv["loss"] is not None:
            rec = state.scratch.get("last_rec")
            if rec is not None and rec.loss is None:
                rec.loss = kv["loss"]
                if kv.get("grad_norm") is not None:
                    rec.grad_norm = kv["grad_norm"]
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
        if any(s.get("last_n") for s in state.all_scratch().values()):
            return []
        runtime = f.get("claimed_train_runtime")
        steps = f.get("total_steps") or (round(runtime * stps) if runtime and stps else None)
        if runtime and steps:
            state.note("no progress bar in the log: one aggregate record from train_runtime / steps "
                       "(a whole-run mean; warm-up is not excluded)")
            state.rank = None
            return [r for r in [make_step(int(steps), runtime / steps, state,
                                          extra={"aggregate": True, "steps_covered": int(steps)})] if r]
        return []
