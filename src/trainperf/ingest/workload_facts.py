"""Build the Workload of a parsed log from three layers, and say where every field came from.

Precedence: command-line flags > facts the log states > the workload file. The log wins over
the file because it records what actually ran (a recipe file may say global batch 256 while the
job ran 128); flags win over both because they are the user's explicit correction. A model
shape or device found in the log is used only when the user gave none. Rates (tokens/s, MFU)
need the model, the device, the device count, the sequence length and the tokens per step: when
one of them is known from nowhere, no workload is built and the missing fields are listed --
defaults are never used for them, so no number is silently wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from trainperf.errors import InputFileError, TrainperfError, one_line
from trainperf.ingest.base import WORKLOAD_FACTS, LogFacts

# Overrides whose command-line flag is not named after the key (trainperf.cli.common.WORKLOAD_FLAGS).
_FLAG_NAMES = {"model.preset": "model"}
_SHAPE_KEYS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "mlp", "tied_embeddings")
_REQUIRED = {
    "model": "the model (workload [model] or --model PRESET)",
    "hardware.device": "the device (--device ID, see `trainperf hw`)",
    "hardware.num_devices": "the device count (--num-devices N)",
    "training.seq_len": "the sequence length (--seq-len N)",
    "training.global_batch": "the global batch (--global-batch N)",
}
# Device names as frameworks print them (torch.cuda.get_device_name) -> catalog id.
_DEVICE_NAMES: list[tuple[str, str]] = [
    (r"H100.*(PCIe)", "h100-pcie"), (r"H100.*NVL", "h100-nvl"),
    # the power-capped HBM2e SXM part (seed 002: "SXM H100 (95GB)"), named by memory
    (r"H100.*(9[56] ?GB|HBM2e)", "h100-sxm-hbm2e"),
    (r"H100 80GB HBM3|H100.*SXM", "h100-sxm"),
    (r"H200", "h200-sxm"), (r"H800", "h800"), (r"GB200", "gb200"), (r"B200", "b200"),
    (r"A100.*SXM4?-80GB|A100 80GB SXM|A100-SXM-80GB", "a100-sxm-80gb"),
    (r"A100.*SXM4?-40GB|A100-SXM-40GB", "a100-sxm-40gb"),
    (r"A100.*PCIE.*80GB|A100 80GB PCIe", "a100-pcie-80gb"), (r"A100.*PCIE", "a100-pcie-40gb"),
    (r"MI300X", "mi300x"), (r"MI325X", "mi325x"), (r"MI355X", "mi355x"),
    # torch sees each MI250(X) GCD as one device
    (r"MI250X", "mi250x-gcd"), (r"MI250", "mi250-gcd"),
]


def device_id_from_name(name: str) -> str | None:
    """Catalog id for a device name as torch prints it, or ``None`` when not unambiguous."""
    for pattern, dev in _DEVICE_NAMES:
        if re.search(pattern, name, re.IGNORECASE):
            return dev
    return None


def _preset_from_log(facts: LogFacts) -> str | None:
    from trainperf.specs.presets import model_ids

    ids = set(model_ids())
    name = facts.get("model")
    if isinstance(name, str) and name.lower() in ids:
        return name.lower()
    flavor = facts.get("model_flavor")  # torchtitan "llama3 8b"
    if isinstance(flavor, str):
        fam, size = flavor.split(" ", 1)
        for cand in (f"{fam}-{size}", f"{fam}.1-{size}"):
            if cand in ids:
                return cand
    return None


@dataclass
class WorkloadResolution:
    """The workload (or ``None``), each field's origin, what is missing, and conflicts noticed."""

    workload: Any
    fields: dict[str, str] = field(default_factory=dict)
    """``"section.key"`` -> where the value came from."""
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tokens_per_step: int | None = None


