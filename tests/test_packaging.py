"""Release quality: what the wheel and the sdist carry, the metadata, the entry points, the help,
the type check, and no internal labels where users read.

The build test copies the files git tracks into a temporary directory and runs setuptools'
PEP 517 backend there in a subprocess (no isolation, no network), so it sees exactly what a
fresh clone builds; it skips outside a git checkout (e.g. in an unpacked sdist).
"""

from __future__ import annotations

import email
import io
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import trainperf
from trainperf.cli.main import COMMANDS, TASKS, main

ROOT = Path(__file__).resolve().parents[1]
# In the repository but not in the sdist: CI's script and git's own files.
NOT_IN_SDIST = (".ci/", ".gitignore")
# Written by setuptools into every sdist.
SDIST_GENERATED = re.compile(r"^(PKG-INFO|setup\.cfg|src/trainperf\.egg-info/.*)$")


def _git_files() -> list[str]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    p = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip("not a git checkout (e.g. an unpacked sdist)")
    return [f for f in p.stdout.split("\0") if f and (ROOT / f).is_file()]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    files = _git_files()
    tree = tmp_path_factory.mktemp("tree")
    out = tmp_path_factory.mktemp("dist")
    for f in files:
        (tree / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, tree / f)
    code = ("import sys\nfrom setuptools import build_meta as b\n"
            "out = sys.argv[1]  # build_meta rewrites sys.argv\n"
            "s = b.build_sdist(out)\nw = b.build_wheel(out)\nprint('BUILT', s, w)\n")
    p = subprocess.run([sys.executable, "-c", code, str(out)], cwd=tree, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    _, sdist_name, wheel_name = next(line for line in p.stdout.splitlines() if line.startswith("BUILT ")).split()
    return {"files": files, "sdist": out / sdist_name, "wheel": out / wheel_name}


def test_wheel_carries_exactly_the_packages_files(built):
    with zipfile.ZipFile(built["wheel"]) as z:
        names = z.namelist()
    payload = {n for n in names if ".dist-info/" not in n}
    expected = {f.removeprefix("src/") for f in built["files"] if f.startswith("src/trainperf/")}
    assert payload == expected
    assert "trainperf/py.typed" in payload
    dist_info = f"trainperf-{trainperf.__version__}.dist-info"
    assert f"{dist_info}/licenses/LICENSE" in names


def test_sdist_carries_the_tree_its_tests_need(built):
    prefix = f"trainperf-{trainperf.__version__}/"
    with tarfile.open(built["sdist"]) as t:
        members = {m.name.removeprefix(prefix) for m in t.getmembers() if m.isfile()}
    expected = {f for f in built["files"] if not f.startswith(NOT_IN_SDIST)}
    extra = {m for m in members - expected if not SDIST_GENERATED.match(m)}
    assert members >= expected, sorted(expected - members)
    assert not extra, sorted(extra)
    assert any(m.startswith("tests/fixtures/") for m in members)  # the tests' inputs travel with them


def test_metadata_states_licence_python_and_extras(built):
    with zipfile.ZipFile(built["wheel"]) as z:
        meta = email.message_from_bytes(z.read(f"trainperf-{trainperf.__version__}.dist-info/METADATA"))
        entry_points = z.read(f"trainperf-{trainperf.__version__}.dist-info/entry_points.txt").decode()
    assert meta["License-Expression"] == "Apache-2.0" and meta["License-File"] == "LICENSE"
    assert meta["Requires-Python"] == ">=3.11"
    assert meta["Version"] == trainperf.__version__
    classifiers = meta.get_all("Classifier")
    assert {f"Programming Language :: Python :: 3.{m}" for m in (11, 12, 13)} <= set(classifiers)
    assert not [c for c in classifiers if c.startswith("License ::")]  # PEP 639: the expression says it
    requires = meta.get_all("Requires-Dist")
    core = sorted(r for r in requires if "extra ==" not in r)
    assert core == ["numpy>=1.24", "scipy>=1.17", "tabulate>=0.10", "tomli-w>=1.2"]
    torch = [r for r in requires if r.startswith("torch") and not r.startswith("torchao")]
    assert torch == ['torch>=2.6; extra == "bench"']  # no upper cap: newer torch releases install
    # torchao states no torch requirement, so the fp8 extra never pulls another torch
    assert 'torchao>=0.18; extra == "fp8"' in requires
    assert "trainperf = trainperf.cli.main:main" in entry_points
    assert (ROOT / "LICENSE").read_text().startswith("\n                                 Apache License")


def test_built_wheel_runs_outside_the_source_tree(built, tmp_path):
    """Unpacked as pip would install it: the catalogs, presets and profiles load from the wheel."""
    site = tmp_path / "site"
    with zipfile.ZipFile(built["wheel"]) as z:
        z.extractall(site)
    env = {"PYTHONPATH": str(site), "TRAINPERF_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}

    def run(*argv: str) -> str:
        p = subprocess.run([sys.executable, "-m", "trainperf", *argv], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return p.stdout

    assert run("--version").strip() == f"trainperf {trainperf.__version__}"
    assert "989.4" in run("hw", "h100-sxm")
    assert "46.5" in run("mfu", "--model", "llama2-70b", "--device", "h100-sxm", "--num-devices", "64",
                         "--fsdp", "64", "--seq-len", "4096", "--global-batch", "128", "--micro-batch", "2",
                         "--step-time", "7.908", "--model-flops-per-seq", "1.82e15", "--peak-tflops", "989")
    assert "step time" in run("predict", "--model", "llama3-8b", "--device", "h100-sxm", "--num-devices", "8",
                              "--seq-len", "8192", "--global-batch", "64", "--micro-batch", "1")


def test_python_m_trainperf_is_the_cli():
    p = subprocess.run([sys.executable, "-m", "trainperf", "--version"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == f"trainperf {trainperf.__version__}"
    p = subprocess.run([sys.executable, "-m", "trainperf", "flops", "--model", "llama2-70b", "--seq-len", "4096",
                        "--json"], capture_output=True, text=True)
    assert p.returncode == 0 and '"megatron"' in p.stdout


def test_help_is_written_for_users(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: trainperf COMMAND [options]")
    assert "Measure, explain and predict the performance of LLM training" in out
    assert "imported only when it runs" not in out  # the module's docstring is not the help
    assert "examples:" in out and "trainperf mfu --model llama2-70b" in out
    for title, names in TASKS:
        assert title in out
        for name in names:
            assert re.search(rf"^    {re.escape(name)}\s+\S", out, re.M), name
    listed = [n for _, names in TASKS for n in names]
    assert sorted(listed) == sorted(COMMANDS), "every command in exactly one task group"
    assert "--version" in out


def test_help_imports_no_command_module():
    code = ("import sys\nfrom trainperf.cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith(('trainperf.cli.', 'trainperf.specs', "
            "'trainperf.accounting', 'numpy', 'tabulate'))))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "['trainperf.cli.main']"


def test_light_commands_import_neither_tabulate_nor_numpy():
    """flops and mfu print their tables without tabulate (trainperf.text_table) and need no numpy."""
    argvs = [["flops", "--model", "llama2-70b", "--seq-len", "4096"],
             ["mfu", "--model", "llama2-70b", "--device", "h100-sxm", "--num-devices", "64", "--fsdp", "64",
              "--seq-len", "4096", "--global-batch", "128", "--step-time", "7.908"],
             ["hw"], ["hw", "h100-sxm"]]
    for argv in argvs:
        code = ("import sys, io, contextlib\nfrom trainperf.cli.main import main\n"
                f"with contextlib.redirect_stdout(io.StringIO()):\n    rc = main({argv!r})\n"
                "print(rc, sorted(m for m in ('tabulate', 'numpy', 'torch', 'matplotlib') if m in sys.modules))")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() == "0 []", (argv, p.stdout)


def test_mypy_is_clean_on_src():
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[dev]')")
    p = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]


# ---------------------------------------------------------------- internal labels users would see

INTERNAL_LABEL = re.compile(r"\bseeds?[ _-]?0*\d{1,3}\b|@seed|\(seed\b|seed document", re.I)
USER_FACING_FILES = ["README.md", "src/trainperf/specs/data/devices.toml", "src/trainperf/specs/data/models.toml"]


@pytest.mark.parametrize("path", USER_FACING_FILES)
def test_no_internal_seed_labels_in_user_facing_files(path):
    text = (ROOT / path).read_text(encoding="utf-8")
    hits = [line.strip() for line in text.splitlines() if INTERNAL_LABEL.search(line)]
    assert not hits, hits[:5]


@pytest.mark.parametrize("argv", [
    ["hw", "h100-sxm"], ["hw", "h100-sxm-hbm2e"], ["hw", "mi250"], ["hw", "mi250x"], ["hw", "mi300x"],
    ["hw", "mi250-gcd"], ["published"], ["published", "--json"], ["published", "340"],
    ["flops", "--model", "llama2-70b", "--seq-len", "4096"],
    ["published", "--help"], ["validate", "--help"],
])
def test_no_internal_seed_labels_in_command_output(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as e:  # --help
        code = e.code
    out = capsys.readouterr().out
    assert code == 0
    hits = [line.strip() for line in io.StringIO(out) if INTERNAL_LABEL.search(line)]
    assert not hits, hits[:5]
