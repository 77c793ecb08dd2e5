"""Every prediction equals the one captured last (first before the step model was restructured,
issue 28; written anew with the MoE physics of issue 29, model version 2026.11.2-moe).

The snapshot (``tests/fixtures/prediction_snapshot.json``, written by
``tests/prediction_snapshot.py`` from the code as it was) holds the full predictions of the 169
rows of the packaged published-runs table, of the 22 runs read from the five public documents and
six planner searches. Numbers must agree to 1e-9 relative; text (bottleneck, notes, links) exactly.
A difference that is a fixed bug is listed in :data:`FIXED` with the rule that gives the new
value from the old one, and why. A change meant to move predictions raises
:data:`trainperf.predict.holdout.MODEL_VERSION` (caches of derived figures key on it), refits the
profiles (``PYTHONPATH=src python -m tools.fit_profiles``) and writes the snapshot anew.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from typing import Any

import pytest

import prediction_snapshot as snap

REL = 1e-9
ABS = 1e-15

FIXED: dict[str, tuple[Callable[[Any], Any], str]] = {}
"""Path suffix -> (new value from the captured one, the bug it fixes). Empty since the snapshot was
written anew for model version 2026.11.3 (issue 29: recipe defaults, interleaved rows, MaxText's remat
policies, long-context attention and context parallel, MoE dispatch/combine), which already holds
issue 28's ZeRO all-gather fix."""


@functools.cache
def _data() -> dict[str, Any]:
    return json.loads(snap.SNAPSHOT.read_text(encoding="utf-8"))


def _expected(path: str, old: Any) -> Any:
    for suffix, (rule, _why) in FIXED.items():
        if path.endswith(suffix):
            return rule(old)
    return old


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float | int) and not isinstance(b, bool):
        return math.isclose(a, float(b), rel_tol=REL, abs_tol=ABS)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def _compare(expected: dict[str, Any], got: dict[str, Any], where: str) -> None:
    assert sorted(got) == sorted(expected), (
        f"{where}: keys differ: missing {sorted(set(expected) - set(got))}, new {sorted(set(got) - set(expected))}")
    diffs = [f"{k}: captured {expected[k]!r}, now {got[k]!r}" for k in expected
             if not _same(_expected(k, expected[k]), got[k])]
    assert not diffs, f"{where}:\n" + "\n".join(diffs)


def _json_round_trip(d: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(json.dumps(d))
    return result


@functools.cache
def _table_now() -> dict[str, Any]:
    return _json_round_trip(snap.capture_table())


def test_every_published_row_is_predicted_as_captured():
    want, got = _data()["table"], _table_now()
    assert sorted(got) == sorted(want)
    assert len(want) == 169
    for row_id in want:
        _compare(want[row_id], got[row_id], f"row {row_id}")


@pytest.mark.parametrize("run_id", sorted(_data()["documents"]))
def test_every_document_run_is_predicted_as_captured(run_id):
    case = _data()["documents"][run_id]
    got = _json_round_trip(snap.predict_document(case["workload"], case["trainable_fraction"]))
    _compare(case["figures"], got, f"document run {run_id}")


@pytest.mark.parametrize("case", snap.PLAN_CASES, ids=[c["name"] for c in snap.PLAN_CASES])
def test_planner_searches_rank_as_captured(case):
    want = _data()["plans"][case["name"]]
    got = _json_round_trip(snap.run_plan_case(case))
    top_want, top_got = want.pop("top"), got.pop("top")
    _compare(want, got, f"search {case['name']}")
    assert len(top_got) == len(top_want)
    for i, (a, b) in enumerate(zip(top_want, top_got, strict=True)):
        _compare(a, b, f"search {case['name']} plan {i + 1}")
