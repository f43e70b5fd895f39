"""Benchmark helion_ops under tritonbench; ``python run_bench.py --help`` lists the flags.

A thin wrapper around ``benchmarks.main`` (also installed as ``helion-ops-bench``). Python puts
this file's folder on sys.path, so it runs from any working directory.
"""

from __future__ import annotations

import sys

from benchmarks.main import main

if __name__ == "__main__":
    sys.exit(main())
