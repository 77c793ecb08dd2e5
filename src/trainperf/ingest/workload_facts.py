"""Build the Workload of a parsed log from three layers, and say where every field came from.

Precedence: command-line flags > facts the log states > the workload file. The log wins over
the file because it records what actually ran (a recipe file may say global batch 256 while the
job ran 128); flags win over both because they are the user's explicit correction.

The model is merged FIELD BY FIELD: the shape the log states (argument dump, config echo),
then the workload file's inline ``[model]`` fields, then each model flag (``--layers``,
``--mlp``...) overrides just its field -- giving ``--vocab`` keeps the log's 64 layers. A whole
model named by the user (``--model``/``--hf-config``, or a file's ``preset``/``hf_config``)
replaces the log's shape; single-field flags then apply on top of it. A device found in the log
is used only when the user named none; ``--peak-tflops`` stands in for a device that is neither
stated nor in the catalog (MFU is then against the user's peak, and says so).

Rates (tokens/s, MFU) need the model, the device, the device count, the sequence length and the
tokens per step: when one of them is known from nowhere, no workload is built and the missing
fields are listed -- defaults are never used for them, so no number is silently wrong. The
rates that need no device or model (tokens per step, tokens/s, tokens/s per device) are still
given from :attr:`WorkloadResolution.tokens_per_step` and ``num_devices``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from trainperf.errors import InputFileError, TrainperfError, one_line
from trainperf.ingest.base import WORKLOAD_FACTS, LogFacts

# Overrides whose command-line flag is not named after the key (trainperf.cli.common.WORKLOAD_FLAGS).
_FLAG_NAMES = {"model.preset": "model"}
_SHAPE_KEYS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab", "mlp",
               "tied_embeddings", "norm", "bias", "position", "max_seq_len", "moe_experts", "moe_topk",
               "moe_expert_ffn", "moe_shared_experts", "moe_dense_layers", "moe_dense_interleaved")
_MODEL_REQUIRED = ("layers", "hidden", "heads", "ffn_hidden", "vocab")
_WHOLE_MODEL_KEYS = ("preset", "hf_config")
_REQUIRED = {
    "model": "the model (workload [model] or --model PRESET)",
    "hardware.device": "the device (--device ID, see `trainperf hw`)",
    "hardware.num_devices": "the device count (--num-devices N)",
    "training.seq_len": "the sequence length (--seq-len N)",
    "training.global_batch": "the global batch (--global-batch N)",
}
# Device names as frameworks print them (torch.cuda.get_device_name, JAX's device_kind) -> catalog id.
_DEVICE_NAMES: list[tuple[str, str]] = [
    (r"H100.*(PCIe)", "h100-pcie"), (r"H100.*NVL", "h100-nvl"),
    # the power-capped HBM2e SXM part (seed 002: "SXM H100 (95GB)"), named by memory
    (r"H100.*(9[56] ?GB|HBM2e)", "h100-sxm-hbm2e"),
    (r"H100 80GB HBM3|H100.*SXM", "h100-sxm"),
    (r"H200", "h200-sxm"), (r"H800", "h800"), (r"\bH20\b", "h20"), (r"GB200", "gb200"), (r"B200", "b200"),
    (r"GB300", "gb300"), (r"B300", "b300"), (r"L40S", "l40s"),
    (r"A100.*SXM4?-80GB|A100 80GB SXM|A100-SXM-80GB", "a100-sxm-80gb"),
    (r"A100.*SXM4?-40GB|A100-SXM-40GB", "a100-sxm-40gb"),
    (r"A100.*PCIE.*80GB|A100 80GB PCIe", "a100-pcie-80gb"), (r"A100.*PCIE", "a100-pcie-40gb"),
    (r"MI300X", "mi300x"), (r"MI325X", "mi325x"), (r"MI355X", "mi355x"),
    # torch sees each MI250(X) GCD as one device
    (r"MI250X", "mi250x-gcd"), (r"MI250", "mi250-gcd"),
    (r"V100.*SXM2.*32GB|V100-SXM2-32GB", "v100-sxm2-32gb"), (r"V100.*SXM2", "v100-sxm2-16gb"),
    (r"V100.*PCIE.*32GB", "v100-pcie-32gb"), (r"V100.*PCIE", "v100-pcie-16gb"),
    # JAX's device_kind: "TPU v5 lite" is v5e, plain "TPU v5" is v5p, "TPU v6 lite" is v6e (Trillium)
    (r"TPU v5 ?(lite|e)\b", "tpu-v5e"), (r"TPU v5p?\b", "tpu-v5p"), (r"TPU v6 ?(lite|e)\b", "tpu-v6e"),
    (r"TPU v4\b", "tpu-v4"),
]


def device_id_from_name(name: str) -> str | None:
    """Catalog id for a device name as torch prints it, or ``None`` when not unambiguous."""
    for pattern, dev in _DEVICE_NAMES:
        if re.search(pattern, name, re.IGNORECASE):
            return dev
    return None


def _preset_from_log(facts: LogFacts) -> str | None:
    """The preset the log's model name (MaxText ``model_name``, as written; see
    :func:`~trainperf.specs.model_names.preset_for_name`) or torchtitan flavour names."""
    from trainperf.specs.model_names import preset_for_name
    from trainperf.specs.presets import model_ids

    ids = set(model_ids())
    name = facts.get("model")
    match = preset_for_name(name) if isinstance(name, str) else None
    if match is not None:
        return match.preset
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
    """Tokens per optimizer step: the log's own count, else seq_len x global batch when both are
    known (from anywhere); enough for tokens/s without a model or device."""
    num_devices: int | None = None
    """The device count, when known (for tokens/s per device without a model or device)."""


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
    from trainperf.specs.workload_file import read_workload_file

    res = WorkloadResolution(workload=None, tokens_per_step=tokens_per_step)
    file_data = read_workload_file(workload_path) if workload_path else dict(base or {})
    base_dir = file_data.pop("_base_dir", None)
    file_label = f"workload file {workload_path}" if workload_path else "given workload"
    data, origin = _from_run_header(facts, res)
    a = _Assembly(data, origin, file_label, res)
    _merge_file(a, file_data)
    user_device = "device" in data.get("hardware", {}) or "hardware.device" in overrides
    _merge_log_facts(a, facts)
    _merge_model(data, origin, facts, overrides, res)
    if not user_device:
        _merge_log_device(a, facts, overrides)
    _merge_flags(a, overrides)
    _drop_inert_sequence_parallel(data, origin, res)
    _peak_stands_in_for_device(data, origin, res, facts.values.get("device_name"))
    tr = data.setdefault("training", {})
    _global_batch_from_tokens(tr, origin, tokens_per_step, res)
    _set_known_counts(data, res)
    res.missing.extend(_missing(data))
    _note_training_defaults(tr, origin)
    res.fields = dict(sorted(origin.items()))
    if res.missing:
        return res
    res.workload = _build_workload(data, base_dir)
    return res


def _drop_inert_sequence_parallel(data: dict[str, dict[str, Any]], origin: dict[str, str],
                                  res: WorkloadResolution) -> None:
    """A log's ``sequence_parallel`` on a plan without tensor parallelism has no effect (Megatron
    and NeMo turn it off when tp is 1): left out, with a note, rather than refusing the plan. A
    user's own flag or file stands (and is checked as given)."""
    par = data.get("parallel", {})
    if par.get("sequence_parallel") and int(par.get("tp") or 1) <= 1 \
            and origin.get("parallel.sequence_parallel", "").startswith("log"):
        par.pop("sequence_parallel")
        origin.pop("parallel.sequence_parallel")
        res.notes.append("the log turns sequence parallelism on with tp = 1, where it does nothing "
                         "(Megatron and NeMo turn it off): left out")


