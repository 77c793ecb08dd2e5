"""Command-line interface: one module per subcommand (see :mod:`trainperf.cli.main`)."""
