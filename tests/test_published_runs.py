"""The packaged published-runs table, stack profiles, validation and two-point calibration."""

from __future__ import annotations

import csv
import io
import json
from importlib import resources

import pytest

from trainperf.cli.main import main
from trainperf.predict import fit_profiles, holdout
from trainperf.predict.runs_table import REQUIRED_COLUMNS, packaged_runs
from trainperf.predict.stacks import STACKS, generation_of, load_profile, packaged_profile, stack_of_framework


def _csv_rows() -> list[dict[str, str]]:
    text = resources.files("trainperf.predict").joinpath("data", "published_runs.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(io.StringIO(text)))


def test_every_row_is_predicted_or_excluded_with_a_reason():
    rows = _csv_rows()
    runs = packaged_runs()
    assert len(runs) == len(rows) == 169
    assert [r.row_id for r in runs] == [r["row_id"] for r in rows]
    for r in runs:
        assert r.source
        if r.included:
            assert r.workload is not None and r.step_time_s and r.step_time_s > 0 and r.step_time_from
            assert not r.exclude_reason
        else:
            assert r.exclude_reason and "\n" not in r.exclude_reason and len(r.exclude_reason) < 200
    assert sum(r.included for r in runs) >= 150
    # the known gaps say what is missing
    by_id = {r.row_id: r for r in runs}
    assert by_id["405"].included  # PaLM: the model named, the plan in words
    assert "device count" in by_id["417"].exclude_reason
    assert not by_id["415"].included


def test_rows_map_to_the_named_policy_stack_and_generation():
    by_id = {r.row_id: r for r in packaged_runs()}
    assert by_id["1"].workload.activation_checkpointing == "save_dot_except_mlpwi"
    assert by_id["7"].workload.activation_checkpointing == "save_dot_except_mlp"
    assert by_id["333"].workload.activation_checkpointing == "selective-op"
    assert by_id["1"].stack == "maxtext" and by_id["13"].stack == "megatron-core"
    assert by_id["379"].stack == "llm-foundry" and by_id["400"].stack == "deepspeed"
    assert by_id["340"].generation == "hopper" and by_id["332"].generation == "ampere"
    w = by_id["4"].workload
    assert (w.plan.fsdp, w.plan.dp) == (128, 4)
    assert by_id["57"].workload.model.mlp == "relu2"
    assert stack_of_framework("NeMo 24.09 (Megatron-Core, TE)") == "megatron-core"
    assert stack_of_framework("something new") == "generic"


def test_profiles_load_and_every_value_has_a_source():
    for name in STACKS:
        prof = packaged_profile(name)
        assert prof.name == name
        for knob in prof.knobs:
            assert prof.source_of(knob, "none-such")
        for gen, vals in prof.generations.items():
            for knob in vals:
                src = prof.source_of(knob, gen)
                assert src and (("fitted" in src and "leave-one-table-out" in src)
                                or src.startswith(f"no table of this stack on {gen}: generic's {gen} share"))
    generic = packaged_profile("generic")
    assert {"ampere", "hopper"} <= set(generic.generations)
    # per generation, never per SKU: the same silicon gets the same knobs
    from trainperf.specs.hardware import get_hardware

    assert generation_of(get_hardware("h100-sxm")) == generation_of(get_hardware("h100-sxm-hbm2e")) == "hopper"


def test_user_profile_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[generations.hopper]\nmatmul_eficiency = 0.5\n')
    from trainperf.errors import TrainperfError

    with pytest.raises(TrainperfError):
        load_profile(str(bad))
    rc = main(["predict", "--model", "llama3-8b", "--device", "h100-sxm", "--num-devices", "8",
               "--stack", str(bad)])
    assert rc == 2


def test_leave_one_table_out_never_fits_on_the_held_out_table(monkeypatch):
    rows = [r for r in fit_profiles.rows_from_table(packaged_runs()) if "paxml" in r.table]
    assert len({r.table for r in rows}) == 3
    seen: list[set[str]] = []
    real = fit_profiles.build_problem

    def spy(rs, **kw):
        seen.append({r.table for r in rs})
        return real(rs, **kw)

    monkeypatch.setattr(fit_profiles, "build_problem", spy)
    preds = holdout.leave_one_table_out(rows)
    tables = {r.table for r in rows}
    fits = [s for s in seen if s != tables]  # the first call only lays out the full problem
    assert len(fits) == 3
    for held in tables:
        assert any(s == tables - {held} for s in fits)
    assert {p.name for p in preds} == {r.name for r in rows}


def test_validate_json_keys_on_a_data_file(tmp_path, capsys):
    rows = _csv_rows()
    keep = [r for r in rows if "paxml" in r["table_id"] or "nemotron4-15b" in r["table_id"]]
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(keep)
    assert main(["validate", "--data", str(path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for key in ("rows", "mape_pct", "leave_one_table_out_mape_pct", "leave_one_table_out_mean_signed_pct",
                "leave_one_group_out_mape_pct", "leave_one_group_out_mean_signed_pct", "per_group"):
        assert key in d
    assert isinstance(d["rows"], list) and len(d["rows"]) == len(keep)
    assert d["leave_one_table_out_mape_pct"] is not None
    assert set(d["per_table"]) == {r["table_id"].strip() for r in keep}
    bad = tmp_path / "bad.csv"
    bad.write_text("row_id,table_id\n1,x\n")
    assert main(["validate", "--data", str(bad)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert set(REQUIRED_COLUMNS) <= set(rows[0])


def test_calibrate_model_writes_a_profile_that_stack_accepts(tmp_path, capsys):
    out = tmp_path / "mine.toml"
    assert main(["calibrate-model", "row:57", "row:58", "--holdout", "row:59", "row:60",
                 "-o", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["holdout_mape_pct"] < 6
    prof = load_profile(str(out))
    assert "hopper" in prof.generations and prof.source_of("matmul_fraction", "hopper")
    args = ["predict", "--model", "llama3-8b", "--device", "h100-sxm", "--num-devices", "8", "--json"]
    assert main([*args, "--stack", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] > 0


def test_two_point_calibration_on_two_tables():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "calibrate_two_points.py"
    spec = importlib.util.spec_from_file_location("calibrate_two_points", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.run(["llama3.1-70b-bf16", "nemotron4-15b-fp8"], fast=True)
    assert len(out["tables"]) == 2
    assert out["mean_mape_pct"] < 6.0


def test_published_filters(capsys):
    assert main(["published", "--framework", "torchtitan", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert len(d["runs"]) == 11 and all(r["stack"] == "torchtitan" for r in d["runs"])
    assert all(r["mfu_pct"] > 0 and r["convention"] == "megatron" for r in d["runs"] if r["included"])
    assert main(["published", "--model", "nemotron4-15b", "--precision", "fp8", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert len(d["runs"]) == 8
    assert main(["published", "--device", "mi250"]) == 0
    assert "not predictable" in capsys.readouterr().out


def test_plan_and_predict_use_the_stack(capsys):
    base = ["plan", "--model", "llama3-8b", "--device", "h100-sxm", "--num-devices", "8", "--seq-len", "8192",
            "--global-batch", "64", "--top", "1", "--json"]
    times = {}
    for stack in ("generic", "torchtitan"):
        assert main([*base, "--stack", stack]) == 0
        times[stack] = json.loads(capsys.readouterr().out)["plans"][0]["step_time_s"]
    assert times["generic"] != times["torchtitan"] and min(times.values()) > 0


def test_profile_file_round_trip(tmp_path):
    prof = packaged_profile("megatron-core")
    path = tmp_path / "copy.toml"
    path.write_text(prof.to_toml())
    again = load_profile(str(path))
    assert again.generations == prof.generations and again.knobs == pytest.approx(prof.knobs)
    assert again.sources == prof.sources


def test_packaged_profiles_and_holdout_cache_are_current(monkeypatch):
    """The packaged hold-out figures belong to this code and data; if this fails, the model
    changed since the profiles were fitted: run `PYTHONPATH=src python -m tools.fit_profiles`."""
    rows = fit_profiles.rows_from_table(packaged_runs())

    def refuse(*a, **k):
        raise AssertionError("stale: packaged hold-out cache does not match the code; refit the profiles")

    monkeypatch.setattr(holdout, "leave_one_table_out", refuse)
    monkeypatch.setattr(holdout, "leave_one_group_out", refuse)
    monkeypatch.setattr(holdout, "_cache_dir", lambda: __import__("pathlib").Path("/nonexistent"))
    held = holdout.cached_holdouts(rows)
    lo, go = holdout.summarize(held["table"]), holdout.summarize(held["group"])
    assert lo["rows"] == go["rows"] == len(rows)
    # the targets, held out: leave-one-table-out MAPE <= 10%; leave-one-(stack, silicon)-out
    # MAPE <= 12%, mean signed within 5%, no group above 20%
    assert lo["mape_pct"] <= 10.0
    assert go["mape_pct"] <= 12.0 and abs(go["mean_signed_pct"]) <= 5.0
    assert max(v["mape_pct"] for v in holdout.by(held["group"], "group").values()) <= 20.0


def test_leave_one_group_out_holds_out_every_table_of_the_pair(monkeypatch):
    rows = [r for r in fit_profiles.rows_from_table(packaged_runs())
            if r.stack in ("torchtitan", "llm-foundry")]
    groups = {holdout.row_group(r) for r in rows}
    assert groups == {"torchtitan@ampere", "torchtitan@hopper", "llm-foundry@ampere"}
    seen: list[set[str]] = []
    real = fit_profiles.build_problem

    def spy(rs, **kw):
        seen.append({holdout.row_group(r) for r in rs})
        return real(rs, **kw)

    monkeypatch.setattr(fit_profiles, "build_problem", spy)
    preds = holdout.leave_one_group_out(rows)
    fits = seen[1:]  # the first call lays out the full problem
    assert sorted(map(sorted, fits)) == sorted(sorted(groups - {g}) for g in groups)
    assert {p.name for p in preds} == {r.name for r in rows}
    # llm-foundry is seen on ampere only: held out, it is predicted by generic alone
    assert all(p.generation for p in preds)


def test_each_profile_predicts_its_rows_as_its_fit_did():
    """What ``trainperf validate`` predicts in sample is what the fit saw: every packaged profile's
    ``[fit] in_sample_mape_pct`` equals the per-stack in-sample MAPE of the predictor as it runs.
    A knob that predictions read on rows the fit held it fixed for breaks this (the 16-bit LM head
    of fp8 rows reads ``matmul_fraction``)."""
    from trainperf.predict.stacks import STACKS, packaged_profile
    from trainperf.predict.validate_runs import validate_runs

    per_stack = validate_runs(loto=False).to_dict()["per_stack"]
    checked = 0
    for name in STACKS:
        fit = packaged_profile(name).fit
        if name == "generic" or not fit.get("in_sample_mape_pct"):
            continue
        assert per_stack[name]["in_sample"]["mape_pct"] == pytest.approx(fit["in_sample_mape_pct"], abs=0.006), name
        checked += 1
    assert checked >= 6


def test_holdout_cache_key_follows_model_version_and_data_not_source(monkeypatch):
    """The hold-out cache keys on the model's version and its data files (issue 28): a refactoring
    that moves no number keeps the packaged figures; a new version or new data refits."""
    rows = fit_profiles.rows_from_table(packaged_runs())[:5]
    key = holdout.cache_key(rows)
    assert holdout.cache_key(rows) == key
    monkeypatch.setattr(holdout, "MODEL_VERSION", holdout.MODEL_VERSION + "+1")
    assert holdout.cache_key(rows) != key
    monkeypatch.undo()
    monkeypatch.setattr(holdout, "DATA_FILES", holdout.DATA_FILES[1:])
    assert holdout.cache_key(rows) != key
    assert holdout.cache_key(rows[:4]) != key


def test_every_row_is_priced_as_predict_prices_its_workload():
    """`validate` (and the profile fit, two-run calibration and `validate --data`) price a row's
    workload as `trainperf predict` does: the reader makes explicit what the stack always does
    (MaxText's and torchtitan's sequence parallelism under TP, GPipe, torchtitan's CP sharding),
    so that a row's facts and the same facts passed by hand give one figure (MaxText's TP rows
    410-411 were 11% apart before)."""
    from trainperf.predict import predict
    from trainperf.predict.validate_runs import predict_row

    rows = [r for r in packaged_runs() if r.included]
    assert len(rows) == 163
    for r in rows:
        assert predict_row(r) == pytest.approx(predict(r.workload).step_time_s, rel=1e-9), r.row_id
    tp = {r.row_id: r for r in rows if r.row_id in ("410", "411")}
    assert all(r.workload.plan.sequence_parallel for r in tp.values())
    assert all(any("maxtext's tensor parallelism always shards the sequence" in a for a in r.assumptions)
               for r in tp.values())
