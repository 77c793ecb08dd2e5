"""The planner: search every valid parallel plan, predict each one vectorised, rank them.

* :mod:`trainperf.plan.space` enumerates candidate plans as numpy columns and counts the
  rejected ones by reason;
* :mod:`trainperf.plan.vectorized` evaluates step time and memory per device for all of them
  at once, with the predictor's own formulas (a test keeps the two equal);
* :mod:`trainperf.plan.search` ranks them by an objective and re-predicts the best few hundred
  with the scalar predictor for the exact figures and breakdowns;
* :mod:`trainperf.plan.explain` says in words why the best plan beats the runner-up, and what
  would make an infeasible request fit;
* :mod:`trainperf.plan.inverse` finds the smallest device count that trains N tokens in D days.
"""
