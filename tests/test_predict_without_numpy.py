"""One prediction (``trainperf predict``, ``trainperf.predict.predict``) runs without importing
numpy, whose import is most of a cold ``predict``; arrays (the planner, the profile fit) still go
through numpy, and a scalar gives the same number either way."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import trainperf
from trainperf import vec
from trainperf.predict.kernels import attention, collectives, gemm

# Each goes through a different branch of the step model: pipeline + interleaving, context
# parallelism (non-causal attention blocks), experts, fp8 recipes, stacks, TPU and CPU silicon.
CLI_RUNS = [
    ["predict", "--model", "llama3-8b", "--device", "h100-sxm", "--num-devices", "8", "--seq-len", "8192",
     "--global-batch", "64"],
    ["predict", "--json", "--model", "llama3-70b", "--device", "h100-sxm", "--num-devices", "64", "--dp", "2",
     "--tp", "8", "--pp", "4", "--vpp", "2", "--sequence-parallel", "--seq-len", "4096", "--global-batch", "128",
     "--stack", "megatron-core"],
    ["predict", "--model", "llama3-8b", "--device", "b200", "--num-devices", "32", "--cp", "4", "--fsdp", "4",
     "--tp", "2", "--seq-len", "131072", "--global-batch", "32", "--stack", "torchtitan", "--compile",
     "--async-tp", "--precision", "fp8", "--fp8-recipe", "rowwise"],
    ["predict", "--model", "mixtral-8x7b", "--device", "mi300x", "--num-devices", "64", "--ep", "8", "--fsdp", "8",
     "--seq-len", "4096", "--global-batch", "256"],
    ["predict", "--model", "llama3-70b", "--device", "tpu-v5p", "--num-devices", "256", "--fsdp", "256",
     "--seq-len", "8192", "--global-batch", "256", "--activation-checkpointing", "selective", "--stack", "maxtext"],
    ["predict", "--model", "gpt2", "--device", "cpu", "--precision", "fp32", "--peak-tflops", "0.05", "--seq-len", "1024",
     "--global-batch", "8"],
]


def test_predict_command_imports_no_numpy(tmp_path):
    """Nor tomllib, once the packaged TOML files are in the JSON cache (the first run fills it)."""
    code = ("import sys, io, contextlib\nfrom trainperf.cli.main import main\n"
            f"for argv in {CLI_RUNS!r}:\n"
            "    out = io.StringIO()\n"
            "    with contextlib.redirect_stdout(out):\n"
            "        rc = main(argv)\n"
            "    assert rc == 0 and 'step' in out.getvalue(), (argv, rc)\n"
            "print(sorted(m for m in ('numpy', 'tabulate', 'torch', 'matplotlib', 'tomllib') if m in sys.modules))")
    env = {**os.environ, "TRAINPERF_CACHE_DIR": str(tmp_path)}
    first, second = (subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                                    env=env) for _ in range(2))
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout.strip() == "['tomllib']"  # parsed the packaged catalogs and profiles
    assert second.returncode == 0, second.stderr[-2000:]
    assert second.stdout.strip() == "[]"


def test_predict_command_runs_without_site_packages(tmp_path):
    """``python -S``: no site-packages (so no numpy at all) and no module a ``.pth`` file preloads;
    once the catalogs are cached, the packaged data files are read without importlib.resources
    (which imports zipfile, tempfile... ~10 ms)."""
    src = Path(trainperf.__file__).resolve().parents[1]
    env = {**os.environ, "TRAINPERF_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(src)}
    code = ("import sys, io, contextlib\nfrom trainperf.cli.main import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()):\n    rc = main({CLI_RUNS[1]!r})\n"
            "print(rc, sorted(m for m in ('numpy', 'importlib.resources', 'zipfile', 'tempfile') if m in sys.modules))")
    for _ in range(2):  # the first run parses the packaged TOML files into the cache
        p = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "0 []"


def test_predict_function_imports_no_numpy():
    code = ("import sys\nfrom trainperf.predict import predict\n"
            "from trainperf.specs.workload_file import load_workload\n"
            "w = load_workload(None, {'model.preset': 'llama3.1-405b', 'hardware.device': 'h100-sxm', "
            "'hardware.num_devices': 128, 'parallel.fsdp': 16, 'parallel.tp': 8, "
            "'parallel.sequence_parallel': True, 'training.seq_len': 8192, 'training.global_batch': 32, "
            "'training.micro_batch': 2, 'training.activation_checkpointing': 'full'})\n"
            "p = predict(w)\n"
            "print(p.step_time_s > 0, p.interval is not None, 'numpy' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "True True False"


def test_is_number_without_and_with_numpy():
    for x in (True, 0, 3, 2.5, float("nan"), np.float64(1.5), np.int32(4), np.bool_(True)):
        assert vec.is_number(x)
    for x in ("3", None, [1.0], (1.0,), np.array([1.0]), np.array(1.0)):
        assert not vec.is_number(x)
    for x in (0, 3, 2.5, np.float32(1.5), np.int64(4)):
        assert vec.is_nonbool_number(x)
    for x in (True, np.bool_(False), "3", np.array([2.0]), None):
        assert not vec.is_nonbool_number(x)


finite = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False)


@given(finite, finite, st.booleans())
def test_scalar_helpers_agree_with_numpy(a, b, cond):
    """Python scalars stay Python scalars with numpy's values; numpy scalars stay scalars too."""
    for x, y in ((a, b), (np.float64(a), b), (a, np.float64(b))):
        for got, want in ((vec.maximum(x, y), np.maximum(a, b)), (vec.minimum(x, y), np.minimum(a, b)),
                          (vec.where(cond, x, y), np.where(cond, a, b)), (vec.ceil(x), np.ceil(a))):
            assert np.ndim(got) == 0 and not isinstance(got, np.ndarray)
            assert float(got) == float(want)
    assert vec.equals(a, a) is True and vec.equals("full", "full") is True


