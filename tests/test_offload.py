"""The optimizer offloaded to the host CPU (ZeRO-Offload): workload field, host link in the
catalog, step time and memory, the stack's host rate, table reading and the range."""

from __future__ import annotations

import json
import math

import pytest

from hand_runs import parse_hand_rows
from trainperf.cli.main import main
from trainperf.errors import SpecError
from trainperf.predict import intervals, predict
from trainperf.predict.runs_table import read_offload
from trainperf.predict.stack_kernels import for_stack
from trainperf.predict.step_model.optimizer import offloaded_optimizer_s
from trainperf.specs.hardware import get_hardware, hardware_from_dict
from trainperf.specs.workload_file import workload_from_dict, workload_to_dict


def _w(device: str = "h200-sxm", offload: bool = True, **hw):
    return workload_from_dict({
        "model": {"preset": "llama3.1-8b"}, "hardware": {"device": device, "num_devices": 8, **hw},
        "parallel": {"fsdp": 8},
        "training": {"seq_len": 8192, "global_batch": 8, "precision": "bf16", "activation_checkpointing": "full",
                     "stack": "deepspeed", "offload_optimizer": offload}})


def test_the_catalog_states_host_links_with_sources():
    h200 = get_hardware("h200-sxm")
    assert h200.host_link_GB_per_s == 55.0 and "nvbandwidth" in h200.sources["host_link_GB_per_s"]
    assert get_hardware("gb200").host_link_GB_per_s == 193.0  # NVLink-C2C to Grace
    assert get_hardware("h100-pcie").host_link_GB_per_s == 0.0  # not stated
    with pytest.raises(SpecError, match="host_link_GB_per_s"):
        hardware_from_dict({"base": "h100-pcie", "host_link_GB_per_s": -5})
    mine = hardware_from_dict({"base": "h100-pcie", "host_link_GB_per_s": 50})
    assert mine.host_link_GB_per_s == 50.0 and "user" in mine.sources["host_link_GB_per_s"]


def test_offload_needs_a_host_link_and_a_device_apart_from_the_host():
    with pytest.raises(SpecError) as e:
        _w("h100-pcie")
    assert e.value.field == "hardware.host_link_GB_per_s" and "h100-pcie" in str(e.value)
    assert _w("h100-pcie", host_link_GB_per_s=26.0).offload_optimizer
    with pytest.raises(SpecError) as e:
        workload_from_dict({"model": {"preset": "debug"}, "hardware": {"device": "cpu", "num_devices": 1},
                            "training": {"seq_len": 64, "offload_optimizer": True}})
    assert e.value.field == "training.offload_optimizer"
    with pytest.raises(SpecError, match="true or false"):
        _w(offload="yes")  # type: ignore[arg-type]


def test_offload_survives_the_workload_file():
    w = _w()
    assert workload_to_dict(w)["training"]["offload_optimizer"] is True
    assert workload_from_dict(workload_to_dict(w)) == w
    assert "offload_optimizer" not in workload_to_dict(_w(offload=False))["training"]


def test_offloaded_step_is_the_host_rate_over_the_node_and_the_copies_back():
    """By hand: the host steps all 8.03e9 parameters (eight ZeRO-3 shards) at DeepSpeed's
    4.14e9 parameters/s; each H200 copies its 1/8 back as bf16 over 55 GB/s."""
    on, off = predict(_w()), predict(_w(offload=False))
    params = on.workload.model.total_params
    assert for_stack("deepspeed", "hopper").cpu_optimizer_params_per_s == 4.14e9
    want = params / 4.14e9 + params / 8 * 2.0 / 55e9
    assert on.breakdown["optimizer"] == pytest.approx(want, rel=1e-9)
    assert want == pytest.approx(1.9761, abs=0.001)  # 1.9396 + 0.0365
    # everything else is the same step
    assert on.step_time_s - off.step_time_s == pytest.approx(on.breakdown["optimizer"] - off.breakdown["optimizer"])
    # the fp32 master weights and Adam's moments (12 bytes per parameter) leave the device
    assert on.memory_breakdown_GiB["optimizer states"] == 0.0
    assert off.memory_breakdown_GiB["optimizer states"] == pytest.approx(params / 8 * 12 / 2**30, rel=1e-6)
    assert off.memory_per_device_GiB - on.memory_per_device_GiB == pytest.approx(
        off.memory_breakdown_GiB["optimizer states"], rel=1e-6)
    assert any("cpu_optimizer_params_per_s" in n for n in on.notes)


def test_a_host_rate_stated_by_a_profile_file_is_used(tmp_path):
    f = tmp_path / "slow-host.toml"
    f.write_text('name = "slow-host"\n[kernels]\ncpu_optimizer_params_per_s = 1e9\n', encoding="utf-8")
    w = _w()
    p = predict(workload_from_dict({**workload_to_dict(w), "training": {**workload_to_dict(w)["training"],
                                                                           "stack": str(f)}}))
    params = w.model.total_params
    assert p.breakdown["optimizer"] == pytest.approx(params / 1e9 + params / 8 * 2.0 / 55e9, rel=1e-9)
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\n[kernels]\ncpu_optimizer_params_per_s = -1\n', encoding="utf-8")
    with pytest.raises(SpecError, match="cpu_optimizer_params_per_s"):
        for_stack(str(bad), "hopper")


