"""Speedup over aten on the validation shapes: ``python -m benchmarks.validate``.

The shapes of ``benchmarks/shapes/validation.csv`` come from real models and were never used
to fit or tune anything (``tests/test_model.py`` checks it). For each dtype and op this runs
``run_bench.py`` (tritonbench, or the built-in harness where tritonbench is not importable, in
this process) on them, aten and helion only: gemm in one
call with ``--input`` (``--layout tt`` unless ``--layout`` says otherwise), addmm one call
per shape (tritonbench's addmm takes one ``--m/--k/--n``, with an [M, N] bias). Then it
writes ``validation.csv`` and ``validation.json`` (per op, mode, dtype and shape: aten's and
helion's latency, the speedup, helion's accuracy) and prints the geomean and minimum.
``--gpus N`` runs each (op, dtype) in a process of its own, on N local GPUs at once; where
there are fewer (op, dtype) than GPUs, each one's shapes are dealt out in parts, one process
per part, so that every GPU measures. ``--rounds N`` runs it all N times, each round into a
folder of its own (``round0``...), and reports each shape's median over the rounds: without
``--cudagraph`` the host's speed decides many shapes, and one run's speedup can be half or
twice the next one's (results README, issue 16).
"""

from __future__ import annotations

import argparse
import csv
import json
import queue
import statistics
import subprocess
import sys
import threading
from pathlib import Path

import torch

from benchmarks.cli import (
    INTERPRETER_MAX_SIZE,
    MODES,
    OPS,
    PRECISIONS,
    interpreter_bf16,
    precision_name,
)
from benchmarks.gpus import gpu_count, worker_env
from benchmarks.main import main as run_bench

VALIDATION_CSV = Path(__file__).parent / "shapes" / "validation.csv"
BACKENDS = {
    "gemm": ("aten_matmul", "helion_matmul_tritonbench"),
    "addmm": ("aten_addmm", "helion_addmm_tritonbench"),
}


def run(
    op: str, precision: str, modes: str, shapes: list[tuple[int, int, int]], out: Path,
    extra: list[str], part: str = "0/1", layout: str = "tt",
) -> int:  # fmt: skip
    """The run_bench.py calls of one op and dtype (of its shapes, those of ``part`` "I/N":
    every Nth from the Ith), each into a folder of its own under out, gemm's operands in
    ``layout`` (tritonbench's ``--layout``); the worst exit status."""
    index, parts = (int(x) for x in part.split("/"))
    shapes = shapes[index::parts]
    common = ["--precision", precision, "--mode", modes, "--only", ",".join(BACKENDS[op])]
    if op == "gemm":
        folder = out / f"gemm_{precision}"
        if parts > 1:
            folder = folder / f"part{index}"
        folder.mkdir(parents=True, exist_ok=True)
        shapes_csv = folder / "shapes.csv"  # tritonbench's --input format
        shapes_csv.write_text("M,N,K,Bias\n" + "".join(f"{m},{n},{k},\n" for m, n, k in shapes))
        argv = ["--layout", layout, "--input", str(shapes_csv.resolve())]
        return run_bench(["--op", "gemm", *argv, *common, "--output-dir", str(folder), *extra])
    status = 0
    for m, n, k in shapes:
        sizes = ["--m", str(m), "--k", str(k), "--n", str(n)]
        folder = out / f"addmm_{precision}" / f"{m}x{n}x{k}"
        argv = ["--op", "addmm", *sizes, *common, "--output-dir", str(folder), *extra]
        status = max(status, run_bench(argv))
    return status


def read_shapes(path: Path) -> list[tuple[int, int, int]]:
    """(M, N, K) of each row of a CSV with M, N and K columns. (Not ``helion_ops.warmup``'s:
    importing helion_ops imports Triton, which on the CPU run_bench must import only after
    setting TRITON_INTERPRET.)"""
    with path.open() as f:
        rows = list(csv.DictReader(f))
    try:
        return [(int(r["M"]), int(r["N"]), int(r["K"])) for r in rows]
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path}: each row needs integer M, N and K columns ({err!r})") from err


