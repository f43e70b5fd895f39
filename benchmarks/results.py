"""tritonbench's CSV read into rows, and the stamped CSV and JSON files written from them.

The ``--output`` CSV is the format both tritonbench versions share: ``;``-separated, a header of
the x label (``(M, N, K)``) then ``{backend label}-{metric}``, one row per input, a last row
``average``; a backend that failed has an error string in its first metric's cell.
"""

from __future__ import annotations

import csv
import datetime
import importlib.metadata
import io
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import torch

from benchmarks.suite import Job

Value = float | str | None

# tritonbench counts the forward's FLOPs in every mode; a matmul's backward is two matmuls.
FLOPS_PER_FORWARD = {"fwd": 1, "fwd_no_grad": 1, "bwd": 2, "fwd_bwd": 3}


@dataclass
class Row:
    """One backend on one input: tritonbench's metrics by name."""

    shape: str
    backend: str
    metrics: dict[str, Value]

    @property
    def error(self) -> str | None:
        """The error tritonbench wrote in place of a metric, if any."""
        return next((v for v in self.metrics.values() if isinstance(v, str)), None)


@dataclass
class JobResult:
    """What one tritonbench call gave: its rows, or why there are none."""

    job: Job
    x_label: str = ""
    rows: list[Row] = field(default_factory=list)
    error: str | None = None
    note: str | None = None
    precision: str = "fp16"


def parse_cell(text: str) -> Value:
    """A CSV cell as a number, None when empty, else the text (an error message)."""
    if text == "":
        return None
    try:
        return float(text)
    except ValueError:
        return text


def parse_tritonbench_csv(text: str) -> tuple[str, list[Row]]:
    """Parse the CSV tritonbench writes for ``--output``.

    Args:
        text: the file's contents.

    Returns:
        The x label and one Row per (input, backend); the ``average`` row is left out.
    """
    table = [line for line in csv.reader(io.StringIO(text), delimiter=";") if line]
    if not table:
        return "", []
    header, *body = table
    rows: dict[tuple[str, str], Row] = {}
    for shape, *cells in body:
        if shape == "average":
            continue
        for column, cell in zip(header[1:], cells, strict=False):
            # Labels hold no "-"; metric names may.
            backend, _, metric = column.partition("-")
            row = rows.setdefault((shape, backend), Row(shape, backend, {}))
            row.metrics[metric] = parse_cell(cell)
    return header[0], list(rows.values())


def merge_csv(texts: list[str]) -> str:
    """tritonbench's CSVs of several calls of one job as one: the header once, no averages.

    Args:
        texts: each call's ``--output`` CSV (an empty one where the call wrote none).

    Returns:
        One CSV; a call whose header differs (another set of backends) keeps its header.
    """
    if len(texts) == 1:
        return texts[0]  # one call: tritonbench's file as it wrote it, average row included
    lines: list[str] = []
    header = None
    for text in texts:
        table = text.splitlines(keepends=True)
        if not table:
            continue
        if table[0] != header:
            header = table[0]
            lines.append(header)
        lines += [line for line in table[1:] if not line.startswith("average;")]
    return "".join(lines)


def format_csv(x_label: str, rows: list[Row]) -> str:
    """Rows in the CSV tritonbench writes for ``--output`` (what ``parse_tritonbench_csv`` reads).

    Args:
        x_label: the first column's header, e.g. "(M, N, K)".
        rows: one per (input, backend), every input with the same backends and metrics.

    Returns:
        The CSV, without an ``average`` row; an empty cell for a metric that is None.
    """
    columns = list(dict.fromkeys((row.backend, metric) for row in rows for metric in row.metrics))
    by_shape: dict[str, dict[tuple[str, str], Value]] = {}
    for row in rows:
        cells = by_shape.setdefault(row.shape, {})
        cells |= {(row.backend, metric): value for metric, value in row.metrics.items()}
    out = io.StringIO()
    writer = csv.writer(out, delimiter=";", lineterminator="\n")
    writer.writerow([x_label, *(f"{backend}-{metric}" for backend, metric in columns)])
    for shape, cells in by_shape.items():
        writer.writerow([shape, *("" if cells.get(c) is None else cells[c] for c in columns)])
    return out.getvalue()


