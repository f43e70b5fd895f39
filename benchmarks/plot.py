"""One PNG per (op, mode): TFLOP/s per input shape, one line per backend, stamped below."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from benchmarks.results import Row


def plot_metric(rows: list[Row]) -> tuple[str, str] | None:
    """The metric to draw and its axis label: TFLOP/s when measured, else latency.

    Args:
        rows: the rows of one (op, mode).

    Returns:
        (metric name, axis label), or None when neither was measured.
    """
    for metric, label in (
        ("tflops_corrected", "TFLOP/s (FLOPs of the timed pass, backward included)"),
        ("latency", "latency (ms)"),
    ):
        if any(isinstance(row.metrics.get(metric), float) for row in rows):
            return metric, label
    return None


def write_plot(path: Path, title: str, rows: list[Row], meta: dict[str, str]) -> bool:
    """Draw the rows into a PNG, the metadata as a footer.

    Args:
        path: the PNG to write.
        title: the plot's title, e.g. "gemm bwd".
        rows: the rows of one (op, mode).
        meta: the stamp, printed under the plot.

    Returns:
        False when there was nothing to plot (no file written).
    """
    chosen = plot_metric(rows)
    if chosen is None:
        return False
    metric, label = chosen
    # On the CPU the stamp says latency is not meaningful: the title says it too.
    caveat = meta.get("latency") if metric == "latency" else None
    # matplotlib is the optional [bench] dependency; a Figure with the Agg canvas needs no
    # display and leaves pyplot's global state alone.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    shapes = list(dict.fromkeys(row.shape for row in rows))
    backends = list(dict.fromkeys(row.backend for row in rows))
    values = {(row.shape, row.backend): row.metrics.get(metric) for row in rows}
    figure = Figure(figsize=(max(6.0, 0.5 * len(shapes) + 3), 5.5))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for backend in backends:
        ys = [values.get((shape, backend)) for shape in shapes]
        axes.plot(
            range(len(shapes)),
            [y if isinstance(y, float) else math.nan for y in ys],
            marker="o",
            label=backend,
        )
    axes.set_xticks(range(len(shapes)), shapes, rotation=45, ha="right", fontsize=8)
    axes.set_xlabel("shape")
    axes.set_ylabel(label)
    axes.set_title(f"{title}: {label}" + (f"\nlatency {caveat}" if caveat else ""))
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    footer = "  ".join(f"{key}: {value}" for key, value in meta.items())
    figure.text(0.01, 0.01, footer, fontsize=6, va="bottom", wrap=True)
    figure.subplots_adjust(bottom=0.33)
    figure.savefig(path, dpi=120)
    return True
