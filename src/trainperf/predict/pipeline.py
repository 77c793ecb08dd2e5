"""Pipeline bubble of 1F1B and interleaved schedules (Narayanan et al. 2021, section 2.2).

With ``p`` stages, ``m`` micro-batches and per-micro-batch stage time ``t``:

* GPipe and 1F1B: the pipeline runs ``(m + p - 1) * t``; the bubble is ``(p - 1) * t``, a
  fraction ``(p - 1) / (m + p - 1)`` of the step (``(p-1)/m`` of the ideal time).
* interleaved 1F1B with ``v`` model chunks per device: bubble ``(p - 1) * t / v``, i.e.
  ``(p - 1) / (v * m)`` of the ideal time.

Functions accept floats or numpy arrays.
"""

from __future__ import annotations


def bubble_time_s(pp, vpp, microbatch_time_s):
    """Idle seconds per step: ``(p - 1) / v`` micro-batch times."""
    return (pp - 1.0) / vpp * microbatch_time_s


def bubble_fraction_of_step(pp, grad_accum, vpp=1):
    """Bubble as a fraction of the whole step: ``(p-1)/(m+p-1)`` for 1F1B (``v = 1``), and
    ``((p-1)/v) / (m + (p-1)/v)`` interleaved."""
    b = (pp - 1.0) / vpp
    return b / (grad_accum + b)


def bubble_fraction_of_ideal(pp, grad_accum, vpp=1):
    """Bubble over the ideal (bubble-free) time: ``(p-1)/(v*m)``."""
    return (pp - 1.0) / (vpp * grad_accum)
