"""The built-in harness: run_bench's jobs measured where tritonbench cannot be imported.

The same ops, modes and shapes as the tritonbench calls would run, with two backends per op:
aten (``torch.matmul`` / ``torch.addmm``) and helion (``helion_ops.matmul`` / ``helion_ops.addmm``),
under tritonbench's backend names, so its rows feed the same CSV, JSON, plots, summary and
``--compare``.

Inputs follow OLD tritonbench's (66b557c) ``get_input_iter``: gemm's a [M, K] and b [K, N] are
``(randn + 1) / K``, each made column-major where ``--layout`` says "n" (default tt, as the plan
uses for gemm's backward) before it requires grad, so both stay leaves; addmm's bias [M, N],
mat1 [M, K] and mat2 [K, N] are ``randn``. Its default shapes are OLD's: gemm's 31 squares 256 to
4096, addmm's 42 with K 1536 and N 512.

The backward is NEW tritonbench's: the forward runs once outside timing, ``dy = 0.1 *
randn_like(y)`` after ``manual_seed(0)`` (the same dy for both backends), and latency times
``y.backward(dy, retain_graph=True)``. Accuracy compares helion's output (fwd, fwd_bwd) and every
input gradient (bwd, fwd_bwd) with aten's: gemm at NEW gemm's tolerances, addmm by the rule of
the plugin's check for OLD (``helion_ops.tritonbench_bwd.assert_matches_baseline``: torch's
rtol, atol two rounding units of aten's largest value), as aten's addmm with an [M, N] bias
rounds twice and a fixed atol fails results closer to float64 than aten's (seen on the H200 in
bf16 from K = 768 up; ``--rtol``/``--atol`` override both). Latency is the median of
``triton.testing.do_bench`` (``do_bench_cudagraph`` with ``--cudagraph``); on the CPU a wall clock.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import logging
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from benchmarks.results import Row
from benchmarks.suite import BACKENDS, BWD_MODES, Shape
from benchmarks.tritonbench_runner import INSTALL_COMMAND

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from benchmarks.cli import Options
    from benchmarks.suite import Job

log = logging.getLogger(__name__)
GEMM_SHAPES: tuple[Shape, ...] = tuple((s, s, s) for s in range(256, 4097, 128))
ADDMM_M = (
    20120, 34579, 34839, 35561, 35916, 19735, 34533, 35791, 35844, 20116, 33887, 20203, 33961,
    19747, 34181, 35541, 36032, 15168, 35249, 33894, 20067, 27456, 19410, 35884, 35917, 19632,
    35656, 35405, 35503, 35504, 35605, 34238, 33660, 35410, 20211, 34308, 34516, 20224, 35678,
    35380, 35901, 20068,
)  # fmt: skip
ADDMM_SHAPES: tuple[Shape, ...] = tuple((m, 512, 1536) for m in ADDMM_M)
# tf32: fp32 tensors under torch's TF32 switch, set for the call (tritonbench sets it for its
# process).
DTYPES = {
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp32": torch.float32,
    "tf32": torch.float32,
}
# NEW gemm's tolerances for fp16/bf16; other dtypes and addmm: the scaled rule (None).
GEMM_TOLERANCES = {"fp16": (0.1, 1e-2), "bf16": (0.1, 1e-2)}
# What it measures (tritonbench's names).
METRICS = ("accuracy", "latency", "tflops", "speedup")


def job_with_shapes(job: Job, options: Options) -> Job:
    """The job with the shapes tritonbench's own inputs would have been (--input-id, --num-inputs).

    Raises:
        ValueError: a flag this harness would ignore (one it does not know, a metric it does
            not measure, a backend it does not run, addmm's --bias-1D-y or --layout), a shape
            set only tritonbench has (--llama, --splitk, ...), or an --input-id past the op's
            inputs.
    """
    unknown = _parser().parse_known_args(list(options.passthrough))[1]
    if unknown:
        raise ValueError(
            f"{' '.join(unknown)}: a flag neither run_bench.py nor the built-in harness knows "
            f"(tritonbench, which would be given it, is not installed: {INSTALL_COMMAND})"
        )
    runs = (BACKENDS[job.op].baseline, BACKENDS[job.op].helion)
    unknown = [name for name in (options.only or "").split(",") if name and name not in runs]
    if unknown:
        raise ValueError(
            f"--only {','.join(unknown)}: the built-in harness runs {job.op}'s {' and '.join(runs)}"
            f" (for tritonbench's others: {INSTALL_COMMAND})"
        )
    unknown = [m for m in (options.metrics or "").split(",") if m and m not in METRICS]
    if unknown:
        raise ValueError(
            f"--metrics {','.join(unknown)}: the built-in harness measures {', '.join(METRICS)}"
        )
    if job.op == "addmm" and options.bias_1d is not None:
        raise ValueError("--bias-1D-y: the built-in harness's addmm takes an [m, n] bias only")
    if job.op == "addmm" and options.layout is not None:
        raise ValueError("--layout: the built-in harness lays out gemm's operands only")
    if job.shapes is not None:
        return job
    flags = [flag for flag in options.shape_set if flag != "--input"]
    if flags:
        raise ValueError(f"{flags[0]}: a shape set of tritonbench's; the built-in harness has none")
    if options.input_csv:
        shapes = _csv_shapes(Path(options.input_csv))
    else:
        shapes = GEMM_SHAPES if job.op == "gemm" else ADDMM_SHAPES
    first = options.input_id or 0
    if first >= len(shapes):
        raise ValueError(f"--input-id {first}: {job.op}'s inputs are 0 to {len(shapes) - 1}")
    last = None if options.num_inputs is None else first + options.num_inputs
    return replace(job, shapes=shapes[first:last])


def _csv_shapes(path: Path) -> tuple[Shape, ...]:
    """gemm's --input CSV, its columns read by name as tritonbench reads them; no Bias values."""
    from helion_ops.warmup import read_shapes  # as functions(): late

    with path.open() as f:
        if any((row.get("Bias") or "").strip() for row in csv.DictReader(f)):
            raise ValueError(
                f"--input {path}: a Bias column; the built-in harness runs gemm without"
            )
    return tuple(read_shapes(path))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    for flag in ("--op", "--mode", "--metrics", "--only", "--device", "--rtol", "--atol"):
        parser.add_argument(flag)
    parser.add_argument("--precision", default="fp16")
    parser.add_argument("--layout", default="tt")
    parser.add_argument("--cudagraph", action="store_true")
    for size in ("--m", "--n", "--k"):
        parser.add_argument(size, type=int)
    return parser


def make_inputs(
    op: str, shape: Shape, dtype: torch.dtype, device: str, layout: str, grad: bool
) -> list[torch.Tensor]:
    """One input of tritonbench's recipe (see the module docstring), leaves that require grad."""
    m, n, k = shape
    if op == "gemm":
        a, b = ((torch.randn(s, device=device, dtype=dtype) + 1) / k for s in ((m, k), (k, n)))
        # Column-major where --layout says "n" (tritonbench's), before requires_grad: leaves.
        pairs = zip((a, b), layout, strict=True)
        tensors = [t.T.contiguous().T if c == "n" else t for t, c in pairs]
    else:
        tensors = [torch.randn(s, device=device, dtype=dtype) for s in ((m, n), (m, k), (k, n))]
    return [t.requires_grad_(grad) for t in tensors]


def functions(op: str) -> dict[str, Callable[..., torch.Tensor]]:
    """The op's backends by tritonbench's names."""
    import helion_ops  # only now: main() sets TRITON_INTERPRET first on the CPU

    names = BACKENDS[op]
    if op == "gemm":
        return {names.baseline: torch.matmul, names.helion: helion_ops.matmul}
    return {names.baseline: torch.addmm, names.helion: helion_ops.addmm}


def grad_out_of(y: torch.Tensor) -> torch.Tensor:
    """The backward's ``dy`` for an output like ``y`` (the same draw every call)."""
    torch.manual_seed(0)
    return 0.1 * torch.randn_like(y)


def _forward(fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor], cudagraph: bool):
    """The forward; under CUDA graphs on the plugin's ``forward_stream``, where the backward
    is captured (one on the legacy default stream fails the capture)."""
    from helion_ops.tritonbench_bwd import on_the_capture_stream  # late: see functions

    with on_the_capture_stream(cudagraph and inputs[0].is_cuda):
        return fn(*inputs)


