"""Keeps docs/DESIGN.md's layer rules and the CLI table honest.

Layers, lower never imports higher: errors, numbers, vec, locked_update, safe_text < specs < records < accounting < ingest < measure <
predict < plan < report < cli. torch only under trainperf/measure (and the thin wrappers that
re-export it); measure never imports predict or plan; predict, plan, ingest and everything
below work without torch.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "trainperf"
LAYERS = {
    "__init__": 0, "errors": 0, "numbers": 0, "vec": 0, "text_table": 0, "locked_update": 0, "safe_text": 0, "specs": 1, "records": 2, "accounting": 3, "ingest": 4,
    "measure": 5, "meter": 5, "integrations": 5, "predict": 6, "plan": 7, "report": 8, "cli": 9,
    "__main__": 9,
}
# Packages that must import (and run) without torch.
TORCH_FREE = {"errors", "numbers", "vec", "text_table", "locked_update", "safe_text", "specs", "records", "accounting", "ingest", "predict", "plan", "report"}
TORCH_MODULES = {"torch", "transformers", "lightning", "pytorch_lightning"}


def _layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).with_suffix("")
        out.append((".".join(rel.parts), path))
    return out


def _imports(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
    return found


def test_every_package_has_a_layer():
    for module, _ in _modules():
        assert _layer_of(module).removesuffix(".py") in LAYERS, f"{module}: add its package to LAYERS"


@pytest.mark.parametrize(("module", "path"), _modules(), ids=[m for m, _ in _modules()])
def test_lower_layers_never_import_higher(module, path):
    mine = _layer_of(module)
    for name, line in _imports(path):
        top = name.split(".")[0]
        if top == "trainperf" and "." in name:
            theirs = _layer_of(name)
            assert LAYERS[theirs] <= LAYERS[mine], f"{path}:{line}: {mine} imports {name} (higher layer)"
        if mine in TORCH_FREE:
            assert top not in TORCH_MODULES, f"{path}:{line}: {mine} must work without torch ({name})"
            assert not name.startswith("trainperf.measure"), f"{path}:{line}: {mine} imports measure"
        if mine == "measure":
            assert not name.startswith(("trainperf.predict", "trainperf.plan")), \
                f"{path}:{line}: measure must stay independent of the model it validates"


def test_torch_free_packages_import_without_torch():
    present = [f"trainperf.{p}" for p in sorted(TORCH_FREE) if (SRC / p).is_dir() or (SRC / f"{p}.py").exists()]
    code = (
        "import sys, importlib, pkgutil\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {sorted(TORCH_MODULES)!r}: raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        f"for pkg in {present!r}:\n"
        "    m = importlib.import_module(pkg)\n"
        "    for info in pkgutil.walk_packages(getattr(m, '__path__', []), pkg + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "import trainperf.cli.main\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def test_cli_table_and_modules_in_sync():
    from trainperf.cli.main import COMMANDS

    for name, (module, help_text) in COMMANDS.items():
        mod = importlib.import_module(module)
        assert callable(mod.add_arguments) and callable(mod.run), name
        assert help_text == mod.HELP, f"{name}: HELP differs from the COMMANDS table"
    on_disk = {p.stem for p in (SRC / "cli").glob("*.py")} - {"__init__", "main", "common"}
    listed = {m.rsplit(".", 1)[1] for m, _ in COMMANDS.values()}
    assert on_disk <= listed, f"command modules not in the COMMANDS table: {sorted(on_disk - listed)}"


LONG_FUNCTION_LINES = 80
"""The most lines a function of predict/ or plan/ may take (issue 28: a reader finds where a
step's exposed TP time is computed in one short function)."""


@pytest.mark.parametrize("package", ["predict", "plan"])
def test_no_long_functions_in_the_model_and_the_planner(package):
    long = []
    for path in sorted((SRC / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > LONG_FUNCTION_LINES:
                    long.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, "split these functions: " + ", ".join(long)


UNUSED_ALLOWED: dict[str, str] = {
    "measure.lora.adapter_parameters": "measure/ is being reworked on its own issue: left to it",
    "measure.data.stdlib_text_dir": "measure/ is being reworked on its own issue: left to it",
    "measure.model.num_params": "measure/ is being reworked on its own issue: left to it",
    "measure.testing.TINY_FLAGS": "a helper for the tests of the bench (measure/testing.py is their support module)",
    "measure.testing.tiny_workload_dict": "a helper for the tests of the bench",
}
"""Public names no code uses, each with the reason it stays."""


def test_every_public_name_is_used():
    """A public module-level function, class or constant of the package that nothing in src/,
    benchmarks/ or tools/ names (its definition aside; the tests do not count) is dead code."""
    root = SRC.parent.parent
    text = "\n".join(p.read_text(encoding="utf-8") for d in ("src", "benchmarks", "tools")
                     for p in (root / d).rglob("*.py"))
    counts: dict[str, int] = {}
    for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text):
        counts[word] = counts.get(word, 0) + 1
    unused = []
    for module, path in _modules():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
            else:
                continue
            for name in names:
                if name.startswith("_") or name in ("HELP", "main", "run", "add_arguments", "__all__"):
                    continue
                qual = f"{module.removeprefix('trainperf.')}.{name}"
                if counts.get(name, 0) <= 1 and qual not in UNUSED_ALLOWED:
                    unused.append(qual)
    assert not unused, "delete these unused public names (or use them): " + ", ".join(unused)
