"""The hardware catalog: one :class:`Hardware` entry per device variant, every number sourced.

The entries live in ``data/devices.toml`` and are loaded once, at first use (no import-time
work). Look a device up with :func:`get_hardware` (case-insensitive exact id; an unknown id is
an :class:`~trainperf.errors.UnknownNameError` with the nearest ids, never a fallback to another
device). Custom devices come from :func:`hardware_from_dict` (inline ``[hardware]`` fields of a
workload file, optionally ``base = "<catalog id>"`` plus overrides).

Conventions (the catalog follows them; custom devices should too):

``peak_tflops``
    DENSE peak TFLOP/s per dtype (no 2:4 structured sparsity), at the tensor-core / matrix-core
    rate where the device has one. NVIDIA datasheets list tf32/fp16/bf16/fp8/fp4 "with sparsity":
    the catalog stores half of those figures and says so in the source. ``fp32`` is the
    non-tensor (CUDA-core) rate on NVIDIA (TF32 is its own dtype) and the matrix rate on AMD;
    ``fp64`` is the FP64 tensor/matrix rate where one exists. A dtype missing from the mapping
    is unsupported: :meth:`Hardware.peak_flops` raises rather than guessing.
``hbm_GB``
    Device memory in decimal GB as the vendor states it (80 for an "80GB" H100, 32 for a TPU v4
    Google lists as 32 GiB). GDDR memory (L4, L40S) is stored in the same field.
``intra_node_link_GB_per_s``
    Per device, ONE direction, aggregate over all of the device's scale-up links to its peers
    in a node: NVLink 4's "900 GB/s" (a bidirectional total) is 450 here; AMD's "7 x 128 GB/s"
    Infinity Fabric is 448. PCIe cards whose NVLink bridges join only pairs or quads carry
    their PCIe x16 figure (the bridge is in the notes). For TPUs it is the chip's ICI.
``inter_node_link_GB_per_s``
    Per device, ONE direction, of the typical scale-out NIC: one 400 Gb/s InfiniBand/RoCE NIC
    per GPU is 50 GB/s (DGX H100), 200 Gb/s HDR is 25 GB/s (DGX A100). Where a NIC is shared,
    its bandwidth is divided among the devices it serves. TPU chips on different hosts of one
    slice talk over ICI (the scale-up domain); this field is a TPU's data-center network (DCN)
    bandwidth per chip, what traffic between slices (multislice) crosses.
``devices_per_node``
    The typical node (one OS host): 8 for HGX/DGX, 4 MI250(X) cards or 8 of their GCDs, 4 TPU
    chips per host, 4 GPUs per GB200 NVL72 compute tray. A job fills whole nodes.
``scale_up_domain``
    Devices joined by the scale-up fabric at ``intra_node_link_GB_per_s`` (NVLink/NVSwitch,
    xGMI, ICI): a node for HGX/DGX and MI300X platforms, the 72 GPUs of a GB200 NVL72 rack, the
    chips of a TPU slice. Omitted: ``devices_per_node``. Collectives are priced by the domains
    a group spans, not by the nodes.
``memory_usable_GiB``
    Device memory the runtime exposes to a process (``cudaMemGetInfo`` total / nvidia-smi's
    "Total", ROCm's VRAM total, XLA's bytes_limit), in GiB: an H100 80GB shows 81,559 MiB =
    79.65 GiB, more than the 74.5 GiB that "80 GB" read as 80e9 bytes would give. Omitted:
    ``hbm_GB`` read as decimal GB (never more than the part has).
``host_link_GB_per_s``
    Device-host copy bandwidth, ONE direction, as nvbandwidth / TransferBench measure it (PCIe
    x16, NVLink-C2C to a Grace CPU): what offloading the optimizer moves gradients and updated
    weights over. Omitted (0): not stated.
``sources``
    Field name -> citation (document title, URL, date, and a note on how the number was
    derived). Peaks have one entry per dtype, keyed ``"peak_tflops.<dtype>"``. Every numeric
    field has one; numbers the catalog is unsure of say so in their source.

The ``cpu`` entry has no datasheet peaks: :func:`get_hardware` fills ``peak_tflops`` and the
memory bandwidth from the calibration cache (:mod:`trainperf.specs.cpu_calibration`) when
``trainperf calibrate`` has measured this machine's CPU, and memory size from the OS.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainperf.errors import InputFileError, SpecError, UnknownNameError
from trainperf.specs.catalog_cache import read_catalog

__all__ = [
    "KINDS",
    "NUMERIC_FIELDS",
    "PRECISIONS",
    "VENDORS",
    "Hardware",
    "device_aliases",
    "format_hardware_detail",
    "format_hardware_table",
    "get_hardware",
    "hardware_from_dict",
    "hardware_ids",
    "list_hardware",
    "normalize_precision",
]

PRECISIONS: tuple[str, ...] = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "fp4")
VENDORS: tuple[str, ...] = ("nvidia", "amd", "google", "intel", "cpu", "other")
KINDS: tuple[str, ...] = ("gpu", "tpu", "hpu", "cpu")
SILICON_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
NUMERIC_FIELDS: tuple[str, ...] = (
    "hbm_GB",
    "hbm_bandwidth_GB_per_s",
    "intra_node_link_GB_per_s",
    "inter_node_link_GB_per_s",
    "devices_per_node",
    "tdp_W",
)
"""Numeric fields other than ``peak_tflops``; each needs a source."""
HOST_FIELDS: tuple[str, ...] = ("host_link_GB_per_s",)
"""Optional figures of the device's link to its host (0: not stated); each needs a source when set."""

