"""FLOPs per token of a live nn.Module counted on the meta device, against hand-derived counts
and trainperf's accounting for the bench's reference model."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from trainperf.errors import SpecError  # noqa: E402


def _mlp(d_in: int = 16, d_hidden: int = 48, d_out: int = 24):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(100, d_in), torch.nn.Linear(d_in, d_hidden),
                               torch.nn.GELU(), torch.nn.Linear(d_hidden, d_out))


def test_hand_derived_linear_stack():
    from trainperf.measure.flop_count import count_flops_per_token

    torch.set_num_threads(1)
    fc = count_flops_per_token(_mlp(), seq_len=10, batch=3)
    fwd = 2 * (16 * 48 + 48 * 24)  # 2 FLOPs per multiply-add; bias adds and GELU are elementwise
    assert fc.forward_flops_per_token == fwd
    # backward: weight gradients of both linears + input gradients of both (the embedding trains)
    assert fc.training_flops_per_token == 3 * fwd
    assert fc.backward_flops_per_token == 2 * fwd
    assert fc.tokens == 30 and fc.forward_by_op == {"addmm": fwd * 30}


def test_frozen_parameters_get_no_weight_gradient_flops():
    from trainperf.measure.flop_count import count_flops_per_token

    m = _mlp()
    for p in m.parameters():
        p.requires_grad_(False)
    m[3].weight.requires_grad_(True)  # only the last layer trains (like an adapter)
    fc = count_flops_per_token(m, seq_len=8)
    fwd = 2 * (16 * 48 + 48 * 24)
    # backward: only the last layer's weight gradient; no input gradient is needed anywhere
    assert fc.training_flops_per_token == fwd + 2 * 48 * 24


def test_module_is_left_untouched():
    from trainperf.measure.flop_count import count_flops_per_token

    m = _mlp()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    m.eval()
    count_flops_per_token(m, seq_len=4)
    assert not m.training
    assert all(p.device.type == "cpu" and p.grad is None for p in m.parameters())
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())


def test_reference_model_matches_accounting_up_to_norm_weights():
    from trainperf.accounting.conventions import model_flops_per_token
    from trainperf.measure.flop_count import count_flops_per_token
    from trainperf.specs.model import ModelSpec

    model_mod = pytest.importorskip("trainperf.measure.model")
    spec = ModelSpec.preset("debug")
    seq = 64
    fc = count_flops_per_token(model_mod.build_model(spec, seq_len=seq), seq_len=seq)
    # SDPA is counted for the full score matrix, as the palm convention does (no causal halving);
    # palm's 6N also counts the RMSNorm weights (elementwise, not matmuls): 2 per layer + final.
    norm_params = (2 * spec.layers + 1) * spec.hidden
    assert fc.training_flops_per_token == pytest.approx(
        model_flops_per_token(spec, seq, "palm") - 6 * norm_params, rel=1e-12)


def test_bad_arguments_are_one_line_errors():
    from trainperf.measure.flop_count import count_flops_per_token

    with pytest.raises(SpecError, match="seq_len"):
        count_flops_per_token(_mlp(), seq_len=0)
    with pytest.raises(SpecError, match="module"):
        count_flops_per_token("not a module", seq_len=4)  # type: ignore[arg-type]
