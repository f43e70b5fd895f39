"""``run_bench.py`` / ``helion-ops-bench``: tritonbench on helion_ops, stamped results, a summary.

Each input of each (op, mode) is one in-process tritonbench call with the helion backends
registered, announced by a progress line while its own output goes to ``run.log``; a job's
calls are merged into a stamped CSV, a JSON and a PNG in the output directory. A call that
fails is recorded and the run goes on. Where tritonbench cannot be imported, the built-in
harness (``benchmarks/harness.py``) runs the same calls, aten and helion only.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from benchmarks import harness
from benchmarks.cli import check_runnable, parse_args
from benchmarks.compare import comparison, latencies_in, latencies_of_results, regression
from benchmarks.gpus import gpu_count, run_workers
from benchmarks.plot import write_plot
from benchmarks.progress import Progress, clock, configs_logged_to, output_to
from benchmarks.report import ci_failures, summary_table
from benchmarks.results import (
    FLOPS_PER_FORWARD,
    JobResult,
    add_corrected_tflops,
    format_csv,
    merge_csv,
    parse_tritonbench_csv,
    read_json,
    run_metadata,
    write_csv,
    write_json,
    write_whole,
)
from benchmarks.suite import CPU_LATENCY_NOTE, plan_jobs, shard_range
from benchmarks.tritonbench_runner import (
    INSTALL_COMMAND,
    addmm_sizes_need_bias_1d,
    count_inputs,
    has_tolerance_flags,
    run_tritonbench,
    tritonbench_import_error,
    unknown_names,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from benchmarks.cli import Options
    from benchmarks.suite import Call, Job


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks a command line asks for (the standard suite without --op).

    Args:
        argv: the arguments, without the program name; default sys.argv[1:].

    Returns:
        The exit status: 0; 1 when a tritonbench call failed or, with --ci, when a helion
        accuracy cell is not 1 or is missing, or --compare finds a regression; 2 on a bad
        command line. Without tritonbench the built-in harness measures the same jobs.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    options = parse_args(argv)
    gpu = torch.cuda.is_available()
    before = _files_in(options.output_dir)
    try:
        check_runnable(options, gpu)
        workers = gpu_count(options.gpus, torch.cuda.device_count()) if options.gpus else 0
        # Read before this run writes anything: its own files must not be the earlier run.
        earlier = latencies_in(options.compare) if options.compare is not None else None
        if workers:
            _make_output_dir(options.output_dir)
    except ValueError as err:
        print(f"run_bench.py: error: {err}", file=sys.stderr)
        return 2
    if workers:
        statuses = run_workers(argv, workers, options.output_dir)
        paths = _written_since(before, options.output_dir.glob("*.json"))
        shards = [read_json(path) for path in paths]
        return max(_finish(options, merge_shards(shards), None, earlier, before), *statuses)

    latency_note = None
    if options.interpreter(gpu):
        latency_note = CPU_LATENCY_NOTE
        print(
            "Running on the CPU in Triton's interpreter (TRITON_INTERPRET=1), tiny shapes, "
            f"aten and helion only; latency is {CPU_LATENCY_NOTE}."
        )
        # Before Triton is first imported (through Helion or tritonbench): the interpreter
        # cannot call the functions Triton jit-decorates at import without it.
        os.environ["TRITON_INTERPRET"] = "1"
    builtin = tritonbench_import_error() is not None
    try:
        if builtin:
            print(
                "tritonbench is not importable: measuring with the built-in harness "
                f"(benchmarks/harness.py). For tritonbench's, run once: {INSTALL_COMMAND}"
            )
            jobs = plan_jobs(options, gpu, builtin=True)
            jobs = [harness.job_with_shapes(job, options) for job in jobs]
        else:
            # Only now: it imports Helion, hence Triton.
            from helion_ops.tritonbench_plugin import register

            register()
            jobs = plan_jobs(
                options,
                gpu,
                has_tolerance_flags=has_tolerance_flags(),
                addmm_sizes_need_bias_1d=addmm_sizes_need_bias_1d(),
            )
            prefixes = "--only-match-mode" in options.passthrough
            for op in dict.fromkeys(job.op for job in jobs):
                unknown = unknown_names(op, None if prefixes else options.only, options.metrics)
                if unknown:
                    raise ValueError(unknown)
        _make_output_dir(options.output_dir)
    except ValueError as err:
        print(f"run_bench.py: error: {err}", file=sys.stderr)
        return 2
    log = options.output_dir / _with_shard("run", options, ".log")
    with output_to(log):
        planned = [(job, _calls(job, options)) for job in jobs]
    estimates = [job.seconds_per_call() for job, calls in planned for _ in calls]
    if options.full:
        print(f"--full: {len(estimates)} tritonbench calls, about {clock(sum(estimates))}.")
    print(f"Third-party output (tritonbench, Triton, inductor) goes to {log}", flush=True)

    meta = run_metadata(shlex.join([sys.argv[0], *argv]))
    meta["precision"] = options.precision or "fp16"
    meta["harness"] = "built-in" if builtin else "tritonbench"
    if latency_note:
        meta["latency"] = latency_note
    progress = Progress(estimates)
    results = []
    for job, calls in planned:
        texts, errors = [], []
        output = _output_path(options, job, len(jobs))
        for call in calls:
            shard = f" shard {options.shard[0]}/{options.shard[1]}" if options.shard else ""
            print(progress.line(f"{job.op} {job.mode} {call.label}{shard}: "
                                f"{', '.join(job.backends)}"), flush=True)  # fmt: skip
            with output_to(log), configs_logged_to(log):
                call_argv = [*job.argv, *call.argv]
                text, error = _call_harness(call_argv) if builtin else _call_tritonbench(call_argv)
            progress.advance()
            texts.append(text)
            if error:
                errors.append(f"{call.label}: {error}" if len(calls) > 1 else error)
            if len(texts) < len(calls):
                # The files so far: a run stopped mid-job (a timeout) keeps what it measured.
                _write_job(job, calls, texts, errors, options, meta, output)
        results.append(_write_job(job, calls, texts, errors, options, meta, output))
    return _finish(options, results, latency_note, earlier, before)


def _make_output_dir(directory: Path) -> None:
    """--output-dir, made where missing.

    Raises:
        ValueError: naming the flag, where it cannot be made (a file, no permission).
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"--output-dir {directory}: {err}") from err


