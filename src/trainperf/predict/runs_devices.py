"""The device count of a runs-table row, as its ``num_gpus`` and ``hardware`` cells write it.

Read in this order, the first that applies (each reading other than a plain count is noted):

0. a product ("16 nodes x 8 GPUs", "2x8", "4 x 8 = 32"): as :func:`~trainperf.predict.runs_cells.read_count`
   reads it;
1. a count of devices the cell names as such, wherever it stands ("16 nodes (128 GPUs)",
   "128 GPUs (16 nodes)", "512 chips"): that count;
2. racks ("2 racks", "1 NVL72 rack"): the racks times the devices of one (the NVL number the
   cell or the hardware names, else the part's scale-up domain: 72 for a GB200 NVL72);
3. nodes ("16 nodes", "2 x DGX H100", "8 hosts"): the nodes times the stated devices per node,
   else the catalog's typical node of the row's device;
4. a plain count ("1,024", "1k", "2x8");
5. nothing stated, and the hardware cell names a TPU slice ("TPU v5p-512", "v5litepod-256"): its
   chips, which the suffix counts for v5e and v6e but counts as TensorCores, two a chip, for v4 and
   v5p (Google Cloud TPU documentation, "TPU versions": the ``-N`` of a v4 or v5p slice is its
   TensorCores, of a v5e or v6e slice its chips).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from trainperf.predict.runs_cells import unstated
from trainperf.predict.runs_rows import row_cell, row_count
from trainperf.specs.hardware import get_hardware

_DEVICES = re.compile(r"(\d[\d,]*)\s*(?:gpus?|devices?|chips?|accelerators?|gcds?|hpus?|tpus?)\b")
_PRODUCT = re.compile(r"\d+\s*(?:[a-z]+\s*)?[x×*]\s*\d")
_RACKS = re.compile(r"^\s*(\d+)\s*(?:x\s*)?(?:gb[23]00\s*)?(?:nvl(\d+)\s*)?racks?\b")
_NODES = re.compile(r"^\s*(\d+)\s*(?:x\s*)?(?:nodes?|hosts?|servers?|dgx|hgx)\b")
_NVL = re.compile(r"nvl(\d+)")
_SLICE = re.compile(r"\b(?:tpu[ _-]*)?(v4|v5p|v5e|v5litepod|v6e)-(\d+)\b")
_CORES_PER_CHIP = {"v4": 2, "v5p": 2, "v5e": 1, "v5litepod": 1, "v6e": 1}


def read_num_devices(r: Mapping[str, str], notes: list[str], reading: Any = None) -> int | None:
    """The row's device count by the module's rule (``reading``: the hardware cell's device
    reading, for a node's or a rack's size); ``None`` when the row states none."""
    cell = row_cell(r, "num_gpus")
    if unstated(cell):  # "not stated for this figure (weak scaling to 1024 GCDs)" states none
        return _tpu_slice(row_cell(r, "hardware"), notes)
    low = cell.lower()
    if _PRODUCT.search(low):  # "16 nodes x 8 GPUs", "2x8": a product, read as one
        return row_count(r, "num_gpus")
    named = _DEVICES.search(low)
    if named:
        n = int(named.group(1).replace(",", ""))
        if not low.strip().startswith(named.group(0)):
            notes.append(f"num_gpus {cell[:40]!r}: {n} devices, as it names them")
        return n
    grouped = _racks(r, low, reading, notes) or _nodes(r, low, reading, notes)
    if grouped:
        return grouped
    return row_count(r, "num_gpus")


def _racks(r: Mapping[str, str], low: str, reading: Any, notes: list[str]) -> int | None:
    """Racks times the devices of one rack: the NVL number stated, else the part's scale-up domain."""
    m = _RACKS.match(low)
    if not m:
        return None
    nvl = m.group(2) or next(iter(_NVL.findall(row_cell(r, "hardware").lower())), None)
    size = int(nvl) if nvl else (get_hardware(reading.device_id).scale_up_domain
                                 if reading is not None and reading.resolved else 0)
    if not size:
        return None
    notes.append(f"num_gpus {row_cell(r, 'num_gpus')[:30]!r}: {m.group(1)} rack(s) x {size} devices per rack")
    return int(m.group(1)) * size


def _nodes(r: Mapping[str, str], low: str, reading: Any, notes: list[str]) -> int | None:
    """Nodes times the stated devices per node, else the catalog's typical node of the device."""
    m = _NODES.match(low)
    if not m:
        return None
    per = row_count(r, "gpus_per_node")
    where = "devices per node"
    if not per and reading is not None and reading.resolved:
        per, where = get_hardware(reading.device_id).devices_per_node, "devices per node (the catalog's typical node)"
    if not per:
        return None
    notes.append(f"num_gpus {row_cell(r, 'num_gpus')[:30]!r}: {m.group(1)} nodes x {per} {where}")
    return int(m.group(1)) * per


def _tpu_slice(hardware: str, notes: list[str]) -> int | None:
    """Chips of a TPU slice the hardware cell names ("TPU v5p-512": 256 chips)."""
    m = _SLICE.search(hardware.lower())
    if not m:
        return None
    chips = int(m.group(2)) // _CORES_PER_CHIP[m.group(1)]
    unit = "TensorCores, two a chip" if _CORES_PER_CHIP[m.group(1)] == 2 else "chips"
    notes.append(f"num_gpus not stated: {chips} chips from the slice {m.group(0)!r} (its -N counts {unit})")
    return chips
