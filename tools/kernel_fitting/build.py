"""Regenerate the predictor's ``predict/kernels/data/params.json`` from the curated measurements
``tools/kernel_fitting/data/*.csv`` (a developer tool: the package ships only the result).

The curated CSVs hold the kernel measurements others published, one row each with its source
(``tools/curate_kernels.py`` selects them from the shared collection; docs/KERNELS.md says what
was kept and rejected). The fits of this package (``gemm.py``, ``attention.py``,
``collectives.py``, ``memory.py``, ``fp8.py``, ``moe.py``) turn them into the numbers the run-time modules
read, each with the rows it came from, and apply the documented fallback rule
(``fallbacks.toml``) to every (silicon, kernel class) without a measurement.

    PYTHONPATH=src python -m tools.kernel_fitting.build           # rewrite params.json
    PYTHONPATH=src python -m tools.kernel_fitting.build --check   # exit 1 if params.json is not current

Conventions: an efficiency is achieved / the catalog figure of the SKU that was measured (dense
peak of the dtype, nominal HBM bandwidth, per-device link bandwidth), divided by that SKU's
``sustained_clock_fraction`` (the predictor multiplies the target SKU's back in), so it transfers
across SKUs of one silicon; a value taken from another silicon, dtype, family or a vendor default
says so first in its source and carries ``measured: false``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from . import attention, collectives, common, fp8, gemm, memory, moe

PARAMS_FILE = "params.json"
SCHEMA = 1


def build() -> dict[str, Any]:
    """Every parameter the run-time modules read, derived from the curated CSVs and the catalog;
    each distinct source text is stored once in ``sources`` and referred to by its index."""
    gemm_rows = common.read_rows("gemm")
    fp8_params = fp8.params(common.read_rows("fp8"), gemm.peak_fractions(gemm_rows))
    recipes = {sil: {name: r["value"] for name, r in t.get("recipes", {}).items()} for sil, t in fp8_params.items()}
    gemm_params = gemm.params(gemm_rows, recipes)  # an fp8 grouped GEMM's time carries its recipe's quantisation
    coll_params = collectives.params(common.read_rows("collectives"))
    return intern({
        "schema": SCHEMA,
        "generated_by": "python -m tools.kernel_fitting.build (from tools/kernel_fitting/data/*.csv and specs/data/devices.toml)",
        "silicons": common.silicons(),
        "gemm": gemm_params,
        "attention": attention.params(common.read_rows("attention")),
        "collectives": coll_params,
        "memory": memory.params(common.read_rows("memory")),
        "fp8": fp8_params,
        "expert_dispatch": moe.params(common.read_rows("moe"), coll_params),
    })


def intern(params: dict[str, Any]) -> dict[str, Any]:
    """Replace every ``source`` text and ``from`` list of texts by indices into ``params["sources"]``."""
    texts: dict[str, int] = {}

    def idx(text: str) -> int:
        return texts.setdefault(text, len(texts))

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: walk(v) for k, v in node.items() if k not in ("source", "from")}
            if isinstance(node.get("source"), str):
                out["source"] = idx(node["source"])
            if "from" in node:
                out["from"] = [idx(t) for t in node["from"]]
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    result = walk(params)
    result["sources"] = list(texts)
    return result


def dumps(params: dict[str, Any]) -> str:
    """JSON with sorted keys, one key per line, lists of numbers on one line (small, diffable)."""

    def fmt(node: Any, pad: str) -> str:
        if isinstance(node, dict):
            if not node:
                return "{}"
            inner = pad + " "
            items = [f"{inner}{json.dumps(k)}: {fmt(node[k], inner)}" for k in sorted(node)]
            return "{\n" + ",\n".join(items) + "\n" + pad + "}"
        if (isinstance(node, list) and any(isinstance(v, dict | list) for v in node)) or \
                (isinstance(node, list) and any(isinstance(v, str) for v in node)):
            if not node:
                return "[]"
            inner = pad + " "
            return "[\n" + ",\n".join(inner + fmt(v, inner) for v in node) + "\n" + pad + "]"
        return json.dumps(node, ensure_ascii=False)

    return fmt(params, "") + "\n"


def params_path() -> Path:
    """The predictor's parameters file in this checkout."""
    return Path(__file__).resolve().parents[2] / "src" / "trainperf" / "predict" / "kernels" / "data" / PARAMS_FILE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.kernel_fitting.build",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if data/params.json is not current")
    args = ap.parse_args(argv)
    text = dumps(build())
    path = params_path()
    if args.check:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            print(f"{path} is out of date: run python -m tools.kernel_fitting.build", file=sys.stderr)
            return 1
        print(f"{path} is current")
        return 0
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