def dealt_out(units: list[tuple[str, str]], gpus: int) -> list[tuple[str, str, str]]:
    """(op, precision, part) for each unit: one part "0/1" where there are at least as many
    units as GPUs, else each unit's shapes in as many parts as it takes to give every GPU
    one."""
    parts = max(1, -(-gpus // max(1, len(units))))
    return [(op, precision, f"{i}/{parts}") for op, precision in units for i in range(parts)]


def run_on_gpus(
    units: list[tuple[str, str, str]], count: int, argv: list[str], spawn=subprocess.run
) -> int:
    """Each (op, precision, part) of ``units`` in a process of its own, on ``count`` GPUs at
    once: each GPU takes the next unit when its last one ends (``CUDA_VISIBLE_DEVICES``, so
    that no two share a GPU). ``argv``: the flags every unit gets. Returns the worst exit
    status."""
    todo: queue.Queue[tuple[str, str, str]] = queue.Queue()
    for unit in units:
        todo.put(unit)
    statuses: list[int] = []

    def gpu(index: int) -> None:
        env = worker_env(index)
        while True:
            try:
                op, precision, part = todo.get_nowait()
            except queue.Empty:
                return
            command = [sys.executable, "-m", "benchmarks.validate", "--op", op]
            command += ["--precision", precision, "--part", part, "--no-summary", *argv]
            statuses.append(spawn(command, env=env).returncode)

    threads = [threading.Thread(target=gpu, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return max(statuses, default=0)


def collect(out: Path) -> list[dict]:
    """One row per (op, dtype, mode, shape) from the JSON files run_bench wrote under out."""
    rows = []
    for path in sorted(out.rglob("*.json")):
        if path.name == "validation.json":
            continue
        data = json.loads(path.read_text())
        meta = data["meta"]
        op, mode = meta["op"], meta["mode"]
        precision = path.relative_to(out).parts[0].split("_")[1]
        aten, helion = BACKENDS[op]
        by_shape: dict[str, dict] = {}
        for row in data["rows"]:
            by_shape.setdefault(row["shape"], {})[row["backend"]] = row
        for shape, backends in by_shape.items():
            ours, theirs = backends.get(helion, {}), backends.get(aten, {})
            speedup = ours.get("speedup")
            if speedup is None and ours.get("latency") and theirs.get("latency"):
                speedup = theirs["latency"] / ours["latency"]  # run without --metrics speedup
            rows.append(
                {
                    "op": op,
                    "mode": mode,
                    "dtype": precision,
                    "shape": shape,
                    "aten_ms": theirs.get("latency"),
                    "helion_ms": ours.get("latency"),
                    "speedup": speedup,
                    "accuracy": ours.get("accuracy"),
                }
            )
    return rows


def median_of_rounds(rounds: list[list[dict]]) -> list[dict]:
    """One row per (op, mode, dtype, shape) of ``collect``'s rows of each round: the median
    latencies and speedup over the rounds that measured them, the worst accuracy (None where
    a round has none), and how many rounds ran the shape."""
    by_key: dict[tuple, list[dict]] = {}
    for rows in rounds:
        for row in rows:
            by_key.setdefault((row["op"], row["mode"], row["dtype"], row["shape"]), []).append(row)
    combined = []
    for (op, mode, dtype, shape), rows in by_key.items():
        accuracies = [r["accuracy"] for r in rows]
        measured = all(isinstance(a, float) for a in accuracies)
        combined.append(
            {
                "op": op, "mode": mode, "dtype": dtype, "shape": shape,
                "aten_ms": _median(rows, "aten_ms"), "helion_ms": _median(rows, "helion_ms"),
                "speedup": _median(rows, "speedup"),
                "accuracy": min(accuracies) if measured else None, "rounds": len(rows),
            }
        )  # fmt: skip
    return combined


def _median(rows: list[dict], field: str) -> float | None:
    values = [r[field] for r in rows if isinstance(r[field], float)]
    return statistics.median(values) if values else None


def summarize(rows: list[dict]) -> list[str]:
    """A line per (op, mode, dtype): shapes, geomean and min of the speedup, accuracy."""
    lines = []
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["op"], row["mode"], row["dtype"]), []).append(row)
    for (op, mode, dtype), group in sorted(groups.items()):
        speedups = [(r["speedup"], r["shape"]) for r in group if isinstance(r["speedup"], float)]
        inaccurate = [r["shape"] for r in group if r["accuracy"] != 1.0]
        if not speedups:
            lines.append(f"{op} {mode} {dtype}: no speedup measured")
            continue
        geomean = statistics.geometric_mean(s for s, _ in speedups)
        low, at = min(speedups)
        below = sum(s < 0.85 for s, _ in speedups)
        lines.append(
            f"{op} {mode} {dtype}: {len(speedups)} shapes, geomean {geomean:.3f}, "
            f"min {low:.3f} at {at}, {below} below 0.85"
            + (f", accuracy not 1 at {inaccurate}" if inaccurate else "")
        )
    return lines


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[tuple[int, int, int]]:
    """What fails before any measuring (else once per run_bench call, or after all of it, in
    ``collect``); returns the shapes to measure (none for --summarize-only)."""
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give 1 or more")
    flags = (("--op", args.op, OPS), ("--precision", args.precision, PRECISIONS))
    for flag, given, known in (*flags, ("--mode", args.mode, MODES)):
        unknown = [value for value in given.split(",") if value not in known]
        if unknown:
            parser.error(f"{flag}: unknown {', '.join(unknown)}; choose from {', '.join(known)}")
    if not args.shapes.is_file():
        parser.error(f"--shapes {args.shapes}: no such file")
    out = args.output_dir
    if args.summarize_only and not out.is_dir():
        parser.error(f"--summarize-only: {out} is not a folder of an earlier run")
    if args.rounds == 1 and (out / "round0").is_dir():
        parser.error(f"--output-dir {out} holds a run of several --rounds: give its --rounds")
    if args.summarize_only:
        return []
    try:
        shapes = read_shapes(args.shapes)
    except ValueError as err:
        parser.error(f"--shapes {err}")
    if args.max_dim:
        shapes = [s for s in shapes if max(s) <= args.max_dim]
    if not shapes:
        within = f" with M, N and K at most --max-dim {args.max_dim}" if args.max_dim else ""
        parser.error(f"--shapes {args.shapes}: no shape{within}")
    if not args.gpus and torch.cuda.device_count() == 0:  # run_bench's CPU interpreter
        if "bf16" in args.precision.split(","):
            parser.error(interpreter_bf16("without a GPU"))
        large = [s for s in shapes if max(s) > INTERPRETER_MAX_SIZE]
        if large:
            parser.error(
                f"--shapes {args.shapes}: without a GPU the kernels run in Triton's CPU "
                f"interpreter, on sizes up to {INTERPRETER_MAX_SIZE}; {len(large)} of its "
                f"{len(shapes)} shapes are larger (such as {'x'.join(map(str, large[0]))}): "
                f"give --max-dim {INTERPRETER_MAX_SIZE}, or run on a GPU"
            )
    return shapes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.validate",
        description=__doc__.splitlines()[0],
        epilog="Other flags (such as --cudagraph) go to run_bench.py and tritonbench as given.",
    )
    parser.add_argument("--op", default="gemm,addmm")
    parser.add_argument(
        "--precision",
        default="bf16,fp16",
        type=lambda text: ",".join(map(precision_name, text.split(","))),
        help="comma-separated: bf16, fp16, fp32 (or bfloat16, ...)",
    )
    parser.add_argument("--mode", default="fwd,bwd")
    parser.add_argument("--shapes", type=Path, default=VALIDATION_CSV)
    parser.add_argument(
        "--layout",
        default="tt",
        choices=("tt", "tn", "nt", "nn"),
        help="gemm's operand layout, as tritonbench's --layout (whose own default is tn)",
    )
    parser.add_argument(
        "--max-dim", type=int, help="only the shapes whose M, N and K are all at most this"
    )
    parser.add_argument("--output-dir", type=Path, default=Path("validation_results"))
    parser.add_argument(
        "--rounds", type=int, default=1, help="measure N times; report each shape's median"
    )
    parser.add_argument(
        "--summarize-only", action="store_true", help="only read the JSON already in the folder"
    )
    parser.add_argument(
        "--gpus",
        metavar="N|all",
        help="run each (op, precision) in a process of its own, on N local GPUs at once",
    )
    # --gpus' workers measure only (their part of the shapes); their parent summarizes once
    # all have written.
    parser.add_argument("--no-summary", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--part", default="0/1", help=argparse.SUPPRESS)
    args, extra = parser.parse_known_args(argv)
    shapes = _check(parser, args)
    out = args.output_dir
    folders = [out] if args.rounds == 1 else [out / f"round{i}" for i in range(args.rounds)]
    status = 0
    units = [(op, p) for p in args.precision.split(",") for op in args.op.split(",")]
    count = 0
    if args.gpus and not args.summarize_only:
        import torch

        try:
            count = gpu_count(args.gpus, torch.cuda.device_count())
        except ValueError as err:
            parser.error(str(err))
    for folder in [] if args.summarize_only else folders:
        if count:
            common = ["--mode", args.mode, "--shapes", str(args.shapes), "--layout", args.layout]
            common += ["--output-dir", str(folder)]
            common += ["--max-dim", str(args.max_dim)] if args.max_dim else []
            status = max(status, run_on_gpus(dealt_out(units, count), count, [*common, *extra]))
        else:
            for op, precision in units:
                code = run(op, precision, args.mode, shapes, folder, extra, args.part, args.layout)
                status = max(status, code)
    if args.no_summary:
        return status
    if args.rounds == 1:
        rows = collect(out)
    else:
        rows = median_of_rounds([collect(folder) for folder in folders])
    with (out / "validation.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["op"])
        writer.writeheader()
        writer.writerows(rows)
    lines = summarize(rows)
    summary = {"summary": lines, "rounds": args.rounds, "rows": rows}
    (out / "validation.json").write_text(json.dumps(summary, indent=1))
    print("\n".join(lines))
    return status


if __name__ == "__main__":
    sys.exit(main())
