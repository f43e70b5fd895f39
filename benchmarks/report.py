"""The end-of-run summary table and the --ci verdict on helion's accuracy."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from tabulate import tabulate

from benchmarks.suite import BACKENDS

if TYPE_CHECKING:
    from benchmarks.results import JobResult, Row


def _floats(rows: list[Row], metric: str) -> list[float]:
    return [v for row in rows if isinstance(v := row.metrics.get(metric), float)]


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _geomean(values: list[float]) -> float | None:
    positive = [v for v in values if v > 0]
    return statistics.geometric_mean(positive) if positive else None


def _accuracy(rows: list[Row]) -> str:
    scores = [row.metrics["accuracy"] for row in rows if "accuracy" in row.metrics]
    if not scores:
        return ""
    return f"{sum(score == 1.0 for score in scores)}/{len(scores)}"


def summary_table(results: list[JobResult], latency_note: str | None = None) -> str:
    """One line per (op, mode, backend), aggregated over the inputs.

    Args:
        results: every job's result, in run order.
        latency_note: a caveat to print in the latency column's header.

    Returns:
        The table as text.
    """
    latency = "latency ms (mean)" + (f" [{latency_note}]" if latency_note else "")
    headers = [
        "op",
        "mode",
        "backend",
        "accuracy",
        latency,
        "TFLOP/s (mean)",
        "TFLOP/s corrected (mean)",
        "speedup (geomean)",
        "error",
    ]
    table = []
    for result in results:
        job = result.job
        if result.error or not result.rows:
            table.append(
                [job.op, job.mode, "", "", None, None, None, None, result.error or result.note]
            )
        by_backend: dict[str, list[Row]] = {}
        for row in result.rows:
            by_backend.setdefault(row.backend, []).append(row)
        for backend, rows in by_backend.items():
            table.append(
                [
                    job.op,
                    job.mode,
                    backend,
                    _accuracy(rows),
                    _mean(_floats(rows, "latency")),
                    _mean(_floats(rows, "tflops")),
                    _mean(_floats(rows, "tflops_corrected")),
                    _geomean(_floats(rows, "speedup")),
                    next((row.error for row in rows if row.error), None),
                ]
            )
    return tabulate(table, headers=headers, floatfmt=".4g", missingval="")


def ci_failures(results: list[JobResult]) -> list[str]:
    """Why --ci fails: each helion accuracy cell that is not 1, or missing, or a failed job.

    Args:
        results: every job's result.

    Returns:
        One message per problem; empty when helion passed everywhere it ran.
    """
    failures = []
    for result in results:
        job = result.job
        if job.op not in BACKENDS or (result.note and not result.error):
            continue
        if result.error:
            failures.append(f"{job.name}: tritonbench failed: {result.error}")
        helion = BACKENDS[job.op].helion
        rows = [row for row in result.rows if row.backend == helion]
        if not rows and not result.error:
            failures.append(f"{job.name}: no {helion} results")
        for row in rows:
            score = row.metrics.get("accuracy")
            if score != 1.0:
                why = row.error or ("missing" if score is None else score)
                failures.append(f"{job.name} {row.shape}: {helion} accuracy {why}")
    return failures
