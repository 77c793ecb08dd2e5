"""Issue 31, a user's first hour with ``bench``: items 1, 2, 3 and 17 (18 is in
``test_bench_distributed.py``, whose pipeline run prints the stage layout).

1 a GPU device on a CPU build of torch is one line, exit 2; 2 a wide spread of step times is
warned about; 3 the MFU of a multi-process CPU run says its peak is per process; 17
``summary.json`` holds no time to train for a token count nobody gave.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainperf.measure.results import SPREAD_WARNING, build_summary, summary_text
from trainperf.specs.workload_file import workload_from_dict, workload_to_dict

PEAK = {"kind": "calibrated", "tflops": 0.2, "threads": 1,
        "label": "cpu bf16 calibrated matmul peak (Test CPU (2 cores, avx2), 1 thread(s), calibration 2026-01-01)"}


def _record(out: Path, times: list[float], *, devices: int = 2, peaks: list | None = None) -> None:
    """A bench run record as the bench writes it: header (workload, peaks, warm-up), steps, end."""
    w = workload_from_dict({"model": {"preset": "debug"},
                            "hardware": {"device": "cpu", "num_devices": devices, "devices_per_node": devices},
                            "parallel": {"dp": devices},
                            "training": {"seq_len": 256, "global_batch": 8 * devices, "micro_batch": 8,
                                         "precision": "bf16"}})
    lines = [{"type": "run", "schema": 1, "source": "bench", "workload": workload_to_dict(w),
              "meta": {"warmup_steps": 1, "planned_steps": len(times), "warmup_given": None,
                       "convention": "megatron", "peaks": [PEAK] if peaks is None else peaks,
                       "parallelism": "data parallel over 2 ranks"}}]
    lines += [{"type": "step", "step": i, "step_time_s": t, "tokens": 256 * 8 * devices, "rank": 0,
               "extra": {"warmup": True} if i == 1 else {}} for i, t in enumerate(times, 1)]
    lines.append({"type": "end", "interrupted": False})
    (out / "steps.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


# --- 2: the spread of step times ------------------------------------------------------------------
def test_a_busy_machine_is_warned_about(tmp_path):
    # steps 2..11 after the warm-up: 0.28 s x 5 and 3.1 s x 5; p10/p90 by linear interpolation
    _record(tmp_path, [5.0] + [0.28] * 5 + [3.1] * 5)
    d = build_summary(tmp_path)
    assert d["step_time_p10_s"] == pytest.approx(0.28) and d["step_time_p90_s"] == pytest.approx(3.1)
    assert d["step_time_spread"] == pytest.approx(3.1 / 0.28)
    text = summary_text(d)
    assert f"warning: step times varied widely (p90 is {3.1 / 0.28:.2f}x p10): other processes were likely " \
           "using this machine's cores" in text


def test_a_quiet_machine_is_not(tmp_path):
    _record(tmp_path, [5.0, 0.26, 0.27, 0.26, 0.28, 0.26, 0.27])
    d = build_summary(tmp_path)
    assert d["step_time_spread"] < SPREAD_WARNING and "varied widely" not in summary_text(d)


# --- 3: MFU per process ------------------------------------------------------------------------------
def test_a_multi_process_cpu_run_says_its_peak_is_per_process(tmp_path):
    _record(tmp_path, [5.0] + [0.5] * 6)
    text = summary_text(build_summary(tmp_path))
    assert "MFU per device: each of the 2 processes is one device running 1 thread(s), and its peak is the " \
           "calibrated matmul rate of 1 thread(s), not of the whole CPU" in text
    assert "a run with another --nproc is measured against another peak, so compare --nproc settings by global " \
           "tokens/s, not MFU" in text
    one = tmp_path / "one"
    one.mkdir()
    _record(one, [5.0] + [0.5] * 6, devices=1, peaks=[{**PEAK, "threads": 2}])
    assert "MFU per device" not in summary_text(build_summary(one))


# --- 17: no time to train for a default nobody sees -------------------------------------------------
def test_summary_json_has_no_days_to_train_for_a_default_token_count(tmp_path):
    _record(tmp_path, [5.0] + [0.5] * 6)
    d = build_summary(tmp_path)
    assert "days_to_train" not in d and "train_tokens" not in d
    assert "days" not in summary_text(d)


# --- 1: a GPU asked for on a CPU build of torch -------------------------------------------------------
@pytest.mark.torch
def test_a_gpu_device_on_a_cpu_torch_is_one_line(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    r = subprocess.run([sys.executable, "-m", "trainperf", "bench", "--device", "h100-sxm", "--out",
                        str(tmp_path / "run")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stdout == ""
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("trainperf bench: error: hardware.device='h100-sxm' is invalid: a device this machine "
                          "has: this torch (") and "leave --device out (or give --device cpu)" in err
    assert not (tmp_path / "run").exists()
