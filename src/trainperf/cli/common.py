"""Shared CLI plumbing: workload flags (named after the workload-file fields), JSON and table
output. Flags override the workload file."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trainperf.accounting.conventions import CONVENTIONS, DEFAULT_CONVENTION

# flag dest -> "section.key" of the workload file
WORKLOAD_FLAGS: dict[str, str] = {
    "model": "model.preset",
    "hf_config": "model.hf_config",
    "layers": "model.layers",
    "hidden": "model.hidden",
    "heads": "model.heads",
    "kv_heads": "model.kv_heads",
    "head_dim": "model.head_dim",
    "ffn_hidden": "model.ffn_hidden",
    "vocab": "model.vocab",
    "mtp_layers": "model.mtp_layers",
    "mlp": "model.mlp",
    "tied_embeddings": "model.tied_embeddings",
    "norm": "model.norm",
    "bias": "model.bias",
    "position": "model.position",
    "moe_experts": "model.moe_experts",
    "moe_topk": "model.moe_topk",
    "moe_expert_ffn": "model.moe_expert_ffn",
    "moe_shared_experts": "model.moe_shared_experts",
    "moe_dense_layers": "model.moe_dense_layers",
    "moe_dense_interleaved": "model.moe_dense_interleaved",
    "device": "hardware.device",
    "num_devices": "hardware.num_devices",
    "devices_per_node": "hardware.devices_per_node",
    "peak_tflops": "hardware.peak_tflops",
    "dp": "parallel.dp",
    "fsdp": "parallel.fsdp",
    "zero_stage": "parallel.zero_stage",
    "tp": "parallel.tp",
    "sequence_parallel": "parallel.sequence_parallel",
    "pp": "parallel.pp",
    "vpp": "parallel.vpp",
    "cp": "parallel.cp",
    "ep": "parallel.ep",
    "pp_schedule": "parallel.pp_schedule",
    "seq_len": "training.seq_len",
    "global_batch": "training.global_batch",
    "micro_batch": "training.micro_batch",
    "precision": "training.precision",
    "activation_checkpointing": "training.activation_checkpointing",
    "training_compile": "training.compile",
    "async_tp": "training.async_tp",
    "fp8_recipe": "training.fp8_recipe",
    "moe_dispatcher": "training.moe_dispatcher",
    "moe_imbalance": "training.moe_imbalance",
    "offload_optimizer": "training.offload_optimizer",
    "stack": "training.stack",
    "etp": "parallel.etp",
    "first_stage_layers": "parallel.first_stage_layers",
    "last_stage_layers": "parallel.last_stage_layers",
    "account_for_embedding_in_pipeline_split": "parallel.account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split": "parallel.account_for_loss_in_pipeline_split",
}


def add_workload_arguments(parser: argparse.ArgumentParser, *, positional: str = "one",
                           hardware: bool = True, architecture: bool = False) -> None:
    """Add the workload file argument and every override flag.

    ``architecture`` adds the flags for the model's architecture beyond its dimensions
    (``--mlp``, ``--tied-embeddings``, ``--norm``, ``--bias``, ``--position``, ``--moe-*``),
    for commands that count FLOPs of a model the user describes (``parse``).
    """
    if positional == "one":
        parser.add_argument("workload", nargs="?", help="workload file (.toml or .json)")
    elif positional == "many":
        parser.add_argument("workload", nargs="*", help="workload files (.toml or .json)")
    m = parser.add_argument_group("model (override [model])")
    m.add_argument("--model", metavar="PRESET", help="model preset id, e.g. llama2-70b (see `trainperf models`)")
    m.add_argument("--hf-config", metavar="PATH", help="Hugging Face config.json to read the shape from")
    for name in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab"):
        m.add_argument(f"--{name.replace('_', '-')}", type=int, metavar="N", dest=name)
    if architecture:
        add_architecture_arguments(m)
    t = parser.add_argument_group("training (override [training])")
    t.add_argument("--seq-len", type=int, metavar="N")
    t.add_argument("--global-batch", type=int, metavar="N", help="sequences per optimizer step")
    t.add_argument("--micro-batch", type=int, metavar="N", help="sequences per device per pass")
    t.add_argument("--precision", metavar="DTYPE", help="fp32 | tf32 | fp16 | bf16 | fp8 | fp4 (also bfloat16, nvfp4, mxfp4; mxfp8: fp8 with "
                        "the mxfp8 recipe)")
    t.add_argument("--activation-checkpointing", metavar="POLICY",
                   help="none | selective | full | full:K | full-every:N | selective-op | minimal | "
                        "save_dot_except_mlpwi | save_dot_except_mlp | save_qkv_proj | qkv_proj_offloaded | "
                        "save_dot_with_context_except_mlp | save_out_proj | minimal_flash | minimal_offloaded | "
                        "selective:MODULES (Megatron-Core --recompute-modules joined by '+', e.g. "
                        "selective:core_attn+moe_act+layernorm) | custom:NAME=WHERE (MaxText remat_policy=custom, "
                        "e.g. custom:query_proj=device+out_proj=offload)")
    if not hardware:
        return
    h = parser.add_argument_group("hardware (override [hardware])")
    h.add_argument("--device", metavar="ID", help="catalog id, e.g. h100-sxm (see `trainperf hw`)")
    h.add_argument("--num-devices", type=int, metavar="N")
    h.add_argument("--devices-per-node", type=int, metavar="N")
    h.add_argument("--peak-tflops", type=float, metavar="X",
                   help="use this dense peak (TFLOP/s per device) instead of the catalog's; labelled as given")
    p = parser.add_argument_group("parallel (override [parallel])")
    for name in ("dp", "fsdp", "zero_stage", "tp", "pp", "vpp", "cp", "ep"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, metavar="N", dest=name)
    p.add_argument("--sequence-parallel", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--pp-schedule", metavar="NAME", help="1f1b | interleaved | gpipe | dualpipe")
    p.add_argument("--etp", type=int, metavar="N", help="expert tensor parallel degree (default: tp)")
    p.add_argument("--first-stage-layers", type=int, metavar="N", help="layers on the first pipeline stage")
    p.add_argument("--last-stage-layers", type=int, metavar="N", help="layers on the last pipeline stage")
    p.add_argument("--account-for-embedding-in-pipeline-split", action=argparse.BooleanOptionalAction,
                   default=None, help="the embedding takes one layer slot of the first stage (Megatron)")
    p.add_argument("--account-for-loss-in-pipeline-split", action=argparse.BooleanOptionalAction,
                   default=None, help="the LM head and loss take one layer slot of the last stage (Megatron)")


def add_software_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of the software stack's features a prediction models (``[training]`` keys)."""
    s = parser.add_argument_group("software features (override [training])")
    s.add_argument("--compile", dest="training_compile", action=argparse.BooleanOptionalAction, default=None,
                   help="the model is compiled (torch.compile / fused graph)")
    s.add_argument("--async-tp", dest="async_tp", action=argparse.BooleanOptionalAction, default=None,
                   help="asynchronous tensor parallelism (TP collectives overlap GEMMs)")
    s.add_argument("--fp8-recipe", metavar="NAME", help="tensorwise | rowwise | delayed | blockwise | mxfp8 (with --precision fp8 or fp4)")
    s.add_argument("--moe-dispatcher", metavar="NAME",
                   help="MoE token dispatch kernels: nccl | deepep | hybrid-ep | mori (default: the stack's)")
    s.add_argument("--moe-imbalance", type=float, metavar="F",
                   help="tokens the busiest expert-parallel rank receives over the mean (default 1: balanced)")
    s.add_argument("--offload-optimizer", dest="offload_optimizer", action=argparse.BooleanOptionalAction,
                   default=None, help="optimizer states and step on the host CPU (DeepSpeed ZeRO-Offload, "
                                      "Megatron-Core --optimizer-cpu-offload)")
    s.add_argument("--stack", metavar="NAME|FILE",
                   help="software-stack profile: generic (default) | megatron-core | megatron-lm-2021 | maxtext | paxml | "
                        "torchtitan | llm-foundry | deepspeed | trainperf-bench (what `trainperf bench` runs) | "
                        "hf-transformers (Hugging Face Trainer/Accelerate, eager), or a profile .toml from "
                        "`trainperf calibrate-model`")


