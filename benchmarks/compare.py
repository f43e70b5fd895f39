"""``--compare DIR``: this run's latencies against an earlier run's JSON files, and a CI gate.

The ratio printed per (op, mode, precision, shape, backend) is this run's latency over the
earlier one's (above 1: slower now). The gate reads helion's speedup over aten, each measured in
its own run, so that a runner whose GPU or host is a little faster or slower than the last one
does not move it: ``relative = speedup now / speedup then``, and ``--ci`` fails when the
geomean of ``relative`` over every compared helion row falls below ``1 - REGRESSION_THRESHOLD``.

Why 10%: two runs of the same code and table on two H200 machines, under CUDA graphs
(benchmarks/results, gemm bwd, calls 2 and 4, 16 shapes x bf16/fp16), gave ``relative`` from
0.71 to 1.18 per shape (the spread sits at the small and medium shapes, 256^3 to 4096x1024x1024;
the large ones stay within 1.5%), a standard deviation of 0.092 in log, and geomeans of 1.004
and 0.982. Over the standard suite's 12 rows the geomean's own deviation is 0.092 / sqrt(12) =
0.027, so 10% is about 3.8 standard deviations of noise, while a real 10% slowdown of every
kernel fails. A single shape's ratio is printed but never gated: it moves by up to 30% on noise.
Without CUDA graphs small shapes read host time and flip by up to 10x from run to run: gate
only runs made with ``--cudagraph``.
"""

from __future__ import annotations

import json
import statistics
from typing import TYPE_CHECKING

from tabulate import tabulate

from benchmarks.suite import BACKENDS

if TYPE_CHECKING:
    from pathlib import Path

    from benchmarks.results import JobResult

REGRESSION_THRESHOLD = 0.10

Key = tuple[str, str, str, str, str]  # op, mode, precision, shape, backend


def latencies_of_results(results: list[JobResult]) -> dict[Key, float]:
    """Latency (ms) by (op, mode, precision, shape, backend) of this run's results."""
    found = {}
    for result in results:
        job = result.job
        for row in result.rows:
            latency = row.metrics.get("latency")
            if isinstance(latency, float):
                found[job.op, job.mode, result.precision, row.shape, row.backend] = latency
    return found


def latencies_in(directory: Path) -> dict[Key, float]:
    """Latency (ms) by key of every result JSON under a directory (an earlier run, or the
    artifacts of one, shard by shard in subfolders).

    Args:
        directory: the earlier run's --output-dir.

    Returns:
        The latencies.

    Raises:
        ValueError: where the directory does not exist, holds no result JSON with latencies,
            or holds more than one run (a key in two files: one run's shards hold disjoint
            keys), whose latencies would override each other in path order.
    """
    if not directory.is_dir():
        raise ValueError(
            f"--compare: {directory} is not a directory: name an earlier run's --output-dir"
        )
    found, source = {}, {}
    for path in sorted(directory.rglob("*.json")):
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(document, dict) or not {"meta", "rows"} <= document.keys():
            continue
        meta = document["meta"]
        for row in document["rows"]:
            latency = row.get("latency")
            if isinstance(latency, float):
                key = (meta["op"], meta["mode"], meta.get("precision", "fp16"))
                key = (*key, row["shape"], row["backend"])
                if key in found:
                    raise ValueError(
                        f"--compare: {directory} holds more than one run ({' '.join(key)} in "
                        f"{source[key]} and {path}): name one run's --output-dir"
                    )
                found[key], source[key] = latency, path
    if not found:
        raise ValueError(f"--compare: {directory} holds no result JSON with latencies")
    return found


def relative_speedups(now: dict[Key, float], then: dict[Key, float]) -> dict[Key, float]:
    """helion's speedup over aten now divided by the same then, per helion row in both runs."""
    relative = {}
    for key, latency in now.items():
        op, mode, precision, shape, backend = key
        if op not in BACKENDS or backend != BACKENDS[op].helion:
            continue
        base = (op, mode, precision, shape, BACKENDS[op].baseline)
        if key in then and base in now and base in then:
            relative[key] = (now[base] / latency) / (then[base] / then[key])
    return relative


def comparison(now: dict[Key, float], then: dict[Key, float]) -> tuple[str, float | None]:
    """The table of ratios, and the geomean of helion's relative speedup (None: nothing shared).

    Args:
        now: this run's latencies.
        then: the earlier run's.

    Returns:
        (table text, geomean of ``relative_speedups``).
    """
    relative = relative_speedups(now, then)
    rows = [
        [*key, then[key], latency, latency / then[key], relative.get(key)]
        for key, latency in now.items()
        if key in then
    ]
    by_job: dict[tuple[str, str, str], list[float]] = {}
    for (op, mode, precision, _, _), value in relative.items():
        by_job.setdefault((op, mode, precision), []).append(value)
    for (op, mode, precision), values in by_job.items():
        rows.append([op, mode, precision, "geomean", "helion vs aten", None, None, None,
                     statistics.geometric_mean(values)])  # fmt: skip
    headers = ["op", "mode", "precision", "shape", "backend", "latency then", "latency now",
               "now / then", "helion speedup now / then"]  # fmt: skip
    table = tabulate(rows, headers=headers, floatfmt=".4g", missingval="")
    return table, (statistics.geometric_mean(list(relative.values())) if relative else None)


def regression(geomean: float | None) -> str | None:
    """Why --ci fails on the comparison, or None."""
    if geomean is None:
        return "--compare: no helion row of this run is in the earlier run"
    if geomean < 1 - REGRESSION_THRESHOLD:
        return (
            f"--compare: helion's speedup over aten fell to {geomean:.3f} of the earlier run's "
            f"(geomean; the gate is {1 - REGRESSION_THRESHOLD:.2f})"
        )
    return None
