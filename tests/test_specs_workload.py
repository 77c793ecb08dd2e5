"""ParallelPlan / Workload validation and the workload file (TOML and JSON, one schema)."""

from __future__ import annotations

import json

import pytest

from trainperf.errors import InputFileError, SpecError, TrainperfError, UnknownNameError
from trainperf.specs.hardware import get_hardware
from trainperf.specs.model import ModelSpec
from trainperf.specs.parallel import ParallelPlan
from trainperf.specs.workload import Workload
from trainperf.specs.workload_file import (
    dump_workload_toml,
    load_workload,
    workload_from_dict,
    workload_to_dict,
)

H100 = get_hardware("h100-sxm")
L70 = ModelSpec.preset("llama2-70b")


def wl(**kw):
    base = dict(model=L70, hardware=H100, num_devices=64, seq_len=4096, global_batch=128, micro_batch=2,
                plan=ParallelPlan(fsdp=64))
    base.update(kw)
    return Workload(**base)


def test_derived_quantities():
    w = wl()
    assert w.plan.dp == 1 and w.plan.data_parallel == 64
    assert w.grad_accum_steps == 1
    assert w.tokens_per_step == 128 * 4096
    assert w.devices_per_node == 8 and w.num_nodes == 8
    w2 = wl(num_devices=512, global_batch=1024, plan=ParallelPlan(fsdp=128))
    assert w2.plan.dp == 4  # seed 003: "FSDP=128" on 512 GPUs is 4-way DP of 128-way FSDP


@pytest.mark.parametrize(("kw", "field"), [
    (dict(plan=ParallelPlan(fsdp=48)), "parallel"),                        # 48 does not divide 64
    (dict(plan=ParallelPlan(dp=2, fsdp=64)), "parallel"),                  # 128 != 64
    (dict(global_batch=100), "training.global_batch"),                     # not a multiple of 2*64
    (dict(plan=ParallelPlan(tp=3, dp=1, fsdp=1), num_devices=3, global_batch=2), "parallel.tp"),
    (dict(plan=ParallelPlan(pp=64, vpp=2), global_batch=128), "parallel.pp"),
    (dict(precision="fp8", hardware=get_hardware("a100-sxm-80gb")), "training.precision"),
    (dict(precision="fp9"), "training.precision"),
    (dict(activation_checkpointing="some"), "training.activation_checkpointing"),
    (dict(num_devices=0), "hardware.num_devices"),
    (dict(seq_len=-1), "training.seq_len"),
    (dict(plan=ParallelPlan(ep=2, fsdp=64)), "parallel.ep"),
    (dict(num_devices=12, plan=ParallelPlan(), global_batch=24), "hardware.num_devices"),
])
def test_invalid_workloads_name_the_field(kw, field):
    with pytest.raises(SpecError) as e:
        wl(**kw)
    assert str(e.value).startswith(field)
    assert "\n" not in str(e.value)


def test_tp_beyond_kv_heads_replicates_with_a_note():
    w = wl(plan=ParallelPlan(tp=16, fsdp=4), num_devices=64, global_batch=8, micro_batch=2)
    assert any("replicated" in n for n in w.notes)
    assert any("spans nodes" in n for n in w.notes)


def test_mi250_has_no_fp8_and_cpu_no_fp4():
    with pytest.raises(SpecError, match="mi250"):
        wl(hardware=get_hardware("mi250"), precision="fp8", num_devices=64)
    with pytest.raises(SpecError, match="CPU"):
        wl(hardware=get_hardware("cpu"), precision="fp4", num_devices=1, plan=ParallelPlan(), global_batch=2)
    # fp8 trains on a CPU through torch._scaled_mm's reference kernel (the bench's correctness runs)
    assert wl(hardware=get_hardware("cpu"), precision="fp8", num_devices=1, plan=ParallelPlan(),
              global_batch=2).precision == "fp8"


@pytest.mark.parametrize(("kw", "field"), [
    (dict(layers=0), "layers"), (dict(hidden=-8), "hidden"), (dict(heads=7), "heads"),
    (dict(kv_heads=3), "kv_heads"), (dict(mlp="swish"), "mlp"), (dict(vocab=1.5), "vocab"),
    (dict(moe_experts=8, moe_topk=9), "moe_topk"), (dict(moe_topk=2), "moe_experts"),
])
def test_invalid_models(kw, field):
    base = dict(layers=2, hidden=64, heads=8, ffn_hidden=128, vocab=100)
    base.update(kw)
    with pytest.raises(SpecError) as e:
        ModelSpec(**base)
    assert str(e.value).startswith(field)


TOML = """
[model]
preset = "llama2-70b"

[hardware]
device = "h100-sxm"
num_devices = 64
devices_per_node = 8

[parallel]
fsdp = 64

[training]
seq_len = 4096
global_batch = 128
micro_batch = 2
precision = "bf16"
activation_checkpointing = "selective"
"""


