"""``run_bench.py`` / ``helion-ops-bench``: tritonbench on helion_ops, stamped results, a summary.

Each (op, mode) is one in-process tritonbench call with the helion backends registered; its
CSV is parsed and written to the output directory as a stamped CSV, a JSON and a PNG. A call
that fails is recorded and the run goes on.
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from benchmarks.cli import parse_args
from benchmarks.plot import write_plot
from benchmarks.report import ci_failures, summary_table
from benchmarks.results import (
    FLOPS_PER_FORWARD,
    JobResult,
    add_corrected_tflops,
    parse_tritonbench_csv,
    run_metadata,
    write_csv,
    write_json,
)
from benchmarks.suite import CPU_LATENCY_NOTE, plan_jobs, shard_range
from benchmarks.tritonbench_runner import (
    addmm_sizes_need_bias_1d,
    count_inputs,
    has_tolerance_flags,
    run_tritonbench,
    tritonbench_import_error,
)

if TYPE_CHECKING:
    from benchmarks.cli import Options
    from benchmarks.suite import Job


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks a command line asks for (the standard suite without --op).

    Args:
        argv: the arguments, without the program name; default sys.argv[1:].

    Returns:
        The exit status: 0; 1 when a tritonbench call failed or, with --ci, when a helion
        accuracy cell is not 1 or is missing; 2 on a bad command line or without tritonbench.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    options = parse_args(argv)
    gpu = torch.cuda.is_available()
    latency_note = None
    if not gpu:
        latency_note = CPU_LATENCY_NOTE
        print(
            "No CUDA GPU: running on the CPU in Triton's interpreter (TRITON_INTERPRET=1), "
            f"tiny shapes, aten and helion only; latency is {CPU_LATENCY_NOTE}."
        )
        # Before Triton is first imported (through Helion or tritonbench): the interpreter
        # cannot call the functions Triton jit-decorates at import without it.
        os.environ["TRITON_INTERPRET"] = "1"
    error = tritonbench_import_error()
    if error:
        print(error, file=sys.stderr)
        return 2

    # Only now: it imports Helion, hence Triton.
    from helion_ops.tritonbench_plugin import register

    register()
    try:
        jobs = plan_jobs(
            options,
            gpu,
            has_tolerance_flags=has_tolerance_flags(),
            addmm_sizes_need_bias_1d=addmm_sizes_need_bias_1d(),
        )
    except ValueError as err:
        print(f"run_bench.py: error: {err}", file=sys.stderr)
        return 2
    options.output_dir.mkdir(parents=True, exist_ok=True)
    meta = run_metadata(shlex.join([sys.argv[0], *argv]))
    if latency_note:
        meta["latency"] = latency_note
    input_counts: dict[str, int] = {}
    results = []
    for i, job in enumerate(jobs, 1):
        print(f"[{i}/{len(jobs)}] {job.op} {job.mode}", flush=True)
        try:
            results.append(_run_job(job, options, meta, input_counts))
        except Exception as err:
            # The other ops and modes still run; the summary and --ci report this one.
            results.append(JobResult(job, error=f"{type(err).__name__}: {err}"))

    print(summary_table(results, latency_note))
    print(f"Results in {options.output_dir}")
    failed = any(result.error for result in results)
    if options.ci:
        failures = ci_failures(results)
        for failure in failures:
            print(f"CI failure: {failure}", file=sys.stderr)
        failed = failed or bool(failures)
    return 1 if failed else 0


def _run_job(
    job: Job, options: Options, meta: dict[str, str], input_counts: dict[str, int]
) -> JobResult:
    """Run one job (its shard's inputs only) and write its CSV, JSON and PNG."""
    result = JobResult(job)
    argv = list(job.argv)
    suffix = ""
    if options.shard:
        index, count = options.shard
        suffix = f"_shard{index}of{count}"
        if job.op not in input_counts:
            input_counts[job.op] = count_inputs(argv)
        start, num = shard_range(input_counts[job.op], options.shard)
        if num == 0:
            result.note = f"no inputs in shard {index}/{count}"
            return result
        argv += ["--input-id", str(start), "--num-inputs", str(num)]

    text, result.error = _call_tritonbench(argv)
    result.x_label, result.rows = parse_tritonbench_csv(text)
    add_corrected_tflops(result.rows, job.mode)
    file_meta = {
        **meta,
        "op": job.op,
        "mode": job.mode,
        "tritonbench_args": shlex.join(argv),
        "tflops_corrected": f"tflops x {FLOPS_PER_FORWARD[job.mode]}, as tritonbench counts "
        "only the forward's FLOPs",
    }
    if result.error:
        file_meta["error"] = result.error
    stem = options.output_dir / f"{job.name}{suffix}"
    write_csv(stem.with_suffix(".csv"), file_meta, text)
    write_json(stem.with_suffix(".json"), file_meta, result)
    try:
        write_plot(stem.with_suffix(".png"), f"{job.op} {job.mode}", result.rows, file_meta)
    except ImportError as err:
        print(f"No plot ({err}): pip install 'helion_ops[bench]'", file=sys.stderr)
    return result


def _call_tritonbench(argv: list[str]) -> tuple[str, str | None]:
    """tritonbench's CSV for one command line, and the error that cut the call short."""
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = Path(tmp) / "tritonbench.csv"
        error = None
        try:
            run_tritonbench([*argv, "--output", str(csv_path)])
        except (Exception, SystemExit) as err:
            # One op failing must not end the run; tritonbench still writes what it measured.
            error = f"{type(err).__name__}: {err}"
        return (csv_path.read_text() if csv_path.exists() else ""), error
