"""torchtitan training logs.

Step line (every ``metrics.log_freq`` steps, printed by every rank unless filtered)::

    [rank0]:[titan] 2025-03-17 10:00:10,123 - root - INFO - step: 10  loss:  9.2741  grad_norm:  2.1034  memory: 42.11GiB(44.33%)  tps: 6,543  tflops: 378.95  mfu: 38.32%

(2024 versions print ``wps`` instead of ``tps`` and no ``tflops``/``grad_norm``; colours are
ANSI codes, stripped). ``tps`` is tokens per second *per device*, averaged since the previous
log line; tflops/mfu use ``6*N + 12*L*H*Q*T`` per token (2024: N counts the input embedding,
the ``torchtitan-2024`` convention; 2025: it does not, the ``palm`` convention).

The console line carries no step time. The step time is taken from the log timestamps:
(time of this line - time of the previous step line) / (steps between them) -- the same
window torchtitan averages its own tps over. Validation and checkpointing run after a step's
line and log when they end (``validate step: 100  loss: ...``, ``Finished saving the checkpoint
... in 12.34 seconds``): the next step is timed from that line, so their time is no step's. The
first logged step has no predecessor; it gets
``global tokens per step / (tps x devices)`` when those are known (log facts or the user's
workload), and is dropped otherwise (it is warm-up anyway). Facts: ``Training starts at step
1, with local batch size B, global batch size G, [gradient accumulation steps A, ]sequence length
S`` (the micro batch is B / A); ``Building N-D device
mesh with [names], [sizes]``; ``Peak FLOPS used for computing MFU: 9.890e+14``; the device name
in ``GPU capacity: NVIDIA H100 80GB HBM3 ...``; the model flavour in ``Building llama3 8B`` (and, for a flavour no preset names, the shape
in its ``ModelArgs(...)``);
``Applied selective activation checkpointing to the model`` (torchtitan's ``selective``: its
per-op option, as its Llama 3 configs set it; the line does not say which option) or ``full``.
The workload's stack is torchtitan.
"""

from __future__ import annotations

import ast
import re
from datetime import UTC, datetime

from trainperf.ingest.base import LogParser, ParseState, make_step, strip_ansi, to_float
from trainperf.records.run_record import StepRecord

_KV = re.compile(r"([a-z_]+):\s*([-+]?[\d,]*\.?\d+(?:[eE][-+]?\d+)?|nan|inf)\s*(GiB\(([\d.]+)%\)|%)?")
_TS = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[,.](\d{1,6}))?")
# "Training starts at step 1, with local batch size 1, global batch size 8, [gradient accumulation
# steps 1, ]sequence length 8192, total steps ...": each field read alone (releases add fields).
_START = re.compile(r"global batch size (\d+)")
_SEQ = re.compile(r"sequence length (\d+)")
_LOCAL = re.compile(r"local batch size (\d+)")
_ACCUM = re.compile(r"gradient accumulation steps (\d+)")
_MESH = re.compile(r"device mesh with (\[[^\]]*\]),\s*(\[[^\]]*\])")
_MESH_NAMES = {"dp": "fsdp", "dp_shard": "fsdp", "dp_replicate": "dp", "tp": "tp", "pp": "pp", "cp": "cp",
               "ep": "ep"}
_AC = re.compile(r"Applied (selective|full) activation checkpointing", re.IGNORECASE)
_ARG_KV = re.compile(r"\b(dim|n_layers|n_heads|n_kv_heads|vocab_size|multiple_of|ffn_dim_multiplier)=([\w.]+)")
_MODEL = re.compile(r"Building (llama\d(?:\.\d)?) (\d+B)\b", re.IGNORECASE)


def _timestamp(line: str) -> float | None:
    m = _TS.search(line, 0, 80)
    if m is None:
        return None
    try:
        y, mo, d, h, mi, s = (int(x) for x in m.groups()[:6])
        frac = m.group(7) or "0"
        t = datetime(y, mo, d, h, mi, s, tzinfo=UTC).timestamp()
    except ValueError:
        return None
    return t + int(frac) / 10 ** len(frac)


def _rebase(line: str, state: ParseState) -> None:
    """A validation or checkpoint line after a step's: the next step is timed from its timestamp
    (the work it ends ran between the two steps' lines, and is no training step's)."""
    ts = _timestamp(line)
    sc = state.scratch
    prev = sc.get("prev")
    state.used = True
    if ts is not None and prev is not None and ts > prev[1]:
        sc["prev"] = (prev[0], ts)
        sc["rebased"] = sc.get("rebased", 0) + 1


