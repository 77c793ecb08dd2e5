"""Predict: an analytic model of a training step's time and memory, and its calibration.

``predict(workload)`` returns a :class:`~trainperf.predict.step.Prediction`; the arithmetic is
in :mod:`trainperf.predict.step_model` (one module per cost component, over one typed layout of
scalars or the planner's numpy arrays). Nothing here imports torch or :mod:`trainperf.measure`.
"""

from trainperf.predict.step import Collective, Prediction, predict

__all__ = ["Collective", "Prediction", "predict"]
