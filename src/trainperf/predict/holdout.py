"""Judge fitted profiles on data they were not fitted on: leave out a table, or a whole group.

Two hold-out schemes, each refitting every profile (``generic`` and every stack's deviation)
from the vendor defaults without the held-out rows, then predicting them:

* **leave-one-table-out**: one published table at a time. Its siblings (other tables of the same
  software stack on the same silicon) stay in the fit, so this is the error a *new run of a
  known stack on a known GPU* can expect.
* **leave-one-group-out**: one ``(software stack, silicon generation)`` pair at a time, with every
  table of that pair out together. What is left to predict the group is what the stack did on
  other silicon, what other stacks did on this silicon, and the kernel physics; this is the
  honest proxy for "a stack on a GPU nobody gave us", and the figure fitting choices are made on.

Both are costly (one refit per table or group), so they are cached: a packaged result keyed by the
model's version (:data:`MODEL_VERSION`) and a hash of its data files (``data/holdout_cache.json``,
written with the profiles by ``python -m tools.fit_profiles``), else a per-user cache
file, else computed.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

PACKAGED_CACHE = "holdout_cache.json"
"""Hold-out predictions of the packaged table, written with the profiles and used only while the
model's version and data hash to the key stored in it (any change to them recomputes)."""


@dataclass(frozen=True)
class Prediction:
    """One measured row and a predicted step time for it."""

    name: str
    table: str
    stack: str
    measured_step_time_s: float
    predicted_step_time_s: float
    generation: str = ""
    """Silicon generation of the row's device (``hopper``...); with ``stack`` it names the group."""

    @property
    def signed_pct(self) -> float:
        """Positive when the prediction is slower than the measurement."""
        return 100.0 * (self.predicted_step_time_s / self.measured_step_time_s - 1.0)

    @property
    def group(self) -> str:
        """``stack@generation``: the unit leave-one-group-out holds out."""
        return f"{self.stack}@{self.generation}"


def group_key(stack: str, generation: str) -> str:
    """The name of a (software stack, silicon generation) group."""
    return f"{stack}@{generation}"


def row_group(row: Any) -> str:
    return group_key(row.stack, row.generation)


# ------------------------------------------------------------------------------ hold-out fits
def leave_out(rows: Sequence[Any], key: Callable[[Any], str], **kw: Any) -> list[Prediction]:
    """Each set of rows sharing ``key(row)`` predicted by a fit on every other row.

    The held-out rows are never in their own fit, nor in its start values (every fit starts from
    the vendor defaults). Parameters the reduced fit has no data for (the held-out stack's own
    deviation when the stack appears nowhere else) stay at zero: the rows are then predicted by
    ``generic``."""
    from trainperf.predict import fit_profiles as fp  # fit_profiles imports this module

    rows = list(rows)
    keys = [key(r) for r in rows]
    full = fp.build_problem(rows, **kw)
    out: dict[str, Prediction] = {}
    for held in dict.fromkeys(keys):
        train = [r for r, k in zip(rows, keys, strict=True) if k != held]
        pb = fp.build_problem(train, **kw)
        theta, _ = fp.solve(pb)
        th_full = theta_for(full, pb, theta)
        idx = [i for i, k in enumerate(keys) if k == held]
        gi = sorted({g for g, grp in enumerate(full.groups) if set(grp.index.tolist()) & set(idx)})
        pred = full.predict(th_full, gi)
        for i in idx:
            r = rows[i]
            out[r.name] = Prediction(r.name, r.table, r.stack, r.measured_step_time_s, float(pred[i]),
                                     r.generation)
    return [out[r.name] for r in rows]


def theta_for(full: Any, pb: Any, theta: Any, held: str | None = None,
              stand: str | None = None) -> np.ndarray:
    """A reduced fit's parameters (``pb``, ``theta``) laid out as the full problem's (``full``):
    a parameter the reduced fit lacks is zero (the held-out rows' own deviations), except that a
    parameter of generation ``held`` (``generic/<held>``, ``<stack>/<held>``) takes the value of
    generation ``stand``'s where the reduced fit has it (benchmarks/unseen_silicon.py)."""
    pos = {p: i for i, p in enumerate(pb.params)}
    out = []
    for lvl, key, knob in full.params:
        if (lvl, key, knob) in pos:
            out.append(theta[pos[(lvl, key, knob)]])
            continue
        parts = key.split("/")
        alt = (lvl, "/".join([*parts[:-1], stand]), knob) if stand and parts[-1] == held else None
        out.append(theta[pos[alt]] if alt in pos else 0.0)
    return np.array(out, dtype=float)


def leave_one_table_out(rows: Sequence[Any], **kw: Any) -> list[Prediction]:
    """Each published table predicted by a fit on every other table."""
    return leave_out(rows, lambda r: r.table, **kw)


def leave_one_group_out(rows: Sequence[Any], **kw: Any) -> list[Prediction]:
    """Each (software stack, silicon generation) group predicted by a fit on every other group."""
    return leave_out(rows, row_group, **kw)


# ------------------------------------------------------------------------------------ cache
def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trainperf"


