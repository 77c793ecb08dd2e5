"""Megatron-LM and NeMo training logs.

Megatron-LM ``training_log`` (every ``log_interval`` iterations, last pipeline rank)::

     [2024-06-11 19:21:40] iteration      100/   10000 | consumed samples:        51200 | elapsed time per iteration (ms): 5320.1 | throughput per GPU (TFLOP/s/GPU): 452.3 | learning rate: 2.999997E-04 | global batch size:   512 | lm loss: 7.251953E+00 | loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |

``elapsed time per iteration`` is the mean over the ``log_interval`` iterations since the
previous line: one record per line, numbered by its last iteration. Tokens per step are the
line's own ``global batch size`` (which may ramp up) times ``seq_length``. The TFLOP/s/GPU is
``num_floating_point_operations`` (attention without causal halving in 2023-24 versions, the
``nemo-legacy`` count; halved in later ones). Megatron-DeepSpeed's variant of the line (``|
samples per second: S | TFLOPs: F |``, per GPU; later ``| tokens per gpu per second (tgs): R |``)
is read too. Facts come from the argument dump
(``  world_size ........ 64``: sizes, parallel degrees (virtual pipeline and expert TP included),
experts, ``sequence_parallel``, ``use_distributed_optimizer``, normalization, positions, biases,
the recompute arguments) and ``using world size: 64, data-parallel size: 8, ...``.

Megatron-DeepSpeed (BLOOM) prints the time in seconds (``elapsed time per iteration (s):
106.46 |``), ``lm-loss:`` in some versions, ``consumed tokens:`` (tokens / samples gives the
sequence length) and a ``[default7]:`` rank prefix (stripped by the pipeline). The per-line
``global batch size`` is a log fact (the last one seen, after any ramp-up). Every value is read
up to its ``|``: a line cut inside the time field (``(ms): 9``) is a cut line, not a 0.009 s step.

``report_memory`` prints, once after the first logged iteration, on every rank whose
data-parallel rank is 0 (``[Rank 43] (after 1 iterations) memory (MB) | allocated: A | max
allocated: M | reserved: R | max reserved: X``, MiB): the largest ``max allocated`` and ``max
reserved`` over those ranks are the run's peak memory (log facts :data:`~.base.MEMORY_PEAK` and
:data:`~.base.MEMORY_RESERVED_PEAK`, in GiB), the busiest pipeline stage's.

NeMo (Lightning) prints ``train_step_timing in s`` per step, either in the NeMo 2 progress
printer (``Training epoch 0, iteration 9/49 | ... | global_step: 9 | reduced_train_loss: 10.35 |
train_step_timing in s: 7.912 | TFLOPS_per_GPU: 459.2 | consumed_samples: 1280``) or in the
tqdm bar postfix (``... reduced_train_loss=10.40, global_step=9.000, train_step_timing in
s=7.900]``). ``train_step_timing`` is the step's own wall time; ``tokens_per_sec_per_gpu`` and
``TFLOPS_per_GPU`` are per-device claims; ``max_memory_allocated`` (bytes: the peak torch has
allocated on the rank so far) is the step's memory in GiB, ``max_memory_reserved`` kept beside
it. The printer's config dump (``  seq_length: 8192``)
gives facts. The time must be followed by ``|``, ``,``, ``]`` or the end of a complete line.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from trainperf.ingest.base import (
    MEMORY_PEAK,
    MEMORY_RESERVED_PEAK,
    RANK_PREFIX,
    LogParser,
    ParseState,
    make_step,
    positive,
    to_float,
    to_int,
    to_time,
)
from trainperf.ingest.templates import BlockField
from trainperf.records.run_record import StepRecord

if TYPE_CHECKING:
    import numpy as np

_ITER = re.compile(r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|")
# The time field with its delimiter: a number not followed by " |" was cut mid-write.
_TIME = re.compile(r"elapsed time per iteration \((ms|s)\):\s*([^\s|]*)(\s*\|)?")
# Megatron-LM's layout since 2023 (throughput and grad norm optional): the speed path. Every
# number is followed by its " |" delimiter.
_FAST = re.compile(r"iteration\s+(\d+)/\s*\d+ \|.*? elapsed time per iteration \((m?s)\): (\d+\.?\d*) \|"
                   r"(?: throughput per GPU \(TFLOP/s/GPU\): (\d+\.?\d*) \|)?.*? global batch size:\s+(\d+) \|"
                   r" lm[ -]loss: ([-+\d.Ee]+|nan|inf) \|(?:.*? grad norm: (\d+\.?\d*) \|)?")
# The full default layout (every field in order, no lazy scanning): fastest when it matches.
_STRICT = re.compile(r"iteration\s+(\d+)/\s*\d+ \| consumed samples:\s+\d+ \| elapsed time per iteration "
                     r"\((m?s)\): (\d+\.?\d*) \|(?: throughput per GPU \(TFLOP/s/GPU\): (\d+\.?\d*) \|)? learning "
                     r"rate: [-+\d.Ee]+ \| global batch size:\s+(\d+) \| lm loss: ([-+\d.Ee]+|nan|inf) \| "
                     r"loss scale: [-+\d.Ee]+ \| grad norm: (\d+\.?\d*) \|")
# The whole canonical line, for the pipeline's block path (see LogParser.block_re).
_BLOCK = re.compile(RANK_PREFIX + r" *(?:\[[^\]\n]*\] +)?iteration +(\d+)/ *\d+ \| consumed samples: +\d+ \| "
                    r"elapsed time per iteration \((m?s)\): (\d+\.?\d*) \|(?: throughput per GPU \(TFLOP/s/GPU\): "
                    r"(\d+\.?\d*) \|)? learning rate: [-+\d.Ee]+ \| global batch size: +(\d+) \| lm loss: "
                    r"([-+\d.Ee]+|nan|inf) \| loss scale: [-+\d.Ee]+ \| grad norm: (\d+\.?\d*) \|"
                    r"(?: number of skipped iterations: +\d+ \| number of nan iterations: +\d+ \|)? *$", re.M)
_CONSUMED = re.compile(r"consumed samples:\s*(\d+) \| consumed tokens:\s*(\d+) \|")
_PADDED_VOCAB = re.compile(r"padded vocab \(size: \d+\) with \d+ dummy tokens \(new size: (\d+)\)")
_ARG = re.compile(r"^\s*([a-z_0-9]+) \.{2,} (\S.*?)\s*$")
_ARGS: dict[str, str] = {
    "world_size": "num_devices", "seq_length": "seq_len", "global_batch_size": "global_batch",
    "micro_batch_size": "micro_batch", "tensor_model_parallel_size": "tp",
    "pipeline_model_parallel_size": "pp", "context_parallel_size": "cp",
    "expert_model_parallel_size": "ep", "num_layers": "layers", "hidden_size": "hidden",
    "num_attention_heads": "heads", "ffn_hidden_size": "ffn_hidden", "padded_vocab_size": "vocab",
    "virtual_pipeline_model_parallel_size": "vpp", "num_experts": "moe_experts",
    "moe_router_topk": "moe_topk", "moe_ffn_hidden_size": "moe_expert_ffn", "kv_channels": "head_dim",
}
_FLAG_ARGS = ("bf16", "fp16", "fp8", "swiglu", "group_query_attention", "num_query_groups",
              "untie_embeddings_and_output_weights")
# Arguments whose words name a plan or model fact: key -> (fact, {printed value: fact value}).
_WORD_ARGS: dict[str, tuple[str, dict[str, object]]] = {
    "sequence_parallel": ("sp", {"True": True, "False": False}),
    "use_distributed_optimizer": ("zero_stage", {"True": 1}),
    "normalization": ("norm", {"RMSNorm": "rmsnorm", "LayerNorm": "layernorm"}),
    "position_embedding_type": ("position", {"rope": "rope", "learned_absolute": "learned", "none": "none"}),
    "add_bias_linear": ("bias", {"True": True, "False": False}),
}
# report_memory (megatron/training/utils.py): MiB, printed once after the first logged iteration
# by every rank whose data-parallel rank is 0 (each tensor- and pipeline-parallel rank).
_MEMORY = re.compile(r"memory \(MB\) \| allocated: [\d.]+ \| max allocated: (\d+\.?\d*) \| reserved: [\d.]+ \| "
                     r"max reserved: (\d+\.?\d*)\s*$")
_RECOMPUTE_ARGS = ("recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules",
                   "checkpoint_activations")
_SIZES = re.compile(r"using world size: (\d+), data-parallel size: (\d+), context-parallel size: (\d+),"
                    r" tensor-model-parallel size: (\d+), pipeline-model-parallel size: (\d+)")


def _field(line: str, key: str, start: int) -> str | None:
    """The text after ``key`` up to the next ``|`` (a substring search, no regex); ``None`` when
    the key is absent or its value has no ``|`` after it (the line was cut inside the field)."""
    j = line.find(key, start)
    if j < 0:
        return None
    j += len(key)
    k = line.find("|", j)
    return line[j:k].strip() or None if k >= 0 else None


class MegatronParser(LogParser):
    name = "megatron"
    step_marker = "elapsed time per iteration ("
    description = ("Megatron-LM / Megatron-DeepSpeed: 'iteration N/ M | ... | elapsed time per iteration "
                   "(ms): T | throughput per GPU (TFLOP/s/GPU): F | ... | lm loss: L' (or '(s): T', "
                   "'samples per second: S | TFLOPs: F')")
    markers = ("iteration ", " ....", "using world size:", "padded vocab", "memory (MB)")
    claimed_convention = None  # nemo-legacy before the 2025 causal halving, megatron after
    claimed_scope = "TFLOP/s per GPU"
    block_re = _BLOCK

    block_fields = (BlockField("step", 3, "int"), BlockField("ms", 4, "text", lambda u: u == "ms"),
                    BlockField("t", 5, "float"), BlockField("tf", 6, "float"), BlockField("gbs", 7, "int"),
                    BlockField("loss", 8, "to_float"), BlockField("gn", 9, "float"))

    def __init__(self) -> None:
        self._seq: int | None = None
        self._last_gbs: tuple[int, int, str] | None = None
        self._args_seen = False

    @staticmethod
    def _seconds(vals: dict[str, np.ndarray]) -> np.ndarray:
        import numpy as np

        t = vals["t"]
        return np.where(vals["ms"] == 1, t / 1000.0, t)

    def block_valid(self, vals: dict[str, np.ndarray]) -> np.ndarray | None:
        t = self._seconds(vals)
        return (t >= 1e-6) & (t <= 1e7)  # else parse_line flags the step

    def block_arrays(self, vals: dict[str, np.ndarray], last_line: str, state: ParseState
                     ) -> dict[str, np.ndarray | None] | None:
        import numpy as np

        gbs = vals["gbs"]
        seq = self._seq or state.facts.values.get("seq_len") or state.hints.get("seq_len")
        if seq and not (type(seq) is int and int(gbs.max()) <= ((1 << 63) - 1) // seq):
            return None  # tokens beyond int64 (or a non-integer length): parse_line keeps them exact
        self._seq = seq
        self._last_gbs = (int(gbs[-1]), state.line_no, last_line)
        tf = vals["tf"]
        return {"step": vals["step"], "step_time_s": self._seconds(vals), "tokens": gbs * seq if seq else None,
                "loss": vals["loss"], "grad_norm": vals["gn"],
                "claimed_tflops_per_device": None if np.isnan(tf).all() else tf}

    def block_inert(self, line: str) -> bool:
        return "elapsed time per iteration (" not in line and " .." not in line  # no step, no seq_length

    def parse_line(self, line: str, state: ParseState) -> StepRecord | None:
        i = line.find("elapsed time per iteration (")
        if i < 0:
            if " .." in line:
                self._arg(line, state)
            elif "using world size:" in line:
                m = _SIZES.search(line)
                if m:
                    for key, g in zip(("num_devices", "dp", "cp", "tp", "pp"), m.groups(), strict=True):
                        state.fact(key, int(g), line)
            elif "padded vocab" in line:
                m = _PADDED_VOCAB.search(line)
                if m:
                    state.fact("vocab", int(m.group(1)), line, overwrite=True)
            elif "memory (MB)" in line:
                m = None if state.partial else _MEMORY.search(line)  # a cut last line may cut the number
                if m:  # MiB -> GiB; the largest over the ranks that printed one
                    state.peak_memory(MEMORY_PEAK, float(m.group(1)) / 1024.0, line)
                    state.peak_memory(MEMORY_RESERVED_PEAK, float(m.group(2)) / 1024.0, line)
            return None
        if "TFLOPs:" not in line and "samples per second" not in line:
            f = _STRICT.search(line) or _FAST.search(line)
            if f is not None:
                t = float(f.group(3)) / (1000.0 if f.group(2) == "ms" else 1.0)
                if 1e-6 <= t <= 1e7:
                    step = int(f.group(1))
                    gbs = int(f.group(5))
                    seq = self._seq or state.facts.values.get("seq_len") or state.hints.get("seq_len")
                    self._seq = seq
                    self._last_gbs = (gbs, state.line_no, line)
                    tf, gn = f.group(4), f.group(7)
                    return StepRecord(step, t, gbs * seq if seq else None, to_float(f.group(6)),
                                      float(gn) if gn else None,
                                      claimed_tflops_per_device=float(tf) if tf else None, rank=state.rank)
        return self._slow(line, i, state)

    def _slow(self, line: str, i: int, state: ParseState) -> StepRecord | None:
        """Any layout: fields found by name, each value up to its ``|`` delimiter."""
        m = _ITER.search(line, 0, i)
        tm = _TIME.match(line, i)
        if m is None or tm is None:
            state.malformed_lines += 1
            return None
        if tm.group(3) is None:  # "(ms): 9" at the end of the line: cut mid-number
            state.cut(line)
            return None
        t = to_time(tm.group(2))
        if t is None:
            state.malformed_lines += 1
            return None
        step = int(m.group(1))
        gbs = to_int(_field(line, "global batch size:", i))
        if gbs:
            self._last_gbs = (gbs, state.line_no, line)
        seq = state.facts.values.get("seq_len") or state.hints.get("seq_len")
        if seq is None and "consumed tokens:" in line:
            c = _CONSUMED.search(line)
            if c and int(c.group(1)) > 0 and int(c.group(2)) % int(c.group(1)) == 0:
                seq = int(c.group(2)) // int(c.group(1))
                state.facts.set("seq_len", seq, state.line_no, line)
                state.facts.where["seq_len"] = f"derived: consumed tokens / consumed samples (line {state.line_no})"
        loss_txt = _field(line, "lm loss:", i) or _field(line, "lm-loss:", i) or _field(line, " loss:", i)
        tflops = positive(to_float(_field(line, "throughput per GPU (TFLOP/s/GPU):", i)))
        if tflops is None:  # Megatron-DeepSpeed: "| samples per second: 40.1 | TFLOPs: 150.2 |" (per GPU)
            tflops = positive(to_float(_field(line, "TFLOPs:", i)))
        sps = positive(to_float(_field(line, "samples per second:", i)))
        tgs = positive(to_float(_field(line, "tokens per gpu per second (tgs):", i)))
        return make_step(
            step, t / 1000.0 if tm.group(1) == "ms" else t, state,
            tokens=gbs * seq if gbs and seq else None,
            loss=to_float(loss_txt) if loss_txt else None,
            grad_norm=to_float(_field(line, "grad norm:", i)),
            claimed_tflops_per_device=tflops,
            claimed_tokens_per_s=sps * seq if sps and seq else None,
            claimed_tokens_per_s_per_device=tgs,
            extra={"claimed_samples_per_s": sps} if sps else None,
        )

    def finish(self, state: ParseState) -> list[StepRecord]:
        if self._last_gbs is not None and "global_batch" not in state.facts.values:
            gbs, line_no, line = self._last_gbs
            state.facts.set("global_batch", gbs, line_no, line)
        if self._args_seen and "mlp" not in state.facts.values:
            state.facts.set("mlp", "gelu", 0, "")
            state.facts.where["mlp"] = "the argument dump has no swiglu: Megatron's default MLP, GeLU"
        _recompute_fact(state)
        _expert_fact(state)
        return []

    def _arg(self, line: str, state: ParseState) -> None:
        m = _ARG.match(line)
        if m is None:
            return
        self._args_seen = True
        key, value = m.group(1), m.group(2)
        fact = _ARGS.get(key)
        if fact is not None:
            state.count_fact(fact, value, line)
        elif key == "expert_tensor_parallel_size":
            _expert_tp(value, line, state)
        elif key in _WORD_ARGS:
            fact_key, words = _WORD_ARGS[key]
            if value.strip() in words:
                state.fact(fact_key, words[value.strip()], line)
            state.used = True
        elif key in _RECOMPUTE_ARGS:
            state.scratch[key] = (value.strip(), state.line_no, line)
            state.used = True
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


def _expert_tp(value: str, line: str, state: ParseState) -> None:
    """``expert_tensor_parallel_size``, kept until the end: it is a plan fact only for an MoE
    model (the dump prints it for dense ones too, where trainperf's plan has no expert TP)."""
    v = to_int(value)
    if v is not None and v > 0:
        state.scratch["etp"] = (v, state.line_no, line)
    state.used = True


def _expert_fact(state: ParseState) -> None:
    """The expert TP of an MoE model's dump (see :func:`_expert_tp`)."""
    etp = next((sc["etp"] for sc in state.all_scratch().values() if "etp" in sc), None)
    if etp is not None and (state.facts.values.get("moe_experts") or 0) > 1 and "etp" not in state.facts.values:
        state.facts.set("etp", etp[0], etp[1], etp[2])


def _recompute_fact(state: ParseState) -> None:
    """The activation checkpointing the argument dump states, in Megatron's own names
    (:data:`trainperf.specs.checkpointing.FRAMEWORK_NAMES`): ``recompute_granularity`` full with
    ``recompute_method`` block and ``recompute_num_layers`` K is ``megatron:full:block:K``, full
    otherwise ``megatron:full`` (uniform: every layer re-run), selective ``megatron:selective`` or,
    with ``recompute_modules`` other than its default core_attn, ``megatron:selective:MODULES``;
    the 2020-21 releases' ``checkpoint_activations True`` is full (every layer, in chunks of
    ``checkpoint_num_layers``); a dump that states neither on is ``none``."""
    sc = {k: v for scratch in state.all_scratch().values() for k, v in scratch.items() if k in _RECOMPUTE_ARGS}
    src = sc.get("recompute_granularity") or sc.get("checkpoint_activations")
    if "activation_checkpointing" in state.facts.values or src is None:
        return
    gran = sc.get("recompute_granularity", ("None",))[0]
    old_on = sc.get("checkpoint_activations", ("False",))[0] == "True"
    if old_on and gran == "None":
        src, gran = sc["checkpoint_activations"], "full"
    if gran == "full":
        method, k = sc.get("recompute_method", ("None",))[0], to_int(sc.get("recompute_num_layers", ("",))[0])
        name = f"megatron:full:block:{k}" if method == "block" and k else "megatron:full"
    elif gran == "selective":
        modules = re.findall(r"[a-z_]+", sc.get("recompute_modules", ("",))[0])
        name = f"megatron:selective:{'+'.join(modules)}" if modules and modules != ["core_attn"] else "megatron:selective"
    elif gran == "None":
        name = "none"
    else:
        return
    state.facts.set("activation_checkpointing", name, src[1], src[2])


_NEMO_STEP = re.compile(r"global_step[:=]\s*([\d.]+)")
_NEMO_ITER = re.compile(r"iteration (\d+)/(\d+)")
# The time and its delimiter (" |", ",", "]" or the end of a complete line).
_NEMO_TIME = re.compile(r"train_step_timing in s[:=]\s*([-+\w.]*)(\s*[|,\]]|\s*$)?")
_NEMO_LOSS = re.compile(r"reduced_train_loss[:=]\s*([-+\d.eE]+|nan|inf)\s*(?:[|,\]]|$)")
_NEMO_TFLOPS = re.compile(r"TFLOPS_per_GPU[:=]\s*([-+\d.eE]+)\s*(?:[|,\]]|$)")
_NEMO_TPS = re.compile(r"tokens_per_sec_per_gpu[:=]\s*([-+\d.eE]+)\s*(?:[|,\]]|$)")
_NEMO_GBS = re.compile(r"global_batch_size[:=]\s*([\d.]+)")
_NEMO_MEM = re.compile(r"max_memory_(allocated|reserved)[:=]\s*(\d+(?:\.\d+)?(?:[eE][+]?\d+)?)\s*(?:[|,\]]|$)")
_NEMO_CONFIG = re.compile(r"^\s*([a-z_0-9]+):\s*([\w.-]+)\s*$")
_NEMO_FACTS = {"seq_length": "seq_len", "micro_batch_size": "micro_batch", "global_batch_size": "global_batch",
               "num_layers": "layers", "hidden_size": "hidden", "num_attention_heads": "heads",
               "ffn_hidden_size": "ffn_hidden", "num_query_groups": "kv_heads",
               "tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp",
               "virtual_pipeline_model_parallel_size": "vpp", "context_parallel_size": "cp",
               "expert_model_parallel_size": "ep", "num_moe_experts": "moe_experts", "moe_router_topk": "moe_topk", "kv_channels": "head_dim"}
# NeMo 1 names of Megatron's recompute arguments (the config keys NeMo 2 prints are Megatron's own).
_NEMO_RECOMPUTE = {"activations_checkpoint_granularity": "recompute_granularity",
                   "activations_checkpoint_method": "recompute_method",
                   "activations_checkpoint_num_layers": "recompute_num_layers",
                   **{k: k for k in ("recompute_granularity", "recompute_method", "recompute_num_layers")}}
_YAML_WORDS = {"null": "None", "~": "None", "true": "True", "false": "False"}


def _nemo_config(line: str, state: ParseState) -> None:
    """A ``  key: value`` line of the configuration NeMo prints: sizes and parallel degrees,
    ``sequence_parallel``, ``use_distributed_optimizer``, the precision (``bf16: true``, ``fp8:
    hybrid``), the recompute settings (read at the end as Megatron's, see :func:`_recompute_fact`)."""
    m = _NEMO_CONFIG.match(line)
    if m is None:
        return
    key, value = m.group(1), _YAML_WORDS.get(m.group(2).lower(), m.group(2))
    if key in _NEMO_FACTS:
        state.count_fact(_NEMO_FACTS[key], value, line)
    elif key == "sequence_parallel" and value in ("True", "False"):
        state.fact("sp", value == "True", line)
    elif key == "use_distributed_optimizer" and value == "True":
        state.fact("zero_stage", 1, line)
    elif key == "bf16" and value == "True":
        state.fact("precision", "bf16", line)
    elif key == "fp8" and value in ("hybrid", "e4m3"):  # Transformer Engine's fp8 formats
        state.fact("precision", "fp8", line, overwrite=True)
    elif key == "expert_tensor_parallel_size":
        _expert_tp(value, line, state)
    elif key in _NEMO_RECOMPUTE:
        state.scratch[_NEMO_RECOMPUTE[key]] = (value, state.line_no, line)
        state.used = True


def _nemo_memory_GiB(line: str) -> dict[str, float]:
    """The printer's ``max_memory_allocated`` / ``max_memory_reserved`` (bytes, the peaks
    ``torch.cuda`` reports on this rank since the start) in GiB."""
    out: dict[str, float] = {}
    for m in _NEMO_MEM.finditer(line):
        v = to_float(m.group(2))
        if v is not None and v > 0:
            out[m.group(1)] = v / 2**30
    return out


class NemoParser(LogParser):
    name = "nemo"
    step_marker = "train_step_timing in s"
    description = "NeMo: 'global_step: N | reduced_train_loss: L | train_step_timing in s: T' (printer or tqdm postfix)"
    markers = ("train_step_timing in s", "seq_length:", "micro_batch_size:")
    claimed_convention = None
    claimed_scope = "TFLOPS_per_GPU and tokens_per_sec_per_gpu per device"

    def parse_line(self, line: str, state: ParseState) -> StepRecord | None:
        i = line.find("train_step_timing in s")
        if i < 0:
            if ": " in line and line.startswith(" "):
                _nemo_config(line, state)
            return None
        t = _NEMO_TIME.search(line, i)
        if t is None or t.group(2) is None or (state.partial and not t.group(2).strip()):
            state.cut(line)  # "in s: 6.0" with no delimiter after it: cut mid-number
            return None
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
        tps = _NEMO_TPS.search(line)
        gbs_m = _NEMO_GBS.search(line)
        gbs = to_float(gbs_m.group(1)) if gbs_m else None
        seq = state.facts.values.get("seq_len") or state.hints.get("seq_len")
        mem = _nemo_memory_GiB(line)
        rec = make_step(step_i, to_time(t.group(1)), state,
                        loss=to_float(loss.group(1)) if loss else None,
                        claimed_tflops_per_device=positive(to_float(tf.group(1))) if tf else None,
                        claimed_tokens_per_s_per_device=positive(to_float(tps.group(1))) if tps else None,
                        tokens=int(gbs) * seq if gbs and seq else None,
                        memory_GiB=mem.get("allocated"),
                        extra={"memory_reserved_GiB": mem["reserved"]} if "reserved" in mem else {})
        if rec is not None:
            sc["last_step"] = step_i
            if gbs and gbs == int(gbs):
                state.facts.set("global_batch", int(gbs), state.line_no, line)
        return rec

    def finish(self, state: ParseState) -> list[StepRecord]:
        _recompute_fact(state)
        _expert_fact(state)
        return []
