"""Ingest: parsers for other frameworks' training logs, turning them into RunRecords.

One module per format behind :class:`~trainperf.ingest.base.LogParser`, registered in
:mod:`.registry`; :func:`~trainperf.ingest.pipeline.parse_log` reads, detects, parses and
attaches the workload; :mod:`.claims` compares what a log claimed with trainperf's
recomputation. Nothing here imports torch.
"""

from trainperf.ingest.pipeline import ParsedLog, parse_log
from trainperf.ingest.registry import FORMATS, detect_format, format_names, get_parser

__all__ = ["FORMATS", "ParsedLog", "detect_format", "format_names", "get_parser", "parse_log"]