@dataclass
class _Assembly:
    """The workload dict being merged from the three layers, where each field came from, and
    the resolution that collects the notes."""

    data: dict[str, dict[str, Any]]
    origin: dict[str, str]
    file_label: str
    res: WorkloadResolution

    def put(self, dotted: str, value: Any, why: str) -> None:
        """Set a field from the log, noting when it contradicts the workload file's value."""
        section, key = dotted.split(".", 1)
        old = self.data.get(section, {}).get(key)
        if old is not None and old != value and self.origin.get(dotted, "") == self.file_label:
            self.res.notes.append(f"{dotted}: the workload file says {old!r}, the log says {value!r}; "
                                  "using the log's (override with a flag)")
        self.data.setdefault(section, {})[key] = value
        self.origin[dotted] = why


def _from_run_header(facts: LogFacts,
                     res: WorkloadResolution) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The workload a trainperf JSONL run header states, with origins; nothing (and a note)
    when it fails the workload schema."""
    from trainperf.specs.workload_file import check_schema

    data: dict[str, dict[str, Any]] = {}
    origin: dict[str, str] = {}
    header = facts.get("workload")
    if not isinstance(header, dict):
        return data, origin
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
        return {}, {}
    return data, origin


def _merge_file(a: _Assembly, file_data: dict[str, Any]) -> None:
    """Lay the workload file's (or the given workload's) fields over the run header's."""
    for section, body in file_data.items():
        for k, v in body.items():
            a.data.setdefault(section, {})[k] = v
            a.origin[f"{section}.{k}"] = a.file_label


