"""The catalog of published results (``data/published.toml``), as run records.

Every row of every table in five public documents (NVIDIA's MaxText Llama2 70B recipe,
torchtitan's performance page, Databricks' MI250 blog, a forum thread on a 405B LoRA fine-tune,
The Next Platform on Frontier) is one :class:`PublishedRun`: the workload (with the assumptions
the document leaves open written down), the measured figure it reports, the step time
(published, or derived from tokens/s or TFLOP/s with the stated global batch, and marked
``derived``), and its citation. ``seed``/``line`` locate the number in the developers' copy of
the document (for the tests); users see ``citation`` and ``document``. :func:`load_published_runs` returns them as
:class:`~trainperf.records.RunRecord` objects with ``source="published"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from trainperf.accounting.conventions import model_flops_per_token
from trainperf.errors import SpecError, UnknownNameError
from trainperf.records.run_record import RunRecord, StepRecord
from trainperf.specs.datafiles import read_package_toml

_RATE_KEYS = ("step_time_s", "tokens_per_s", "tokens_per_s_per_device", "tflops_per_device")
_ROW_KEYS = frozenset({
    "id", "seed", "line", "citation", "framework", "workload", "assumptions", "convention",
    "claimed_tokens_per_s", "claimed_tokens_per_s_per_device", "claimed_tflops_per_device",
    "claimed_mfu_pct", "tflops_device_group", "validate", "exclude_reason", "trainable_fraction",
    *_RATE_KEYS,
})


@dataclass(frozen=True)
class PublishedRun:
    """One published result."""

    id: str
    workload: Any
    step_time_s: float
    """Seconds per optimizer step: published, or derived (see ``derived_from``)."""
    derived_from: str | None
    """``None`` when the step time is published; else the figure it was derived from."""
    seed: str
    """File name of the developers' copy of the document (provenance for tests, not for users)."""
    line: int
    citation: str
    """The document, table and row, as users read it."""
    framework: str
    convention: str
    assumptions: str
    validate: bool = True
    exclude_reason: str = ""
    trainable_fraction: float = 1.0
    claimed: dict[str, float] = field(default_factory=dict)
    document: str = ""
    """Short name of the document (``[documents]`` of published.toml), for listings."""

    @property
    def vendor(self) -> str:
        return self.workload.hardware.vendor

    @property
    def source(self) -> str:
        return self.citation

    def to_run_record(self) -> RunRecord:
        w = self.workload
        step = StepRecord(
            step=0, step_time_s=self.step_time_s, tokens=w.tokens_per_step,
            claimed_tokens_per_s=self.claimed.get("tokens_per_s"),
            claimed_tokens_per_s_per_device=self.claimed.get("tokens_per_s_per_device"),
            claimed_tflops_per_device=self.claimed.get("tflops_per_device"),
            claimed_mfu_pct=self.claimed.get("mfu_pct"),
        )
        meta = {
            "name": self.id, "citation": self.citation, "document": self.document,
            "framework": self.framework, "convention": self.convention,
            "derived_from": self.derived_from, "assumptions": self.assumptions,
            "validate": self.validate, "exclude_reason": self.exclude_reason,
            "trainable_fraction": self.trainable_fraction,
        }
        return RunRecord(source="published", steps=[step], workload=w, meta=meta)


@lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    return read_package_toml("trainperf.predict", "published.toml", "published catalog")


def _build(row: dict[str, Any]) -> PublishedRun:
    from trainperf.specs.workload_file import workload_from_dict

    rid = str(row.get("id", "?"))
    unknown = sorted(set(row) - _ROW_KEYS)
    if unknown:
        raise SpecError(f"published[{rid}]", unknown[0], f"a known key: {', '.join(sorted(_ROW_KEYS))}")
    w = workload_from_dict(row["workload"])
    if "stack" not in row["workload"].get("training", {}):
        import dataclasses

        from trainperf.predict.stacks import stack_of_framework

        w = dataclasses.replace(w, stack=stack_of_framework(str(row.get("framework", ""))))
    given = [k for k in _RATE_KEYS if k in row]
    if len(given) != 1:
        raise SpecError(f"published[{rid}]", given, f"exactly one of {', '.join(_RATE_KEYS)}")
    key = given[0]
    value = float(row[key])
    tokens = w.tokens_per_step
    claimed = {k[len("claimed_"):]: float(v) for k, v in row.items() if k.startswith("claimed_")}
    convention = str(row.get("convention", "megatron"))
    if key == "step_time_s":
        step, derived = value, None
    elif key == "tokens_per_s":
        step, derived = tokens / value, f"tokens_per_s={value:g}"
        claimed.setdefault("tokens_per_s", value)
    elif key == "tokens_per_s_per_device":
        step, derived = tokens / (value * w.num_devices), f"tokens_per_s_per_device={value:g}"
        claimed.setdefault("tokens_per_s_per_device", value)
    else:
        group = int(row.get("tflops_device_group", 1))
        per_token = model_flops_per_token(w.model, w.seq_len, convention)
        step = tokens * per_token / (value * 1e12 * w.num_devices / group)
        derived = (f"tflops_per_device={value:g} per {group}-rank device under the {convention} "
                   f"convention ({per_token:.4g} FLOPs/token)")
        claimed.setdefault("tflops_per_device", value / group)
    return PublishedRun(
        id=rid, document=_document(rid, row), workload=w, step_time_s=step, derived_from=derived,
        seed=str(row["seed"]),
        line=int(row["line"]), citation=str(row["citation"]), framework=str(row.get("framework", "")),
        convention=convention, assumptions=str(row.get("assumptions", "")),
        validate=bool(row.get("validate", True)), exclude_reason=str(row.get("exclude_reason", "")),
        trainable_fraction=float(row.get("trainable_fraction", 1.0)), claimed=claimed,
    )


def _document(rid: str, row: dict[str, Any]) -> str:
    """The short name of the document a row comes from; a row whose document is not listed in
    ``[documents]`` is a catalog error."""
    documents = _data().get("documents", {})
    seed = row.get("seed")
    if seed not in documents:
        raise SpecError(f"published[{rid}].seed", seed, f"one of the [documents] keys: {', '.join(documents)}")
    return str(documents[seed])


@lru_cache(maxsize=1)
def published_runs() -> tuple[PublishedRun, ...]:
    """Every published run of the catalog, in file order."""
    return tuple(_build(dict(r)) for r in _data().get("runs", []))


def published_claims() -> tuple[dict[str, Any], ...]:
    """Published figures that are not step times (e.g. scaling efficiencies), as dicts, each
    with its ``document``'s short name."""
    return tuple({**c, "document": _document(str(c.get("id", "?")), c)} for c in _data().get("claims", []))


def get_published(run_id: str) -> Any:
    """A run of the documents' catalog by id, or a row of the published-runs table as
    ``row:<row_id>``."""
    if run_id.startswith("row:"):
        from trainperf.predict.runs_table import get_table_run

        return get_table_run(run_id)
    runs = {r.id: r for r in published_runs()}
    if run_id not in runs:
        raise UnknownNameError("published run", run_id, runs)
    return runs[run_id]


def load_published_runs(include_table: bool = True) -> list[RunRecord]:
    """The documents' catalog and (``include_table``) the mapped rows of the published-runs table
    (named ``row:<row_id>``) as run records (``source="published"``), so ``compare`` and
    ``report`` can put a user's run beside every comparable published one."""
    runs = [r.to_run_record() for r in published_runs()]
    if include_table:
        from trainperf.predict.runs_table import table_run_records

        runs += table_run_records()
    return runs
