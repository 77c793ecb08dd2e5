"""``trainperf.meter.ThroughputMeter``: tokens/s, TFLOP/s per device and MFU for any training loop.

A thin re-export; see :mod:`trainperf.measure.meter` for the documentation. Needs torch (the
``bench`` extra).
"""

from trainperf.measure.meter import ThroughputMeter

__all__ = ["ThroughputMeter"]