def _merge_log_facts(a: _Assembly, facts: LogFacts) -> None:
    """Lay the log's stated non-model facts over the file's (the device comes by name, later)."""
    fv = facts.values
    for key, dotted in WORKLOAD_FACTS.items():
        if key not in fv or dotted.startswith("model.") or dotted == "hardware.device":
            continue
        a.put(dotted, fv[key], f"log ({facts.where.get(key, '')})")


def _merge_log_device(a: _Assembly, facts: LogFacts, overrides: dict[str, Any]) -> None:
    """The catalog device the log names, or a note asking for one when it is not in the catalog."""
    fv = facts.values
    if not isinstance(fv.get("device_name"), str):
        return
    dev = device_id_from_name(fv["device_name"])
    if dev:
        a.put("hardware.device", dev, f"log device name {fv['device_name']!r} "
                                      f"({facts.where.get('device_name', '')})")
    elif a.data.get("hardware", {}).get("peak_tflops") is None and "hardware.peak_tflops" not in overrides:
        a.res.notes.append(f"the log names the device {fv['device_name']!r}, which is not in the catalog; "
                           "give --device ID (see `trainperf hw`) or --peak-tflops X")


def _merge_flags(a: _Assembly, overrides: dict[str, Any]) -> None:
    """Lay the non-model flags over everything, noting where they correct the log."""
    for dotted, value in overrides.items():
        if value is not None and not dotted.startswith("model."):
            section, key = dotted.split(".", 1)
            old = a.data.get(section, {}).get(key)
            if old is not None and old != value and a.origin.get(dotted, "").startswith("log"):
                a.res.notes.append(f"{dotted}: the log says {old!r}; using {value!r} from {_flag_origin(dotted)}")
            a.data.setdefault(section, {})[key] = value
            a.origin[dotted] = _flag_origin(dotted)


def _global_batch_from_tokens(tr: dict[str, Any], origin: dict[str, str], tokens_per_step: int | None,
                              res: WorkloadResolution) -> None:
    """Global batch = the log's tokens per step / seq_len, when not given and it divides evenly."""
    if "global_batch" in tr or not tokens_per_step or not isinstance(tr.get("seq_len"), int):
        return
    gb, rem = divmod(tokens_per_step, tr["seq_len"])
    if gb > 0 and rem == 0:
        tr["global_batch"] = gb
        origin["training.global_batch"] = (f"log tokens per step {tokens_per_step} / seq_len "
                                           f"{tr['seq_len']}")
    else:
        res.notes.append(f"the log's tokens per step {tokens_per_step} is not a multiple of "
                         f"seq_len {tr['seq_len']}")


