"""Callbacks that put trainperf's meter into other frameworks' training loops.

* :mod:`trainperf.integrations.hf` — a Hugging Face ``transformers.TrainerCallback``;
* :mod:`trainperf.integrations.lightning` — a Lightning ``Callback``.

Each imports its framework only when its callback class is first used, and says how to
install it when it is missing. Both time optimizer steps with
:class:`trainperf.measure.meter.ThroughputMeter` (device synchronised before the clock,
warm-up excluded, optional JSONL run record) and log ``tokens_per_s``,
``tokens_per_s_per_device``, ``tflops_per_device``, ``mfu_pct`` and ``step_time_s`` into the
framework's own logs.
"""