def _files_in(directory: Path) -> dict[Path, int]:
    """Each file in ``directory`` and its modification time (ns), before this run writes."""
    return {path: path.stat().st_mtime_ns for path in directory.glob("*") if path.is_file()}


def _written_since(before: dict[Path, int], paths: Iterable[Path]) -> list[Path]:
    """``paths`` this run wrote, in name order: new, or modified since ``_files_in`` saw them
    (an --output-dir used before may hold an earlier run's files)."""
    return sorted(path for path in paths if before.get(path) != path.stat().st_mtime_ns)


def merge_shards(results: list[JobResult]) -> list[JobResult]:
    """One result per (op, mode, precision): the rows of its shards together, errors joined.

    Args:
        results: the results of every shard, as read back from their JSON files.

    Returns:
        The merged results, in first-seen order.
    """
    merged: dict[tuple[str, str, str], JobResult] = {}
    for result in results:
        key = (result.job.op, result.job.mode, result.precision)
        if key not in merged:
            merged[key] = JobResult(result.job, result.x_label, precision=result.precision)
        into = merged[key]
        into.rows += result.rows
        if result.error:
            into.error = "; ".join(filter(None, [into.error, result.error]))
    return list(merged.values())


def _finish(
    options: Options,
    results: list[JobResult],
    latency_note: str | None,
    earlier: dict | None,
    before: dict[Path, int],
) -> int:
    """The summary, the files this run wrote (those not in ``before`` as it was), the
    comparison with ``earlier`` (the latencies of --compare's run) and the exit status."""
    print(summary_table(results, latency_note))
    print(f"Results in {options.output_dir}:")
    for pattern in ("*.csv", "*.json", "*.png", "*.log"):
        for path in _written_since(before, options.output_dir.glob(pattern)):
            print(f"  {path}")
    if options.output is not None:
        for path in sorted(options.output.parent.glob(f"{options.output.stem}*.csv")):
            print(f"  {path} (tritonbench's CSV)")
    failed = any(result.error for result in results)
    failures = ci_failures(results) if options.ci else []
    if earlier is not None:
        table, geomean = comparison(latencies_of_results(results), earlier)
        print(f"Against {options.compare}:\n{table}")
        if geomean is not None:
            print(f"helion's speedup over aten, now / then, geomean: {geomean:.3f}")
        why = regression(geomean)
        if latency_note is not None:  # the CPU interpreter's latencies gate nothing
            print(f"Not a regression check: latency is {latency_note}.")
        elif options.ci and why:
            failures.append(why)
    for failure in failures:
        print(f"CI failure: {failure}", file=sys.stderr)
    return 1 if failed or failures else 0


