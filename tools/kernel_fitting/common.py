"""What every fit shares: the curated rows (``data/*.csv``), the catalog figures they are
normalised by, citations, the vendor defaults fallbacks end in (``fallbacks.toml``), and the
rounding of the shipped numbers."""

from __future__ import annotations

import csv
import math
import re
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

from trainperf.specs.datafiles import read_package_toml
from trainperf.specs.hardware import Hardware, get_hardware, hardware_ids

SIG = 4
"""Significant digits kept in params.json (the measurements themselves carry 3-4)."""

Row = dict[str, str]
Param = dict[str, Any]
"""{"value": float, "measured": bool, "source": str} (plus class-specific extras)."""

NEIGHBOUR = {"volta": "ampere", "ada": "ampere", "cdna2": "cdna3", "cdna4": "cdna3"}
"""A silicon without its own measurement of a class -> the nearest measured silicon of the same
vendor (by architecture), whose fraction of its own catalog figure is used (ratio 1)."""

DATA_DIR = Path(__file__).with_name("data")
"""The curated measurements, one CSV per kernel class (``tools/curate_kernels.py`` writes them)."""
FALLBACKS = Path(__file__).with_name("fallbacks.toml")
"""Fallback kernel physics per vendor, for a (silicon, kernel class) nobody measured."""


def read_rows(name: str) -> list[Row]:
    """The curated rows of ``data/<name>.csv``."""
    text = (DATA_DIR / f"{name}.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines()))


@cache
def catalog() -> dict[str, Hardware]:
    """Catalog SKUs with datasheet figures (the host ``cpu`` entry is machine-specific: left out)."""
    return {i: get_hardware(i) for i in hardware_ids() if i != "cpu"}


@cache
def silicons() -> dict[str, str]:
    """silicon -> vendor, in catalog order, ``cpu`` last."""
    out: dict[str, str] = {}
    for hw in catalog().values():
        out.setdefault(hw.silicon, hw.vendor)
    out["cpu"] = "cpu"
    return out


def scf(sku: str) -> float:
    """The SKU's sustained_clock_fraction (measurements are divided by it, see build.py)."""
    return catalog()[sku].sustained_clock_fraction


def peak(sku: str, dtype: str) -> float:
    """Dense peak TFLOP/s of ``dtype`` at the clock the SKU sustains."""
    return catalog()[sku].peak_tflops[dtype] * scf(sku)


@cache
def _efficiency_vendors() -> dict[str, dict[str, Any]]:
    return read_package_toml("trainperf.predict", "efficiency.toml", "efficiency table")["vendors"]


@cache
def _fallbacks() -> dict[str, Any]:
    return tomllib.loads(FALLBACKS.read_text(encoding="utf-8"))


def vendor_knob(vendor: str, knob: str) -> tuple[float, str]:
    """A vendor's default and its source: the per-kernel overhead (``op_overhead_us``) from the
    predictor's efficiency.toml, fallback kernel physics from :data:`FALLBACKS` (else its
    ``[builtin]`` value)."""
    if knob == "op_overhead_us":
        entry = _efficiency_vendors().get(vendor, {})
        if knob in entry:
            return float(entry[knob]), (f"vendor default {knob} = {entry[knob]} from predict/data/efficiency.toml "
                                        f"[vendors.{vendor}] ({entry['sources'][knob]})")
        from trainperf.predict.efficiency import BUILTIN

        return BUILTIN.op_overhead_us, (f"built-in default {knob} = {BUILTIN.op_overhead_us} "
                                        f"(predict/data/efficiency.toml has no [vendors.{vendor}] {knob})")
    entry = _fallbacks()["vendors"].get(vendor, {})
    if knob in entry:
        return float(entry[knob]), (f"vendor default {knob} = {entry[knob]} from tools/kernel_fitting/fallbacks.toml "
                                    f"[vendors.{vendor}] ({entry['sources'][knob]})")
    builtin = _fallbacks()["builtin"]
    return float(builtin[knob]), (f"built-in default {knob} = {builtin[knob]} (tools/kernel_fitting/fallbacks.toml "
                                  f"has no [vendors.{vendor}] {knob}; {builtin['sources']['all']})")


def cite(row: Row) -> str:
    """Short citation of a curated row: repository@commit (7 hex) or URL, the location in it, and the
    line of the shared collection it was curated from."""
    src = re.sub(r"@([0-9a-f]{7})[0-9a-f]{33}", r"@\1", row["source"])
    src = re.sub(r" \(.*\)$", "", src)
    return f"{src}, {row['where']} [kernels/{row['file']}:{row['line']}]"


def sig(x: float) -> float:
    """``x`` rounded to :data:`SIG` significant digits (stable, small params.json)."""
    x = float(x)
    if x == 0 or not math.isfinite(x):
        return x
    return float(f"{x:.{SIG}g}")


def param(value: float, measured: bool, source: str, **extra: Any) -> Param:
    return {"value": sig(value), "measured": bool(measured), "source": source, **extra}


def borrowed(p: Param, why: str) -> Param:
    """``p`` used where it was not measured: measured=False, the rule as the source, and the
    lender's source chain under ``from`` (params.json stores each distinct text once)."""
    return {**p, "measured": False, "source": why, "from": [p["source"], *p.get("from", [])]}
