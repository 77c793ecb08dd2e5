"""MaxText (JAX) training logs.

Step line, printed once per step by ``MetricLogger`` on every host::

    completed step: 49, seconds: 7.908, TFLOP/s/device: 460.480, Tokens/s/device: 1035.970, total_weights: 524288, loss: 0.000

(older versions print ``TFLOP/s: x`` without ``Tokens/s/device``). ``seconds`` is that one
step's wall time; ``total_weights`` is the count of non-padding target tokens in the global
batch, i.e. the tokens of the step. Run-level facts: the ``Config param <key>: <value>`` dump
(``global_batch_size_to_train_on``, ``max_target_length``, ``per_device_batch_size``, ``dtype``,
``model_name``; without the global batch, ``per_device_batch_size x devices x
gradient_accumulation_steps``, as MaxText computes it; ``remat_policy`` where trainperf has
that policy; ``quantization: fp8``; the plan from the ``ici_*`` / ``dcn_*_parallelism`` mesh,
:mod:`~.maxtext_mesh`), ``Num_devices: N`` and the device kind
JAX reports (``TFRT TPU v5``: v5p; ``TPU v5 lite``: v5e). When the log has no device count, it is derived from
the step line itself: ``total_weights / (seconds * Tokens/s/device)``.

MaxText's TFLOP/s/device counts training FLOPs per device per step
(``calculate_tflops_training_per_device``); the version in seed 003 counted the attention
without causal halving (1.82e15 per 4096-token Llama-2-70B sequence, the nemo-legacy count).
"""

from __future__ import annotations

import re
import statistics
from typing import TYPE_CHECKING, Any

from trainperf.ingest.base import (
    RANK_PREFIX,
    LogParser,
    ParseState,
    make_step,
    to_float,
    to_int,
    to_time,
)
from trainperf.ingest.templates import BlockField
from trainperf.records.run_record import MAX_TOKENS_PER_STEP, StepRecord, storable_step

if TYPE_CHECKING:
    import numpy as np

_STEP = "completed step: "
_CONFIG = "Config param "
_CONFIG_KEYS = {
    "global_batch_size_to_train_on": "global_batch",
    "max_target_length": "seq_len",
    "model_name": "model",
    "dtype": "precision",
}
# The exact layout MaxText prints today: one regex, no per-field splitting (the speed path).
_FAST = re.compile(r"completed step: (\d+), seconds: (\d+\.?\d*), TFLOP/s/device: (\d+\.?\d*), "
                   r"Tokens/s/device: (\d+\.?\d*), total_weights: (\d+), loss: (\d+\.?\d*)")
_BLOCK = re.compile(RANK_PREFIX + r" ?completed step: (\d+), seconds: (\d+\.?\d*), TFLOP/s/device: (\d+\.?\d*), "
                    r"Tokens/s/device: (\d+\.?\d*), total_weights: (\d+), loss: (\d+\.?\d*)$", re.M)
_SECONDS = re.compile(r"seconds:\s*([^\s,]*)(,)?")
_MESH_KEY = re.compile(r"^(ici|dcn)_([a-z_]+?)_parallelism$")
_TPU_KIND = re.compile(r"^\s*(?:TFRT\s+)?(TPU v\d+[a-z]?(?: lite)?)\s*$")
_DTYPES = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16", "fp8": "fp8", "float8": "fp8"}