def test_array_helpers_are_numpy():
    a, b = np.array([1.0, 5.0, -2.0]), np.array([3.0, 4.0, -2.0])
    np.testing.assert_array_equal(vec.maximum(a, b), np.maximum(a, b))
    np.testing.assert_array_equal(vec.maximum(a, 2.0), np.maximum(a, 2.0))
    np.testing.assert_array_equal(vec.minimum(2.0, b), np.minimum(2.0, b))
    np.testing.assert_array_equal(vec.where(a > 2, a, b), np.where(a > 2, a, b))
    np.testing.assert_array_equal(vec.ceil(a / 3), np.ceil(a / 3))
    np.testing.assert_array_equal(vec.equals(np.array(["full", "none"]), "full"), [True, False])
    np.testing.assert_array_equal(vec.maximum([1.0, 7.0], [2.0, 3.0]), [2.0, 7.0])  # lists are arrays


@pytest.mark.parametrize("silicon", ["hopper", "cdna3", "tpu-v5p"])
def test_kernel_curves_give_one_number_for_scalars_and_arrays(silicon):
    """A Python float, a numpy scalar and an array element give the same efficiency."""
    dims = [(4096.0, 8192, 1024), (np.float64(4096.0), np.int64(8192), 1024)]
    effs = [gemm.efficiency(silicon, "bf16", *d) for d in dims]
    arr = gemm.efficiency(silicon, "bf16", np.array([4096.0, 64.0]), 8192, 1024)
    assert type(effs[0]) is float and effs[0] == effs[1] == arr[0]
    fam = "xla" if silicon.startswith("tpu") else "sdpa"
    seqs = [8192, np.int64(8192)]
    at = [attention.efficiency(silicon, fam, s, 128, True) for s in seqs]
    at_arr = attention.efficiency(silicon, fam, np.array([8192.0, 1024.0]), 128, True)
    assert at[0] == at[1] == (at_arr[0][0], at_arr[1][0])
    bw = [collectives.busbw_fraction(silicon, "scale-up", "all-gather", s, r)
          for s, r in ((1e8, 4), (np.float64(1e8), np.int64(4)))]
    bw_arr = collectives.busbw_fraction(silicon, "scale-up", "all-gather", np.array([1e8, 1e6]), np.array([4, 4]))
    assert bw[0] == bw[1] == bw_arr[0]
