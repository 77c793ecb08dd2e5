"""`trainperf.measure` exports the meter and the live-module FLOP counter, lazily."""

import subprocess
import sys


def test_lazy_exports_import_torch_only_when_used():
    code = ("import sys, trainperf.measure as m\n"
            "assert 'torch' not in sys.modules\n"
            "from trainperf.measure import count_flops_per_token, ThroughputMeter\n"
            "import trainperf.meter\n"
            "assert trainperf.meter.ThroughputMeter is ThroughputMeter and callable(count_flops_per_token)\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
