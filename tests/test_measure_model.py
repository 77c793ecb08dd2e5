"""The bench's reference model agrees with the ModelSpec / FLOP accounting it is built from."""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from trainperf.accounting.flops import forward_flops, training_flops  # noqa: E402
from trainperf.errors import SpecError  # noqa: E402
from trainperf.measure.model import build_model, num_params  # noqa: E402
from trainperf.specs.model import ModelSpec  # noqa: E402

pytestmark = pytest.mark.torch

SHAPES = {
    "debug": ModelSpec.preset("debug"),
    "tied-gqa": ModelSpec(layers=2, hidden=64, heads=8, kv_heads=2, ffn_hidden=96, vocab=300,
                          tied_embeddings=True, max_seq_len=64),
    "mqa-headdim": ModelSpec(layers=3, hidden=48, heads=4, kv_heads=1, head_dim=16, ffn_hidden=80, vocab=128,
                             max_seq_len=64),
    "mha-gelu": ModelSpec(layers=1, hidden=32, heads=2, ffn_hidden=64, vocab=50, mlp="gelu", max_seq_len=64),
}


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_parameter_count_equals_modelspec(name):
    spec = SHAPES[name]
    model = build_model(spec)
    assert num_params(model) == spec.total_params
    if spec.tied_embeddings:
        assert model.output.weight is model.tok_embeddings.weight


def _count(spec: ModelSpec, batch: int, seq: int, backend=None) -> tuple[int, int]:
    model = build_model(spec)
    x = torch.randint(0, spec.vocab, (batch, seq + 1))
    ctx = sdpa_kernel(backend) if backend is not None else contextlib.nullcontext()
    fc = FlopCounterMode(display=False)
    with ctx, fc:
        logits = model(x[:, :-1])
        fwd = fc.get_total_flops()
        F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten()).backward()
    return fwd, fc.get_total_flops()


@pytest.mark.parametrize("name", ["tied-gqa", "mqa-headdim", "mha-gelu"])
def test_flop_counter_matches_accounting_with_math_attention(name):
    """With the math SDPA backend every matmul is visible to FlopCounterMode.

    Known differences from trainperf's exact count, all on the attention core:
    * causal halving: the math path computes the full S x S score matrix and masks it, so it
      matches ``attention="full"``, not the exact causal ``S(S+1)/2`` pairs;
    * backward = 2 x forward for every matmul (no recompute here; a flash-attention backward
      recomputes Q.K^T, one extra score matmul, which is hardware FLOPs, not model FLOPs);
    * the embedding lookup and its scatter-add backward are not matmuls: 0 in both.
    """
    spec, b, s = SHAPES[name], 2, 24
    fwd, total = _count(spec, b, s, SDPBackend.MATH)
    assert fwd == b * forward_flops(spec, s, "full").matmul
    assert total == b * training_flops(spec, s, "full")
    causal = b * training_flops(spec, s, "causal")
    assert causal < total  # the exact causal count is smaller by the masked half of the core
    assert total - causal == pytest.approx(3 * b * (forward_flops(spec, s, "full").attention_core
                                                    - forward_flops(spec, s, "causal").attention_core))


def test_flop_counter_default_cpu_attention_is_uncounted():
    """On CPU, SDPA runs the fused flash kernel, for which FlopCounterMode has no formula: the
    count is every linear layer (3x forward) and nothing of the attention core."""
    spec, b, s = SHAPES["tied-gqa"], 2, 24
    fwd, total = _count(spec, b, s)
    fb = forward_flops(spec, s, "causal")
    assert fwd == b * (fb.matmul - fb.attention_core)
    assert total == 3 * fwd


def test_unsupported_features_are_named():
    with pytest.raises(SpecError, match="attention"):
        build_model(ModelSpec.preset("deepseek-v3").replace(layers=4, moe_dense_layers=1))  # MLA
    with pytest.raises(SpecError, match="norm"):
        build_model(ModelSpec(layers=1, hidden=32, heads=2, ffn_hidden=64, vocab=50, norm="layernorm"))


@pytest.mark.parametrize(("field", "value"), [
    ("attn_bias", True), ("mlp_bias", True), ("lm_head_bias", True), ("attention_sinks", True),
    ("parallel_residual", True), ("norms_per_layer", 4), ("mtp_layers", 1)])
def test_features_the_bench_model_lacks_are_refused_not_dropped(field, value):
    """A spec the bench cannot build exactly is refused by name: a model without the biases or
    extra norms would have fewer parameters than the spec and time a different network."""
    spec = ModelSpec(layers=2, hidden=32, heads=2, ffn_hidden=64, vocab=50, **{field: value})
    with pytest.raises(SpecError, match=rf"model\.{field}"):
        build_model(spec)
    with pytest.raises(SpecError, match=r"model\.moe_router_linear_bias"):
        build_model(ModelSpec.preset("gpt-oss-20b").replace(layers=2, sliding_window=0, sliding_window_layers=0,
                                                            attn_bias=False, mlp_bias=False, attention_sinks=False))


def test_forward_shape_and_causality():
    spec = SHAPES["tied-gqa"]
    model = build_model(spec)
    x = torch.randint(0, spec.vocab, (1, 16))
    y = x.clone()
    y[0, 10] = (y[0, 10] + 1) % spec.vocab
    with torch.no_grad():
        a, b = model(x), model(y)
    assert a.shape == (1, 16, spec.vocab)
    assert torch.equal(a[0, :10], b[0, :10])  # positions before the change cannot see it
    assert not torch.equal(a[0, 10:], b[0, 10:])
