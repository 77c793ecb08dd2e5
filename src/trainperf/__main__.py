"""``python -m trainperf``: the same entry point as the ``trainperf`` command."""

import sys

from trainperf.cli.main import main

sys.exit(main())
