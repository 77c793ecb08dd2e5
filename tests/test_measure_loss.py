"""The fused, chunked LM-head cross-entropy equals the plain one: loss and both gradients."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from trainperf.measure.loss import linear_cross_entropy  # noqa: E402

pytestmark = [pytest.mark.torch]


@pytest.mark.parametrize("chunk", [3, 7, 64])
def test_matches_unfused_loss_and_gradients(chunk):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(2, 11, 16, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(37, 16, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 37, (2, 11), generator=g)
    ref = F.cross_entropy((h @ w.t()).flatten(0, 1), y.flatten())
    ref_gh, ref_gw = torch.autograd.grad(0.5 * ref, (h, w))
    loss = linear_cross_entropy(h, w, y, chunk=chunk)
    gh, gw = torch.autograd.grad(0.5 * loss, (h, w))
    assert loss.dtype == torch.float32
    assert float(loss.detach()) == pytest.approx(float(ref.detach()), rel=1e-6)
    assert torch.allclose(gh, ref_gh, rtol=1e-5, atol=1e-7) and torch.allclose(gw, ref_gw, rtol=1e-5, atol=1e-7)


def test_bench_model_fused_head_equals_logits_path():
    from trainperf.measure.model import build_model
    from trainperf.specs.presets import get_model

    spec = get_model("debug").replace(layers=2, hidden=64, heads=4, kv_heads=2, ffn_hidden=128)
    model = build_model(spec, seq_len=16, seed=1)
    x = torch.randint(0, spec.vocab, (2, 16))
    y = torch.roll(x, -1, 1)
    ref = F.cross_entropy(model(x).float().flatten(0, 1), y.flatten())
    ref_grads = torch.autograd.grad(ref, list(model.parameters()))
    fused = linear_cross_entropy(model.features(x), model.output.weight, y)
    grads = torch.autograd.grad(fused, list(model.parameters()))
    assert float(fused.detach()) == pytest.approx(float(ref.detach()), rel=1e-5)
    for a, b in zip(grads, ref_grads, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def test_frozen_head_gets_no_gradient():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(8, 16, generator=g, requires_grad=True)
    w = torch.randn(37, 16, generator=g)  # frozen
    y = torch.randint(0, 37, (8,), generator=g)
    (gh,) = torch.autograd.grad(linear_cross_entropy(h, w, y, chunk=3), (h,))
    (ref,) = torch.autograd.grad(F.cross_entropy(h @ w.t(), y), (h,))
    assert torch.allclose(gh, ref, rtol=1e-5, atol=1e-6)


def test_chunk_tokens_by_device_budget():
    from trainperf.measure.loss import chunk_tokens

    # CPU: 32 MiB of fp32 logits; 32 MiB / (4 B x 32,000) = 262 tokens -> 256
    assert chunk_tokens(32_000, "cpu") == 256
    # GPU: 1 GiB / (4 B x 128,256) = 2,093 tokens -> 2,048 (a Llama 3 vocabulary: 4 chunks of 8,192 tokens)
    assert chunk_tokens(128_256, "cuda") == 2048
    # never below 256, however large the vocabulary
    assert chunk_tokens(10**7, "cuda") == 256 and chunk_tokens(256_000, "cpu") == 256
    # a tiny vocabulary: one chunk holds a whole step's tokens
    assert chunk_tokens(256, "cuda") == 2**30 // 1024 // 256 * 256