def read_json(path: Path) -> JobResult:
    """A result JSON written by ``write_json``, read back (for merging the runs of several GPUs).

    Args:
        path: the file.

    Returns:
        Its JobResult; the job's command line is the one recorded in the file.
    """
    document = json.loads(path.read_text())
    meta = document["meta"]
    rows = []
    for row in document["rows"]:
        metrics = {k: v for k, v in row.items() if k not in ("shape", "backend")}
        rows.append(Row(row["shape"], row["backend"], metrics))
    job = Job(meta["op"], meta["mode"], tuple(meta.get("tritonbench_args", "").split()))
    return JobResult(
        job, document["x_label"], rows, document["error"], precision=meta.get("precision", "fp16")
    )


def add_corrected_tflops(rows: list[Row], mode: str) -> None:
    """Add ``tflops_corrected``: tritonbench's tflops with the backward's FLOPs counted.

    Args:
        rows: rows of one mode, changed in place.
        mode: the tritonbench mode they ran in.
    """
    factor = FLOPS_PER_FORWARD[mode]
    for row in rows:
        tflops = row.metrics.get("tflops")
        if isinstance(tflops, float):
            row.metrics["tflops_corrected"] = tflops * factor


def run_metadata(command: str) -> dict[str, str]:
    """The stamp every result file carries: hardware, versions, date and command.

    Args:
        command: the command line that produced the results.

    Returns:
        Keys gpu, torch, triton, helion, tritonbench, tritonbench_commit, date, command.
    """
    return {
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "triton": _version("triton"),
        "helion": _version("helion"),
        "tritonbench": _version("tritonbench"),
        "tritonbench_commit": tritonbench_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
    }


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def tritonbench_commit() -> str:
    """The git commit of the tritonbench clone in use, "+dirty" where its tracked files differ
    from it (a copy of other files assembled over a clone), or "unknown"."""
    try:
        import tritonbench
    except ImportError:
        return "unknown"
    root = Path(tritonbench.__file__).resolve().parent.parent
    # Without its own .git, git would answer for whatever repository encloses the clone.
    if not (root / ".git").exists():
        return "unknown"
    try:
        head, changes = (
            subprocess.run(
                ["git", "-C", str(root), *args],
                capture_output=True,
                text=True,
                check=True,
                timeout=10,
            ).stdout.strip()
            for args in (["rev-parse", "HEAD"], ["status", "--porcelain", "--untracked-files=no"])
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if not head:
        return "unknown"
    return f"{head}+dirty" if changes else head


def write_csv(path: Path, meta: dict[str, str], tritonbench_csv: str) -> None:
    """tritonbench's CSV under ``# key: value`` lines of metadata.

    Args:
        path: the file to write.
        meta: the stamp (values are written on one line each).
        tritonbench_csv: the CSV as tritonbench wrote it.
    """
    stamp = "".join(f"# {key}: {' '.join(str(value).split())}\n" for key, value in meta.items())
    write_whole(path, stamp + tritonbench_csv)


def write_json(path: Path, meta: dict[str, str], result: JobResult) -> None:
    """A ``meta`` object, the x label, the rows (one per input and backend) and any error.

    Args:
        path: the file to write.
        meta: the stamp.
        result: the job's result.
    """
    document = {
        "meta": meta,
        "x_label": result.x_label,
        "rows": [{"shape": r.shape, "backend": r.backend, **r.metrics} for r in result.rows],
        "error": result.error,
    }
    write_whole(path, json.dumps(document, indent=2) + "\n")


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: a run stopped mid-write (a timeout
    between a job's inputs rewrites its files) leaves the previous version, not half a file."""
    partial = path.with_name(path.name + ".part")
    partial.write_text(text)
    partial.replace(path)