def add_architecture_arguments(group: Any) -> None:
    """``--mlp``, ``--tied-embeddings``, ``--norm``, ``--bias``, ``--position`` and the MoE shape
    flags (each overrides one ``[model]`` field, on top of a preset or a shape the log states)."""
    from trainperf.specs.model import MLP_KINDS, NORM_KINDS, POSITION_KINDS

    group.add_argument("--mlp", choices=MLP_KINDS, metavar="KIND",
                       help=f"MLP kind: {' | '.join(MLP_KINDS)} (gated kinds have 3 matrices, plain ones 2)")
    group.add_argument("--tied-embeddings", action=argparse.BooleanOptionalAction, default=None,
                       help="the LM head reuses the input embedding")
    group.add_argument("--norm", choices=NORM_KINDS, metavar="KIND", help=" | ".join(NORM_KINDS))
    group.add_argument("--bias", action=argparse.BooleanOptionalAction, default=None,
                       help="every linear layer and norm carries a bias (GPT-2/3, BLOOM)")
    group.add_argument("--position", choices=POSITION_KINDS, metavar="KIND", help=" | ".join(POSITION_KINDS))
    for name, what in (("moe_experts", "routed experts per MoE layer"), ("moe_topk", "experts per token"),
                       ("moe_expert_ffn", "intermediate width of one expert"),
                       ("moe_shared_experts", "always-active shared experts"),
                       ("moe_dense_layers", "dense-MLP layers of an MoE model (leading ones unless "
                                            "--moe-dense-interleaved)")):
        group.add_argument(f"--{name.replace('_', '-')}", type=int, metavar="N", dest=name, help=what)
    group.add_argument("--moe-dense-interleaved", action=argparse.BooleanOptionalAction, default=None,
                       help="the dense layers alternate with the MoE layers (Llama 4), not leading (DeepSeek-V3)")


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """``--force`` (replace an existing output file) and ``--parents`` (create missing parent
    directories) for commands that write files; see :mod:`trainperf.records.output_path`."""
    parser.add_argument("--force", action="store_true",
                        help="replace an existing output file (never an input, a directory or a device)")
    parser.add_argument("--parents", action="store_true",
                        help="create missing parent directories of the output path")