def _set_known_counts(data: dict[str, dict[str, Any]], res: WorkloadResolution) -> None:
    """Tokens per step (the log's, else seq_len x global batch) and the device count, when known:
    enough for tokens/s without a model or device."""
    tr = data["training"]
    seq, gb = tr.get("seq_len"), tr.get("global_batch")
    if res.tokens_per_step is None and _positive_int(seq) and _positive_int(gb):
        assert seq is not None and gb is not None  # _positive_int rejects None
        res.tokens_per_step = seq * gb
    nd = data.get("hardware", {}).get("num_devices")
    res.num_devices = nd if _positive_int(nd) else None


def _missing(data: dict[str, dict[str, Any]]) -> list[str]:
    """What the rates need and no layer gave, in :data:`_REQUIRED`'s words and order."""
    missing: list[str] = []
    for dotted, what in _REQUIRED.items():
        if dotted == "model":
            lacking_model = _missing_model(data.get("model", {}), what)
            if lacking_model is not None:
                missing.append(lacking_model)
            continue
        section, key = dotted.split(".", 1)
        if dotted == "hardware.device" and isinstance(data.get("hardware", {}).get("peak_tflops"), dict):
            continue  # an inline device (a file's, or the --peak-tflops stand-in)
        if data.get(section, {}).get(key) is None:
            missing.append(what)
    return missing


def _missing_model(model: dict[str, Any], what: str) -> str | None:
    """``None`` when the model is named whole or has every required field, else what it lacks
    (``what`` when there is no model at all) and the flags that would give it."""
    if any(model.get(k) for k in _WHOLE_MODEL_KEYS) or all(k in model for k in _MODEL_REQUIRED):
        return None
    lacking = [k for k in _MODEL_REQUIRED if k not in model]
    return (what if not model else
            f"the model's {', '.join(lacking)} (not in the log: give "
            + ", ".join(f"--{k.replace('_', '-')} N" for k in lacking)
            + ", or --model PRESET)")


def _note_training_defaults(tr: dict[str, Any], origin: dict[str, str]) -> None:
    """Say which training fields no layer gave, so their defaults show as defaults."""
    if "precision" not in tr:
        origin["training.precision"] = "default (bf16)"
    if "activation_checkpointing" not in tr:
        origin["training.activation_checkpointing"] = "default (none; give --activation-checkpointing if the run recomputed)"


def _build_workload(data: dict[str, Any], base_dir: Any) -> Any:
    """The validated Workload of the merged dict; an invalid one is an input error (one line)."""
    from trainperf.specs.workload_file import workload_from_dict

    if base_dir:
        data["_base_dir"] = base_dir
    try:
        return workload_from_dict(data)
    except TrainperfError as e:
        raise InputFileError(f"the workload assembled from the log, the workload file and the flags is "
                             f"invalid: {one_line(str(e))} (fix it with a flag)") from None


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _flag_origin(dotted: str) -> str:
    return "flag --" + _FLAG_NAMES.get(dotted, dotted.split(".", 1)[1]).replace("_", "-")


def _merge_model(data: dict[str, dict[str, Any]], origin: dict[str, str], facts: LogFacts,
                 overrides: dict[str, Any], res: WorkloadResolution) -> None:
    """Merge the model field by field: log shape < file's inline fields < flags (module doc).

    A whole model named by a flag (``--model``/``--hf-config``) or by the file/run header
    (``preset``/``hf_config``) replaces the log's model; single-field flags apply on top.
    """
    model = data.setdefault("model", {})
    fv = facts.values
    whole_flag = next((k for k in ("model.preset", "model.hf_config") if overrides.get(k) is not None), None)
    if whole_flag is not None:
        for k in [k for k in origin if k.startswith("model.")]:
            del origin[k]
        model.clear()
    elif not any(model.get(k) for k in _WHOLE_MODEL_KEYS):
        preset = _preset_from_log(facts)
        if preset:
            model["preset"] = preset
            origin["model.preset"] = f"log ({facts.where.get('model') or facts.where.get('model_flavor', '')})"
        else:
            for k in _SHAPE_KEYS:
                if k in fv and k not in model:  # the file's inline field (the user's) wins
                    model[k] = fv[k]
                    origin[f"model.{k}"] = f"log ({facts.where.get(k, '')})"
    for dotted, value in overrides.items():
        if value is None or not dotted.startswith("model."):
            continue
        key = dotted.split(".", 1)[1]
        if key in _WHOLE_MODEL_KEYS:
            model.pop("hf_config" if key == "preset" else "preset", None)
        old = model.get(key)
        if old is not None and old != value and origin.get(dotted, "").startswith("log"):
            res.notes.append(f"{dotted}: the log says {old!r}; using {value!r} from {_flag_origin(dotted)}")
        model[key] = value
        origin[dotted] = _flag_origin(dotted)
    if not model:
        del data["model"]
        return
    if not any(model.get(k) for k in _WHOLE_MODEL_KEYS) and "mlp" not in model:
        res.notes.append("the MLP kind is stated by neither the log nor a flag: counted as swiglu "
                         "(3 matrices); give --mlp gelu for a plain GeLU MLP (2 matrices)")
        origin["model.mlp"] = "default (swiglu; give --mlp)"


