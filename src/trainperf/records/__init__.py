"""Run records: every source of performance data (bench, parsed log, publication, prediction)
becomes a :class:`RunRecord` of :class:`StepRecord` rows; :class:`Summary` is what is shown."""

from trainperf.records.run_record import RunRecord, StepRecord
from trainperf.records.summary import Summary

__all__ = ["RunRecord", "StepRecord", "Summary"]
