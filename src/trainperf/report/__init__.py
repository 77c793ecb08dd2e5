"""Reports: a run, a sweep or a comparison as one self-contained HTML page, Markdown and PNGs.

``build_report(paths, out_dir)`` is the entry point (``trainperf report`` calls it). Works
without torch; matplotlib (the ``plot`` extra) draws the figures and is imported only then.
"""

from trainperf.report.build import Report, build_report

__all__ = ["Report", "build_report"]