MODEL_VERSION = "2026.11.29.9"
"""Version of the step model and of the fit: raise it with every change to the code that moves a
prediction or a fitted number (``tests/test_prediction_snapshot.py`` fails on such a change, and
``tests/test_published_runs.py`` on a packaged hold-out cache that no longer matches). Caches of
derived figures key on it and on the data files (:func:`data_hash`), not on source bytes: a
comment or a refactoring that leaves every number alone keeps them."""

DATA_FILES: tuple[tuple[str, str], ...] = (
    ("trainperf.predict", "data/efficiency.toml"),
    ("trainperf.predict", "data/stacks"),
    ("trainperf.predict.kernels", "data/params.json"),
    ("trainperf.specs", "data/devices.toml"),
    ("trainperf.specs", "data/models.toml"),
)
"""The packaged data a hold-out prediction reads (package, file or folder): efficiency defaults,
stack profiles, fitted kernel parameters, the device and model catalogs. The rows themselves
(their workloads and measured times) enter :func:`cache_key` directly."""


def data_hash() -> str:
    """Hash of the content of :data:`DATA_FILES` (a folder: every file in it, by name), as parsed:
    a comment or a re-ordering of a TOML or JSON file leaves it alone."""
    import tomllib

    h = hashlib.sha256()
    for package, rel in DATA_FILES:
        node = resources.files(package).joinpath(rel)
        files = sorted(node.iterdir(), key=lambda p: p.name) if node.is_dir() else [node]
        for f in files:
            text = f.read_text(encoding="utf-8")
            data = tomllib.loads(text) if f.name.endswith(".toml") else json.loads(text)
            h.update(f"{package}/{rel}/{f.name}".encode())
            h.update(json.dumps(data, sort_keys=True).encode())
    return h.hexdigest()[:16]


def cache_key(rows: Sequence[Any], key_extra: str = "") -> str:
    """Key of a hold-out result: :data:`MODEL_VERSION`, :func:`data_hash` and every row's identity
    and workload."""
    h = hashlib.sha256()
    h.update(MODEL_VERSION.encode())
    h.update(data_hash().encode())
    h.update(key_extra.encode())
    for r in rows:
        h.update(f"{r.name}|{r.table}|{r.stack}|{r.measured_step_time_s!r}|{r.workload!r}".encode())
    return h.hexdigest()[:20]


def _read_cache(path: Path, key: str) -> dict[str, list[Prediction]] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    try:
        return {scheme: [Prediction(**d) for d in data[scheme]] for scheme in ("table", "group")}
    except (KeyError, TypeError, ValueError):  # a scheme missing, or not a list of predictions
        return None


def cache_payload(key: str, table: Sequence[Prediction], group: Sequence[Prediction]) -> str:
    """The JSON text of a cache file."""
    return json.dumps({"key": key, "table": [p.__dict__ for p in table],
                       "group": [p.__dict__ for p in group]})


def cached_holdouts(rows: Sequence[Any], key_extra: str = "") -> dict[str, list[Prediction]]:
    """``{"table": leave-one-table-out, "group": leave-one-group-out}`` predictions of ``rows``:
    the packaged result when it matches, else the per-user cache file, else computed (and cached)."""
    key = cache_key(rows, key_extra)
    packaged = Path(__file__).parent / "data" / PACKAGED_CACHE
    got = _read_cache(packaged, key) if packaged.is_file() else None
    if got is not None:
        return got
    path = _cache_dir() / f"holdout-{key}.json"
    got = _read_cache(path, key) if path.is_file() else None
    if got is not None:
        return got
    out = {"table": leave_one_table_out(rows), "group": leave_one_group_out(rows)}
    try:
        from trainperf.errors import TrainperfError
        from trainperf.locked_update import update_file

        path.parent.mkdir(parents=True, exist_ok=True)
        # under the cache's lock, written whole and renamed: a concurrent reader sees the old file
        # or the new one, and two processes computing the same key write the same text
        update_file(path, lambda _old: cache_payload(key, out["table"], out["group"]), what="hold-out cache")
    except (OSError, TrainperfError):
        pass
    return out


# -------------------------------------------------------------------------------- summaries
def summarize(preds: Sequence[Prediction]) -> dict[str, Any]:
    """MAPE, mean signed error and worst row of a set of predictions."""
    if not preds:
        return {"rows": 0, "mape_pct": float("nan"), "mean_signed_pct": float("nan"), "worst": None}
    errs = [p.signed_pct for p in preds]
    worst = max(preds, key=lambda p: abs(p.signed_pct))
    return {"rows": len(preds), "mape_pct": statistics.fmean(abs(e) for e in errs),
            "mean_signed_pct": statistics.fmean(errs), "worst": worst.name,
            "worst_pct": worst.signed_pct}


def by(preds: Sequence[Prediction], key: str) -> dict[str, dict[str, Any]]:
    """:func:`summarize` per ``table``, ``stack`` or ``group``."""
    keys = list(dict.fromkeys(getattr(p, key) for p in preds))
    return {k: summarize([p for p in preds if getattr(p, key) == k]) for k in keys}