def test_offloaded_optimizer_vectorises_over_plans():
    # the function takes the step model's arrays as well as scalars
    from trainperf.predict.step_model import layout_of
    from trainperf.predict.step_model.stage import busiest_stage

    lay = layout_of(_w())
    assert float(offloaded_optimizer_s(lay, busiest_stage(lay))) == pytest.approx(
        predict(_w()).breakdown["optimizer"], rel=1e-9)


def test_predict_flag_and_its_one_line_error(capsys):
    base = ["predict", "--model", "llama3.1-8b", "--num-devices", "8", "--fsdp", "8", "--seq-len", "8192",
            "--stack", "deepspeed", "--offload-optimizer", "--json"]
    assert main([*base, "--device", "h200-sxm"]) == 0
    d = json.loads(capsys.readouterr().out)
    iv = d["step_time_interval_s"]
    assert any("offloaded" in why for why in iv["widened_by"])
    assert main([*base, "--device", "h100-pcie"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "hardware.host_link_GB_per_s" in err[0]


def test_the_range_widens_for_an_offloaded_optimizer():
    dom = intervals.Domain(silicon={"hopper": {"max_seq_len": 8192, "max_devices": 1024,
                                               "precisions": ["16-bit"], "moe": False}})
    f, why = intervals.widening(dom, "hopper", _w())
    assert f == pytest.approx(intervals.WIDEN["offload"]) and "offloaded" in why[0]
    assert intervals.widening(dom, "hopper", _w(offload=False)) == (1.0, ())
    assert math.isclose(intervals.widening(intervals.Domain(), "hopper", _w())[0],
                        intervals.WIDEN["offload"] * intervals.WIDEN["unseen_silicon"])


@pytest.mark.parametrize(("cell", "said"), [
    ("ZeRO-3 + CPU offload", "CPU offload"), ("offload_optimizer: cpu", "offload_optimizer"),
    ("ZeRO-Offload (stage 2)", "ZeRO-Offload"), ("optimizer state offloading", "optimizer state offloading"),
    ("no CPU offload", None), ("without cpu offload", None), ("cpu_offload: none", None),
    ("remat_policy=qkv_proj_offloaded", None), ("offload_param only", None), ("", None),
])
def test_table_words_that_state_an_offloaded_optimizer(cell, said):
    assert read_offload(cell) == said


def test_a_table_row_stating_cpu_offload_is_predicted_offloaded():
    row = dict(table_id="hand", source="hand-built", model="Llama 3.1 8B", layers="32", hidden="4096", heads="32",
               kv_heads="8", ffn_hidden="14336", vocab="128256", arch_type="dense (SwiGLU, GQA)", seq_len="8192",
               micro_batch="1", global_batch_seqs="8", hardware="H200 SXM 141GB", num_gpus="8", act_ckpt="full",
               precision="bf16", framework="DeepSpeed 0.19", step_time_s="3.0")
    on, off = parse_hand_rows([{**row, "row_id": f"o{i}", "fsdp_zero": zero}
                               for i, zero in enumerate(("ZeRO-3 + CPU offload", "ZeRO-3"))])
    assert on.included and off.included, (on.exclude_reason, off.exclude_reason)
    assert on.workload.offload_optimizer and not off.workload.offload_optimizer
    assert any("CPU offload" in n for n in on.assumptions)


def test_plan_with_an_offloaded_optimizer_agrees_with_predict(capsys):
    args = ["plan", "--model", "llama3.1-70b", "--device", "h200-sxm", "--num-devices", "8", "--seq-len", "8192",
            "--global-batch", "32", "--stack", "deepspeed", "--offload-optimizer", "--top", "3", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    best = out["plans"][0]
    w = workload_from_dict({
        "model": {"preset": "llama3.1-70b"}, "hardware": {"device": "h200-sxm", "num_devices": 8},
        "parallel": {k: best[k] for k in ("dp", "fsdp", "zero_stage", "tp", "sequence_parallel", "pp", "vpp", "cp")},
        "training": {"seq_len": 8192, "global_batch": 32, "micro_batch": best["micro_batch"], "precision": "bf16",
                     "activation_checkpointing": best["activation_checkpointing"], "stack": "deepspeed",
                     "offload_optimizer": True}})
    assert best["memory_breakdown_GiB"]["optimizer states"] == 0.0
    p = predict(w)
    assert p.step_time_s == pytest.approx(best["step_time_s"], rel=1e-6)
    assert p.memory_per_device_GiB == pytest.approx(best["memory_per_device_GiB"], rel=1e-6)
    # the host steps all 70B parameters of the node: seconds no device-resident plan pays
    assert p.breakdown["optimizer"] > w.model.total_params / 4.14e9
    assert main([*args, "--device", "h100-pcie"]) == 2  # the last --device wins
    assert "hardware.host_link_GB_per_s" in capsys.readouterr().err


def test_hw_shows_the_host_link_with_its_source(capsys):
    assert main(["hw", "h200-sxm"]) == 0
    out = capsys.readouterr().out
    assert "host link (GB/s, device to host, one direction): 55" in out and "nvbandwidth" in out
    assert main(["hw", "h100-pcie"]) == 0
    assert "host link" not in capsys.readouterr().out  # not stated: not shown
