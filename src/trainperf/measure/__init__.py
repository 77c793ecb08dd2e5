"""The real run: reference model, parallelize, trainer, meter, launch, checkpoint, sinks.

The only layer that imports torch. Nothing is imported here at package import time; use the
submodules (``trainperf.measure.meter.ThroughputMeter``, ``trainperf.measure.trainer.train`` ...).
"""
