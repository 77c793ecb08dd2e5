"""Megatron-LM and NeMo training logs.

Megatron-LM ``training_log`` (every ``log_interval`` iterations, last pipeline rank)::

     [2024-06-11 19:21:40] iteration      100/   10000 | consumed samples:        51200 | elapsed time per iteration (ms): 5320.1 | throughput per GPU (TFLOP/s/GPU): 452.3 | learning rate: 2.999997E-04 | global batch size:   512 | lm loss: 7.251953E+00 | loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |

``elapsed time per iteration`` is the mean over the ``log_interval`` iterations since the
previous line: one record per line, numbered by its last iteration. Tokens per step are the
line's own ``global batch size`` (which may ramp up) times ``seq_length``. The TFLOP/s/GPU is
``num_floating_point_operations`` (attention without causal halving in 2023-24 versions, the
``nemo-legacy`` count; halved in later ones). Megatron-DeepSpeed's variant of the line (``|
samples per second: S | TFLOPs: F |``, per GPU) is read too. Facts come from the argument dump
(``  world_size ........ 64``) and ``using world size: 64, data-parallel size: 8, ...``.

NeMo (Lightning) prints ``train_step_timing in s`` per step, either in the NeMo 2 progress
printer (``Training epoch 0, iteration 9/49 | ... | global_step: 9 | reduced_train_loss: 10.35 |
train_step_timing in s: 7.912 | TFLOPS_per_GPU: 459.2 | consumed_samples: 1280``) or in the
tqdm bar postfix (``... reduced_train_loss=10.40, global_step=9.000, train_step_timing in
s=7.900]``). ``train_step_timing`` is the step's own wall time.
"""

from __future__ import annotations

import re

from trainperf.ingest.base import LogParser, ParseState, make_step, positive, to_float, to_int
from trainperf.records.run_record import StepRecord