def _warm_up(fn, inputs: list[torch.Tensor], mode: str, cudagraph: bool) -> None:
    """On a GPU, the passes before the compared one that the tritonbench plugin makes
    (``helion_ops.native.warm_up_passes``: they also teach helion_ops' C++ path its key and
    backward; the other backends merely run as often)."""
    if not inputs[0].is_cuda:
        return
    from helion_ops import native  # as functions(): late

    for _ in native.warm_up_passes(inputs[0], cudagraph):
        with torch.no_grad() if mode == "fwd_no_grad" else contextlib.nullcontext():
            y = _forward(fn, inputs, cudagraph and mode == "bwd")
        if mode in BWD_MODES:
            y.backward(torch.ones_like(y))


def results_and_step(fn, inputs, mode: str, cudagraph: bool = False):
    """What accuracy compares (the output, every input gradient) and the callable to time."""
    _warm_up(fn, inputs, mode, cudagraph)
    for t in inputs:
        t.grad = None
    with torch.no_grad() if mode == "fwd_no_grad" else contextlib.nullcontext():
        y = _forward(fn, inputs, cudagraph and mode == "bwd")
    dy = grad_out_of(y) if mode in BWD_MODES else None
    if dy is not None:
        y.backward(dy, retain_graph=True)
    compared = {"output": y.detach().clone()} if mode != "bwd" else {}
    if dy is not None:
        from helion_ops.tritonbench_bwd import settled_grads  # as functions(): late

        compared |= {f"grad {i}": g for i, g in enumerate(settled_grads(inputs))}
    # Only bwd's step keeps this graph (and with it the inputs' grad accumulators on this
    # forward's stream): fwd_bwd's captured forward must make accumulators of its own.
    kept = y if mode == "bwd" else None

    def step() -> None:
        for t in inputs:
            t.grad = None
        if kept is not None:
            kept.backward(dy, retain_graph=True)
        elif mode == "fwd_bwd":
            fn(*inputs).backward(dy)
        else:
            with torch.no_grad() if mode == "fwd_no_grad" else contextlib.nullcontext():
                fn(*inputs)

    if cudagraph and mode in BWD_MODES:  # as the tritonbench plugin's backwards
        from helion_ops.tritonbench_bwd import synchronized_outside_captures

        return compared, synchronized_outside_captures(step)
    return compared, step


