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

llm.c (karpathy/llm.c, nanoGPT's GPT-2 in C/CUDA), every step, in its three layouts::

    step    1/18865 | loss 11.009809 (+nanz)| norm 15.4192 (+nanz)| lr 8.39e-07 | 1394.56 ms | 36.5% bf16 MFU | 375954 tok/s
    step    1/18865 | train loss 11.009809 | norm 15.4192 | lr 8.39e-07 | 1394.56 ms | 36.5% bf16 MFU | 375954 tok/s
    step 1/74: train loss 4.367857 (acc 4.367857) (1136.117 ms, 3606 tok/s)

and the CPU reference ``train_gpt2.c``: ``step 1: train loss 5.356 (took 1452.121 ms)``. The
milliseconds are the step's own wall time; ``tok/s`` is global (every process's tokens over the
step's time), so the step's tokens are ``tok/s x seconds`` (the printed rate is rounded: the
product is taken to the nearest multiple of 64 when that is within 0.01%); the MFU is llm.c's
own (the ``llm.c`` convention: 6 N, N every parameter, + 6 L C T), per GPU, against the peak
of its GPU table. The configuration table it prints first (``| sequence
length T | 1024 |``, ``| total batch size | 524288 |``, ``| num_processes | 8 |``, ``| device |
NVIDIA H100 80GB HBM3 |``, the model's ``num_layers L``, ``num_heads NH``, ``channels C``,
``padded_vocab_size Vp``) gives facts; a table with GPT-2's ``channels C`` also gives what
``train_gpt2`` fixes in code: a GeLU MLP of ``4 C``, LayerNorm with biases, learned positions and
an output layer tied to the embedding.

nanochat (karpathy/nanochat, nanoGPT's successor) prints, every step of its pre- and mid-training::

    step 00010/21400 (0.05%) | loss: 9.123456 | lrm: 1.00 | dt: 512.34ms | tok/sec: 1,023,456 | mfu: 45.67 | total time: 0.08m

``dt`` is the step's own wall time; ``tok/sec`` is global (``int(total_batch_size / dt)``), so
the step's tokens are ``tok/sec x dt`` taken to a multiple of 64 as for llm.c, or ``Total batch
size 524,288`` where the log printed it; ``mfu`` is per GPU against the H100's bf16 dense 989
TFLOP/s, which nanochat hard-codes.
"""

from __future__ import annotations

import re

from trainperf.ingest.base import LogParser, ParseState, make_step, to_float, to_int
from trainperf.records.run_record import StepRecord

_RE = re.compile(r"iter (\d+): loss ([^,]+), time ([-+\d.eE]+)\s*ms(?:, mfu ([-+\d.eE]+)%)?")
NANOGPT_PEAK_TFLOPS = 312.0
_MODDED = re.compile(r"step:(\d+)/\d+\s+(?:val_loss:(\S+)\s+)?(?:train_loss:(\S+)\s+)?train_time:([\d.]+)ms\b")
# llm.c: the step, its loss, then (after "|" or "(") the milliseconds; MFU and tok/s may follow.
_LLMC = re.compile(r"^\s*step\s+(\d+)/\d+\s*[|:]\s*(?:train\s+)?loss\s+([-+\d.eE]+|nan|-?inf)\b.*?[|(]\s*"
                   r"(\d+\.?\d*) ms\b(.*)$")
_LLMC_CPU = re.compile(r"^\s*step\s+(\d+):\s*train loss\s+([-+\d.eE]+|nan|-?inf)\s*\(took\s+(\d+\.?\d*)\s*ms\)")
_NANOCHAT = re.compile(r"^\s*step\s+(\d+)(?:/\d+)?\s*\([\d.]+%\)\s*\|\s*loss:\s*([-+\d.eE]+|nan|-?inf)\s*\|.*?"
                       r"\bdt:\s*(\d+\.?\d*)ms\s*\|(.*)$")
_NANOCHAT_TPS = re.compile(r"tok/sec:\s*(\d[\d,]*)\s*(?:\||$)")
_NANOCHAT_MFU = re.compile(r"\bmfu:\s*(\d+\.?\d*)\s*(?:\||$)")
_NANOCHAT_BATCH = re.compile(r"^\s*Total batch size\s+(\d[\d,]*)\b")
NANOCHAT_PEAK_TFLOPS = 989.0
_LLMC_MFU = re.compile(r"(\d+\.?\d*)%\s*(?:\w+\s+)?MFU")
_LLMC_TPS = re.compile(r"(\d+\.?\d*)\s*tok/s")
_LLMC_TABLE = re.compile(r"^\|\s*([A-Za-z][\w ]*?)\s*\|\s*(.*?)\s*\|\s*$")
_LLMC_FACTS = {"sequence length T": "seq_len", "max_sequence_length T": "max_seq_len", "total batch size":
               "tokens_per_step", "micro batch size B": "micro_batch", "num_processes": "num_devices",
               "num_layers L": "layers", "num_heads NH": "heads", "padded_vocab_size Vp": "vocab"}


class NanoGptParser(LogParser):
    name = "nanogpt"
    step_marker = "iter "
    description = ("nanoGPT: 'iter N: loss L, time Tms, mfu M%'; modded-nanogpt: 'step:N/T train_time:Xms "
                   "step_avg:Yms'; llm.c: 'step N/T | loss L | ... | T ms | M% bf16 MFU | R tok/s'; nanochat: "
                   "'step N/T (P%) | loss: L | ... | dt: Tms | tok/sec: R | mfu: M'")
    markers = ("iter ", "train_time:", "tokens per iteration will be:", "block_size", "step", "|")
    claimed_convention = "palm"
    claimed_scope = "MFU per GPU against a hard-coded A100 bf16 peak of 312 TFLOP/s"

    def parse_line(self, line: str, state: ParseState) -> StepRecord | None:
        if "train_time:" in line:
            return _modded_step(line, state)
        if line.lstrip().startswith("step"):  # llm.c and nanochat lines; nanoGPT's start with "iter"
            if " dt:" in line and "tok/sec" in line:
                return _nanochat_step(line, state)
            if " ms" in line and "loss" in line:
                return _llmc_step(line, state)
        if line.startswith("Total batch size"):
            m = _NANOCHAT_BATCH.match(line)
            n = to_int(m.group(1).replace(",", "")) if m else None
            if n and n > 0:
                state.fact("tokens_per_step", n, line)
            return None
        if line.startswith("|"):
            _llmc_fact(line, state)
            return None
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


def _llmc_step(line: str, state: ParseState) -> StepRecord | None:
    """An llm.c step line (any of its layouts, :data:`_LLMC`, :data:`_LLMC_CPU`): the step's
    milliseconds, its tokens from the global ``tok/s`` where printed, the MFU it claims."""
    m = _LLMC.match(line) or _LLMC_CPU.match(line)
    if m is None:
        return None
    ms = to_float(m.group(3))
    tail = m.group(4) if m.re is _LLMC else ""
    mfu = _LLMC_MFU.search(tail)
    tps_m = _LLMC_TPS.search(tail)
    tps = to_float(tps_m.group(1)) if tps_m else None
    tokens = state.facts.get("tokens_per_step")
    if tokens is None and tps and ms:
        tokens = _snap(tps * ms / 1000.0)
    if mfu and "mfu_convention" not in state.facts.values:
        state.fact("mfu_convention", "llm.c", line)  # not nanoGPT's (palm): its own count
    return make_step(to_int(m.group(1)), ms / 1000.0 if ms is not None else None, state,
                     loss=to_float(m.group(2)), tokens=tokens,
                     claimed_tokens_per_s=tps if tps else None,
                     claimed_mfu_pct=to_float(mfu.group(1)) if mfu else None)


def _snap(tokens: float) -> int:
    """``tokens`` (a rounded rate times a rounded time) to the nearest multiple of 64 when that is
    within 0.01%: llm.c's batches are whole sequences of a length that 64 divides."""
    near = 64 * round(tokens / 64)
    return near if near > 0 and abs(near - tokens) <= 1e-4 * tokens else round(tokens)


def _llmc_fact(line: str, state: ParseState) -> None:
    """A row of llm.c's configuration table: ``| name | value |``."""
    m = _LLMC_TABLE.match(line)
    if m is None:
        return
    name, value = m.group(1), m.group(2)
    if name in _LLMC_FACTS:
        state.count_fact(_LLMC_FACTS[name], value, line)
    elif name == "channels C":
        c = to_int(value)
        if c is not None and c > 0:
            state.fact("hidden", c, line)
            _gpt2_facts(4 * c, line, state)
    elif name == "device" and value:
        state.fact("device_name", value, line)
    elif name == "precision" and value.lower() in ("bf16", "fp16", "fp32"):
        state.fact("precision", value.lower(), line)
    elif name == "peak TFlops":
        peak = to_float(value)
        if peak and peak > 0:
            state.fact("claimed_peak_tflops", peak, line)


def _gpt2_facts(ffn: int, line: str, state: ParseState) -> None:
    """What llm.c's ``train_gpt2`` hard-codes about its model (GPT-2, ``gpt2_build_from_checkpoint``):
    the MLP's GeLU of ``ffn`` = 4 x channels, LayerNorm with biases, learned positions, tied
    embeddings."""
    for key, value in (("ffn_hidden", ffn), ("mlp", "gelu"), ("norm", "layernorm"), ("bias", True),
                       ("position", "learned"), ("tied_embeddings", True)):
        state.fact(key, value, line)
        state.facts.where[key] = f"{state.facts.where[key]} (llm.c's GPT-2 fixes it)"


def _nanochat_step(line: str, state: ParseState) -> StepRecord | None:
    """A nanochat training line (:data:`_NANOCHAT`): the step's ``dt``, its tokens (the log's total
    batch size, else ``tok/sec x dt``), the per-GPU MFU it claims against the H100's 989 TFLOP/s."""
    m = _NANOCHAT.match(line)
    if m is None:
        state.malformed_lines += 1
        return None
    ms = to_float(m.group(3))
    tps_m = _NANOCHAT_TPS.search(m.group(4))
    tps = to_float(tps_m.group(1).replace(",", "")) if tps_m else None
    mfu = _NANOCHAT_MFU.search(m.group(4))
    tokens = state.facts.get("tokens_per_step")
    if tokens is None and tps and ms:
        tokens = _snap(tps * ms / 1000.0)
    if "claimed_peak_tflops" not in state.facts.values:
        state.fact("claimed_peak_tflops", NANOCHAT_PEAK_TFLOPS, line)
    return make_step(to_int(m.group(1)), ms / 1000.0 if ms is not None else None, state,
                     loss=to_float(m.group(2)), tokens=tokens, claimed_tokens_per_s=tps if tps else None,
                     claimed_mfu_pct=to_float(mfu.group(1)) if mfu else None)
