"""Upper bounds on model sizes: a vocabulary of 1e30 is a typo, not a model.

Each bound names its limit and why, so the one-line error says what would be valid. The bounds
are generous (an order of magnitude or more above any published model) and shared by
:class:`~trainperf.specs.model.ModelSpec` and the Hugging Face config reader.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Bound:
    """Inclusive range of an integer size field, with the reason for the upper limit."""

    lo: int
    hi: int
    why: str

    def valid(self) -> str:
        """The ``valid`` part of a :class:`~trainperf.errors.SpecError`."""
        return f"an integer from {self.lo:,} to {self.hi:,} ({self.why})"


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
}
"""ModelSpec fields and their bounds (checked after the type and sign checks)."""


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
BENCH_MICRO_TOKENS = Bound(1, 1 << 24, "trainperf's bound on tokens per micro-batch (micro_batch x seq_len, "
                                       "16,777,216); published runs use up to ~1M, and the activations grow "
                                       "with it")
