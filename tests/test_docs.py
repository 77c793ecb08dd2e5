"""Docs that cannot drift: every file of this repository a doc or a docstring names exists, and
nothing points users outside the repository.

Checked: docs/*.md, README.md and the strings and comments of src/, tools/ and benchmarks/. A
path is a name with a known extension; one whose first part is a folder of this repository
(``data/devices.toml``, ``docs/KERNELS.md``, ``predict/step_model/layout.py``) must match a file
under the repository, the package, docs/, or the naming file's own folders; a bare capitalised
Markdown name (``DESIGN.md``) must be one of the repository's. Other projects' files that docs
cite by their own paths (``torchtitan docs/float8.md``) are listed in :data:`EXTERNAL`.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = {"src", "docs", "tests", "tools", "benchmarks", "trainperf", "predict", "plan", "specs", "accounting",
        "records", "ingest", "measure", "report", "cli", "integrations", "data", "kernels", "step_model", "stacks",
        "fixtures", "kernel_fitting"}
"""First parts of a path that mean a folder of this repository."""
EXTERNAL = {"docs/float8.md", "docs/async_tp.md", "docs/source/workflows/training.md", "SOURCES.md"}
"""Other projects' files cited by their paths in those projects (torchtitan, NVIDIA's recipes), and
the shared kernel collection's index, which the developer tool tools/curate_kernels.py reads."""
REF = re.compile(r"(?<![\w./~$-])((?:\.\./)*[\w.-]+(?:/[\w.*{},-]+)*\.(?:py|md|toml|json|csv|jsonl|txt))\b")
FILES = sorted([*ROOT.glob("docs/*.md"), ROOT / "README.md", *ROOT.glob("src/**/*.py"), *ROOT.glob("tools/**/*.py"),
                *ROOT.glob("benchmarks/*.py")])


def _texts(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of a Markdown file, or of each string and comment of a Python file."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        yield from enumerate(text.splitlines(), 1)
        return
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.STRING, tokenize.COMMENT):
            yield tok.start[0], tok.string


def _exists(ref: str, path: Path) -> bool:
    """Whether ``ref`` (``{a,b}`` alternatives, ``*`` globs, ``{name}`` placeholders) names files."""
    alt = re.search(r"\{([^{}]*,[^{}]*)\}", ref)
    if alt:
        return all(_exists(ref[:alt.start()] + o + ref[alt.end():], path) for o in alt.group(1).split(","))
    ref = re.sub(r"\{\w+\}", "*", ref)
    for base in (ROOT, ROOT / "src", ROOT / "src" / "trainperf", ROOT / "docs", *path.parents):
        if (any(base.glob(ref)) if "*" in ref else (base / ref).exists()):
            return True
    return any(ROOT.glob(f"src/**/{ref}")) or any(ROOT.glob(f"tools/**/{ref}"))


def _problems(path: Path) -> list[str]:
    out = []
    names = {p.name for p in ROOT.glob("*.md")} | {p.name for p in ROOT.glob("docs/*.md")}
    for line, text in _texts(path):
        for m in REF.finditer(text):
            ref = m.group(1)
            where = f"{path.relative_to(ROOT)}:{line}: {ref}"
            if "shared/" in ref and "tools" not in path.relative_to(ROOT).parts:
                out.append(f"{where} (outside the repository)")
            elif "/" in ref.lstrip("./"):
                if ref.lstrip("./").split("/")[0] in OURS and ref not in EXTERNAL and not _exists(ref.lstrip("./"), path):
                    out.append(f"{where} (no such file)")
            elif re.fullmatch(r"[A-Z_]+\.md", ref) and ref not in names | EXTERNAL:
                out.append(f"{where} (no such file)")
    return out


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_every_file_a_doc_names_exists(path):
    problems = _problems(path)
    assert not problems, "\n".join(problems)


def test_design_rules_the_code_cites_are_in_the_repository():
    design = (ROOT / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    for section in ("## The one data flow", "## Layers", "## Accounting", "## Predict"):
        assert section in design


def test_the_stack_profile_example_is_one_the_loader_reads(tmp_path):
    """The TOML example in trainperf.predict.stacks' docstring loads as a profile."""
    from trainperf.predict import stacks

    block = stacks.__doc__.split("same format)::\n", 1)[1].split("\n\n", 1)[0]
    path = tmp_path / "example.toml"
    path.write_text("\n".join(line[4:] for line in block.splitlines()) + "\n", encoding="utf-8")
    prof = stacks.read_profile_file(str(path))
    assert prof.name == "megatron-core" and prof.values_for("hopper")["matmul_fraction"] == 0.95