class MaxTextParser(LogParser):
    name = "maxtext"
    step_marker = "completed step: "
    description = "MaxText: 'completed step: N, seconds: S, TFLOP/s/device: T, Tokens/s/device: K, total_weights: W, loss: L'"
    markers = (_STEP, _CONFIG, "Num_devices:")
    claimed_convention = None  # version dependent; inferred from TFLOP/s ÷ Tokens/s per device
    claimed_scope = "TFLOP/s and Tokens/s are per device"

    block_re = _BLOCK

    block_fields = (BlockField("step", 3, "int"), BlockField("secs", 4, "float"), BlockField("tflops", 5, "float"),
                    BlockField("tok_dev", 6, "float"), BlockField("weights", 7, "int"), BlockField("loss", 8, "float"))

    def __init__(self) -> None:
        self._ratios: list[float] = []

    def block_valid(self, vals: dict[str, np.ndarray]) -> np.ndarray | None:
        secs = vals["secs"]
        # else parse_line flags the step, or (a token count no step has) counts the line malformed
        return (secs >= 1e-6) & (secs <= 1e7) & (vals["weights"] <= MAX_TOKENS_PER_STEP)

    def block_arrays(self, vals: dict[str, np.ndarray], last_line: str, state: ParseState
                     ) -> dict[str, np.ndarray | None] | None:
        import numpy as np

        from trainperf.records.step_columns import INT_NONE

        weights, secs, tok_dev = vals["weights"], vals["secs"], vals["tok_dev"]
        ratios = self._ratios
        if len(ratios) < 64:  # the first 64 steps' device counts, in line order (as parse_line adds them)
            for w, s, k in zip(weights[:64].tolist(), secs[:64].tolist(), tok_dev[:64].tolist(), strict=True):
                if len(ratios) >= 64:
                    break
                if k > 0:
                    ratios.append(w / (s * k))
        return {"step": vals["step"], "step_time_s": secs, "tokens": np.where(weights == 0, INT_NONE, weights),
                "loss": vals["loss"], "claimed_tflops_per_device": vals["tflops"],
                "claimed_tokens_per_s_per_device": tok_dev}

    def block_inert(self, line: str) -> bool:
        return _STEP not in line  # its facts never enter a step

    def parse_line(self, line: str, state: ParseState) -> StepRecord | None:
        i = line.find(_STEP)
        if i < 0:
            if _CONFIG in line:
                self._config(line, state)
            elif line.lstrip().startswith(("TFRT TPU", "TPU v")):
                m = _TPU_KIND.match(line)
                if m:
                    state.fact("device_name", m.group(1), line)
            elif "Num_devices:" in line:
                n = to_int(line.split("Num_devices:", 1)[1].split(",", 1)[0].strip())
                if n and n > 0:
                    state.fact("num_devices", n, line)
            return None
        m = _FAST.match(line, i)
        if m is not None:
            secs = float(m.group(2))
            if not storable_step(int(m.group(1)), int(m.group(5))):
                state.malformed_lines += 1  # a 27-digit step, 1e20 tokens: damage, not a step
                return None
            if 1e-6 <= secs <= 1e7:
                weights = int(m.group(5))
                tok_dev = float(m.group(4))
                if len(self._ratios) < 64 and tok_dev > 0:
                    self._ratios.append(weights / (secs * tok_dev))
                return StepRecord(int(m.group(1)), secs, weights or None, float(m.group(6)),
                                  claimed_tflops_per_device=float(m.group(3)),
                                  claimed_tokens_per_s_per_device=tok_dev, rank=state.rank)
        return self._slow(line, i, state)

    def _slow(self, line: str, i: int, state: ParseState) -> StepRecord | None:
        """Any field order: ``key: value`` pairs split on ", "; the seconds must be followed by ","."""
        t = _SECONDS.search(line, i)
        if t is None or t.group(2) is None:
            state.cut(line)  # "seconds: 5.6" at the end of the line: cut mid-number
            return None
        kv: dict[str, str] = {}
        for part in line[i + len(_STEP):].split(", "):
            k, sep, v = part.partition(": ")
            if sep:
                kv[k] = v
            elif not kv:
                kv["step"] = part
        step = to_int(kv.get("step") or line[i + len(_STEP):].split(",", 1)[0])
        seconds = to_time(t.group(1))
        tflops = to_float(kv.get("TFLOP/s/device") or kv.get("TFLOP/s"))
        tok_dev = to_float(kv.get("Tokens/s/device"))
        weights = to_int(kv.get("total_weights"))
        if step is not None and not storable_step(step, weights if weights and weights > 0 else None):
            state.malformed_lines += 1
            return None
        loss = to_float(kv.get("loss", "").split(" ", 1)[0]) if "loss" in kv else None
        rec = make_step(step, seconds, state, tokens=weights if weights and weights > 0 else None,
                        loss=loss, claimed_tflops_per_device=tflops,
                        claimed_tokens_per_s_per_device=tok_dev)
        if rec is not None and rec.flag is None and weights and tok_dev and seconds and len(self._ratios) < 64:
            self._ratios.append(weights / (seconds * tok_dev))
        return rec

    def _config(self, line: str, state: ParseState) -> None:
        rest = line.split(_CONFIG, 1)[1]
        key, sep, value = rest.partition(":")
        fact = _CONFIG_KEYS.get(key.strip())
        if sep and key.strip() in ("remat_policy", "quantization"):
            _remat_or_quantization(key.strip(), value.strip(), line, state)
            return
        mesh = _MESH_KEY.match(key.strip())
        if sep and (mesh or key.strip() == "num_slices"):
            degree = to_int(value.strip()) if value.strip().lstrip("-").isdigit() else None
            if degree is not None:
                axes = state.scratch.setdefault("mesh", {})
                axes[(mesh.group(1), mesh.group(2)) if mesh else "num_slices"] = degree
            state.used = True
            return
        if not sep or fact is None:
            if sep and key.strip() in ("per_device_batch_size", "gradient_accumulation_steps"):
                size = to_float(value.strip())
                if size is not None and size > 0:
                    state.scratch[key.strip()] = (size, state.line_no, line)
                state.used = True
            return
        value = value.strip()
        v: Any
        if fact == "precision":
            v = _DTYPES.get(value.lower())
        elif fact == "model":
            v = value or None
        else:
            v = to_int(value)
            v = v if v and v > 0 else None
        if v is not None:
            state.fact(fact, v, line)

    def finish(self, state: ParseState) -> list[StepRecord]:
        self._count_devices(state)
        _mesh_facts(state)
        f = state.facts.values
        per = [sc.get("per_device_batch_size") for sc in state.all_scratch().values()]
        per_dev = next((p for p in per if p), None)
        if per_dev and "global_batch" not in f and f.get("num_devices"):
            accum = next((sc["gradient_accumulation_steps"][0] for sc in state.all_scratch().values()
                          if "gradient_accumulation_steps" in sc), 1.0)
            g = per_dev[0] * f["num_devices"] * accum
            if g >= 1 and abs(g - round(g)) < 1e-6:  # MaxText: global_batch_size_to_train_on
                state.facts.set("global_batch", round(g), per_dev[1], per_dev[2])
                state.facts.where["global_batch"] = (f"derived: per_device_batch_size {per_dev[0]:g} x "
                                                     f"{f['num_devices']} devices x {accum:g} accumulation steps "
                                                     f"(line {per_dev[1]})")
        return []

    def _count_devices(self, state: ParseState) -> None:
        """The device count from the step lines where the log states none."""
        ratios = self._ratios
        if ratios and "num_devices" not in state.facts.values:
            r = statistics.median(ratios)
            n = round(r)
            if n >= 1 and abs(r - n) <= 0.02 * n:
                state.facts.set("num_devices", n, 0, "derived")
                state.facts.where["num_devices"] = (
                    f"derived from the step lines: total_weights / (seconds x Tokens/s/device) = {r:.3f}")