_ID_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")

_PRECISION_ALIASES = {
    "float64": "fp64",
    "double": "fp64",
    "float32": "fp32",
    "float": "fp32",
    "tensorfloat32": "tf32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float8": "fp8",
    "float4": "fp4",
    "nvfp4": "fp4",
    "mxfp4": "fp4",
}

CALIBRATE_HINT = "run `trainperf calibrate` to measure this machine's CPU, or pass --peak-tflops"


class _FrozenDict(dict):
    """A read-only dict: keeps Hardware immutable while staying picklable and JSON-serialisable."""

    __slots__ = ()

    def _readonly(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("Hardware mappings are read-only; use dataclasses.replace() to derive a device")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _readonly

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_FrozenDict, (dict(self),))

    def __copy__(self) -> _FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> _FrozenDict:
        return self


def normalize_precision(precision: str) -> str:
    """Canonical dtype name: lowercase, common aliases mapped ("bfloat16" -> "bf16")."""
    p = str(precision).strip().lower()
    return _PRECISION_ALIASES.get(p, p)


def _is_positive_number(value: Any) -> bool:
    return (
        not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value) and value > 0
    )


@dataclass(frozen=True)
class Hardware:
    """One device variant and its datasheet figures (units in the field names).

    See the module docstring for the conventions every field follows.
    """

    id: str
    """Catalog id, lowercase with hyphens, e.g. ``"h100-sxm"``."""
    name: str
    """Human-readable name, e.g. ``"NVIDIA H100 SXM5 80GB"``."""
    vendor: str
    """One of :data:`VENDORS`."""
    kind: str
    """One of :data:`KINDS`: ``gpu``, ``tpu``, ``hpu`` (Gaudi) or ``cpu``."""
    peak_tflops: Mapping[str, float]
    """Dense peak TFLOP/s per dtype (keys from :data:`PRECISIONS`); a missing dtype is unsupported."""
    hbm_GB: float
    """Device memory, GB as the vendor states it."""
    hbm_bandwidth_GB_per_s: float
    """Peak device-memory bandwidth, GB/s."""
    intra_node_link_GB_per_s: float
    """Scale-up bandwidth per device, one direction, aggregate over its links (NVLink, xGMI, ICI)."""
    inter_node_link_GB_per_s: float
    """Scale-out bandwidth per device, one direction (one 400 Gb/s NIC per GPU = 50)."""
    devices_per_node: int
    """Devices in a typical node (8 for HGX, 4 TPU chips per host...)."""
    tdp_W: float
    """Maximum board power (TDP / TBP), watts."""
    sources: Mapping[str, str]
    """Field name (``"peak_tflops.<dtype>"`` for peaks) -> citation."""
    notes: str = ""
    """Caveats worth reading before trusting a number."""
    calibrated: bool = False
    """True when the peaks were measured locally (``cpu`` after ``trainperf calibrate``)."""
    silicon: str = ""
    """Chip generation this SKU is built on (``hopper`` for every H100/H200/H800 part, ``ampere``,
    ``cdna2``...): SKUs of one silicon share compute behaviour and differ only in the physics
    fields, so software-stack profiles key on this, never on the SKU id. ``""``: unknown
    (a custom device without ``base``)."""
    sustained_clock_fraction: float = 1.0
    """Fraction of the boost clock (at which ``peak_tflops`` is stated) that the part sustains
    under its power cap during dense matmuls; 1.0 for parts that hold their boost clock. The
    predictor scales compute peaks by it; MFU keeps the nominal peak. Needs a source when < 1."""

    scale_up_domain: int = 0
    """Devices in one scale-up (NVLink/xGMI/ICI) domain; 0: ``devices_per_node``. See the module
    docstring."""
    memory_usable_GiB: float = 0.0
    """Device memory the runtime exposes, GiB; 0: ``hbm_GB * 1e9`` bytes. Needs a source when set."""
    host_link_GB_per_s: float = 0.0
    """Device-host copy bandwidth, one direction, GB/s; 0: not stated. Needs a source when set."""

    @property
    def scale_up_devices(self) -> int:
        """Devices in one scale-up domain (``scale_up_domain``, else ``devices_per_node``)."""
        return self.scale_up_domain or self.devices_per_node

    @property
    def usable_memory_bytes(self) -> float:
        """Bytes of device memory a process can allocate before the framework's own reserve:
        ``memory_usable_GiB`` when the catalog states it, else ``hbm_GB`` decimal GB."""
        return self.memory_usable_GiB * 2.0 ** 30 if self.memory_usable_GiB else self.hbm_GB * 1e9

    def __post_init__(self) -> None:
        object.__setattr__(self, "peak_tflops", _FrozenDict(self._checked_peaks()))
        object.__setattr__(
            self, "sources", _FrozenDict({str(k): str(v) for k, v in dict(self.sources).items()})
        )
        self._check_identity()
        self._check_numeric_fields()
        self._check_descriptive_fields()
        self._check_clock_and_domain()
        self._check_memory_and_host_link()
        self._check_sources()

    def _check_identity(self) -> None:
        """``id``, ``name``, ``vendor`` and ``kind`` are well-formed."""
        if not isinstance(self.id, str) or not _ID_RE.match(self.id):
            raise SpecError(
                "hardware.id", self.id, "lowercase letters, digits and single hyphens, e.g. 'h100-sxm'"
            )
        if not isinstance(self.name, str) or not self.name.strip():
            raise SpecError(f"hardware[{self.id}].name", self.name, "a non-empty string")
        if self.vendor not in VENDORS:
            raise SpecError(f"hardware[{self.id}].vendor", self.vendor, f"one of {', '.join(VENDORS)}")
        if self.kind not in KINDS:
            raise SpecError(f"hardware[{self.id}].kind", self.kind, f"one of {', '.join(KINDS)}")

    def _check_numeric_fields(self) -> None:
        """Every :data:`NUMERIC_FIELDS` value is positive; stored as float (``devices_per_node``: int)."""
        for name in NUMERIC_FIELDS:
            value = getattr(self, name)
            if not _is_positive_number(value):
                raise SpecError(f"hardware[{self.id}].{name}", value, "a positive number")
        if not isinstance(self.devices_per_node, int):
            if float(self.devices_per_node).is_integer():
                object.__setattr__(self, "devices_per_node", int(self.devices_per_node))
            else:
                raise SpecError(
                    f"hardware[{self.id}].devices_per_node", self.devices_per_node, "a positive integer"
                )
        for name in (
            "hbm_GB",
            "hbm_bandwidth_GB_per_s",
            "intra_node_link_GB_per_s",
            "inter_node_link_GB_per_s",
            "tdp_W",
        ):
            object.__setattr__(self, name, float(getattr(self, name)))

    def _check_descriptive_fields(self) -> None:
        """Some peak unless a CPU (filled by calibration), and well-typed ``calibrated``, ``notes``,
        ``silicon``."""
        if not self.peak_tflops and self.kind != "cpu":
            raise SpecError(
                f"hardware[{self.id}].peak_tflops", {}, f"at least one of {', '.join(PRECISIONS)}"
            )
        if not isinstance(self.calibrated, bool):
            raise SpecError(f"hardware[{self.id}].calibrated", self.calibrated, "true or false")
        if not isinstance(self.notes, str):
            raise SpecError(f"hardware[{self.id}].notes", self.notes, "a string")
        if not isinstance(self.silicon, str) or (self.silicon and not SILICON_RE.match(self.silicon)):
            raise SpecError(f"hardware[{self.id}].silicon", self.silicon,
                            "a lowercase generation id such as 'hopper' or 'cdna3' (or empty)")

    def _check_clock_and_domain(self) -> None:
        """``sustained_clock_fraction`` in (0, 1]; ``scale_up_domain`` 0 or an integer that divides,
        or is a multiple of, ``devices_per_node``."""
        f = self.sustained_clock_fraction
        if isinstance(f, bool) or not isinstance(f, int | float) or not 0.0 < f <= 1.0:
            raise SpecError(f"hardware[{self.id}].sustained_clock_fraction", f, "a fraction in (0, 1]")
        object.__setattr__(self, "sustained_clock_fraction", float(f))
        d = self.scale_up_domain
        if isinstance(d, bool) or not isinstance(d, int | float) or d < 0 or not float(d).is_integer():
            raise SpecError(f"hardware[{self.id}].scale_up_domain", d,
                            "a positive integer (devices per NVLink/xGMI/ICI domain), or 0 for devices_per_node")
        object.__setattr__(self, "scale_up_domain", int(d))
        if d and (d % self.devices_per_node and self.devices_per_node % d):
            raise SpecError(f"hardware[{self.id}].scale_up_domain", d,
                            f"a multiple or a divisor of devices_per_node={self.devices_per_node}")

    def _check_memory_and_host_link(self) -> None:
        """``memory_usable_GiB`` between 0 and ``hbm_GB``; :data:`HOST_FIELDS` finite and >= 0."""
        m = self.memory_usable_GiB
        if isinstance(m, bool) or not isinstance(m, int | float) or not math.isfinite(m) or m < 0:
            raise SpecError(f"hardware[{self.id}].memory_usable_GiB", m, "a positive number of GiB, or 0 for hbm_GB")
        if m > self.hbm_GB:  # GiB exposed never exceed the GB stated: 80 GB parts carry 80 GiB raw
            raise SpecError(f"hardware[{self.id}].memory_usable_GiB", m,
                            f"at most hbm_GB={self.hbm_GB:g} (GiB exposed <= the part's raw memory)")
        object.__setattr__(self, "memory_usable_GiB", float(m))
        for name in HOST_FIELDS:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise SpecError(f"hardware[{self.id}].{name}", v, "a positive number of GB/s, or 0 when not stated")
            object.__setattr__(self, name, float(v))

    def _checked_peaks(self) -> dict[str, float]:
        if not isinstance(self.peak_tflops, Mapping):
            raise SpecError(
                f"hardware[{self.id}].peak_tflops", self.peak_tflops, "a table of dtype -> TFLOP/s"
            )
        peaks: dict[str, float] = {}
        for key, value in self.peak_tflops.items():
            dtype = normalize_precision(key)
            if dtype not in PRECISIONS:
                raise SpecError(
                    f"hardware[{self.id}].peak_tflops", key, f"dtype keys are {', '.join(PRECISIONS)}"
                )
            if not _is_positive_number(value):
                raise SpecError(
                    f"hardware[{self.id}].peak_tflops.{dtype}", value, "a positive number of TFLOP/s"
                )
            peaks[dtype] = float(value)
        # Canonical order, so tables and to_dict() are stable.
        return {p: peaks[p] for p in PRECISIONS if p in peaks}

    def _check_sources(self) -> None:
        required = [*NUMERIC_FIELDS, *(f"peak_tflops.{p}" for p in self.peak_tflops)]
        if self.sustained_clock_fraction != 1.0:
            required.append("sustained_clock_fraction")
        required += [k for k in ("scale_up_domain", "memory_usable_GiB", *HOST_FIELDS) if getattr(self, k)]
        allowed = {*NUMERIC_FIELDS, "sustained_clock_fraction", "scale_up_domain", "memory_usable_GiB", *HOST_FIELDS,
                   *(f"peak_tflops.{p}" for p in PRECISIONS)}
        for key in self.sources:
            if key not in allowed:
                raise SpecError(
                    f"hardware[{self.id}].sources",
                    key,
                    f"keys are field names or peak_tflops.<dtype>: {', '.join(sorted(allowed))}",
                )
        missing = [k for k in required if not self.sources.get(k, "").strip()]
        if missing:
            raise SpecError(
                f"hardware[{self.id}].sources",
                sorted(self.sources),
                f"a citation for every number; missing {', '.join(missing)}",
            )

    def __hash__(self) -> int:
        return hash(
            (self.id, self.name, self.peak_tflops, self.hbm_GB, self.hbm_bandwidth_GB_per_s, self.calibrated)
        )

    # ------------------------------------------------------------------ queries

    @property
    def precisions(self) -> tuple[str, ...]:
        """The dtypes with a peak, in :data:`PRECISIONS` order."""
        return tuple(self.peak_tflops)

    def supports(self, precision: str) -> bool:
        """Whether the device has a peak for ``precision`` (aliases such as "bfloat16" accepted)."""
        return normalize_precision(precision) in self.peak_tflops

    def sustained_peak_flops(self, precision: str) -> float:
        """Dense peak FLOP/s at the sustained clock: :meth:`peak_flops` x ``sustained_clock_fraction``
        (what the silicon can deliver under its power cap; MFU still divides by the nominal peak)."""
        return self.peak_flops(precision) * self.sustained_clock_fraction

    def peak_flops(self, precision: str) -> float:
        """Dense peak FLOP/s (not TFLOP/s) for ``precision``.

        Raises :class:`~trainperf.errors.SpecError` naming the precision, the device and the
        dtypes it does support; for an uncalibrated ``cpu``, the message says how to calibrate.
        """
        dtype = normalize_precision(precision)
        if dtype not in PRECISIONS:
            raise SpecError("precision", precision, f"one of {', '.join(PRECISIONS)}")
        if dtype in self.peak_tflops:
            return self.peak_tflops[dtype] * 1e12
        if not self.peak_tflops:
            raise SpecError(
                "precision",
                precision,
                f"device {self.id!r} ({self.name}) has no peak FLOP/s yet: {CALIBRATE_HINT}",
            )
        supported = ", ".join(self.peak_tflops)
        raise SpecError(
            "precision",
            precision,
            f"device {self.id!r} ({self.name}) has no {dtype} peak; it supports {supported} "
            f"(or pass --peak-tflops)",
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-serialisable dict; :func:`hardware_from_dict` reads it back."""
        return {
            "id": self.id,
            "name": self.name,
            "vendor": self.vendor,
            "kind": self.kind,
            "peak_tflops": dict(self.peak_tflops),
            "hbm_GB": self.hbm_GB,
            "hbm_bandwidth_GB_per_s": self.hbm_bandwidth_GB_per_s,
            "intra_node_link_GB_per_s": self.intra_node_link_GB_per_s,
            "inter_node_link_GB_per_s": self.inter_node_link_GB_per_s,
            "devices_per_node": self.devices_per_node,
            "tdp_W": self.tdp_W,
            "sources": dict(self.sources),
            "notes": self.notes,
            "calibrated": self.calibrated,
            "silicon": self.silicon,
            "sustained_clock_fraction": self.sustained_clock_fraction,
            "scale_up_domain": self.scale_up_domain,
            "memory_usable_GiB": self.memory_usable_GiB,
            "host_link_GB_per_s": self.host_link_GB_per_s,
        }


# ---------------------------------------------------------------------- catalog loading

_ENTRY_KEYS = frozenset(
    {"name", "vendor", "kind", "peak_tflops", *NUMERIC_FIELDS, "sources", "notes", "calibrated",
     "silicon", "sustained_clock_fraction", "scale_up_domain", "memory_usable_GiB", *HOST_FIELDS}
)


def _expand_source(text: str, citations: Mapping[str, str], where: str) -> str:
    """Expand ``@key`` references (anywhere in the text) to the citation text."""

    def repl(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in citations:
            raise InputFileError(
                f"devices.toml: {where} cites unknown @{key}; known: {', '.join(sorted(citations))}"
            )
        return citations[key]

    return re.sub(r"@([a-z0-9][a-z0-9-]*[a-z0-9])", repl, text).strip()


def _entry_to_hardware(device_id: str, entry: Mapping[str, Any], citations: Mapping[str, str]) -> Hardware:
    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown:
        raise InputFileError(f"devices.toml: [devices.{device_id}] has unknown keys {', '.join(unknown)}")
    peaks = dict(entry.get("peak_tflops", {}))
    raw_sources = dict(entry.get("sources", {}))
    default_peak_source = raw_sources.pop("peak_tflops.*", None)
    sources: dict[str, str] = {}
    for key, text in raw_sources.items():
        sources[key] = _expand_source(str(text), citations, f"[devices.{device_id}.sources] {key}")
    if default_peak_source is not None:
        expanded = _expand_source(
            str(default_peak_source), citations, f"[devices.{device_id}.sources] peak_tflops.*"
        )
        for dtype in peaks:
            sources.setdefault(f"peak_tflops.{normalize_precision(dtype)}", expanded)
    fields = {k: v for k, v in entry.items() if k != "sources"}
    fields.setdefault("peak_tflops", {})
    try:
        return Hardware(id=device_id, sources=sources, **fields)
    except TypeError as exc:  # a required field is missing
        raise InputFileError(f"devices.toml: [devices.{device_id}] {exc}") from None


@functools.lru_cache(maxsize=1)
def _catalog_data() -> dict[str, Any]:
    return read_catalog("trainperf.specs", "devices.toml", "hardware catalog")


@functools.cache
def _device(device_id: str) -> Hardware:
    """One catalog entry, built and validated on first use (a command needs one, not all)."""
    data = _catalog_data()
    return _entry_to_hardware(device_id, data["devices"][device_id], data.get("citations", {}))


def _device_entries() -> dict[str, Any]:
    """The raw ``[devices]`` tables by id, in catalog order."""
    return _catalog_data().get("devices", {})


def device_aliases() -> dict[str, str]:
    """Other names of catalog devices (``[aliases]`` of devices.toml): alias -> catalog id.

    An alias names the same physical part (e.g. ``h100-sxm-94gb`` -> ``h100-sxm-hbm2e``); the
    catalog reason for each is a comment beside it in devices.toml.
    """
    aliases = {str(k): str(v) for k, v in _catalog_data().get("aliases", {}).items()}
    catalog = _device_entries()
    for alias, target in aliases.items():
        if target not in catalog or alias in catalog:
            raise InputFileError(f"devices.toml: alias {alias!r} -> {target!r} must name a catalog id "
                                 "and must not shadow one")
    return aliases


def hardware_ids() -> list[str]:
    """All catalog ids, in catalog order."""
    return list(_device_entries())


def get_hardware(device_id: str) -> Hardware:
    """The catalog entry for ``device_id`` (case-insensitive, exact).

    An unknown id raises :class:`~trainperf.errors.UnknownNameError` listing the nearest ids;
    there is never a fallback to another device. ``"cpu"`` is filled from this machine: see
    :func:`_local_cpu`.
    """
    key = str(device_id).strip().lower()
    if not key:
        raise SpecError("device", device_id, "a catalog id such as h100-sxm (`trainperf hw` lists them)")
    catalog = _device_entries()
    key = device_aliases().get(key, key)
    if key not in catalog:
        raise UnknownNameError("device", str(device_id), _suggestion_pool(key, catalog))
    hw = _device(key)
    if hw.kind == "cpu":
        return _local_cpu(hw)
    return hw


def _suggestion_pool(key: str, catalog: Mapping[str, Any]) -> list[str]:
    """Known ids, ordered so that ids starting with the typed text come up as suggestions.

    UnknownNameError suggests difflib's close matches; for a prefix such as "h100" it would miss
    some variants (h100-sxm, h100-pcie, h100-nvl), so ids extending the text come first.
    """
    ids = list(catalog)
    prefixed = [i for i in ids if key and i.startswith(key + "-")]
    if prefixed:
        return prefixed
    return ids


def list_hardware() -> list[Hardware]:
    """Every catalog entry, in catalog order (``cpu`` filled as by :func:`get_hardware`)."""
    return [get_hardware(i) for i in hardware_ids()]


def _physical_memory_GB() -> float | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (AttributeError, ValueError, OSError):
        return None


def _local_cpu(base: Hardware) -> Hardware:
    """The ``cpu`` entry for this machine: OS memory size, and calibrated peaks when cached."""
    from trainperf.specs import cpu_calibration

    model = cpu_calibration.cpu_model_name()
    changes: dict[str, Any] = {"name": f"CPU: {model}"}
    sources = dict(base.sources)
    mem = _physical_memory_GB()
    if mem and mem > 0:
        changes["hbm_GB"] = round(mem, 3)
        sources["hbm_GB"] = (
            "Physical memory of this machine (os.sysconf SC_PHYS_PAGES x SC_PAGE_SIZE), decimal GB."
        )
    cal = cpu_calibration.load_calibration(cpu_model=model)
    if cal is not None:
        stamp = f"trainperf calibrate on {cal.cpu_model} at {cal.measured_at}"
        if cal.method:
            stamp += f" ({cal.method})"
        changes["peak_tflops"] = dict(cal.peak_tflops)
        changes["hbm_bandwidth_GB_per_s"] = cal.memory_bandwidth_GB_per_s
        changes["calibrated"] = True
        for dtype in cal.peak_tflops:
            sources[f"peak_tflops.{dtype}"] = stamp
        sources["hbm_bandwidth_GB_per_s"] = stamp
    changes["sources"] = sources
    return dataclasses.replace(base, **changes)


# ---------------------------------------------------------------------- custom devices

_CUSTOM_KEYS = frozenset({"id", "base", "device", *_ENTRY_KEYS})
_USER_SOURCE = "user-supplied (custom device)"


def hardware_from_dict(d: Mapping[str, Any]) -> Hardware:
    """A device from plain fields: a workload file's inline ``[hardware]`` or :meth:`Hardware.to_dict`.

    Either every field (``peak_tflops``, ``hbm_GB``, ``hbm_bandwidth_GB_per_s``,
    ``intra_node_link_GB_per_s``, ``inter_node_link_GB_per_s``, ``devices_per_node``, ``tdp_W``;
    ``id``, ``name``, ``vendor``, ``kind``, ``notes``, ``sources`` optional), or
    ``base = "<catalog id>"`` (alias ``device``) plus the fields to override (``peak_tflops`` given with a base
    replaces the base's dtypes it names and keeps the others). Numbers without a source are
    cited as user-supplied. Unknown keys, unknown dtypes and non-positive numbers raise
    :class:`~trainperf.errors.SpecError`.
    """
    if not isinstance(d, Mapping):
        raise SpecError("hardware", d, "a table of device fields")
    _check_custom_keys(d)
    fields: dict[str, Any] = {}
    sources: dict[str, str] = {}
    base_id = d.get("base", d.get("device"))
    if base_id is not None:
        fields, sources = _base_fields(str(base_id))
    _apply_custom_fields(d, fields, sources, based=base_id is not None)
    if base_id is not None:
        _reset_base_derived(d, fields, sources)
    if isinstance(d.get("sources"), Mapping):
        sources.update({str(k): str(v) for k, v in d["sources"].items()})
    _complete_custom_fields(d, fields, sources)
    try:
        return Hardware(sources=sources, **fields)
    except TypeError as exc:
        raise SpecError("hardware", sorted(d), str(exc)) from None


def _check_custom_keys(d: Mapping[str, Any]) -> None:
    """Every key of a custom device is a hardware field, and at most one of ``base``/``device``."""
    unknown = sorted(set(d) - _CUSTOM_KEYS)
    if unknown:
        import difflib  # only an error needs it

        close = difflib.get_close_matches(str(unknown[0]), sorted(_CUSTOM_KEYS), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        raise SpecError(
            "hardware",
            unknown[0],
            f"not a hardware field; {hint}valid keys: {', '.join(sorted(_CUSTOM_KEYS))}",
        )
    if "base" in d and "device" in d:
        raise SpecError(
            "hardware.device", d["device"], "give either base or device (the same thing), not both"
        )


def _base_fields(base_id: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The fields and sources of catalog device ``base_id``, renamed as its custom variant."""
    base = get_hardware(base_id)
    fields = base.to_dict()
    sources = dict(fields.pop("sources"))
    fields["peak_tflops"] = dict(fields["peak_tflops"])
    fields["id"] = f"{base.id}-custom"
    fields["name"] = f"{base.name} (custom)"
    fields["calibrated"] = base.calibrated
    return fields, sources


def _apply_custom_fields(d: Mapping[str, Any], fields: dict[str, Any], sources: dict[str, str],
                         based: bool) -> None:
    """Copy the given fields over ``fields`` (in place), citing each number as user-supplied."""
    for key, value in d.items():
        if key in ("base", "device", "sources"):
            continue
        if key == "peak_tflops":
            fields["peak_tflops"] = _custom_peaks(value, fields, sources, based)
        else:
            fields[key] = value
            if key in NUMERIC_FIELDS:
                sources[key] = _USER_SOURCE
            elif key in ("sustained_clock_fraction", "scale_up_domain", "memory_usable_GiB", *HOST_FIELDS):
                if value in (1.0, 0) and (key == "sustained_clock_fraction") == (value == 1.0):
                    sources.pop(key, None)  # the default needs no citation
                else:
                    sources[key] = _USER_SOURCE


def _custom_peaks(value: Any, fields: dict[str, Any], sources: dict[str, str], based: bool) -> dict[str, Any]:
    """The peaks of a custom device: the given dtypes over the base's (when ``based``), cited."""
    if not isinstance(value, Mapping):
        raise SpecError(
            "hardware.peak_tflops", value, "a table of dtype -> TFLOP/s, e.g. {bf16 = 989.4}"
        )
    peaks = fields.get("peak_tflops", {}) if based else {}
    for dtype, tflops in value.items():
        canon = normalize_precision(dtype)
        if canon not in PRECISIONS:
            raise SpecError("hardware.peak_tflops", dtype, f"dtype keys are {', '.join(PRECISIONS)}")
        peaks[canon] = tflops
        sources[f"peak_tflops.{canon}"] = _USER_SOURCE
    return peaks


def _reset_base_derived(d: Mapping[str, Any], fields: dict[str, Any], sources: dict[str, str]) -> None:
    """Drop a base's figures that a user override made inconsistent (in place)."""
    # a base's exposed memory belongs to its hbm_GB, its domain to its node size
    if "hbm_GB" in d and "memory_usable_GiB" not in d:
        fields["memory_usable_GiB"] = 0.0
        sources.pop("memory_usable_GiB", None)
    dom, dpn = fields.get("scale_up_domain", 0), fields.get("devices_per_node")
    if ("devices_per_node" in d and "scale_up_domain" not in d and dom and isinstance(dpn, int)
            and dpn > 0 and dom % dpn and dpn % dom):
        fields["scale_up_domain"] = 0
        sources.pop("scale_up_domain", None)


def _complete_custom_fields(d: Mapping[str, Any], fields: dict[str, Any], sources: dict[str, str]) -> None:
    """Default the descriptive fields, require every number, and drop sources of absent dtypes."""
    fields.setdefault("id", "custom")
    fields["id"] = str(fields["id"]).strip().lower()
    fields.setdefault("name", fields["id"])
    fields.setdefault("vendor", "other")
    fields.setdefault("kind", "gpu")
    missing = [k for k in ("peak_tflops", *NUMERIC_FIELDS) if k not in fields]
    if missing:
        raise SpecError(
            "hardware",
            sorted(d),
            f"a custom device needs {', '.join(missing)} (or base = '<catalog id>' to start from)",
        )
    for key in NUMERIC_FIELDS:
        if not _is_positive_number(fields[key]):
            raise SpecError(f"hardware.{key}", fields[key], "a positive number")
    for key in list(sources):  # sources of dtypes no longer present would fail validation
        if key.startswith("peak_tflops.") and key.split(".", 1)[1] not in fields["peak_tflops"]:
            del sources[key]


# ---------------------------------------------------------------------- text output


def _fmt_num(value: float | None) -> str:
    if value is None:
        return "-"
    if float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.4f}".rstrip("0").rstrip(".")


TABLE_FOOTER = (
    "bf16 fp16 fp8 fp32: dense peak TFLOP/s (no sparsity, boost clock); HBM: GB and GB/s; intra, inter: "
    "link GB/s per device, one direction, inside a node and across nodes; /node: devices per node; W: TDP. "
    "'trainperf hw <id>' shows every dtype and the source of each number (for cpu, this machine's "
    "instruction sets)."
)


def format_hardware_table(hardware_list: Iterable[Hardware]) -> str:
    """One row per device: dense peaks for the training dtypes, memory, links, power.

    Plain text for ``trainperf hw``, narrow enough for a terminal (units in the footer, not the
    headers; the CPU's instruction sets only in ``trainperf hw cpu``); a dash means the dtype is
    unsupported (or, for an uncalibrated ``cpu``, not measured yet).
    """
    import textwrap

    from trainperf.text_table import format_table

    headers = ["id", "name", "silicon", "bf16", "fp16", "fp8", "fp32", "HBM GB", "HBM GB/s", "intra", "inter",
               "/node", "W"]
    rows = []
    for hw in hardware_list:
        rows.append([
            hw.id, _table_name(hw), hw.silicon or "-",
            *(_fmt_num(hw.peak_tflops.get(p)) for p in ("bf16", "fp16", "fp8", "fp32")),
            _fmt_num(hw.hbm_GB), _fmt_num(hw.hbm_bandwidth_GB_per_s), _fmt_num(hw.intra_node_link_GB_per_s),
            _fmt_num(hw.inter_node_link_GB_per_s), str(hw.devices_per_node), _fmt_num(hw.tdp_W),
        ])
    return format_table(rows, headers, numparse=False) + "\n" + textwrap.fill(TABLE_FOOTER, 100)


def _table_name(hw: Hardware) -> str:
    """A device's name for the table: this machine's CPU without its instruction-set flags."""
    if hw.kind != "cpu":
        return hw.name
    from trainperf.specs.cpu_calibration import isa_tag

    name = hw.name.replace(f", {isa_tag()})", ")")
    return " ".join(re.sub(r"\((?:R|TM)\)|\bCPU @ [\d.]+GHz", " ", name).split())  # Intel's marks and clock


CPU_CALIBRATED_DTYPES: tuple[str, ...] = ("fp32", "bf16", "fp8")
"""The matmul dtypes ``trainperf calibrate`` measures a CPU's peak in (``trainperf.measure.calibrate.DTYPES``;
a test checks they agree)."""


def format_hardware_detail(hw: Hardware) -> str:
    """Every field of one device with its source, for ``trainperf hw <id>``."""
    lines = [
        f"{hw.id}: {hw.name}",
        f"  vendor {hw.vendor}, kind {hw.kind}, silicon {hw.silicon or 'unknown'}"
        + (", calibrated" if hw.calibrated else ""),
    ]
    lines.append("  peak TFLOP/s (dense):")
    if hw.peak_tflops:
        for dtype, value in hw.peak_tflops.items():
            lines.append(
                f"    {dtype:<5} {value:>10g}   [{hw.sources.get(f'peak_tflops.{dtype}', 'no source')}]"
            )
        missing = [p for p in PRECISIONS if p not in hw.peak_tflops]
        # a CPU has the peaks measured so far, not a datasheet's: those calibrate can measure are pending
        pending = [p for p in missing if hw.kind == "cpu" and p in CPU_CALIBRATED_DTYPES]
        if pending:
            lines.append(f"    not measured yet: {', '.join(pending)} (`trainperf calibrate --dtypes "
                         f"{','.join(pending)}`)")
        if len(missing) > len(pending):
            lines.append(f"    not supported: {', '.join(p for p in missing if p not in pending)}")
    else:
        lines.append(f"    none: {CALIBRATE_HINT}")
    labels = {
        "hbm_GB": "memory (GB)",
        "hbm_bandwidth_GB_per_s": "memory bandwidth (GB/s)",
        "intra_node_link_GB_per_s": ("ICI within a slice" if hw.kind == "tpu" else "intra-node link")
        + " (GB/s, per device, one direction)",
        "inter_node_link_GB_per_s": ("DCN between slices" if hw.kind == "tpu" else "inter-node link")
        + " (GB/s, per device, one direction)",
        "devices_per_node": "devices per node",
        "tdp_W": "TDP (W)",
    }
    for name in NUMERIC_FIELDS:
        value = getattr(hw, name)
        lines.append(f"  {labels[name]}: {value:g}")
        lines.append(f"      source: {hw.sources.get(name, 'no source')}")
    if hw.sustained_clock_fraction != 1.0:
        lines.append(f"  sustained clock (fraction of boost): {hw.sustained_clock_fraction:g}")
        lines.append(f"      source: {hw.sources.get('sustained_clock_fraction', 'no source')}")
    if hw.scale_up_domain:
        lines.append(f"  scale-up (NVLink/xGMI/ICI) domain: {hw.scale_up_domain} devices")
        lines.append(f"      source: {hw.sources.get('scale_up_domain', 'no source')}")
    if hw.memory_usable_GiB:
        lines.append(f"  memory exposed to a process (GiB): {hw.memory_usable_GiB:g}")
        lines.append(f"      source: {hw.sources.get('memory_usable_GiB', 'no source')}")
    if hw.host_link_GB_per_s:
        lines.append(f"  host link (GB/s, device to host, one direction): {hw.host_link_GB_per_s:g}")
        lines.append(f"      source: {hw.sources.get('host_link_GB_per_s', 'no source')}")
    if hw.notes:
        lines.append(f"  notes: {hw.notes}")
    return "\n".join(lines)