def user_hints(workload_path: str | None, overrides: dict[str, Any],
               base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Facts the user gave, for parsers that need them while parsing (seq len, devices, tokens)."""
    from trainperf.specs.workload_file import merge_overrides, read_workload_file

    data = read_workload_file(workload_path) if workload_path else (base or {})
    data = merge_overrides(data, overrides)
    tr, hw = data.get("training", {}), data.get("hardware", {})
    hints: dict[str, Any] = {}
    if isinstance(tr.get("seq_len"), int):
        hints["seq_len"] = tr["seq_len"]
    if isinstance(hw.get("num_devices"), int):
        hints["num_devices"] = hw["num_devices"]
    if isinstance(tr.get("seq_len"), int) and isinstance(tr.get("global_batch"), int):
        hints["tokens_per_step"] = tr["seq_len"] * tr["global_batch"]
    return hints


def resolve_workload(facts: LogFacts, workload_path: str | None, overrides: dict[str, Any],
                     tokens_per_step: int | None = None,
                     base: dict[str, Any] | None = None) -> WorkloadResolution:
    """Merge file, log facts and flags (see module doc) and build the Workload if possible.

    ``tokens_per_step`` is the median tokens per steady step the log states (MaxText
    total_weights, nanoGPT tokens per iteration, Megatron batch x seq); with a sequence length
    it gives the global batch. ``base`` (a workload dict) stands in for a workload file.
    """
    from trainperf.specs.workload_file import check_schema, read_workload_file, workload_from_dict

    data: dict[str, dict[str, Any]] = {}
    origin: dict[str, str] = {}
    res = WorkloadResolution(workload=None, tokens_per_step=tokens_per_step)
    file_data = read_workload_file(workload_path) if workload_path else dict(base or {})
    base_dir = file_data.pop("_base_dir", None)
    file_label = f"workload file {workload_path}" if workload_path else "given workload"
    header = facts.get("workload")  # a trainperf JSONL run header
    if isinstance(header, dict):
        for section, body in header.items():
            if isinstance(body, dict):
                for k, v in body.items():
                    if v is not None:
                        data.setdefault(section, {})[k] = v
                        origin[f"{section}.{k}"] = "log (trainperf run header)"
        try:
            check_schema(data, where="run header")
        except TrainperfError as e:
            res.notes.append(f"run header workload ignored: {one_line(str(e))}")
            data, origin = {}, {}
    for section, body in file_data.items():
        for k, v in body.items():
            data.setdefault(section, {})[k] = v
            origin[f"{section}.{k}"] = file_label
    user_model = bool(data.get("model")) or any(k.startswith("model.") for k in overrides)
    user_device = "device" in data.get("hardware", {}) or "hardware.device" in overrides

    def put(dotted: str, value: Any, why: str) -> None:
        section, key = dotted.split(".", 1)
        old = data.get(section, {}).get(key)
        if old is not None and old != value and origin.get(dotted, "") == file_label:
            res.notes.append(f"{dotted}: the workload file says {old!r}, the log says {value!r}; "
                             "using the log's (override with a flag)")
        data.setdefault(section, {})[key] = value
        origin[dotted] = why

    fv = facts.values
    for key, dotted in WORKLOAD_FACTS.items():
        if key not in fv or dotted.startswith("model.") or dotted == "hardware.device":
            continue
        put(dotted, fv[key], f"log ({facts.where.get(key, '')})")
    if not user_model:
        preset = _preset_from_log(facts)
        shape = {k: fv[k] for k in _SHAPE_KEYS if k in fv}
        if preset:
            where = facts.where.get("model") or facts.where.get("model_flavor", "")
            put("model.preset", preset, f"log ({where})")
        elif all(k in shape for k in ("layers", "hidden", "heads", "ffn_hidden", "vocab")):
            for k, v in shape.items():
                put(f"model.{k}", v, f"log ({facts.where.get(k, '')})")
    if not user_device and isinstance(fv.get("device_name"), str):
        dev = device_id_from_name(fv["device_name"])
        if dev:
            put("hardware.device", dev, f"log device name {fv['device_name']!r} "
                                        f"({facts.where.get('device_name', '')})")
    for dotted, value in overrides.items():
        if value is not None:
            section, key = dotted.split(".", 1)
            if section == "model" and key == "preset":
                data["model"] = {}
                for k in [k for k in origin if k.startswith("model.")]:
                    del origin[k]
            data.setdefault(section, {})[key] = value
            origin[dotted] = "flag --" + _FLAG_NAMES.get(dotted, key).replace("_", "-")
    tr = data.setdefault("training", {})
    if "global_batch" not in tr and tokens_per_step and isinstance(tr.get("seq_len"), int):
        gb, rem = divmod(tokens_per_step, tr["seq_len"])
        if gb > 0 and rem == 0:
            tr["global_batch"] = gb
            origin["training.global_batch"] = (f"log tokens per step {tokens_per_step} / seq_len "
                                               f"{tr['seq_len']}")
        else:
            res.notes.append(f"the log's tokens per step {tokens_per_step} is not a multiple of "
                             f"seq_len {tr['seq_len']}")
    have_model = bool(data.get("model"))
    for dotted, what in _REQUIRED.items():
        if dotted == "model":
            if not have_model:
                res.missing.append(what)
            continue
        section, key = dotted.split(".", 1)
        if data.get(section, {}).get(key) is None:
            res.missing.append(what)
    if "precision" not in tr:
        origin["training.precision"] = "default (bf16)"
    res.fields = dict(sorted(origin.items()))
    if res.missing:
        return res
    if base_dir:
        data["_base_dir"] = base_dir  # type: ignore[assignment]
    try:
        res.workload = workload_from_dict(data)
    except TrainperfError as e:
        raise InputFileError(f"the workload assembled from the log, the workload file and the flags is "
                             f"invalid: {one_line(str(e))} (fix it with a flag)") from None
    return res
