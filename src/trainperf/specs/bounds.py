"""Upper bounds on model sizes and on every number whose work grows with it: a vocabulary of
1e30 is a typo, not a model, and a trillion devices is a typo, not a cluster.

Each bound names its limit and why, so the one-line error says what would be valid. The bounds
are generous (an order of magnitude or more above any published model or training run) and
shared by :class:`~trainperf.specs.model.ModelSpec`, the Hugging Face config reader, the
workload (:class:`~trainperf.specs.workload.Workload` and the workload file, so every command
that builds a workload checks them before any work) and the commands' own numeric flags.
:meth:`Bound.check` / :meth:`RealBound.check` raise the one-line :class:`SpecError` (exit 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainperf.errors import SpecError


@dataclass(frozen=True)
class Bound:
    """Inclusive range of an integer size field, with the reason for the upper limit."""

    lo: int
    hi: int
    why: str

    def valid(self) -> str:
        """The ``valid`` part of a :class:`~trainperf.errors.SpecError`."""
        return f"an integer from {self.lo:,} to {self.hi:,} ({self.why})"

    def check(self, field: str, value: object) -> int:
        """``value`` if it is an integer within the bound, else one SpecError line naming ``field``."""
        if isinstance(value, bool) or not isinstance(value, int) or not self.lo <= value <= self.hi:
            raise SpecError(field, shown(value), self.valid())
        return value


@dataclass(frozen=True)
class RealBound:
    """Range of a real-valued field (finite; ``lo`` excluded when ``lo_open``), with the reason."""

    lo: float
    hi: float
    why: str
    lo_open: bool = True
    unit: str = ""

    def valid(self) -> str:
        """The ``valid`` part of a :class:`~trainperf.errors.SpecError`."""
        low = f"above {self.lo:g}" if self.lo_open else f"at least {self.lo:g}"
        return f"a number {low} and at most {self.hi:,g}{self.unit} ({self.why})"

    def check(self, field: str, value: object) -> float:
        """``value`` as a float if it is a finite number within the bound, else one SpecError line."""
        ok = not isinstance(value, bool) and isinstance(value, int | float)
        if ok:
            try:
                x = float(value)  # type: ignore[arg-type]
            except OverflowError:  # an integer beyond any float
                ok = False
            else:
                ok = math.isfinite(x) and (x > self.lo if self.lo_open else x >= self.lo) and x <= self.hi
        if not ok:
            raise SpecError(field, shown(value), self.valid())
        return x


def shown(value: object) -> object:
    """``value`` as an error message shows it: an integer of more than 30 digits as its
    magnitude, so a 4,000-digit typo stays a short line."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 100:
        digits = int(value.bit_length() * math.log10(2))
        return f"{'-' if value < 0 else ''}~1e{digits}"
    return value


LAYERS = Bound(1, 10_000, "trainperf's bound on transformer blocks; the deepest published LLM has 126")
WIDTH = Bound(1, 1 << 20, "trainperf's bound on a width (1,048,576); published models stay below 75,000")
HEADS = Bound(1, 1 << 14, "trainperf's bound on attention heads (16,384)")
VOCAB = Bound(1, 1 << 24, "trainperf's bound on a vocabulary (16,777,216); the largest published has 262,208")
POSITIONS = Bound(1, 1 << 32, "trainperf's bound on a position table or context (4,294,967,296 tokens)")
LEARNED_POSITIONS = Bound(1, 1 << 20, "trainperf's bound on a learned position table (1,048,576 rows)")
EXPERTS = Bound(1, 1 << 16, "trainperf's bound on experts per layer (65,536)")
COUNT = Bound(0, 1 << 16, "trainperf's bound on a small count (65,536)")
RANK = Bound(0, 1 << 20, "trainperf's bound on a low-rank width (1,048,576)")
WIDTH_OR_ZERO = Bound(0, WIDTH.hi, WIDTH.why)
LAYERS_OR_ZERO = Bound(0, LAYERS.hi, LAYERS.why)

MODEL_FIELD_BOUNDS: dict[str, Bound] = {
    "layers": LAYERS, "hidden": WIDTH, "heads": HEADS, "kv_heads": HEADS, "head_dim": WIDTH,
    "ffn_hidden": WIDTH, "vocab": VOCAB, "max_seq_len": POSITIONS, "moe_experts": EXPERTS,
    "moe_expert_ffn": WIDTH, "moe_shared_experts": COUNT, "q_lora_rank": RANK, "kv_lora_rank": RANK,
    "qk_rope_head_dim": WIDTH, "qk_nope_head_dim": WIDTH, "v_head_dim": WIDTH, "norms_per_layer": Bound(
        0, 16, "trainperf's bound on norms per block (16)"),
    "mamba_heads": HEADS, "mamba_head_dim": WIDTH, "mamba_state_dim": WIDTH, "mamba_groups": HEADS,
    "mamba_conv_kernel": Bound(0, 64, "trainperf's bound on a Mamba convolution's width; 4 in every "
                               "published Mamba-2 model"),
    "mamba_chunk": POSITIONS,
}
"""ModelSpec fields and their bounds (checked after the type and sign checks)."""


# --- the workload: devices, batch and sequence (every command that builds a workload) -------------
NUM_DEVICES = Bound(1, 1 << 21, "trainperf's bound on devices in one run: ~10x the largest "
                    "training clusters announced, ~200,000 GPUs")
DEVICES_PER_NODE = Bound(1, 1 << 16, "trainperf's bound on devices per node; the largest scale-up "
                         "domain announced, NVL576, has 576")
SEQ_LEN = Bound(1, 1 << 27, "trainperf's bound on tokens per sequence: ~13x the longest context of "
                "a published model, Llama 4 Scout's 10M")