def _peak_stands_in_for_device(data: dict[str, dict[str, Any]], origin: dict[str, str],
                               res: WorkloadResolution, log_device_name: Any = None) -> None:
    """With ``--peak-tflops`` and no catalog device, a device known only by that peak.

    MFU then names the user's peak; nothing else of the device (memory, links) is known, so
    the stand-in carries no such numbers anyone could mistake for a datasheet's.
    """
    hw = data.get("hardware", {})
    peak = hw.get("peak_tflops")
    if peak is None or isinstance(peak, dict):
        return
    device = hw.get("device")
    if device is not None:
        from trainperf.specs.hardware import hardware_ids

        if str(device).strip().lower() in hardware_ids():
            return
    if isinstance(peak, bool) or not isinstance(peak, int | float) or not peak > 0:
        return  # the workload builder reports it (one line)
    precision = data.get("training", {}).get("precision", "bf16")
    if device is not None:
        label = str(device)
    elif isinstance(log_device_name, str) and log_device_name.strip():
        label = f"{log_device_name.strip()} (named by the log)"
    else:
        label = "a device not in the catalog"
    hw.pop("device", None)
    hw.pop("peak_tflops")
    slug = re.sub(r"[^a-z0-9]+", "-", str(device).lower()).strip("-") if device is not None else ""
    dpn = hw.get("devices_per_node")
    hw.update(peak_only_device(precision, float(peak), slug or "user-peak", label))
    # No node boundary is known: unless given, assume none (no link is modelled for parse).
    hw["devices_per_node"] = dpn if _positive_int(dpn) else (
        hw["num_devices"] if _positive_int(hw.get("num_devices")) else 1)
    origin["hardware.device"] = f"--peak-tflops {peak:g} stands in for {label} (MFU against that peak)"
    res.notes.append(f"device: {label}, known only by the peak you gave ({peak:g} TFLOP/s {precision}); "
                     "MFU is against that peak")


def peak_only_device(precision: str, peak_tflops: float, device_id: str, label: str) -> dict[str, Any]:
    """Inline ``[hardware]`` fields of a device known only by a user-given dense peak.

    Memory, bandwidth and power are unknown; they are set to 1 and cited as unknown so that
    ``parse`` and ``compare`` (which need only the peak) work, and nothing passes them off as
    datasheet figures.
    """
    from trainperf.specs.hardware import NUMERIC_FIELDS

    unknown = "unknown: only the peak was given (--peak-tflops); not a datasheet value, do not use for prediction"
    fields: dict[str, Any] = {k: 1 for k in NUMERIC_FIELDS}
    sources = {k: unknown for k in NUMERIC_FIELDS}
    sources[f"peak_tflops.{precision}"] = "given by the user (--peak-tflops / hardware.peak_tflops)"
    return {"id": device_id, "name": f"{label} (peak {peak_tflops:g} TFLOP/s {precision} given by the user)",
            "peak_tflops": {precision: peak_tflops}, "sources": sources,
            "notes": "Known only by the user's peak; memory, links and power are unknown.", **fields}
