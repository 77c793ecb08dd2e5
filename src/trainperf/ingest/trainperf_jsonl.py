"""trainperf's own JSONL run records (:mod:`trainperf.records.jsonl`): a ``run`` header line
with the workload, one ``step`` line per step, an optional ``end`` line.

Read line by line like any other log, so a record cut off mid-line (a killed run) keeps every
complete step. The header's workload becomes the log's workload facts.
"""

from __future__ import annotations

from trainperf.ingest.base import LogParser, ParseState, json_object, step_flag
from trainperf.records.run_record import StepRecord


class TrainperfJsonlParser(LogParser):
    name = "trainperf"
    description = "trainperf JSONL: {'type': 'run'|'step'|'end', ...} (bench and meter output)"
    markers = ('"type"',)
    claimed_convention = None
    claimed_scope = "trainperf's own measurement"

    def parse_line(self, line: str, state: ParseState) -> StepRecord | None:
        if '"type"' not in line:
            return None
        s = line.strip()
        if not s.startswith("{"):
            return None
        obj = json_object(s, state)
        if obj is None:
            return None
        kind = obj.get("type")
        if kind == "step":
            try:
                rec = StepRecord.from_dict(obj)
            except (TypeError, ValueError):
                state.malformed_lines += 1
                return None
            if not isinstance(rec.step, int) or isinstance(rec.step, bool):
                state.malformed_lines += 1
                return None
            if state.rank is not None and rec.rank is None:
                rec.rank = state.rank
            if rec.flag is None:
                rec.flag = step_flag(rec.step_time_s)
            return rec
        if kind == "run" and "schema" in obj:
            state.used = True
            if isinstance(obj.get("workload"), dict):
                state.fact("workload", obj["workload"], s[:200])
            meta = obj.get("meta")
            if isinstance(meta, dict) and meta.get("name"):
                state.fact("run_name", str(meta["name"]), s[:200])
        elif kind == "end":
            state.used = True
            state.fact("ended", True, s[:200])
        return None