def add_convention_argument(parser: argparse.ArgumentParser, per_run: bool = False) -> None:
    """``--convention``. ``per_run``: a command about runs or workloads that may be LoRA
    fine-tunes, whose unnamed convention is resolved per run (``lora`` for one,
    :func:`~trainperf.accounting.conventions.run_convention`), so its default is None."""
    default = f"{DEFAULT_CONVENTION}; lora for a LoRA fine-tune" if per_run else DEFAULT_CONVENTION
    parser.add_argument("--convention", default=None if per_run else DEFAULT_CONVENTION, metavar="NAME",
                        help=f"FLOP convention: {', '.join(CONVENTIONS)} (default {default})")


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON for scripts instead of tables")


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    return {key: getattr(args, dest) for dest, key in WORKLOAD_FLAGS.items()
            if getattr(args, dest, None) is not None}


def workload_from_args(args: argparse.Namespace, path: str | None = None):
    """The validated Workload of a workload file (optional) plus flags."""
    from trainperf.specs.workload_file import load_workload

    return load_workload(path if path is not None else getattr(args, "workload", None),
                         overrides_from_args(args))


def model_from_args(args: argparse.Namespace):
    """(ModelSpec, seq_len) from a workload file's [model]/[training] and the flags; no hardware needed."""
    from trainperf.specs.workload_file import merge_overrides, model_from_section, read_workload_file

    data = read_workload_file(args.workload) if getattr(args, "workload", None) else {}
    data = merge_overrides(data, overrides_from_args(args))
    model = model_from_section(data.get("model", {}), data.get("_base_dir"))
    seq = data.get("training", {}).get("seq_len", model.max_seq_len)
    from trainperf.errors import SpecError

    if isinstance(seq, bool) or not isinstance(seq, int) or seq <= 0:
        raise SpecError("training.seq_len", seq, "a positive integer")
    return model, seq


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def print_json(obj: Any, *, lines: bool = False) -> None:
    """JSON to stdout; ``lines`` prints one compact object per line (JSON Lines)."""
    if lines:
        print(json.dumps(_clean(obj), separators=(",", ":"), default=str))
    else:
        print(json.dumps(_clean(obj), indent=2, default=str))


def table(rows: Iterable[Sequence[Any]], headers: Sequence[str], floatfmt: str = ",.4g",
          numparse: bool = True) -> str:
    """tabulate's "simple" table, numeric strings aligned as numbers (without importing tabulate);
    ``numparse=False`` leaves every cell as formatted. Text cells go through the terminal's
    escaper (:func:`shown`): a name with a newline or an escape sequence stays in its cell."""
    from trainperf.text_table import format_table

    rows = [[shown(c) if isinstance(c, str) else c for c in r] for r in rows]
    return format_table(rows, [shown(h) for h in headers], floatfmt=floatfmt, numparse=numparse)


def shown(value: Any) -> str:
    """A value as the terminal shows it: control characters (newlines included) as visible
    escapes, never sent (:func:`trainperf.safe_text.terminal_text`)."""
    from trainperf.safe_text import terminal_text

    return terminal_text(value)


def eprint(*a: Any) -> None:
    print(*a, file=sys.stderr)
