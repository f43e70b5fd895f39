"""helion_ops under tritonbench: the ``run_bench.py`` / ``helion-ops-bench`` command.

cli reads the command line, suite turns it into one tritonbench call per (op, mode),
tritonbench_runner makes those calls in-process, results parses and stamps what they wrote,
plot draws it, report prints the summary and the --ci verdict; main ties them together.
"""