def test_toml_and_json_same_schema(tmp_path):
    t = tmp_path / "w.toml"
    t.write_text(TOML)
    import tomllib

    j = tmp_path / "w.json"
    j.write_text(json.dumps(tomllib.loads(TOML)))
    a, b = load_workload(t), load_workload(j)
    assert a == b
    assert a.activation_checkpointing == "selective" and a.plan.fsdp == 64


def test_flags_override_file(tmp_path):
    t = tmp_path / "w.toml"
    t.write_text(TOML)
    w = load_workload(t, {"hardware.num_devices": 128, "parallel.fsdp": 128, "training.global_batch": 256})
    assert w.num_devices == 128 and w.global_batch == 256


def test_inline_model_and_preset_override(tmp_path):
    w = workload_from_dict({"model": {"preset": "llama3-8b", "layers": 2}, "hardware": {"device": "a100-sxm-80gb"}})
    assert w.model.layers == 2 and w.model.hidden == 4096
    w2 = workload_from_dict({"model": {"layers": 2, "hidden": 64, "heads": 4, "ffn_hidden": 128, "vocab": 256},
                             "hardware": {"device": "h100-sxm"}, "training": {"seq_len": 128}})
    assert w2.model.head_dim == 16


@pytest.mark.parametrize(("data", "exc", "needle"), [
    ({"model": {"preset": "llama2-70b", "layer": 2}, "hardware": {"device": "h100-sxm"}}, UnknownNameError, "model.layer"),
    ({"modle": {"preset": "llama2-70b"}}, UnknownNameError, "modle"),
    ({"model": {"preset": "llama9"}, "hardware": {"device": "h100-sxm"}}, UnknownNameError, "model"),
    ({"model": {"preset": "llama2-70b"}, "hardware": {"device": "h100"}}, UnknownNameError, "h100-sxm"),
    ({"model": {"preset": "llama2-70b"}}, SpecError, "hardware.device"),
    ({"hardware": {"device": "h100-sxm"}}, SpecError, "model"),
])
def test_bad_workload_dicts(data, exc, needle):
    with pytest.raises(exc) as e:
        workload_from_dict(data)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_malformed_files(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\npreset = 1")
    with pytest.raises(InputFileError, match="malformed"):
        load_workload(bad)
    with pytest.raises(InputFileError, match="does not exist"):
        load_workload(tmp_path / "nope.toml")
    yml = tmp_path / "w.yaml"
    yml.write_text("a: 1")
    with pytest.raises(InputFileError, match="extension"):
        load_workload(yml)


def test_round_trip_through_dict_and_toml(tmp_path):
    w = load_workload(None, {"model.preset": "mixtral-8x7b", "hardware.device": "h100-sxm",
                             "hardware.num_devices": 16, "parallel.tp": 2, "parallel.ep": 8,
                             "training.seq_len": 4096, "training.global_batch": 64,
                             "hardware.peak_tflops": 900.0})
    assert workload_from_dict(workload_to_dict(w)) == w
    p = tmp_path / "w.toml"
    p.write_text(dump_workload_toml(w))
    assert load_workload(p) == w
    assert w.hardware.peak_tflops["bf16"] == 900.0
    assert "user" in w.hardware.sources["peak_tflops.bf16"]


def test_all_errors_are_value_errors():
    assert issubclass(TrainperfError, ValueError)


def test_custom_device_fields_and_peak_table():
    w = workload_from_dict({"model": {"preset": "llama3-8b"},
                            "hardware": {"device": "h100-sxm", "hbm_GB": 94, "num_devices": 8}})
    assert w.hardware.hbm_GB == 94 and w.hardware.peak_tflops["bf16"] == pytest.approx(989.4)
    assert "user" in w.hardware.sources["hbm_GB"]
    w2 = workload_from_dict({"model": {"preset": "llama3-8b"},
                             "hardware": {"device": "h100-sxm", "peak_tflops": {"bf16": 800}}})
    assert w2.hardware.peak_tflops["bf16"] == 800


def test_malformed_hf_config_is_one_line(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text("{not json")
    with pytest.raises(InputFileError) as e:
        workload_from_dict({"model": {"hf_config": str(cfg)}, "hardware": {"device": "h100-sxm"}})
    assert "\n" not in str(e.value) and "config.json" in str(e.value)
    cfg.write_text('{"model_type": "bert", "hidden_size": 8}')
    with pytest.raises(SpecError, match="model_type"):
        workload_from_dict({"model": {"hf_config": str(cfg)}, "hardware": {"device": "h100-sxm"}})


def test_inline_device_round_trips_with_its_node_size():
    from trainperf.specs.hardware import hardware_from_dict

    hw = hardware_from_dict({"base": "h100-sxm", "hbm_GB": 94})
    w = Workload(model=ModelSpec.preset("llama3-8b"), hardware=hw, num_devices=16, seq_len=4096, global_batch=16)
    assert workload_from_dict(workload_to_dict(w)) == w


def test_cpu_devices_at_the_catalogs_one_per_node_say_they_are_machines():
    """A CPU device is one process with its machine's cores; N of them at the catalog's one per
    node are N machines, not `bench --nproc N` on one: said when the count per node is not given."""
    cpu = get_hardware("cpu")
    debug = ModelSpec.preset("debug")
    base = dict(model=debug, hardware=cpu, seq_len=256, global_batch=8, micro_batch=2)
    two = Workload(num_devices=2, plan=ParallelPlan(pp=2), **base)
    assert two.devices_per_node == 1 and two.num_nodes == 2
    assert any("--devices-per-node 2" in n and "bench --nproc 2" in n for n in two.notes)
    stated = Workload(num_devices=2, devices_per_node=2, plan=ParallelPlan(pp=2), **base)
    assert stated.num_nodes == 1 and not any("--devices-per-node" in n for n in stated.notes)
    assert not any("--devices-per-node" in n for n in Workload(num_devices=1, **base).notes)
    assert not any("--devices-per-node" in n for n in wl().notes)  # a GPU's count per node is the catalog's


def test_more_processes_times_threads_than_cores_is_noted(monkeypatch):
    """On this machine's CPU, processes x threads beyond its cores take turns on them: predict
    prices each with cores of its own, and says so (the bench warns the same before it runs)."""
    from trainperf.specs import cpu_calibration as cc

    monkeypatch.setattr(cc, "_cores_used", lambda: 2)
    assert cc.shared_cores_note(2, 1) is None and cc.shared_cores_note(1, 2) is None
    assert "about 2.0x the step" in cc.shared_cores_note(4, 1)
    base = dict(model=ModelSpec.preset("debug"), hardware=get_hardware("cpu"), seq_len=256, micro_batch=2)
    four = Workload(num_devices=4, devices_per_node=4, global_batch=8, plan=ParallelPlan(dp=4), **base)
    assert any("4 process(es) x 1 thread(s) on this machine's 2 core(s)" in n for n in four.notes)
    two = Workload(num_devices=2, devices_per_node=2, global_batch=4, plan=ParallelPlan(dp=2), **base)
    assert not any("core(s)" in n for n in two.notes)
    threads = Workload(num_devices=1, global_batch=2, threads_per_device=4, **base)
    assert any("1 process(es) x 4 thread(s)" in n for n in threads.notes)


@pytest.mark.parametrize(("section", "key", "value", "field"), [
    ("training", "activation_checkpointing", [], "training.activation_checkpointing"),
    ("training", "activation_checkpointing", {}, "training.activation_checkpointing"),
    ("parallel", "sequence_parallel", {}, "parallel.sequence_parallel"),
    ("parallel", "sequence_parallel", [1], "parallel.sequence_parallel"),
    ("hardware", "devices_per_node", "eight", "hardware.devices_per_node"),
])
def test_a_toml_value_of_the_wrong_kind_is_a_one_line_error(section, key, value, field):
    """Found by fuzzing workload files: a list or table where a name or flag belongs was a
    TypeError (unhashable) and a word for a CPU's devices per node a ValueError."""
    from trainperf.errors import SpecError
    from trainperf.specs.workload_file import workload_from_dict

    d = {"model": {"preset": "llama3-8b"}, "hardware": {"device": "cpu", "num_devices": 2},
         "parallel": {"tp": 2}, "training": {"seq_len": 512, "global_batch": 2, "micro_batch": 1, "precision": "bf16"}}
    d[section][key] = value
    with pytest.raises(SpecError) as info:
        workload_from_dict(d)
    assert info.value.field == field and "\n" not in str(info.value)


@pytest.mark.parametrize("given, precision, recipe", [
    ("bfloat16", "bf16", None), ("NVFP4", "fp4", None), ("mxfp8", "fp8", "mxfp8"), ("fp8", "fp8", None),
])
def test_precision_aliases_and_names_that_state_the_recipe(given, precision, recipe):
    w = workload_from_dict({"model": {"preset": "llama3-8b"}, "hardware": {"device": "b200", "num_devices": 8},
                            "training": {"precision": given, "global_batch": 8}})
    assert (w.precision, w.fp8_recipe) == (precision, recipe)


def test_a_precision_naming_one_recipe_refuses_another():
    data = {"model": {"preset": "llama3-8b"}, "hardware": {"device": "b200", "num_devices": 8},
            "training": {"precision": "mxfp8", "fp8_recipe": "delayed", "global_batch": 8}}
    with pytest.raises(SpecError, match=r"training\.fp8_recipe='delayed'.*mxfp8 \(precision 'mxfp8' names it\)"):
        workload_from_dict(data)