def accurate(actual: dict, expected: dict, tolerance: tuple[float, float] | None) -> bool:
    """Whether every compared tensor matches aten's: within (rtol, atol), or for None by
    ``assert_matches_baseline`` (atol two rounding units of aten's largest value). A mismatch
    is logged as a warning: which tensor, and how far."""
    from helion_ops.tritonbench_bwd import assert_matches_baseline  # as functions(): late

    if sorted(actual) != sorted(expected):
        log.warning("not accurate: compared %s, aten %s", sorted(actual), sorted(expected))
        return False
    for name, value in expected.items():
        try:
            if tolerance is None:
                assert_matches_baseline(actual[name], value, name)
            else:
                rtol, atol = tolerance
                torch.testing.assert_close(actual[name], value, rtol=rtol, atol=atol)
        except AssertionError as mismatch:
            log.warning("%s not accurate against aten: %s", name, mismatch)
            return False
    return True


def tolerance(op: str, args: argparse.Namespace) -> tuple[float, float] | None:
    if args.rtol is not None or args.atol is not None:
        return float(args.rtol or 0), float(args.atol or 0)
    return GEMM_TOLERANCES.get(args.precision) if op == "gemm" else None


def latency_ms(step: Callable[[], None], cuda: bool, cudagraph: bool) -> float:
    """The median latency in ms; on the CPU a wall clock over a few calls (not meaningful)."""
    if cuda:
        import triton.testing

        if not cudagraph:
            return float(triton.testing.do_bench(step, return_mode="median"))
        # On a stream of its own, as tritonbench's do_bench wrapper captures: a capture must
        # not start from the legacy default stream (seen on the H200: the first capture of a
        # backward failed, and torch's generator then refused every later random draw).
        with torch.cuda.stream(torch.cuda.Stream()):
            return float(triton.testing.do_bench_cudagraph(step, return_mode="median"))
    step()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def run_call(argv: Sequence[str]) -> list[Row]:
    """One call, as tritonbench would run it: a Row per backend of --only on the --m/--n/--k.

    A backend that fails gets its error in its first metric's cell, as in tritonbench's CSV.
    """
    args, _ = _parser().parse_known_args(list(argv))
    with tf32_switch(args.precision == "tf32"):
        return _run_call(args)


@contextlib.contextmanager
def tf32_switch(on: bool) -> Iterator[None]:
    """torch's TF32 switch for fp32 products set to ``on``, and back after."""
    was = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = on
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = was


def _run_call(args: argparse.Namespace) -> list[Row]:
    if len(args.layout) != 2 or set(args.layout) - {"t", "n"}:
        raise ValueError(f"--layout: two letters of t and n, got {args.layout!r}")
    shape = (args.m, args.n, args.k)
    label = "({}, {}, {})".format(*shape)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    metrics = args.metrics.split(",")
    fns = functions(args.op)
    baseline = BACKENDS[args.op].baseline
    inputs = make_inputs(
        args.op, shape, DTYPES[args.precision], device, args.layout, args.mode != "fwd_no_grad"
    )
    # The step is dropped at once: a graph kept alive through it would keep the inputs' grad
    # accumulators, and with them the stream of this forward, for every later backward.
    expected = results_and_step(fns[baseline], inputs, args.mode, args.cudagraph)[0]
    flops = 2 * args.m * args.n * args.k + (args.m * args.n if args.op == "addmm" else 0)
    rows, baseline_ms = [], None
    for name in args.only.split(","):
        # tritonbench's columns: every metric asked for, less speedup and accuracy for the baseline
        names = [m for m in metrics if name != baseline or m not in ("speedup", "accuracy")]
        values: dict[str, float | str | None] = {}
        try:
            compared, step = results_and_step(fns[name], inputs, args.mode, args.cudagraph)
            ms = latency_ms(step, device != "cpu", args.cudagraph)
        except Exception as err:  # one backend failing must not end the call
            values[names[0]] = f"{type(err).__name__}: {err}"
        else:
            baseline_ms = ms if name == baseline else baseline_ms
            values = {"latency": ms, "tflops": flops / ms / 1e9}
            values["speedup"] = baseline_ms / ms if baseline_ms else None
            values["accuracy"] = float(accurate(compared, expected, tolerance(args.op, args)))
        rows.append(Row(label, name, {m: values.get(m) for m in names}))
    return rows
