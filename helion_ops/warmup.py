"""Compile the kernels of many shapes ahead of time, in parallel: ``python -m helion_ops.warmup``.

Each new (shape, layout, dtype) compiles its kernels on first use, a few seconds each (the
forward, and the backward's two products or their pair). Worker processes run the forward
and backward of every shape once, so Triton's on-disk cache holds the compiled kernels and a
later process (a training job, a benchmark) only loads them. Run it on the machine, and with
the Triton cache directory, that will use them. ``--layout`` names the operands' layouts as
tritonbench's gemm does: ``tt`` both row-major (the default), ``tn`` ``b`` column-major
(tritonbench's own default), ``nt`` ``a``, ``nn`` both.
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from helion_ops.dtype_names import tritonbench_name

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
LAYOUTS = ("tt", "tn", "nt", "nn")


def operands(
    m: int, n: int, k: int, dtype: torch.dtype, layout: str, device: str = "cuda"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Leaves a [m, k] and b [k, n] in tritonbench's ``layout``: "n" makes that operand
    column-major."""

    def leaf(rows: int, cols: int, column_major: bool) -> torch.Tensor:
        if column_major:
            return torch.randn(cols, rows, device=device, dtype=dtype).T.requires_grad_()
        return torch.randn(rows, cols, device=device, dtype=dtype, requires_grad=True)

    return leaf(m, k, layout[0] == "n"), leaf(k, n, layout[1] == "n")


def warm_shape(job: tuple[int, int, int, str, str, str]) -> None:
    """In a worker: one forward and backward of matmul, or of addmm with an [M, N] bias."""
    import helion_ops

    m, n, k, dtype_name, op, layout = job
    dtype = DTYPES[dtype_name]
    a, b = operands(m, n, k, dtype, layout)
    if op == "addmm":
        bias = torch.randn(m, n, device="cuda", dtype=dtype, requires_grad=True)
        out = helion_ops.addmm(bias, a, b)
    else:
        out = helion_ops.matmul(a, b)
    out.backward(torch.randn_like(out))
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # workers are reused: keep no shape's memory for the next


def read_shapes(path: Path) -> list[tuple[int, int, int]]:
    """(M, N, K) of each row of a CSV with M, N and K columns (tritonbench's gemm format)."""
    with path.open() as f:
        rows = list(csv.DictReader(f))
    try:
        return [(int(r["M"]), int(r["N"]), int(r["K"])) for r in rows]
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path}: each row needs integer M, N and K columns ({err!r})") from err


def warm(
    shapes: list[tuple[int, int, int]],
    dtypes: list[str],
    ops: list[str],
    jobs: int,
    layouts: tuple[str, ...] = ("tt",),
) -> None:
    """Compile the forward and backward kernels of every (shape, dtype, op, layout) in
    ``jobs`` worker processes."""
    work = [
        (*shape, dtype, op, layout)
        for dtype in dtypes
        for op in ops
        for layout in layouts
        for shape in shapes
    ]
    # The largest shapes first, so that they do not finish last.
    work.sort(key=lambda w: -w[0] * w[1] * w[2])
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(jobs, mp_context=context) as pool:
        list(pool.map(warm_shape, work))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helion_ops.warmup", description=__doc__.splitlines()[0]
    )
    parser.add_argument("shapes", type=Path, help="CSV with M, N, K columns")
    parser.add_argument(
        "--dtype", default="bf16", help="comma-separated: bf16, fp16, fp32 (or bfloat16, ...)"
    )
    parser.add_argument(
        "--op", default="matmul,addmm", help="comma-separated: matmul (or gemm), addmm"
    )
    parser.add_argument(
        "--layout", default="tt", help="comma-separated: tt, tn (tritonbench's default), nt, nn"
    )
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    args = parser.parse_args(argv)
    dtypes = [tritonbench_name(name) for name in args.dtype.split(",")]
    ops = ["matmul" if op == "gemm" else op for op in args.op.split(",")]
    layouts = args.layout.split(",")
    choices = (("--dtype", dtypes, DTYPES), ("--op", ops, ("matmul", "addmm")))
    for name, given, allowed in (*choices, ("--layout", layouts, LAYOUTS)):
        unknown = [g for g in given if g not in allowed]
        if unknown:
            print(
                f"helion_ops.warmup: error: {name} {unknown} not in {list(allowed)}",
                file=sys.stderr,
            )
            return 2
    try:
        shapes = read_shapes(args.shapes)
    except (OSError, ValueError) as err:
        print(f"helion_ops.warmup: error: {err}", file=sys.stderr)
        return 2
    if not shapes:
        print(f"helion_ops.warmup: error: {args.shapes}: no shapes", file=sys.stderr)
        return 2
    if args.jobs < 1 or min((size for shape in shapes for size in shape), default=1) < 1:
        print("helion_ops.warmup: error: --jobs and every size must be 1 or more", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("helion_ops.warmup needs a CUDA GPU", file=sys.stderr)
        return 2
    start = time.monotonic()
    warm(shapes, dtypes, ops, args.jobs, tuple(layouts))
    count = len(shapes) * len(dtypes) * len(ops) * len(layouts)
    print(f"warmed {count} (shape, dtype, op, layout) in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