def _remat_or_quantization(key: str, value: str, line: str, state: ParseState) -> None:
    """``remat_policy`` as the run's checkpointing (MaxText's name where trainperf has the policy;
    ``custom`` states no tensors here, so it is left to the user) and ``quantization: fp8`` (or
    ``nanoo_fp8``) as the precision."""
    from trainperf.errors import TrainperfError
    from trainperf.specs.checkpointing import get_policy

    if key == "quantization":
        if value in ("fp8", "nanoo_fp8"):
            state.fact("precision", "fp8", line, overwrite=True)
        return
    try:
        get_policy(value)
    except TrainperfError:
        state.used = True
        return
    state.fact("activation_checkpointing", value, line)


def _mesh_facts(state: ParseState) -> None:
    """The plan from the dump's ``ici_*`` / ``dcn_*_parallelism`` and ``num_slices`` (one slice when
    it is not printed and no DCN value is above 1), on the log's device count
    (:func:`~trainperf.ingest.maxtext_mesh.plan_degrees`); nothing when they do not lay the devices out."""
    from trainperf.ingest.maxtext_mesh import plan_degrees

    mesh = {k: v for sc in state.all_scratch().values() for k, v in sc.get("mesh", {}).items()}
    n = state.facts.values.get("num_devices")
    if not n or not any(isinstance(k, tuple) for k in mesh):
        return
    ici = {k[1]: v for k, v in mesh.items() if isinstance(k, tuple) and k[0] == "ici"}
    dcn = {k[1]: v for k, v in mesh.items() if isinstance(k, tuple) and k[0] == "dcn"}
    slices = mesh.get("num_slices", -1)
    if slices < 1:
        if any(v > 1 for v in dcn.values()):
            return
        slices = 1
    degrees = plan_degrees(ici, dcn, int(n), int(slices))
    if degrees is None:
        state.note("the configuration's ici_/dcn_ parallelism does not lay out the log's devices: no plan read")
        return
    for key, d in degrees.items():
        if d > 1 and key not in state.facts.values:
            state.facts.set(key, d, 0, "derived")
            state.facts.where[key] = (f"derived: MaxText's mesh (ici_/dcn_*_parallelism over {n} devices, "
                                      f"{slices} slice(s))")