_ITER = re.compile(r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|")
# Megatron-LM's layout since 2023 (throughput and grad norm optional): the speed path.
_FAST = re.compile(r"iteration\s+(\d+)/\s*\d+ \|.*? elapsed time per iteration \(ms\): (\d+\.?\d*) \|"
                   r"(?: throughput per GPU \(TFLOP/s/GPU\): (\d+\.?\d*) \|)?.*? global batch size:\s+(\d+) \|"
                   r" lm loss: ([-+\d.Ee]+|nan|inf) \|(?:.*? grad norm: (\d+\.?\d*) \|)?")
# The full default layout (every field in order, no lazy scanning): fastest when it matches.
_STRICT = re.compile(r"iteration\s+(\d+)/\s*\d+ \| consumed samples:\s+\d+ \| elapsed time per iteration "
                     r"\(ms\): (\d+\.?\d*) \|(?: throughput per GPU \(TFLOP/s/GPU\): (\d+\.?\d*) \|)? learning "
                     r"rate: [-+\d.Ee]+ \| global batch size:\s+(\d+) \| lm loss: ([-+\d.Ee]+|nan|inf) \| "
                     r"loss scale: [-+\d.Ee]+ \| grad norm: (\d+\.?\d*) \|")
_ARG = re.compile(r"^\s*([a-z_0-9]+) \.{2,} (\S.*?)\s*$")
_ARGS: dict[str, str] = {
    "world_size": "num_devices", "seq_length": "seq_len", "global_batch_size": "global_batch",
    "micro_batch_size": "micro_batch", "tensor_model_parallel_size": "tp",
    "pipeline_model_parallel_size": "pp", "context_parallel_size": "cp",
    "expert_model_parallel_size": "ep", "num_layers": "layers", "hidden_size": "hidden",
    "num_attention_heads": "heads", "ffn_hidden_size": "ffn_hidden", "padded_vocab_size": "vocab",
}
_FLAG_ARGS = ("bf16", "fp16", "fp8", "swiglu", "group_query_attention", "num_query_groups",
              "untie_embeddings_and_output_weights")
_SIZES = re.compile(r"using world size: (\d+), data-parallel size: (\d+), context-parallel size: (\d+),"
                    r" tensor-model-parallel size: (\d+), pipeline-model-parallel size: (\d+)")


def _field(line: str, key: str, start: int) -> str | None:
    """The text after ``key`` up to the next ``|`` (a substring search, no regex)."""
    j = line.find(key, start)
    if j < 0:
        return None
    j += len(key)
    k = line.find("|", j)
    return line[j:k] if k >= 0 else line[j:]


class MegatronParser(LogParser):
    name = "megatron"
    step_marker = "elapsed time per iteration (ms):"
    description = ("Megatron-LM: 'iteration N/ M | consumed samples: ... | elapsed time per iteration "
                   "(ms): T | throughput per GPU (TFLOP/s/GPU): F | ... | lm loss: L'")
    markers = ("iteration ", " ....", "using world size:")
    claimed_convention = None  # nemo-legacy before the 2025 causal halving, megatron after
    claimed_scope = "TFLOP/s per GPU"

    def __init__(self) -> None:
        self._seq: int | None = None

    def parse_line(self, line: str, state: ParseState) -> StepRecord | None:
        i = line.find("elapsed time per iteration (ms):")
        if i < 0:
            if " .." in line:
                self._arg(line, state)
            elif "using world size:" in line:
                m = _SIZES.search(line)
                if m:
                    for key, g in zip(("num_devices", "dp", "cp", "tp", "pp"), m.groups(), strict=True):
                        state.fact(key, int(g), line)
            return None
        f = _STRICT.search(line) or _FAST.search(line)
        if f is not None and (f.group(3) or "TFLOPs:" not in line):
            ms_f = float(f.group(2))
            if ms_f > 0:
                step = int(f.group(1))
                gbs = int(f.group(4))
                seq = self._seq or state.facts.values.get("seq_len") or state.hints.get("seq_len")
                self._seq = seq
                tf, gn = f.group(3), f.group(6)
                loss = to_float(f.group(5))
                return StepRecord(step, ms_f / 1000.0, gbs * seq if seq else None, loss,
                                  float(gn) if gn else None,
                                  claimed_tflops_per_device=float(tf) if tf else None, rank=state.rank)
        m = _ITER.search(line, 0, i)
        if m is None:
            state.malformed_lines += 1
            return None
        step = int(m.group(1))
        ms = to_float(_field(line, "elapsed time per iteration (ms):", i))
        gbs = to_int(_field(line, "global batch size:", i))
        seq = state.facts.values.get("seq_len") or state.hints.get("seq_len")
        loss_txt = _field(line, "lm loss:", i) or _field(line, " loss:", i)
        tflops = positive(to_float((_field(line, "throughput per GPU (TFLOP/s/GPU):", i) or "").strip() or None))
        if tflops is None:  # Megatron-DeepSpeed: "| samples per second: 40.1 | TFLOPs: 150.2 |" (per GPU)
            tflops = positive(to_float((_field(line, "TFLOPs:", i) or "").strip() or None))
        sps = positive(to_float((_field(line, "samples per second:", i) or "").strip() or None))
        return make_step(
            step, ms / 1000.0 if ms is not None else None, state,
            tokens=gbs * seq if gbs and seq else None,
            loss=to_float(loss_txt.strip()) if loss_txt else None,
            grad_norm=to_float((_field(line, "grad norm:", i) or "").strip() or None),
            claimed_tflops_per_device=tflops,
            claimed_tokens_per_s=sps * seq if sps and seq else None,
        )

    def _arg(self, line: str, state: ParseState) -> None:
        m = _ARG.match(line)
        if m is None:
            return
        key, value = m.group(1), m.group(2)
        fact = _ARGS.get(key)
        if fact is not None:
            v = to_int(value)
            if v is not None and v > 0:
                state.fact(fact, v, line)
        elif key in _FLAG_ARGS:
            state.used = True
            truthy = value.strip() not in ("False", "None", "0")
            if key in ("bf16", "fp16") and truthy:
                state.fact("precision", key, line)
            elif key == "fp8" and truthy:
                state.fact("precision", "fp8", line, overwrite=True)
            elif key == "swiglu":
                state.fact("mlp", "swiglu" if truthy else "gelu", line)
            elif key == "untie_embeddings_and_output_weights":
                state.fact("tied_embeddings", not truthy, line)
            elif key == "num_query_groups" and to_int(value):
                state.scratch["num_query_groups"] = to_int(value)
                if state.facts.get("gqa"):
                    state.fact("kv_heads", to_int(value), line)
            elif key == "group_query_attention" and truthy:
                state.facts.values["gqa"] = True
                g = state.scratch.get("num_query_groups")
                if g:
                    state.fact("kv_heads", g, line)


_NEMO_STEP = re.compile(r"global_step[:=]\s*([\d.]+)")
_NEMO_ITER = re.compile(r"iteration (\d+)/(\d+)")
_NEMO_TIME = re.compile(r"train_step_timing in s[:=]\s*([-+\d.eE]+)")
_NEMO_LOSS = re.compile(r"reduced_train_loss[:=]\s*([-+\d.eE]+|nan|inf)")
_NEMO_TFLOPS = re.compile(r"TFLOPS_per_GPU[:=]\s*([-+\d.eE]+)")
_NEMO_GBS = re.compile(r"global_batch_size[:=]\s*([\d.]+)")


class NemoParser(LogParser):
    name = "nemo"
    step_marker = "train_step_timing in s"
    description = "NeMo: 'global_step: N | reduced_train_loss: L | train_step_timing in s: T' (printer or tqdm postfix)"
    markers = ("train_step_timing in s",)
    claimed_convention = None
    claimed_scope = "TFLOPS_per_GPU per device"

    def parse_line(self, line: str, state: ParseState) -> StepRecord | None:
        i = line.find("train_step_timing in s")
        if i < 0:
            return None
        t = _NEMO_TIME.search(line, i)
        m = _NEMO_STEP.search(line)
        if m is not None:
            step = to_float(m.group(1))
            step_i = int(step) if step is not None and step == int(step) else None
        else:
            it = _NEMO_ITER.search(line)
            step_i = int(it.group(1)) if it else None
        sc = state.scratch
        if step_i is not None and step_i == sc.get("last_step"):
            state.used = True  # a progress bar redraw of the same step
            return None
        loss = _NEMO_LOSS.search(line)
        tf = _NEMO_TFLOPS.search(line)
        gbs_m = _NEMO_GBS.search(line)
        gbs = to_float(gbs_m.group(1)) if gbs_m else None
        seq = state.facts.values.get("seq_len") or state.hints.get("seq_len")
        rec = make_step(step_i, positive(to_float(t.group(1))) if t else None, state,
                        loss=to_float(loss.group(1)) if loss else None,
                        claimed_tflops_per_device=positive(to_float(tf.group(1))) if tf else None,
                        tokens=int(gbs) * seq if gbs and seq else None)
        if rec is not None:
            sc["last_step"] = step_i
            if gbs and gbs == int(gbs):
                state.facts.set("global_batch", int(gbs), state.line_no, line)
        return rec
