"""The workload file: one schema, TOML or JSON, for every command.

```toml
[model]       preset = "llama2-70b" | hf_config = "config.json" | inline ModelSpec fields
              (inline fields next to a preset or hf_config override it)
[hardware]    device = "h100-sxm" (or inline Hardware fields), num_devices, devices_per_node,
              peak_tflops (overrides the catalog peak for the run's precision, labelled as such),
              threads_per_device (a CPU run's threads per process; default: the cores shared out)
[parallel]    dp, fsdp, zero_stage, tp, sequence_parallel, pp, vpp, cp, ep, pp_schedule
[training]    seq_len, global_batch, micro_batch, precision, activation_checkpointing,
              compile, async_tp, fp8_recipe, moe_dispatcher, moe_imbalance, offload_optimizer
              (and stack)
[lora]        rank, alpha, targets (optional: a LoRA fine-tune, see trainperf.specs.lora)
```

Unknown sections and keys are errors (a typo must never be silently ignored). Command-line
flags become ``overrides`` keyed ``"section.key"`` and win over the file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainperf.errors import InputFileError, SpecError, TrainperfError, UnknownNameError
from trainperf.specs.bounds import PEAK_TFLOPS, WORKLOAD_FIELD_BOUNDS
from trainperf.specs.checkpointing import framework_policy
from trainperf.specs.datafiles import parse_user_data, read_user_text
from trainperf.specs.hardware import (
    PRECISIONS,
    Hardware,
    get_hardware,
    hardware_from_dict,
    normalize_precision,
)
from trainperf.specs.model import ModelSpec
from trainperf.specs.model_notes import default_training_seq_len
from trainperf.specs.parallel import ParallelPlan

if TYPE_CHECKING:
    from trainperf.specs.lora import LoraSpec

SECTIONS: dict[str, frozenset[str]] = {
    "model": frozenset({"preset", "hf_config"} | {f.name for f in dataclasses.fields(ModelSpec)} - {"extra"}),
    "hardware": frozenset({"device", "num_devices", "devices_per_node", "peak_tflops", "threads_per_device"}
                          | {f.name for f in dataclasses.fields(Hardware)}),
    "parallel": frozenset(f.name for f in dataclasses.fields(ParallelPlan)),
    "training": frozenset({"seq_len", "global_batch", "micro_batch", "precision", "activation_checkpointing",
                           "stack", "compile", "async_tp", "fp8_recipe", "moe_dispatcher", "moe_imbalance",
                           "offload_optimizer"}),
    "lora": frozenset({"rank", "alpha", "targets"}),
}
_HW_WORKLOAD_KEYS = frozenset({"device", "num_devices", "devices_per_node", "peak_tflops", "threads_per_device"})


def read_workload_file(path: str | Path) -> dict[str, Any]:
    """Parse a ``.toml`` or ``.json`` workload file into a dict (no validation beyond syntax)."""
    p = Path(path)
    text = read_user_text(p, "workload file")
    if p.suffix.lower() not in (".json", ".toml"):
        raise InputFileError(f"workload file {str(p)!r}: the extension must be .toml or .json")
    data = parse_user_data(text, p, "workload file", toml=p.suffix.lower() == ".toml")
    if not isinstance(data, dict):
        raise InputFileError(f"workload file {str(p)!r}: the top level must be a table/object")
    check_schema(data, where=str(p))
    data.setdefault("_base_dir", str(p.parent))
    return data


def check_schema(data: Mapping[str, Any], where: str = "workload") -> None:
    """Reject unknown sections and keys, naming the nearest valid one."""
    for section, body in data.items():
        if section.startswith("_"):
            continue
        if section not in SECTIONS:
            raise UnknownNameError(f"{where}: section [{section}]", section, SECTIONS)
        if not isinstance(body, Mapping):
            raise SpecError(f"[{section}]", body, "a table of key = value pairs")
        for key in body:
            if key not in SECTIONS[section]:
                raise UnknownNameError(f"{section}.{key}", key, SECTIONS[section])
    check_bounds(data)


def check_bounds(data: Mapping[str, Any]) -> None:
    """Reject a number outside its :data:`~trainperf.specs.bounds.WORKLOAD_FIELD_BOUNDS` range
    (a negative, zero or NaN batch, a trillion devices, an infinite peak), one line naming the
    field, before any work is done with it. Absent and null fields, and text (a type error the
    Workload reports, or a count list ``plan`` parses itself), are left to the constructors."""
    for dotted, bound in WORKLOAD_FIELD_BOUNDS.items():
        section, key = dotted.split(".", 1)
        body = data.get(section)
        value = body.get(key) if isinstance(body, Mapping) else None
        if isinstance(value, Mapping) and dotted == "hardware.peak_tflops":
            for dtype, peak in value.items():
                bound.check(f"{dotted}.{dtype}", peak)
        elif value is not None and not isinstance(value, str):
            bound.check(dotted, value)


def merge_overrides(data: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """Apply ``{"section.key": value}`` overrides (None values are ignored)."""
    out: dict[str, Any] = {k: dict(v) if isinstance(v, Mapping) else v for k, v in data.items()}
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        section, key = dotted.split(".", 1)
        body = out.setdefault(section, {})
        if section == "model" and key == "preset":
            body.pop("hf_config", None)
        body[key] = value
    check_schema(out, where="flags")
    return out


def model_from_section(body: Mapping[str, Any], base_dir: str | None = None) -> ModelSpec:
    """Build the ModelSpec of a ``[model]`` section."""
    body = dict(body)
    preset, hf = body.pop("preset", None), body.pop("hf_config", None)
    if preset and hf:
        raise SpecError("model.preset", preset, "give either preset or hf_config, not both")
    if preset:
        base = ModelSpec.preset(str(preset))
        return base.replace(**body) if body else base
    if hf:
        path = Path(hf)
        if base_dir and not path.is_absolute() and not path.exists():
            path = Path(base_dir) / path
        base = ModelSpec.from_hf_config(path)
        return base.replace(**body) if body else base
    if not body:
        raise SpecError("model", None, "a [model] section with preset, hf_config or inline fields "
                        "(or the --model flag)")
    return ModelSpec.from_dict(body)


def hardware_from_section(body: Mapping[str, Any], precision: str) -> Hardware:
    """Resolve the device of a ``[hardware]`` section.

    ``device`` names a catalog entry; other Hardware fields next to it override the entry's
    (cited as given in the workload file); without ``device`` every field must be given inline.
    ``peak_tflops`` as a number overrides the peak of the run's precision; as a table
    (``{bf16 = 500}``) it sets the peaks of an inline device.
    """
    peak = body.get("peak_tflops")
    fields = {k: v for k, v in body.items() if k not in _HW_WORKLOAD_KEYS}
    if isinstance(peak, Mapping):
        fields["peak_tflops"] = peak
        peak = None
    device = body.get("device")
    if device is None and fields and "devices_per_node" in body:
        # An inline device's typical node is the workload's node (workload_to_dict writes it once).
        fields.setdefault("devices_per_node", body["devices_per_node"])
    if device is None and not fields:
        raise SpecError("hardware.device", None, "a catalog id such as h100-sxm (see `trainperf hw`), "
                        "or inline hardware fields")
    if device is not None:
        hw = hardware_from_dict({"base": device, **fields}) if fields else get_hardware(str(device))
    else:
        hw = hardware_from_dict(fields)
    if peak is not None:
        hw = with_peak_override(hw, precision, peak)
    return hw


def with_peak_override(hw: Hardware, precision: str, peak_tflops: Any) -> Hardware:
    """A copy of ``hw`` whose ``precision`` peak is ``peak_tflops``, its source saying so."""
    peaks = dict(hw.peak_tflops)
    peaks[precision] = PEAK_TFLOPS.check("hardware.peak_tflops", peak_tflops)
    sources = dict(hw.sources)
    sources[f"peak_tflops.{precision}"] = "given by the user (--peak-tflops / hardware.peak_tflops)"
    return dataclasses.replace(hw, peak_tflops=peaks, sources=sources)


def workload_from_dict(data: Mapping[str, Any], overrides: Mapping[str, Any] | None = None):
    """Build a validated :class:`Workload` from a workload-file dict plus flag overrides."""
    from trainperf.specs.workload import Workload

    data = merge_overrides(data, overrides)
    base_dir = data.get("_base_dir")
    model = model_from_section(data.get("model", {}), base_dir)
    training = dict(data.get("training", {}))
    hw_body = dict(data.get("hardware", {}))
    precision = _precision(training)
    hardware = hardware_from_section(hw_body, precision)
    plan = ParallelPlan.from_dict(dict(data.get("parallel", {})))
    num_devices = hw_body.get("num_devices", 1)
    seq_len = training.get("seq_len", default_training_seq_len(model))
    seq_notes = _seq_len_notes(model, seq_len, defaulted="seq_len" not in training)
    stack = str(training.get("stack", "generic"))
    ac, mapping = framework_policy(training.get("activation_checkpointing", "none"), stack)
    if mapping:  # the stack's own name (torchtitan's selective): said, and written as trainperf's
        seq_notes = (*seq_notes, f"activation checkpointing: {mapping}")
    micro = training.get("micro_batch", 1)
    if "global_batch" not in training:
        # One micro-batch per data-parallel rank: the smallest valid global batch.
        try:
            dp_total = plan.resolve(num_devices).data_parallel
        except TrainperfError:
            dp_total = 1
        training["global_batch"] = micro * dp_total
    return Workload(
        model=model, hardware=hardware, num_devices=num_devices,
        devices_per_node=hw_body.get("devices_per_node"), threads_per_device=hw_body.get("threads_per_device", 0),
        plan=plan, seq_len=seq_len,
        global_batch=training["global_batch"], micro_batch=micro, precision=precision,
        activation_checkpointing=ac, notes=seq_notes, stack=stack,
        compile=training.get("compile", False), async_tp=training.get("async_tp", False),
        fp8_recipe=training.get("fp8_recipe"), moe_dispatcher=training.get("moe_dispatcher"),
        moe_imbalance=training.get("moe_imbalance", 1.0),
        offload_optimizer=training.get("offload_optimizer", False),
        lora=_lora(data.get("lora")),
    )


_RECIPE_PRECISIONS = {"mxfp8": ("fp8", "mxfp8")}
"""Precision names that also name the fp8 recipe (MXFP8: fp8 with 32-element block scales)."""


def _precision(training: dict[str, Any]) -> str:
    """``training.precision`` read by :func:`precision_with_recipe`; the recipe it names is set in
    ``training``."""
    precision, training["fp8_recipe"] = precision_with_recipe(training.get("precision", "bf16"),
                                                              training.get("fp8_recipe"))
    return precision


def precision_with_recipe(given: Any, fp8_recipe: Any) -> tuple[str, Any]:
    """``given`` as one of :data:`PRECISIONS` with the fp8 recipe: aliases read (``bfloat16``,
    ``nvfp4``), and a name that also states the recipe (``mxfp8``) sets it unless ``fp8_recipe``
    states another (an error)."""
    valid = f"one of {', '.join(PRECISIONS)} (or {', '.join(_RECIPE_PRECISIONS)})"
    if not isinstance(given, str):
        raise SpecError("training.precision", given, valid)
    precision = normalize_precision(given)
    if precision in _RECIPE_PRECISIONS:
        precision, recipe = _RECIPE_PRECISIONS[precision]
        if fp8_recipe is not None and fp8_recipe != recipe:
            raise SpecError("training.fp8_recipe", fp8_recipe, f"{recipe} (precision {given!r} names it)")
        fp8_recipe = recipe
    if precision not in PRECISIONS:  # it keys the peak override
        raise SpecError("training.precision", given, valid)
    return precision, fp8_recipe


def _lora(body: Any) -> LoraSpec | None:
    """The ``[lora]`` section as a LoraSpec (imported only for a workload that has one)."""
    if not body:
        return None
    from trainperf.specs.lora import LoraSpec

    return LoraSpec.from_dict(body)


def _seq_len_notes(model: ModelSpec, seq_len: Any, defaulted: bool) -> tuple[str, ...]:
    """A defaulted sequence length, and one beyond the position table, said in the notes."""
    from trainperf.specs.model_notes import SEQ_DEFAULT, position_warning, seq_len_line

    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0:
        return ()  # Workload rejects it with a one-line error
    lines = [seq_len_line(model, seq_len, SEQ_DEFAULT if defaulted else "given"),
             position_warning(model, seq_len)]
    return tuple(line for line in lines if line)


def load_workload(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None):
    """Load a workload file (optional) and apply flag overrides."""
    data = read_workload_file(path) if path else {}
    return workload_from_dict(data, overrides)


def workload_to_dict(w: Any) -> dict[str, Any]:
    """The workload as a file dict that :func:`workload_from_dict` turns back into an equal Workload."""
    model = w.model.to_dict()
    try:
        catalog = get_hardware(w.hardware.id)
    except TrainperfError:
        catalog = None
    hardware: dict[str, Any]
    if catalog is not None and catalog == w.hardware:
        hardware = {"device": w.hardware.id}
    elif catalog is not None and _only_peaks_differ(catalog, w.hardware):
        hardware = {"device": w.hardware.id, "peak_tflops": w.hardware.peak_tflops[w.precision]}
    else:
        hardware = {k: v for k, v in w.hardware.to_dict().items() if v is not None}
    hardware.update(num_devices=w.num_devices, devices_per_node=w.devices_per_node,
                    **({"threads_per_device": w.threads_per_device} if w.threads_per_device else {}))
    return {
        "model": model,
        "hardware": hardware,
        "parallel": {k: v for k, v in w.plan.to_dict().items() if v is not None},
        "training": {
            "seq_len": w.seq_len, "global_batch": w.global_batch, "micro_batch": w.micro_batch,
            "precision": w.precision, "activation_checkpointing": w.activation_checkpointing,
            **({"stack": w.stack} if w.stack != "generic" else {}),
            **({"compile": True} if w.compile else {}),
            **({"async_tp": True} if w.async_tp else {}),
            **({"fp8_recipe": w.fp8_recipe} if w.fp8_recipe else {}),
            **({"moe_dispatcher": w.moe_dispatcher} if w.moe_dispatcher else {}),
            **({"moe_imbalance": w.moe_imbalance} if w.moe_imbalance != 1.0 else {}),
            **({"offload_optimizer": True} if w.offload_optimizer else {}),
        },
        **({"lora": w.lora.to_dict()} if getattr(w, "lora", None) is not None else {}),
    }


def _only_peaks_differ(a: Hardware, b: Hardware) -> bool:
    return dataclasses.replace(a, peak_tflops=b.peak_tflops, sources=b.sources) == b


def dump_workload_toml(w: Any) -> str:
    """Write a workload as TOML (tomli-w), leaving out unset and empty values."""
    import tomli_w

    doc = {section: {k: v for k, v in body.items() if v is not None and not (isinstance(v, dict | list) and not v)}
           for section, body in workload_to_dict(w).items()}
    return tomli_w.dumps(doc)