GLOBAL_BATCH = Bound(1, 1 << 20, "trainperf's bound on sequences per step: 16x the largest "
                     "published batch, 65,536 sequences (LAMB on BERT)")
MICRO_BATCH = Bound(1, 1 << 12, "trainperf's bound on sequences per device per pass: ~100x the "
                    "largest micro batch of the published runs, 40")
PARALLEL_DEGREE = Bound(1, NUM_DEVICES.hi, "trainperf's bound on devices")
VPP = Bound(1, 128, "trainperf's bound on virtual pipeline stages per rank: ~10x the largest of "
                   "the published runs, 12")
PEAK_TFLOPS = RealBound(1e-6, 1e7, "trainperf's bound on a device peak: from 1 MFLOP/s, below any device "
                        "a step can be timed on, to ~80x the largest chip, Cerebras WSE-3 at 125,000 TFLOP/s",
                        unit=" TFLOP/s", lo_open=False)
MEMORY_BANDWIDTH_GB_PER_S = RealBound(1e-3, 1e6, "trainperf's bound on a memory bandwidth: ~125x the fastest "
                                      "HBM, 8,000 GB/s", unit=" GB/s", lo_open=False)

WORKLOAD_FIELD_BOUNDS: dict[str, Bound | RealBound] = {
    "hardware.num_devices": NUM_DEVICES, "hardware.devices_per_node": DEVICES_PER_NODE,
    "training.seq_len": SEQ_LEN, "training.global_batch": GLOBAL_BATCH, "training.micro_batch": MICRO_BATCH,
    **{f"parallel.{k}": PARALLEL_DEGREE for k in ("dp", "fsdp", "tp", "pp", "cp", "ep", "etp")},
    "parallel.vpp": VPP, "parallel.first_stage_layers": LAYERS_OR_ZERO,
    "parallel.last_stage_layers": LAYERS_OR_ZERO, "hardware.peak_tflops": PEAK_TFLOPS,
}
"""Workload-file fields (``section.key``) and their bounds, checked when a workload file is read
or a flag overrides it (before any work) and again when a Workload is built."""

# --- the commands' own numbers (search sizes, rates, prices) ------------------------------------
TRAIN_TOKENS = RealBound(0.0, 1e17, "trainperf's bound on tokens to train: ~2,500x the largest "
                         "published pre-training run (Qwen3, 36T tokens)", unit=" tokens")
DAYS = RealBound(0.0, 36_500.0, "trainperf's bound on a training time (100 years)", unit=" days")
USD_PER_DEVICE_HOUR = RealBound(0.0, 1e6, "trainperf's bound on a price per device-hour", unit=" USD",
                                lo_open=False)
MEMORY_MARGIN = RealBound(0.0, 0.5, "a fraction of the device's usable memory; over half left free "
                          "would waste the device", lo_open=False)
SEARCH_VALUES = Bound(1, 64, "trainperf's bound on the values of one search list or range: "
                      "each is a search of its own")
SEARCH_RESULTS = Bound(1, 10_000, "trainperf's bound on plans shown or re-ranked: each is a full "
                       "prediction, ~1 ms")

# --- the bench's own inputs (trainperf bench / sweep / slurm): the work grows with each ---------
BENCH_STEPS = Bound(1, 1_000_000, "trainperf's bound on bench steps: a benchmark needs tens to thousands, and "
                                  "the run keeps every step in memory")
BENCH_MICRO_BATCHES = Bound(1, 1 << 16, "trainperf's bound on micro-batches per rank per step (65,536); "
                                        "published runs accumulate at most a few thousand")
BENCH_SEQ_LEN = Bound(1, 1 << 20, "trainperf's bound on the bench's sequence length (1,048,576 tokens); the "
                                  "longest published training context is 1M")
BENCH_NPROC = Bound(1, 1024, "trainperf's bound on processes per node (1,024); nodes have up to 16 "
                             "accelerators or a few hundred cores, and each process loads torch")
BENCH_NNODES = Bound(1, 100_000, "trainperf's bound on nodes (100,000); the largest published runs use "
                                 "a few thousand")
BENCH_THREADS = Bound(1, 4096, "trainperf's bound on CPU threads per process (4,096)")
BENCH_REPEATS = Bound(1, 1000, "trainperf's bound on sweep repeats per configuration (1,000)")
BENCH_STOP_GRACE_S = Bound(1, 3600, "trainperf's bound on the seconds a stopped run's step may take to "
                                    "finish (1 hour; Slurm gives 30 s by default)")
WARMUP_STEPS = Bound(0, 1_000_000, "steps left out as warm-up: at most trainperf's bound on bench steps")
BENCH_LR = RealBound(0.0, 10.0, "trainperf's bound on the bench's AdamW learning rate; LLMs train at "
                                "1e-5 to 1e-2, and a rate above 10 only diverges")
CALIBRATE_SIZE = Bound(1, 8192, "trainperf's bound on a calibration matmul size: three n x n fp32 matrices "
                                "hold 805 MB at 8,192, and one matmul is 1.1e12 FLOPs (about 20 s on a slow CPU)")
CALIBRATE_REPEATS = Bound(1, 100, "trainperf's bound on timed repeats per size (each lasts at least 0.25 s)")
CALIBRATE_ROUNDS = Bound(1, 20, "trainperf's bound on rounds of a workload's kernel timings (each a few seconds)")
CALIBRATE_SIZE_COUNT = Bound(1, 16, "trainperf's bound on matmul sizes per calibration (each is measured)")
BENCH_MICRO_TOKENS = Bound(1, 1 << 24, "trainperf's bound on tokens per micro-batch (micro_batch x seq_len, "
                                       "16,777,216); published runs use up to ~1M, and the activations grow "
                                       "with it")