def _with_shard(stem: str, options: Options, suffix: str) -> str:
    if options.shard is None:
        return stem + suffix
    index, count = options.shard
    return f"{stem}_shard{index}of{count}{suffix}"


def _calls(job: Job, options: Options) -> list[Call]:
    """The job's calls in this shard: its shapes, or tritonbench's inputs chosen by id."""
    if job.shapes is not None:
        calls = job.calls()
    else:
        total = count_inputs(job.argv)
        first = options.input_id or 0
        end = total if options.num_inputs is None else min(total, first + options.num_inputs)
        calls = job.calls(range(first, end))
    if options.shard is None:
        return calls
    first, count = shard_range(len(calls), options.shard)
    return calls[first : first + count]


def _write_job(
    job: Job,
    calls: list[Call],
    texts: list[str],
    errors: list[str],
    options: Options,
    meta: dict[str, str],
    output: Path | None,
) -> JobResult:
    """Merge a job's calls into its result and write its CSV, JSON, PNG (and --output CSV).

    ``texts`` holds the output of the first calls; while it has fewer than ``calls``, the
    files are stamped partial and no plot is drawn."""
    result = JobResult(job, precision=meta["precision"])
    if not calls:
        index, count = options.shard or (0, 1)
        result.note = f"no inputs in shard {index}/{count}"
        return result
    text = merge_csv(texts)
    result.x_label, result.rows = parse_tritonbench_csv(text)
    result.error = "; ".join(errors) or None
    add_corrected_tflops(result.rows, job.mode)
    file_meta = {
        **meta,
        "op": job.op,
        "mode": job.mode,
        "tritonbench_args": shlex.join(job.argv),
        "inputs": ", ".join(call.label for call in calls[: len(texts)]),
        "tflops_corrected": f"tflops x {FLOPS_PER_FORWARD[job.mode]}, as tritonbench counts "
        "only the forward's FLOPs",
    }
    finished = len(texts) == len(calls)
    if not finished:
        file_meta["partial"] = f"{len(texts)} of {len(calls)} inputs (the run had not finished)"
    if result.error:
        file_meta["error"] = result.error
    stem = options.output_dir / _with_shard(job.name, options, "")
    write_csv(stem.with_suffix(".csv"), file_meta, text)
    write_json(stem.with_suffix(".json"), file_meta, result)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        write_whole(output, text)
    if not finished:
        return result
    try:
        write_plot(stem.with_suffix(".png"), f"{job.op} {job.mode}", result.rows, file_meta)
    except ImportError as err:
        print(f"No plot ({err}): pip install 'helion_ops[bench]'", file=sys.stderr)
    return result


def _output_path(options: Options, job: Job, num_jobs: int) -> Path | None:
    """``--output PATH``: the path itself for a run of one op and mode, else one file per job
    beside it (``x_gemm_fwd.csv``), as tritonbench writes one CSV per op."""
    if options.output is None or (num_jobs == 1 and options.shard is None):
        return options.output
    name = _with_shard(f"{options.output.stem}_{job.name}", options, options.output.suffix)
    return options.output.with_name(name)


def _call_harness(argv: list[str]) -> tuple[str, str | None]:
    """The built-in harness's rows for one command line, as tritonbench's CSV, and its error."""
    try:
        return format_csv("(M, N, K)", harness.run_call(argv)), None
    except Exception as err:
        return "", f"{type(err).__name__}: {err}"


def _call_tritonbench(argv: list[str]) -> tuple[str, str | None]:
    """tritonbench's CSV for one command line, and the error that cut the call short."""
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = Path(tmp) / "tritonbench.csv"
        error = None
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                run_tritonbench([*argv, "--output", str(csv_path)])
        except (Exception, SystemExit) as err:
            # One op failing must not end the run; tritonbench still writes what it measured.
            error = f"{type(err).__name__}: {err}"
            # tritonbench's argparse says why it exits (an unknown flag, a bad choice) on
            # stderr only: that line goes into the error cell too.
            why = [line for line in stderr.getvalue().splitlines() if ": error: " in line]
            if isinstance(err, SystemExit) and why:
                error += f" ({why[-1].strip()})"
        finally:
            sys.stderr.write(stderr.getvalue())  # the log keeps all of it
        return (csv_path.read_text() if csv_path.exists() else ""), error


if __name__ == "__main__":
    sys.exit(main())