def _llama_args(line: str, state: ParseState) -> None:
    """The shape in a Llama flavour's ``ModelArgs(dim=4096, n_layers=32, n_heads=32,
    n_kv_heads=8, vocab_size=128256, multiple_of=1024, ffn_dim_multiplier=1.3, ...)``, for a
    flavour no preset names (``debugmodel``; a named one's preset wins). The MLP width as
    torchtitan's Llama ``FeedForward`` computes it: ``int(2 * 4 * dim / 3)``, times
    ``ffn_dim_multiplier`` when set, rounded up to a multiple of ``multiple_of``. Arguments of an
    MoE flavour are left alone (their experts' shapes are other fields)."""
    if "moe" in line.lower() or "num_experts" in line:
        return
    kv = {k: v for k, v in _ARG_KV.findall(line)}
    dim, layers, heads, vocab = (to_float(kv.get(k)) for k in ("dim", "n_layers", "n_heads", "vocab_size"))
    if not (dim and layers and heads and vocab) or any(x != int(x) or x <= 0 for x in (dim, layers, heads, vocab)):
        return
    for key, value in (("hidden", dim), ("layers", layers), ("heads", heads), ("vocab", vocab)):
        state.fact(key, int(value), line)
    kv_heads = to_float(kv.get("n_kv_heads"))
    state.fact("kv_heads", int(kv_heads) if kv_heads and kv_heads == int(kv_heads) else int(heads), line)
    multiple, mult = to_float(kv.get("multiple_of")), to_float(kv.get("ffn_dim_multiplier"))
    if multiple and multiple == int(multiple) and multiple > 0:
        ffn = int(2 * 4 * int(dim) / 3)
        if mult:
            ffn = int(mult * ffn)
        state.fact("ffn_hidden", int(multiple) * ((ffn + int(multiple) - 1) // int(multiple)), line)
        state.fact("mlp", "swiglu", line)  # torchtitan's Llama FeedForward: w2(silu(w1 x) * w3 x)


class TorchtitanParser(LogParser):
    name = "torchtitan"
    step_marker = "step:"
    description = "torchtitan: 'step: N  loss: L  memory: MGiB(P%)  tps: T  tflops: F  mfu: U%'"
    markers = ("step:", "global batch size", "device mesh", "Peak FLOPS", "capacity:", "Building llama",
               "activation checkpointing")
    claimed_convention = "palm"
    stack = "torchtitan"
    claimed_scope = "tps is tokens/s per device; tflops and mfu per device"

    def parse_line(self, line: str, state: ParseState) -> StepRecord | None:
        i = line.find("step:")
        if i < 0 or "loss:" not in line or ("tps:" not in line and "wps:" not in line):
            if "validate step:" in line or "Finished saving the checkpoint" in line:
                _rebase(line, state)
            elif i < 0:
                self._fact(line, state)
            elif state.partial and "loss:" in line:
                state.cut(line)  # the last line, cut before its rates
            return None
        line = strip_ansi(line)
        i = line.find("step:")
        kv: dict[str, float] = {}
        mem_pct = None
        nonfinite: dict[str, str] = {}
        for m in _KV.finditer(line, i):
            v = to_float(m.group(2))
            if v is not None:
                kv.setdefault(m.group(1), v)
            elif m.group(2) in ("nan", "inf"):
                nonfinite.setdefault(m.group(1), m.group(2))
            if m.group(1) == "memory" and m.group(4):
                mem_pct = to_float(m.group(4))
        step = kv.get("step")
        tps = kv.get("tps", kv.get("wps"))
        if state.partial and not line.rstrip().endswith("%"):
            state.cut(line)  # the last line, cut before its closing "mfu: x%"
            return None
        if step is None or step != int(step) or step < 0 or ("loss" not in kv and "loss" not in nonfinite):
            state.malformed_lines += 1
            return None
        step_i = int(step)
        ts = _timestamp(line)
        sc = state.scratch
        prev = sc.get("prev")  # (step, timestamp) of the last step line with a usable timestamp
        step_time = None
        if ts is not None and prev is not None and step_i > prev[0]:
            if ts > prev[1]:
                step_time = (ts - prev[1]) / (step_i - prev[0])
            else:  # the clock went backwards: no time for this step, and it is no base for the next
                sc["backwards"] = sc.get("backwards", 0) + 1
                ts = None
        if ts is not None or prev is None or step_i <= prev[0]:
            sc["prev"] = (step_i, ts) if ts is not None else None
        extra: dict[str, object] = {"memory_pct": mem_pct} if mem_pct is not None else {}
        if "loss" in nonfinite:
            extra["loss_not_finite"] = nonfinite["loss"]
            sc["nan_loss"] = sc.get("nan_loss", 0) + 1
        fields = dict(loss=kv.get("loss"), grad_norm=kv.get("grad_norm"),
                      memory_GiB=kv.get("memory"), claimed_tokens_per_s_per_device=tps,
                      claimed_tflops_per_device=kv.get("tflops"), claimed_mfu_pct=kv.get("mfu"),
                      extra=extra)
        if step_time is None:
            # No predecessor (first line, restart) or no timestamps: finish it at the end if the
            # tokens per step and the device count become known.
            if tps and tps > 0:
                pending = sc.setdefault("pending", [])
                if len(pending) < 100_000:
                    pending.append((step_i, tps, fields, state.rank, state.line_no))
            state.used = True
            return None
        return make_step(step_i, step_time, state, **fields)

    def _fact(self, line: str, state: ParseState) -> None:
        if "global batch size" in line:
            m, seq = _START.search(line), _SEQ.search(line)
            if m and seq:
                state.fact("global_batch", int(m.group(1)), line)
                state.fact("seq_len", int(seq.group(1)), line)
                loc, ga = _LOCAL.search(line), _ACCUM.search(line)
                local, steps = (int(loc.group(1)) if loc else 0), (int(ga.group(1)) if ga else 1)
                if local and steps and local % steps == 0:  # a rank's batch, in that many micro-batches
                    state.fact("micro_batch", local // steps, line)
        elif "device mesh" in line:
            m = _MESH.search(line)
            if m:
                try:
                    names, sizes = ast.literal_eval(m.group(1)), ast.literal_eval(m.group(2))
                except (ValueError, SyntaxError, MemoryError, RecursionError):
                    return
                if isinstance(names, list) and isinstance(sizes, list) and len(names) == len(sizes) \
                        and all(isinstance(s, int) and s > 0 for s in sizes):
                    n = 1
                    for name, size in zip(names, sizes, strict=True):
                        n *= size
                        key = _MESH_NAMES.get(str(name))
                        if key:
                            state.fact(key, size, line)
                    state.fact("num_devices", n, line)
        elif "Peak FLOPS used for computing MFU" in line:
            v = to_float(line.rsplit(":", 1)[1].strip())
            if v and v > 0:
                state.fact("claimed_peak_tflops", v / 1e12, line)
        elif "capacity:" in line:
            m = re.search(r"capacity:\s*(.+?)\s+(?:\(\d+\)\s+)?with\s+[\d.]+\s*GiB", line)
            if m:
                state.fact("device_name", m.group(1).strip(), line)
        elif "activation checkpointing" in line:
            m = _AC.search(line)
            if m:  # torchtitan's own name: selective is its per-op option unless said otherwise
                state.fact("activation_checkpointing", f"torchtitan:{m.group(1).lower()}", line)
        elif "Building llama" in line or "Building Llama" in line:
            m = _MODEL.search(line)
            if m:
                fam, size = m.group(1).lower(), m.group(2).lower()
                state.fact("model_flavor", f"{fam} {size}", line)
            if "ModelArgs(" in line:
                _llama_args(line, state)

    def finish(self, state: ParseState) -> list[StepRecord]:
        out: list[StepRecord] = []
        f = state.facts.values
        h = state.hints
        tokens = h.get("tokens_per_step") or (
            f["global_batch"] * f["seq_len"] if "global_batch" in f and "seq_len" in f else None)
        n = h.get("num_devices") or f.get("num_devices")
        dropped = 0
        for scratch in state.all_scratch().values():
            for step_i, tps, fields, rank, line_no in scratch.get("pending", []):
                if tokens and n:
                    kw = {k: v for k, v in fields.items() if v is not None}
                    kw["extra"] = {**kw.get("extra", {}), "line": line_no}
                    out.append(StepRecord(step=step_i, step_time_s=tokens / (tps * n), rank=rank, **kw))
                else:
                    dropped += 1
        nan = sum(sc.get("nan_loss", 0) for sc in state.all_scratch().values())
        if nan:
            state.note(f"{nan} step(s) with a non-finite loss (nan/inf: the run diverged) are kept, marked "
                       "extra['loss_not_finite']; their timing is real and counts")
        rebased = sum(sc.get("rebased", 0) for sc in state.all_scratch().values())
        if rebased:
            state.note(f"{rebased} validation or checkpoint line(s) between steps: the step after each is timed "
                       "from its end, so their time is left out of the step times")
        back = sum(sc.get("backwards", 0) for sc in state.all_scratch().values())
        if back:
            state.note(f"{back} step line(s) whose timestamp goes backwards got no step time (the next step is "
                       "timed from the last step line whose clock moved forward)")
        if dropped:
            state.untimed = (f"{dropped} step line(s) without a preceding timestamped step line were left out "
                             "(their time needs the tokens per step and the device count: the workload's, or "
                             "--seq-len, --global-batch and --num-devices)")
            state.note(state.untimed)
        elif out:
            state.note(f"{len(out)} step time(s) derived as tokens per step / (tps x devices)")
        return out
