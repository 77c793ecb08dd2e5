"""What every fit shares: the curated rows, the catalog figures they are normalised by, citations,
the vendor defaults fallbacks end in, and the rounding of the shipped numbers."""

from __future__ import annotations

import csv
import math
import re
from functools import cache
from importlib import resources
from typing import Any

from trainperf.specs.datafiles import read_package_toml
from trainperf.specs.hardware import Hardware, get_hardware, hardware_ids

DATA = "trainperf.predict.kernels"
SIG = 4
"""Significant digits kept in params.json (the measurements themselves carry 3-4)."""

Row = dict[str, str]
Param = dict[str, Any]
"""{"value": float, "measured": bool, "source": str} (plus class-specific extras)."""

NEIGHBOUR = {"volta": "ampere", "ada": "ampere", "cdna2": "cdna3", "cdna4": "cdna3"}
"""A silicon without its own measurement of a class -> the nearest measured silicon of the same
vendor (by architecture), whose fraction of its own catalog figure is used (ratio 1)."""

BUILTIN_KNOBS = {"matmul_efficiency": 0.70, "fp8_matmul_efficiency": 0.55, "matmul_half_dim": 64.0,
                 "attention_efficiency": 0.45, "memory_efficiency": 0.80, "link_efficiency": 0.80,
                 "link_latency_us": 10.0, "op_overhead_us": 5.0}
"""trainperf.predict.efficiency.BUILTIN's values (kept here so the fit does not import the model)."""


def read_rows(name: str) -> list[Row]:
    """The curated rows of ``data/<name>.csv``."""
    text = resources.files(DATA).joinpath("data", f"{name}.csv").read_text(encoding="utf-8")
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
def _vendor_table() -> dict[str, dict[str, Any]]:
    return read_package_toml("trainperf.predict", "efficiency.toml", "efficiency table")["vendors"]


def vendor_knob(vendor: str, knob: str) -> tuple[float, str]:
    """A knob of predict/data/efficiency.toml's vendor table, else the built-in default, and its source."""
    entry = _vendor_table().get(vendor, {})
    if knob in entry:
        return float(entry[knob]), (f"vendor default {knob} = {entry[knob]} from predict/data/efficiency.toml "
                                    f"[vendors.{vendor}] ({entry['sources'][knob]})")
    return BUILTIN_KNOBS[knob], (f"built-in default {knob} = {BUILTIN_KNOBS[knob]} (predict/data/efficiency.toml "
                                 f"has no [vendors.{vendor}] {knob})")


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
