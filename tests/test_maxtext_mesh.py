"""MaxText's mesh settings read as trainperf's plan (hand-derived layouts)."""

from __future__ import annotations

import pytest

from trainperf.ingest.maxtext_mesh import plan_degrees
from trainperf.ingest.pipeline import parse_log


def test_the_defaults_shard_everything_over_fsdp():
    """base.yml: ici_fsdp -1 (fills the slice), dcn_data -1 (fills the slices): 256 chips in one
    slice are fsdp 256; over 2 slices of 128, fsdp 128 x dp 2."""
    ici, dcn = {"data": 1, "fsdp": -1, "tensor": 1}, {"data": -1, "fsdp": 1}
    assert plan_degrees(ici, dcn, 256, 1) == {"dp": 1, "fsdp": 256, "tp": 1, "cp": 1, "ep": 1, "pp": 1}
    assert plan_degrees(ici, dcn, 256, 2) == {"dp": 2, "fsdp": 128, "tp": 1, "cp": 1, "ep": 1, "pp": 1}


def test_axes_that_share_a_plan_degree_multiply():
    """fsdp x fsdp_transpose is fsdp; tensor x tensor_sequence is tp: 4 x 2 x 4 x 2 = 64 chips."""
    ici = {"fsdp": 4, "fsdp_transpose": 2, "tensor": 4, "tensor_sequence": 2, "data": 1}
    assert plan_degrees(ici, {}, 64, 1) == {"dp": 1, "fsdp": 8, "tp": 8, "cp": 1, "ep": 1, "pp": 1}


@pytest.mark.parametrize(("ici", "dcn", "n", "slices"), [
    ({"fsdp": -1, "tensor": -1}, {}, 64, 1),  # two unknowns
    ({"fsdp": 3}, {}, 64, 1),  # does not lay 64 chips out
    ({"fsdp": -1, "autoregressive": 2}, {}, 64, 1),  # a decoding axis in training
    ({"fsdp": -1}, {"data": -1}, 64, 3),  # 64 chips are not 3 equal slices
])
def test_layouts_that_do_not_fit_give_no_plan(ici, dcn, n, slices):
    assert plan_degrees(ici, dcn, n, slices) is None


def test_a_maxtext_dump_gives_the_plan(tmp_path):
    """The printed configuration on 16 chips: ici_fsdp -1 and ici_tensor 4 -> fsdp 4 x tp 4."""
    dump = ["Config param dcn_data_parallelism: -1", "Config param ici_data_parallelism: 1",
            "Config param ici_fsdp_parallelism: -1", "Config param ici_tensor_parallelism: 4",
            "Config param ici_autoregressive_parallelism: 1", "Config param num_slices: 1",
            "Num_devices: 16, shape (1, 1, 4, 1, 1, 1, 1, 4, 1, 1, 1, 1)"]
    step = ("completed step: {n}, seconds: 1.234, TFLOP/s/device: 123.456, Tokens/s/device: 4567.890, "
            "total_weights: 65536, loss: 10.123")
    log = tmp_path / "maxtext.log"
    log.write_text("\n".join(dump + [step.format(n=n) for n in range(1, 4)]) + "\n")
    f = parse_log(log).facts.values
    assert (f["fsdp"], f["tp"], f["num_devices"]) == (4, 4, 16) and "dp" not in f
