"""run_bench's parts that need no tritonbench: command line, plan, CSV parsing, files, summary."""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
from conftest import DEVICE

from benchmarks import gpus
from benchmarks import main as main_module
from benchmarks.cli import UsageError, check_runnable, parse_args, parse_shard
from benchmarks.compare import REGRESSION_THRESHOLD, comparison, latencies_in, regression
from benchmarks.gpus import gpu_count, worker_argv
from benchmarks.plot import write_plot
from benchmarks.progress import Progress, clock, output_to
from benchmarks.report import ci_failures, summary_table
from benchmarks.results import (
    JobResult,
    add_corrected_tflops,
    merge_csv,
    parse_tritonbench_csv,
    read_json,
    tritonbench_commit,
    write_csv,
    write_json,
)
from benchmarks.suite import (
    BACKENDS,
    CPU_METRICS,
    GPU_METRICS,
    SECONDS_PER_CALL,
    SUITE_SHAPES,
    Job,
    plan_jobs,
    shard_range,
)
from benchmarks.tritonbench_runner import (
    addmm_sizes_need_bias_1d,
    has_tolerance_flags,
    unknown_names,
)

TRITONBENCH_CSV = """\
(M, N, K);aten_matmul-latency;aten_matmul-tflops;helion_matmul_tritonbench-latency;\
helion_matmul_tritonbench-tflops;helion_matmul_tritonbench-accuracy
(256, 256, 256);0.01;3.5;0.02;1.75;1.0
(384, 384, 384);0.02;5.0;"RuntimeError('boom; bad')";;
average;0.015;4.25;;;
"""


# --- command line --------------------------------------------------------------------------------


def test_our_flags_are_split_from_tritonbench_flags():
    argv = ["--op", "gemm", "--m", "64", "--n", "48", "--k", "32", "--precision=bf16", "--ci"]
    argv += ["--shard", "1/2", "--output-dir", "out", "--metrics", "accuracy", "--layout", "tt"]
    argv += ["--cudagraph", "--rep", "100"]
    options = parse_args(argv)
    assert options.ops == ("gemm",)
    assert options.modes is None
    assert options.metrics == "accuracy"
    assert (options.ci, options.shard, options.output_dir) == (True, (1, 2), Path("out"))
    assert (options.sizes, options.precision, options.layout) == ((64, 48, 32), "bf16", "tt")
    assert options.passthrough == ("--cudagraph", "--rep", "100")


def test_defaults_are_the_suite_and_a_timestamped_folder():
    options = parse_args([])
    assert (options.ops, options.modes, options.ci, options.shard) == (None, None, False, None)
    assert (options.full, options.compare, options.gpus, options.output) == (
        False,
        None,
        None,
        None,
    )
    assert options.output_dir.parent == Path("bench_results")
    assert options.output_dir.name.endswith("Z")


def test_tritonbench_output_flag_is_accepted():
    assert parse_args(["--output", "x/y.csv"]).output == Path("x/y.csv")


def test_modes_from_lists_and_flags():
    assert parse_args(["--mode", "fwd,bwd"]).modes == ("fwd", "bwd")
    assert parse_args(["--fwd-bwd"]).modes == ("fwd_bwd",)
    assert parse_args(["--op", "addmm,gemm"]).ops == ("addmm", "gemm")
    assert parse_args(["--precision", "bfloat16"]).precision == "bf16"  # torch's name too


@pytest.mark.parametrize(("text", "shard"), [("0/2", (0, 2)), ("1/2", (1, 2)), ("0/1", (0, 1))])
def test_parse_shard(text, shard):
    assert parse_shard(text) == shard


SIZES = ["--n", "48", "--k", "32"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shard", "2/2"], "0 <= i < n"),
        (["--shard", "1/0"], "0 <= i < n"),
        (["--shard", "1"], "must look like i/n"),
        (["--shard=-1/2"], "must look like i/n"),
        (["--shard", "a/b"], "must look like i/n"),
        (["--suite", "--op", "gemm"], "drop --op or --suite"),
        (["--mode", "backward"], "unknown ['backward']"),
        (["--isolate"], "lose the helion registration"),
        (["--output-json=x.json"], "--output-json is not supported"),
        (["--op", "foo"], "--op: unknown foo; choose from gemm, addmm"),
        (["--op", "gemm,softmax"], "--op: unknown softmax"),
        (["--m", "-5", *SIZES], "--m must be a positive size, got -5"),
        (["--m", "64", "--n", "0", "--k", "32"], "--n must be a positive size, got 0"),
        (["--m", "64"], "--m without --n and --k"),
        (["--m", "64", "--k", "32"], "--m --k without --n"),
        (["--num-inputs", "0"], "--num-inputs must be positive"),
        (["--input-id", "-1"], "--input-id must be 0 or more"),
        (["--gpus", "0"], "positive number or 'all'"),
        (["--gpus", "two"], "positive number or 'all'"),
        (["--gpus", "2", "--shard", "0/2"], "--gpus gives each GPU a --shard"),
        (["--gpus", "2", "--output", "x.csv"], "--output with --gpus"),
        (["--full", "--m", "64", *SIZES], "--full runs tritonbench's default shapes"),
        (["--output", "x.json"], "--output must name a .csv file"),
        (["--precision", "fp64"], "--precision: unknown fp64; choose from fp16, bf16, fp32"),
        (["--layout", "xx"], "--layout: two letters of t and n"),
        (["--layout", "tnt"], "--layout: two letters of t and n"),
        (["--rtol", "abc"], "--rtol must be a number, got 'abc'"),
        (["--atol=1e-2x"], "--atol must be a number"),
        (["--op", "gemm", "--input", "/nonexistent.csv"], "--input /nonexistent.csv: no such file"),
    ],
)
def test_bad_command_lines_exit_2_with_a_reason(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "gpu", "message"),
    [
        (["--m", "4096", *SIZES], False, "--m 4096: without a GPU"),
        (["--m", "64", "--n", "48", "--k", "513"], False, "--k 513"),
        (["--op", "gemm", "--m", "4096", *SIZES, "--device", "cpu"], True, "with --device cpu"),
        (["--op", "gemm", "--input", __file__], False, "--input: without a GPU the kernels"),
        (["--op", "gemm", "--llama"], False, "--llama"),
        (["--op", "addmm", "--large-k-shapes"], False, "--large-k-shapes"),
        (["--full"], False, "--full: tritonbench's default shapes take hours"),
        (["--device", "cuda"], False, "--device cuda: this machine has no CUDA GPU"),
        (["--op", "gemm", "--input-id", "3"], False, "--input-id: without a GPU the run takes"),
        (["--op", "gemm", "--num-inputs", "2"], False, "--num-inputs: without a GPU"),
        (["--precision", "bf16"], False, "--precision bf16: without a GPU the kernels run in"),
        (["--precision", "bfloat16", "--device", "cpu"], True, "bf16: with --device cpu"),
    ],
)
def test_what_the_interpreter_cannot_run_is_refused(argv, gpu, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        check_runnable(parse_args(argv), gpu)


@pytest.mark.parametrize(
    ("argv", "gpu"),
    [
        (["--m", "512", "--n", "512", "--k", "512"], False),
        (["--op", "gemm"], False),  # the plan gives it the tiny CPU shape
        (["--m", "4096", *SIZES], True),
        (["--full"], True),
        (["--op", "gemm", "--llama"], True),
        (["--precision", "bf16"], True),
        (["--precision", "fp32"], False),
    ],
)
def test_what_the_interpreter_can_run_is_accepted(argv, gpu):
    check_runnable(parse_args(argv), gpu)


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--op", "gemm", "--mode", "bwd", "--m", "-5", "--device", "cpu"], "--m"),
        (["--op", "foo"], "--op"),
        (["--m", "4096", "--n", "4096", "--k", "4096"], "--m 4096"),
    ],
    ids=["negative", "unknown-op", "full-size-in-interpreter"],
)
def test_bad_flags_fail_before_tritonbench_is_imported(monkeypatch, capsys, argv, flag):
    """The issue's cases: each ran minutes (or started tritonbench) before failing."""
    monkeypatch.setattr(main_module.torch.cuda, "is_available", lambda: False)

    def imported(*args):
        raise AssertionError("tritonbench was imported")

    monkeypatch.setattr(main_module, "tritonbench_import_error", imported)
    try:
        status = main_module.main(argv)
    except SystemExit as exit_info:
        status = exit_info.code
    assert status == 2
    assert flag in capsys.readouterr().err


# --- the plan ------------------------------------------------------------------------------------


def only_of(job: Job) -> list[str]:
    return job.argv[job.argv.index("--only") + 1].split(",")


def test_gpu_suite_runs_representative_shapes_without_torch_compile():
    jobs = plan_jobs(parse_args([]), gpu=True)
    assert [job.name for job in jobs] == ["gemm_fwd", "gemm_bwd", "addmm_fwd", "addmm_bwd"]
    gemm_fwd, gemm_bwd, addmm_fwd, addmm_bwd = jobs
    assert only_of(gemm_fwd) == [
        "aten_matmul",
        "helion_matmul_tritonbench",
        "triton_tutorial_matmul",
    ]
    # The tutorial kernel has no backward; triton_addmm has one.
    assert only_of(gemm_bwd) == ["aten_matmul", "helion_matmul_tritonbench"]
    assert (
        only_of(addmm_fwd)
        == only_of(addmm_bwd)
        == ["aten_addmm", "helion_addmm_tritonbench", "triton_addmm"]
    )
    for job in jobs:
        assert job.shapes == SUITE_SHAPES[job.op]
        assert job.argv[job.argv.index("--metrics") + 1] == GPU_METRICS
        assert "--keep-going" in job.argv
        assert "--device" not in job.argv
        assert ("--layout" in job.argv) == (job.name == "gemm_bwd")
    assert [call.label for call in gemm_fwd.calls()] == [
        "1024x1024x1024",
        "4096x4096x4096",
        "1000000x768x256",
    ]


def test_the_default_suite_is_estimated_under_five_minutes():
    """The issue's budget on one H200, by the per-backend estimates (torch.compile left out)."""
    jobs = plan_jobs(parse_args([]), gpu=True)
    seconds = sum(job.seconds_per_call() * len(job.calls()) for job in jobs)
    assert seconds < 300
    full = plan_jobs(parse_args(["--full"]), gpu=True)
    assert all(job.shapes is None and "pt2_triton_matmul" in only_of(job) for job in full)
    assert full[0].seconds_per_call() - jobs[0].seconds_per_call() == SECONDS_PER_CALL["compiled"]


def test_chosen_inputs_are_tritonbench_s_own():
    for argv in (["--op", "gemm"], ["--num-inputs", "2"], ["--input-id", "3"]):
        assert {job.shapes for job in plan_jobs(parse_args(argv), gpu=True)} == {None}
    (job,) = plan_jobs(parse_args(["--op", "gemm", "--mode", "fwd"]), gpu=True)
    assert [call.argv for call in job.calls(range(2, 4))] == [
        ("--input-id", "2", "--num-inputs", "1"),
        ("--input-id", "3", "--num-inputs", "1"),
    ]


def test_cpu_suite_runs_aten_and_helion_on_tiny_shapes():
    gemm_fwd, _, addmm_fwd, _ = plan_jobs(parse_args([]), gpu=False)
    assert only_of(gemm_fwd) == ["aten_matmul", "helion_matmul_tritonbench"]
    assert only_of(addmm_fwd) == ["aten_addmm", "helion_addmm_tritonbench"]
    for job in (gemm_fwd, addmm_fwd):
        argv = " ".join(job.argv)
        assert f"--metrics {CPU_METRICS}" in argv
        assert "--device cpu" in argv
        assert [call.argv for call in job.calls()] == [("--m", "64", "--n", "48", "--k", "32")]


def test_the_command_line_overrides_the_suite():
    argv = ["--op", "gemm", "--mode", "fwd_bwd", "--only", "aten_matmul", "--m", "128"]
    argv += ["--n", "64", "--k", "32", "--layout", "nt", "--device", "cpu", "--metrics", "latency"]
    argv += ["--ci", "--keep-going"]
    (job,) = plan_jobs(parse_args(argv), gpu=False)
    assert job.argv.count("--layout") == job.argv.count("--device") == 1
    assert job.argv.count("--keep-going") == 1
    assert job.shapes == ((128, 64, 32),)
    assert only_of(job) == ["aten_matmul"]
    # --ci always measures accuracy.
    assert job.argv[job.argv.index("--metrics") + 1] == "latency,accuracy"


@pytest.mark.parametrize(
    "flags,want",
    [
        ([], ["--rtol", "1e-3", "--atol", "1e-2"]),
        (["--precision", "bf16"], ["--rtol", "1.6e-2", "--atol", "1e-2"]),
        (["--precision=fp32"], []),
        (["--rtol", "0.5", "--atol", "0.5"], ["--rtol", "0.5", "--atol", "0.5"]),
    ],
)
def test_addmm_gets_an_atol_where_tritonbench_takes_it(flags, want):
    argv = ["--op", "gemm,addmm", "--mode", "fwd", *flags]
    gemm, addmm = plan_jobs(parse_args(argv), gpu=True, has_tolerance_flags=True)
    # gemm sets its own; the user's flags pass through once, never doubled.
    for flag in ("--rtol", "--atol"):
        assert gemm.argv.count(flag) == flags.count(flag)
        assert addmm.argv.count(flag) == want.count(flag)
    assert " ".join(want) in " ".join(addmm.argv)
    (old,) = plan_jobs(parse_args(["--op", "addmm", "--mode", "fwd"]), gpu=True)
    assert "--atol" not in old.argv


@pytest.mark.parametrize("new", [True, False], ids=["NEW", "OLD"])
def test_tolerance_flags_are_detected_in_tritonbench_parser(monkeypatch, new):
    parser = argparse.ArgumentParser()
    parser.add_argument("--op")
    if new:
        parser.add_argument("--rtol", type=float)
        parser.add_argument("--atol", type=float)
    parser_module = types.ModuleType("tritonbench.utils.parser")
    parser_module.get_parser = lambda args=None: parser
    for name in ("tritonbench", "tritonbench.utils"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "tritonbench.utils.parser", parser_module)
    has_tolerance_flags.cache_clear()
    try:
        assert has_tolerance_flags() is new
    finally:
        has_tolerance_flags.cache_clear()


def test_new_addmm_gets_bias_1d_with_the_cpu_sizes_and_refuses_ignored_sizes():
    """NEW tritonbench's addmm ignores --m/--k/--n without --bias-1D-y."""
    gemm, _, addmm, _ = plan_jobs(parse_args([]), gpu=False, addmm_sizes_need_bias_1d=True)
    assert "--bias-1D-y 1" in " ".join(addmm.argv)
    assert "--bias-1D-y" not in gemm.argv
    (on_gpu,) = plan_jobs(
        parse_args(["--op", "addmm", "--mode", "fwd"]), gpu=True, addmm_sizes_need_bias_1d=True
    )
    assert "--bias-1D-y" not in on_gpu.argv
    sized = ["--op", "addmm", "--mode", "fwd", "--m", "1024", "--k", "1024", "--n", "1024"]
    with pytest.raises(ValueError, match=r"--m/--k/--n.*--bias-1D-y"):
        plan_jobs(parse_args(sized), gpu=True, addmm_sizes_need_bias_1d=True)
    (given,) = plan_jobs(
        parse_args([*sized, "--bias-1D-y", "1"]), gpu=True, addmm_sizes_need_bias_1d=True
    )
    assert given.argv.count("--bias-1D-y") == 1
    (old,) = plan_jobs(parse_args(sized), gpu=True)
    assert "--bias-1D-y" not in old.argv


def fake_addmm_parser(monkeypatch, new: bool):
    def parse(args):
        parser = argparse.ArgumentParser()
        parser.add_argument("--m", type=int)
        if new:
            parser.add_argument("--bias-1D-y", type=bool, default=False)
        return parser.parse_args(args)

    data_io = types.ModuleType("tritonbench.operators.addmm.data_io")
    data_io.parse_args = parse
    for name in ("tritonbench", "tritonbench.operators", "tritonbench.operators.addmm"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "tritonbench.operators.addmm.data_io", data_io)


@pytest.mark.parametrize("new", [True, False], ids=["NEW", "OLD"])
def test_addmm_bias_1d_flag_is_detected_in_the_operators_parser(monkeypatch, capsys, new):
    fake_addmm_parser(monkeypatch, new)
    addmm_sizes_need_bias_1d.cache_clear()
    try:
        assert addmm_sizes_need_bias_1d() is new
    finally:
        addmm_sizes_need_bias_1d.cache_clear()
    assert capsys.readouterr().err == ""  # argparse's complaint about OLD is swallowed


def test_main_refuses_addmm_sizes_tritonbench_would_ignore(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(main_module, "tritonbench_import_error", lambda: None)
    monkeypatch.setattr(main_module, "has_tolerance_flags", lambda: True)
    monkeypatch.setattr(main_module, "addmm_sizes_need_bias_1d", lambda: True)
    plugin = types.ModuleType("helion_ops.tritonbench_plugin")
    plugin.register = lambda: ["gemm", "addmm"]
    monkeypatch.setitem(sys.modules, "helion_ops.tritonbench_plugin", plugin)
    argv = ["--op", "addmm", "--m", "256", "--k", "256", "--n", "256"]
    assert main_module.main([*argv, "--output-dir", str(tmp_path / "out")]) == 2
    assert "--bias-1D-y" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def fake_registries(monkeypatch):
    """tritonbench's registries as OLD and NEW keep them, for gemm."""
    triton_op = types.ModuleType("tritonbench.utils.triton_op")
    triton_op.REGISTERED_BENCHMARKS = {
        "gemm": {"aten_matmul": None, "helion_matmul_tritonbench": None}
    }
    triton_op.BUILTIN_METRICS = {"latency", "accuracy", "speedup", "tflops"}
    triton_op.REGISTERED_METRICS = {"gemm": ["gbps"]}
    for name in ("tritonbench", "tritonbench.utils"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    sys.modules["tritonbench.utils"].triton_op = triton_op
    monkeypatch.setitem(sys.modules, "tritonbench.utils.triton_op", triton_op)


@pytest.mark.parametrize(
    ("only", "metrics", "message"),
    [
        ("aten_matmul,helion_matmul_tritonbench", "latency,gbps", None),
        (
            "aten,helion_matmul_tritonbench",
            None,
            "--only aten: tritonbench's gemm has no such backend",
        ),
        (None, "latency,gpbs", "--metrics gpbs: tritonbench's gemm has no such metric"),
    ],
)
def test_names_tritonbench_would_drop_or_fail_on_are_found(monkeypatch, only, metrics, message):
    fake_registries(monkeypatch)
    unknown = unknown_names("gemm", only, metrics)
    assert unknown == message if message is None else unknown.startswith(message)
    if message:
        assert "aten_matmul" in unknown if only else "gbps" in unknown


def test_main_refuses_names_tritonbench_does_not_know(monkeypatch, capsys, tmp_path):
    """Before: an unknown metric was dropped without a word, an unknown backend failed mid-run."""
    fake_registries(monkeypatch)
    monkeypatch.setattr(main_module, "tritonbench_import_error", lambda: None)
    monkeypatch.setattr(main_module, "has_tolerance_flags", lambda: False)
    monkeypatch.setattr(main_module, "addmm_sizes_need_bias_1d", lambda: False)
    plugin = types.ModuleType("helion_ops.tritonbench_plugin")
    plugin.register = lambda: ["gemm"]
    monkeypatch.setitem(sys.modules, "helion_ops.tritonbench_plugin", plugin)
    argv = ["--op", "gemm", "--metrics", "latency,bogus", "--output-dir", str(tmp_path / "out")]
    assert main_module.main(argv) == 2
    assert "--metrics bogus: tritonbench's gemm has no such metric" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("num_inputs", [0, 1, 2, 5, 31, 42])
@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_shards_cover_every_input_once(num_inputs, count):
    covered = []
    for index in range(count):
        start, num = shard_range(num_inputs, (index, count))
        covered += range(start, start + num)
    assert covered == list(range(num_inputs))


def test_a_single_input_runs_in_shard_0():
    assert shard_range(1, (0, 2)) == (0, 1)
    assert shard_range(1, (1, 2))[1] == 0


@pytest.mark.parametrize(
    ("chosen", "shards"),
    [
        (["--num-inputs", "8"], [[0, 1, 2, 3], [4, 5, 6, 7]]),
        (["--input-id", "2", "--num-inputs", "5"], [[2, 3, 4], [5, 6]]),
        (["--input-id", "9"], [[9, 10], [11]]),
        (["--num-inputs", "50"], [list(range(6)), list(range(6, 12))]),
    ],
)
def test_shards_split_the_chosen_inputs(monkeypatch, chosen, shards):
    """``--gpus 2 --num-inputs 8`` gives each GPU half of the 8 inputs (of 12 here)."""
    monkeypatch.setattr(main_module, "count_inputs", lambda argv: 12)
    for index, expected in enumerate(shards):
        options = parse_args(["--op", "addmm", "--mode", "fwd", *chosen, "--shard", f"{index}/2"])
        (job,) = plan_jobs(options, gpu=True)
        ids = [int(call.argv[1]) for call in main_module._calls(job, options)]
        assert ids == expected


# --- results -------------------------------------------------------------------------------------


def test_parse_tritonbench_csv():
    x_label, rows = parse_tritonbench_csv(TRITONBENCH_CSV)
    assert x_label == "(M, N, K)"
    by_key = {(row.shape, row.backend): row for row in rows}
    assert len(rows) == 4  # two shapes, two backends, no average row
    assert by_key["(256, 256, 256)", "helion_matmul_tritonbench"].metrics == {
        "latency": 0.02,
        "tflops": 1.75,
        "accuracy": 1.0,
    }
    failed = by_key["(384, 384, 384)", "helion_matmul_tritonbench"]
    assert failed.error == "RuntimeError('boom; bad')"
    assert failed.metrics["accuracy"] is None
    assert by_key["(384, 384, 384)", "aten_matmul"].error is None


def test_parse_an_empty_csv():
    assert parse_tritonbench_csv("") == ("", [])


@pytest.mark.parametrize(("mode", "factor"), [("fwd", 1), ("bwd", 2), ("fwd_bwd", 3)])
def test_corrected_tflops_count_the_backward(mode, factor):
    _, rows = parse_tritonbench_csv(TRITONBENCH_CSV)
    add_corrected_tflops(rows, mode)
    for row in rows:
        if isinstance(row.metrics.get("tflops"), float):
            assert row.metrics["tflops_corrected"] == row.metrics["tflops"] * factor
        else:
            assert "tflops_corrected" not in row.metrics


def result_of(csv_text: str, mode: str = "bwd", **kwargs) -> JobResult:
    x_label, rows = parse_tritonbench_csv(csv_text)
    add_corrected_tflops(rows, mode)
    return JobResult(Job("gemm", mode, ("--op", "gemm")), x_label, rows, **kwargs)


META = {"gpu": "cpu", "torch": "2.x", "date": "2025-01-01T00:00:00+00:00", "command": "run a b"}


def test_files_are_stamped_and_read_back(tmp_path):
    result = result_of(TRITONBENCH_CSV)
    write_csv(tmp_path / "r.csv", {**META, "note": "two\nlines"}, TRITONBENCH_CSV)
    write_json(tmp_path / "r.json", META, result)

    lines = (tmp_path / "r.csv").read_text().splitlines(keepends=True)
    stamp = [line for line in lines if line.startswith("#")]
    assert stamp[0] == "# gpu: cpu\n"
    assert "# note: two lines\n" in stamp
    assert "".join(lines[len(stamp) :]) == TRITONBENCH_CSV

    document = json.loads((tmp_path / "r.json").read_text())
    assert document["meta"] == META
    assert document["x_label"] == "(M, N, K)"
    assert document["error"] is None
    assert document["rows"][1] == {
        "shape": "(256, 256, 256)",
        "backend": "helion_matmul_tritonbench",
        "latency": 0.02,
        "tflops": 1.75,
        "accuracy": 1.0,
        "tflops_corrected": 3.5,
    }


def test_plot(tmp_path):
    pytest.importorskip("matplotlib")
    rows = result_of(TRITONBENCH_CSV).rows
    assert write_plot(tmp_path / "p.png", "gemm bwd", rows, META)
    assert (tmp_path / "p.png").read_bytes().startswith(b"\x89PNG")
    assert not write_plot(tmp_path / "none.png", "gemm bwd", [], META)
    assert not (tmp_path / "none.png").exists()


def test_commit_is_unknown_for_a_clone_without_git(tmp_path, monkeypatch):
    # The clone sits inside another repository, whose commit must not be reported.
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    package = tmp_path / "clone" / "tritonbench"
    package.mkdir(parents=True)
    fake = types.ModuleType("tritonbench")
    fake.__file__ = str(package / "__init__.py")
    monkeypatch.setitem(sys.modules, "tritonbench", fake)
    assert tritonbench_commit() == "unknown"


def test_commit_of_a_clone_says_where_its_files_differ(tmp_path, monkeypatch):
    clone = tmp_path / "clone"
    (clone / "tritonbench").mkdir(parents=True)
    (clone / "tritonbench" / "__init__.py").write_text("")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(clone)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "c"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    fake = types.ModuleType("tritonbench")
    fake.__file__ = str(clone / "tritonbench" / "__init__.py")
    monkeypatch.setitem(sys.modules, "tritonbench", fake)
    assert tritonbench_commit() == head.strip()
    (clone / "tritonbench" / "__init__.py").write_text("NEW = True\n")  # another version's file
    assert tritonbench_commit() == head.strip() + "+dirty"


# --- summary and --ci ----------------------------------------------------------------------------


def test_summary_table():
    table = summary_table([result_of(TRITONBENCH_CSV)], latency_note="not meaningful")
    assert "latency ms (mean) [not meaningful]" in table
    helion = next(line for line in table.splitlines() if "helion_matmul_tritonbench" in line)
    assert "1/2" in helion  # the input with an error did not pass
    assert "RuntimeError('boom; bad')" in helion


def test_summary_shows_a_failed_job():
    failed = result_of("", error="SystemExit: 2")
    assert "SystemExit: 2" in summary_table([failed])


def test_ci_passes_when_helion_scores_one():
    csv_text = "(M, N, K);helion_matmul_tritonbench-accuracy\n(64, 48, 32);1.0\naverage;1.0\n"
    assert ci_failures([result_of(csv_text)]) == []


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (result_of(TRITONBENCH_CSV), "(384, 384, 384): helion_matmul_tritonbench accuracy Runtime"),
        (
            result_of("(M, N, K);helion_matmul_tritonbench-accuracy\n(1, 2, 3);0.0\n"),
            "accuracy 0.0",
        ),
        (
            result_of("(M, N, K);aten_matmul-latency\n(1, 2, 3);0.1\n"),
            "no helion_matmul_tritonbench",
        ),
        (result_of("", error="KeyError: 'x'"), "gemm_bwd: tritonbench failed: KeyError"),
    ],
    ids=["error-cell", "zero", "missing", "job-failed"],
)
def test_ci_failures(result, message):
    failures = ci_failures([result])
    assert len(failures) == 1
    assert message in failures[0]


def test_ci_ignores_empty_shards_and_other_ops():
    skipped = result_of("", note="no inputs in shard 1/2")
    other = JobResult(Job("softmax", "fwd", ()), error="boom")
    assert ci_failures([skipped, other]) == []


# --- main ----------------------------------------------------------------------------------------


def test_run_bench_py_works_from_any_folder(tmp_path):
    run_bench = Path(__file__).resolve().parent.parent / "run_bench.py"
    out = subprocess.run(
        [sys.executable, str(run_bench), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--shard" in out.stdout


# --- progress and logs ---------------------------------------------------------------------------


def test_progress_rescales_the_estimate_by_the_time_measured():
    progress = Progress([1.0, 1.0, 2.0], now=0.0)
    assert progress.line("gemm fwd 1024x1024x1024", now=0.0) == (
        "[1/3] gemm fwd 1024x1024x1024 | 0:00 elapsed, ~0:04 left"
    )
    progress.advance()
    # The first call took 10 s against an estimate of 1: the 3 s left become 30 s.
    assert progress.line("gemm bwd", now=10.0).endswith(
        "[2/3] gemm bwd | 0:10 elapsed, ~0:30 left"[6:]
    )
    assert clock(3725) == "1:02:05"


def test_third_party_output_goes_to_the_log(tmp_path, capfd):
    log = tmp_path / "run.log"
    with output_to(log):
        print("python print")
        print("python warning", file=sys.stderr)
        os.write(2, b"C-level write\n")
        subprocess.run([sys.executable, "-c", "print('autotune worker')"], check=True)
    print("after")
    out, err = capfd.readouterr()
    assert (out, err) == ("after\n", "")
    text = log.read_text()
    for line in ("python print", "python warning", "C-level write", "autotune worker"):
        assert line in text


# --- a whole run, tritonbench faked --------------------------------------------------------------


def fake_csv(argv: list[str]) -> str:
    """What tritonbench's --output holds for one call: aten and helion on the call's shape."""
    m, n, k = (argv[argv.index(flag) + 1] for flag in ("--m", "--n", "--k"))
    op = argv[argv.index("--op") + 1]
    backends = BACKENDS[op]
    helion_latency = 0.02 if FAKE_SLOWDOWN.get(op) is None else 0.02 * FAKE_SLOWDOWN[op]
    return (
        f"(M, N, K);{backends.baseline}-latency;{backends.helion}-latency;"
        f"{backends.helion}-accuracy\n({m}, {n}, {k});0.01;{helion_latency};1.0\naverage;;;\n"
    )


FAKE_SLOWDOWN: dict[str, float] = {}


@pytest.fixture
def fake_run(monkeypatch):
    """main() with tritonbench replaced by fake_csv; the command lines it got are recorded."""
    calls = []

    def run_tritonbench(argv):
        calls.append(argv)
        if "--m" in argv and argv[argv.index("--m") + 1] == "13":
            raise RuntimeError("boom")
        print("inductor autotune table")  # third-party noise, for the log
        output = Path(argv[argv.index("--output") + 1])
        output.write_text(fake_csv(argv))

    monkeypatch.setattr(main_module, "run_tritonbench", run_tritonbench)
    monkeypatch.setattr(main_module, "tritonbench_import_error", lambda: None)
    monkeypatch.setattr(main_module, "has_tolerance_flags", lambda: False)
    monkeypatch.setattr(main_module, "addmm_sizes_need_bias_1d", lambda: False)
    monkeypatch.setattr(main_module.torch.cuda, "is_available", lambda: False)
    plugin = types.ModuleType("helion_ops.tritonbench_plugin")
    plugin.register = lambda: ["gemm", "addmm"]
    monkeypatch.setitem(sys.modules, "helion_ops.tritonbench_plugin", plugin)
    FAKE_SLOWDOWN.clear()
    yield calls
    FAKE_SLOWDOWN.clear()


def test_a_run_shows_progress_keeps_logs_out_and_lists_its_files(fake_run, tmp_path, capsys):
    out = tmp_path / "out"
    assert main_module.main(["--output-dir", str(out), "--output", str(tmp_path / "x.csv")]) == 0
    printed = capsys.readouterr().out
    assert len(fake_run) == 4
    assert "[1/4] gemm fwd 64x48x32: aten_matmul, helion_matmul_tritonbench |" in printed
    assert "[4/4] addmm bwd" in printed and "left" in printed
    assert "inductor autotune table" not in printed
    assert (out / "run.log").read_text().count("inductor autotune table") == 4
    for name in ("gemm_fwd.csv", "gemm_fwd.json", "addmm_bwd.csv", "run.log"):
        assert f"  {out / name}\n" in printed
    # --output: tritonbench's CSV, one per op and mode beside the path given.
    assert (tmp_path / "x_gemm_bwd.csv").read_text() == fake_csv(list(fake_run[1]))
    assert f"{tmp_path / 'x_addmm_fwd.csv'} (tritonbench's CSV)" in printed


def test_a_runs_log_says_what_each_specialization_ran(fake_run, tmp_path, monkeypatch, capsys):
    """What helion_ops logs at INFO (each new specialization's kernel and config, when it
    compiles) goes into run.log once, not onto the console; the handler leaves with the run."""
    fake = main_module.run_tritonbench

    def run_and_compile(argv):
        m = argv[argv.index("--m") + 1]
        logging.getLogger("helion_ops.kernel").info("_matmul on m=%s: {'block_sizes': [16]}", m)
        fake(argv)

    monkeypatch.setattr(main_module, "run_tritonbench", run_and_compile)
    out = tmp_path / "out"
    assert main_module.main(["--output-dir", str(out), "--op", "gemm", "--mode", "fwd"]) == 0
    printed = capsys.readouterr()
    log = (out / "run.log").read_text()
    assert log.count("helion_ops.kernel: _matmul on m=") == len(fake_run) > 0
    assert "_matmul on" not in printed.out + printed.err
    assert not logging.getLogger("helion_ops").handlers
    assert logging.getLogger("helion_ops").propagate


def test_output_of_one_op_and_mode_is_the_path_itself(fake_run, tmp_path):
    argv = ["--op", "gemm", "--mode", "fwd", "--output-dir", str(tmp_path / "out")]
    assert main_module.main([*argv, "--output", str(tmp_path / "x.csv")]) == 0
    assert (tmp_path / "x.csv").read_text() == fake_csv(list(fake_run[0]))


def test_a_failing_call_is_recorded_and_the_run_goes_on(fake_run, tmp_path, capsys):
    argv = ["--op", "gemm", "--m", "13", "--n", "8", "--k", "8", "--output-dir", str(tmp_path)]
    assert main_module.main([*argv, "--mode", "fwd,bwd"]) == 1
    assert len(fake_run) == 2
    assert "RuntimeError: boom" in capsys.readouterr().out
    document = json.loads((tmp_path / "gemm_bwd.json").read_text())
    assert "RuntimeError: boom" in document["error"]


def test_a_run_stopped_mid_job_keeps_the_inputs_it_measured(fake_run, tmp_path, monkeypatch):
    """The job's files are rewritten after each input, stamped partial until the last: a run
    that a timeout stops (or an input that hangs) keeps the rows measured before it."""
    fake = main_module.run_tritonbench

    def stopped_at_the_third(argv):
        if len(fake_run) == 2:
            raise KeyboardInterrupt  # as a timeout's signal would, past every except clause
        fake(argv)

    monkeypatch.setattr(main_module, "run_tritonbench", stopped_at_the_third)
    # On a GPU the suite's gemm forward is a job of three shapes.
    monkeypatch.setattr(main_module.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(main_module.torch.cuda, "get_device_name", lambda: "a GPU")
    out = tmp_path / "out"
    argv = ["--mode", "fwd", "--output-dir", str(out)]
    with pytest.raises(KeyboardInterrupt):
        main_module.main(argv)
    first, second, _ = SUITE_SHAPES["gemm"]
    document = json.loads((out / "gemm_fwd.json").read_text())
    assert document["meta"]["partial"] == "2 of 3 inputs (the run had not finished)"
    assert {row["shape"] for row in document["rows"]} == {str(first), str(second)}
    assert "# partial: 2 of 3 inputs" in (out / "gemm_fwd.csv").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["gemm_fwd.csv", "gemm_fwd.json", "run.log"]

    monkeypatch.setattr(main_module, "run_tritonbench", fake)
    assert main_module.main(argv) == 0
    document = json.loads((out / "gemm_fwd.json").read_text())
    assert "partial" not in document["meta"] and len(document["rows"]) == 6
    assert "partial" not in (out / "gemm_fwd.csv").read_text()


# --- --compare -----------------------------------------------------------------------------------


@pytest.fixture
def on_a_gpu(fake_run, monkeypatch):
    """fake_run's main() as on a GPU machine: its latencies are meaningful, so --ci gates them."""
    monkeypatch.setattr(main_module.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(main_module.torch.cuda, "get_device_name", lambda: "a GPU")
    return fake_run


def run_into(directory: Path, slowdown: float | None = None) -> int:
    FAKE_SLOWDOWN.clear()
    if slowdown is not None:
        FAKE_SLOWDOWN["gemm"] = FAKE_SLOWDOWN["addmm"] = slowdown
    return main_module.main(["--output-dir", str(directory), "--ci"])


def test_compare_prints_ratios_and_passes_on_the_same_numbers(fake_run, tmp_path, capsys):
    assert run_into(tmp_path / "then") == 0
    capsys.readouterr()
    argv = ["--output-dir", str(tmp_path / "now"), "--ci", "--compare", str(tmp_path / "then")]
    assert main_module.main(argv) == 0
    printed = capsys.readouterr().out
    assert "helion's speedup over aten, now / then, geomean: 1.000" in printed
    table = printed.split("Against ")[1]
    row = next(line for line in table.splitlines() if "(64, 48, 32)" in line and "helion_" in line)
    assert row.split()[-2:] == ["1", "1"]  # latency now / then, helion's speedup now / then


def test_compare_with_ci_fails_on_a_regression_beyond_the_threshold(on_a_gpu, tmp_path, capsys):
    assert run_into(tmp_path / "then") == 0
    FAKE_SLOWDOWN["gemm"] = FAKE_SLOWDOWN["addmm"] = 1 / (1 - REGRESSION_THRESHOLD) + 0.01
    argv = ["--output-dir", str(tmp_path / "now"), "--compare", str(tmp_path / "then")]
    assert main_module.main(argv) == 0  # without --ci it only reports
    assert main_module.main([*argv, "--ci"]) == 1
    assert (
        "CI failure: --compare: helion's speedup over aten fell to 0.89" in capsys.readouterr().err
    )


def test_compare_within_the_threshold_passes(on_a_gpu, tmp_path):
    assert run_into(tmp_path / "then") == 0
    FAKE_SLOWDOWN["gemm"] = FAKE_SLOWDOWN["addmm"] = 1.05
    argv = ["--output-dir", str(tmp_path / "now"), "--ci", "--compare", str(tmp_path / "then")]
    assert main_module.main(argv) == 0


def test_compare_gates_no_ci_on_the_interpreter_s_latencies(fake_run, tmp_path, capsys):
    """Without a GPU the latencies are the CPU interpreter's (noise of 0.1-0.8x between two
    runs): the comparison is printed, but a slower run fails no --ci."""
    assert run_into(tmp_path / "then") == 0
    FAKE_SLOWDOWN["gemm"] = FAKE_SLOWDOWN["addmm"] = 2.0
    argv = ["--output-dir", str(tmp_path / "now"), "--ci", "--compare", str(tmp_path / "then")]
    assert main_module.main(argv) == 0
    printed = capsys.readouterr()
    assert "helion's speedup over aten, now / then, geomean: 0.5" in printed.out
    assert "Not a regression check: latency is not meaningful (CPU interpreter)." in printed.out
    assert "CI failure" not in printed.err


def test_compare_reads_artifacts_in_subfolders_and_fails_ci_when_nothing_matches(tmp_path):
    then = tmp_path / "then" / "gpu-benchmark-shard-0"
    then.mkdir(parents=True)
    result = result_of(
        "(M, N, K);aten_matmul-latency;helion_matmul_tritonbench-latency\n(1, 2, 3);0.5;1.0\n"
    )
    write_json(then / "gemm_bwd.json", {"op": "gemm", "mode": "bwd"}, result)
    (then / "other.json").write_text("[1, 2]")
    then_latencies = latencies_in(tmp_path / "then")
    assert then_latencies[("gemm", "bwd", "fp16", "(1, 2, 3)", "helion_matmul_tritonbench")] == 1.0
    now = {key: value / 2 for key, value in then_latencies.items()}
    _, geomean = comparison(now, then_latencies)
    assert geomean == 1.0  # both twice as fast: no change relative to aten
    assert regression(comparison(now, {})[1]).startswith("--compare: no helion row")


def test_compare_never_reads_this_runs_own_files(on_a_gpu, tmp_path, capsys):
    """An --output-dir inside the --compare folder (the default bench_results/<time> under
    --compare bench_results): the earlier run is read before this one writes, so a slower run
    still fails the gate rather than matching itself."""
    assert run_into(tmp_path / "runs" / "1") == 0
    FAKE_SLOWDOWN["gemm"] = FAKE_SLOWDOWN["addmm"] = 1.3
    # (This run's files sort after the earlier run's: read with them, they would override it.)
    argv = ["--output-dir", str(tmp_path / "runs" / "2"), "--ci", "--compare"]
    assert main_module.main([*argv, str(tmp_path / "runs")]) == 1
    assert "CI failure: --compare: helion's speedup over aten fell" in capsys.readouterr().err


@pytest.mark.parametrize("given", ["missing", "a file", "empty", "two runs"])
def test_compare_refuses_a_folder_that_is_not_one_earlier_run(fake_run, tmp_path, capsys, given):
    """Before anything runs: exit 2 with the reason (a missing folder, a file, no results, or
    two runs whose latencies would override each other)."""
    earlier = tmp_path / "earlier"
    if given == "a file":
        earlier.write_text("{}")
    elif given == "empty":
        earlier.mkdir()
    elif given == "two runs":
        assert run_into(earlier / "a") == 0 and run_into(earlier / "b") == 0
    capsys.readouterr()
    fake_run.clear()
    argv = ["--output-dir", str(tmp_path / "now"), "--compare", str(earlier)]
    assert main_module.main(argv) == 2
    err = capsys.readouterr().err
    reason = {
        "missing": "is not a directory",
        "a file": "is not a directory",
        "empty": "holds no result JSON",
        "two runs": "holds more than one run",
    }[given]
    assert err.startswith(f"run_bench.py: error: --compare: {earlier}") and reason in err
    assert not fake_run  # nothing ran
    assert not (tmp_path / "now").exists()


def test_an_output_dir_that_cannot_be_made_is_a_usage_error(fake_run, tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    assert main_module.main(["--output-dir", str(tmp_path / "afile")]) == 2
    assert capsys.readouterr().err.startswith(f"run_bench.py: error: --output-dir {tmp_path}")
    assert not fake_run


def test_a_reused_output_dir_reports_only_this_runs_files(fake_run, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.json").write_text("{}")
    os.utime(out / "stale.json", (0, 0))  # written long before this run
    assert main_module.main(["--output-dir", str(out), "--op", "gemm", "--mode", "fwd"]) == 0
    listed = capsys.readouterr().out.split(f"Results in {out}:")[1]
    assert "gemm_fwd.json" in listed and "stale.json" not in listed


# --- --gpus --------------------------------------------------------------------------------------


def test_worker_argv_takes_the_shard_and_leaves_the_parent_flags():
    argv = ["--gpus", "2", "--ci", "--compare=old", "--output-dir", "o", "--precision", "bf16"]
    assert worker_argv(argv, 1, 2, Path("res")) == [
        "--ci",
        "--precision",
        "bf16",
        "--shard",
        "1/2",
        "--output-dir",
        "res",
    ]


@pytest.mark.parametrize(("text", "available", "count"), [("all", 4, 4), ("2", 2, 2), ("1", 8, 1)])
def test_gpu_count(text, available, count):
    assert gpu_count(text, available) == count


@pytest.mark.parametrize(("text", "available"), [("3", 2), ("all", 0)])
def test_gpu_count_refuses_gpus_that_are_not_there(text, available):
    with pytest.raises(ValueError, match=f"--gpus {text}: this machine has {available}"):
        gpu_count(text, available)


def test_gpus_runs_one_worker_per_gpu_into_one_summary(monkeypatch, tmp_path, capsys):
    """Each fake worker writes what its shard would; the parent merges them into one table."""
    started = []

    class Worker:
        def __init__(self, command, env):
            started.append((command, env["CUDA_VISIBLE_DEVICES"]))
            shard = command[command.index("--shard") + 1].replace("/", "of")
            shape = "(1024, 1024, 1024)" if shard == "0of2" else "(4096, 4096, 4096)"
            result = result_of(f"(M, N, K);helion_matmul_tritonbench-accuracy\n{shape};1.0\n")
            write_json(
                tmp_path / f"gemm_bwd_shard{shard}.json", {"op": "gemm", "mode": "bwd"}, result
            )

        def wait(self):
            return 0

    monkeypatch.setattr(main_module.torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(gpus, "run_workers", functools.partial(gpus.run_workers, spawn=Worker))
    monkeypatch.setattr(main_module, "run_workers", gpus.run_workers)
    assert main_module.main(["--gpus", "all", "--ci", "--output-dir", str(tmp_path)]) == 0
    assert [(command[1:3], device) for command, device in started] == [
        (["-m", "benchmarks.main"], "0"),
        (["-m", "benchmarks.main"], "1"),
    ]
    helion = [line for line in capsys.readouterr().out.splitlines() if "helion_matmul" in line]
    assert len(helion) == 1 and "2/2" in helion[0]


def test_gpus_beyond_the_machine_fail_fast(monkeypatch, capsys):
    monkeypatch.setattr(main_module.torch.cuda, "device_count", lambda: 1)
    assert main_module.main(["--gpus", "2"]) == 2
    assert "--gpus 2: this machine has 1 CUDA GPU(s)" in capsys.readouterr().err


# --- merging calls and shards --------------------------------------------------------------------


def test_merge_csv_keeps_one_header_and_no_averages():
    one = "(M, N, K);a-latency\n(1, 1, 1);0.5\naverage;0.5\n"
    two = "(M, N, K);a-latency\n(2, 2, 2);0.7\naverage;0.7\n"
    assert merge_csv([one]) == one
    assert merge_csv([one, "", two]) == "(M, N, K);a-latency\n(1, 1, 1);0.5\n(2, 2, 2);0.7\n"


def test_json_reads_back_and_shards_merge(tmp_path):
    write_json(
        tmp_path / "a.json",
        {"op": "gemm", "mode": "bwd", "precision": "bf16"},
        result_of(TRITONBENCH_CSV),
    )
    back = read_json(tmp_path / "a.json")
    assert (back.job.name, back.precision, len(back.rows)) == ("gemm_bwd", "bf16", 4)
    (merged,) = main_module.merge_shards([back, back])
    assert len(merged.rows) == 8


def test_output_to_leaves_handlers_made_inside_it_working(tmp_path):
    """tritonbench makes its logging handler during the first call, inside the redirect;
    later calls must still log (a handler holding the first call's closed file lost them)."""
    import logging

    log = tmp_path / "run.log"
    logger = logging.getLogger("helion_ops_test_output_to")
    with output_to(log):
        handler = logging.StreamHandler()  # takes sys.stderr as it is in here
        logger.addHandler(handler)
        logger.warning("first call")
    try:
        with output_to(log):
            logger.warning("second call")
    finally:
        logger.removeHandler(handler)
    text = log.read_text()
    assert "first call" in text and "second call" in text and "Logging error" not in text


def test_gpu_only_tools_say_so_without_a_gpu(monkeypatch, capsys):
    """The GPU measuring tools exit 2 with a message on a machine without a GPU."""
    import torch

    from benchmarks import host_overhead, wave_split

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert host_overhead.main([]) == 2
    assert "host_overhead_cpu" in capsys.readouterr().err
    assert wave_split.main(["--shape", "64x64x64"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
    from benchmarks import rule_ab

    assert rule_ab.main(["--off", "narrow_tiles.narrow_columns", "--shape", "64x64x64"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_rule_ab_turns_a_rule_off_everywhere_and_back(capsys):
    """``benchmarks.rule_ab``: while a rule is off, every module's reference to it answers
    False (the launcher's and the config rules' alike); after, the rule again; a name the
    package lacks is refused before anything runs."""
    import torch

    from benchmarks import rule_ab
    from helion_ops import configs, kernel, long_k, narrow_tiles

    rule = rule_ab.predicate("narrow_tiles.few_columns_long_k")
    assert kernel.long_k_product(4096, 8, 8192, torch.bfloat16)
    with rule_ab.turned_off([rule, rule_ab.predicate("narrow_tiles.narrow_columns")]):
        assert not kernel.long_k_product(4096, 8, 8192, torch.bfloat16)
        assert long_k.split_rule(4096, 8, 8192, 132).config["block_sizes"][1] != 16
        assert not configs.narrow_columns(16384, 60) and not narrow_tiles.narrow_columns(16384, 60)
    assert kernel.long_k_product(4096, 8, 8192, torch.bfloat16)
    assert configs.narrow_columns(16384, 60) and narrow_tiles.few_columns_long_k is rule
    bad_names = {
        "narrow_tiles.nothing": "has no function 'nothing'",
        "nowhere.few_rows": "helion_ops has no module 'nowhere'",
        "narrow_tiles.FEW_COLUMNS": "has no function 'FEW_COLUMNS'",
        "narrow_tiles": "give module.function",
        "kernel.reset": "not a rule (a function annotated to return bool)",
    }
    for name, message in bad_names.items():
        with pytest.raises(SystemExit):
            rule_ab.main(["--off", name, "--shape", "64x64x64"])
        err = capsys.readouterr().err
        assert f"--off {name!r}: " in err and message in err
    for bad in (["--shape", "64x64x64:rt"], ["--shape", "64x64x64", "--rounds", "0"]):
        with pytest.raises(SystemExit):
            rule_ab.main(["--off", "narrow_tiles.narrow_columns", *bad])
        assert bad[-1] in capsys.readouterr().err


@pytest.mark.parametrize("op", ["gemm", "addmm"])
@pytest.mark.parametrize("mode", ["fwd", "bwd"])
def test_rule_ab_keeps_each_row_as_it_is_measured(tmp_path, monkeypatch, capsys, mode, op):
    """A run of ``benchmarks.rule_ab`` cut short (a timeout's signal, here on the third
    product) has printed, and written to ``--json``, every row it measured before, of the
    pass ``--mode`` names, of the op ``--op`` names."""
    import torch

    from benchmarks import rule_ab

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "a GPU")
    monkeypatch.setattr(rule_ab, "operands", lambda *args: (None, None))
    monkeypatch.setattr(rule_ab.torch, "randn", lambda *args, **kwargs: None)
    monkeypatch.setattr(rule_ab, "forget_decisions", lambda: None)
    times = iter([{"us": 2.0, "aten_us": 3.0}, {"us": 4.0, "aten_us": 3.0}])
    timed, untimed = ("measure", "measure_backward")[:: 1 if mode == "fwd" else -1]
    monkeypatch.setattr(rule_ab, timed, lambda *operands: next(times))
    monkeypatch.setattr(rule_ab, untimed, None)
    path = tmp_path / "ab.json"
    argv = ["--off", "narrow_tiles.narrow_columns", "--shape", "64x64x64", "--shape", "96x8x4096"]
    with pytest.raises(StopIteration):
        rule_ab.main([*argv, "--rounds", "1", "--mode", mode, "--op", op, "--json", str(path)])
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    written = json.loads(path.read_text())
    assert printed == written["rows"] and written["device"] == "a GPU"
    assert written["mode"] == mode and written["op"] == op
    assert [(r["shape"], r["rule"], r["us"]) for r in printed] == [
        ("64x64x64", "on", 2.0),
        ("96x8x4096", "on", 4.0),
    ]


def test_rule_ab_times_the_backward_and_checks_both_gradients(monkeypatch):
    """``benchmarks.rule_ab --mode bwd``'s measure (without graphs): both
    gradients of ``helion_ops.matmul`` and of torch's, a column-major operand among them,
    against float64; a wrong gradient shows in the error."""
    import torch

    import helion_ops
    from benchmarks import rule_ab

    a, b = torch.randn(40, 24, device=DEVICE), torch.randn(19, 24, device=DEVICE).T
    row = rule_ab.measure_backward(a, b, cudagraph=False)
    assert row.keys() == {"us", "rel_err", "aten_us", "aten_rel_err"}
    assert row["rel_err"] < 1e-5 and row["aten_rel_err"] < 1e-5, row
    assert row["us"] > 0 and row["aten_us"] > 0
    monkeypatch.setattr(helion_ops, "matmul", lambda x, y: torch.matmul(1.01 * x, y))
    assert rule_ab.measure_backward(a, b, cudagraph=False)["rel_err"] > 5e-3


def test_rule_ab_times_addmms_backward_and_checks_the_bias_gradient(monkeypatch):
    """``benchmarks.rule_ab --op addmm --mode bwd``'s measure (without graphs): the three
    gradients of ``helion_ops.addmm`` and of torch's, an [M, N] bias among them, against
    float64; a wrong bias gradient alone shows in the error."""
    import torch

    import helion_ops
    from benchmarks import rule_ab

    a, b = torch.randn(40, 24, device=DEVICE), torch.randn(19, 24, device=DEVICE).T
    bias = torch.randn(40, 19, device=DEVICE)
    row = rule_ab.measure_backward(a, b, bias, cudagraph=False)
    assert row["rel_err"] < 1e-5 and row["aten_rel_err"] < 1e-5, row
    addmm = helion_ops.addmm
    monkeypatch.setattr(helion_ops, "addmm", lambda c, x, y: addmm(1.01 * c, x, y))
    assert rule_ab.measure_backward(a, b, bias, cudagraph=False)["rel_err"] > 5e-3


def test_the_cpu_host_bench_times_every_row_in_turn():
    """``benchmarks.host_overhead_cpu`` in a process of its own (it stubs Triton's launches
    for the whole process): every row timed, batches interleaved as on the GPU."""
    argv = [sys.executable, "-m", "benchmarks.host_overhead_cpu", "--calls", "20", "--repeats", "2"]
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=root)
    assert done.returncode == 0, done.stderr[-2000:]
    timed = [line.rsplit(maxsplit=2) for line in done.stdout.splitlines() if line.endswith(" us")]
    assert [name for name, _, _ in timed] == [
        "launch_mm", "matmul (no grad)", "addmm (no grad)", "matmul (grad)", "addmm (grad)",
        "matmul fwd+bwd", "addmm fwd+bwd",
    ]  # fmt: skip
    assert all(float(us) > 0 for _, us, _ in timed)
    # A row to profile that is none of these is named before anything is timed.
    done = subprocess.run([*argv, "-p", "bogus"], capture_output=True, text=True, cwd=root)
    assert done.returncode == 2 and "-p 'bogus': the rows are 'launch_mm'" in done.stderr
    assert " us" not in done.stdout


def test_the_precisions_run_bench_accepts_are_the_built_in_harness_dtypes():
    from benchmarks import cli, harness

    assert set(cli.PRECISIONS) == set(harness.DTYPES)


def test_tritonbench_s_own_usage_error_reaches_the_error_cell(monkeypatch, capsys):
    """A flag tritonbench refuses made every call's cell read `SystemExit: 2`; argparse's
    reason, printed on stderr, now follows it (and still reaches the log)."""

    def refusing(argv):
        parser = argparse.ArgumentParser(prog="tritonbench")
        parser.add_argument("--op")
        parser.parse_args(argv)

    monkeypatch.setattr(main_module, "run_tritonbench", refusing)
    _, error = main_module._call_tritonbench(["--op", "gemm", "--foo-bar", "3"])
    assert error.startswith("SystemExit: 2 (tritonbench: error: unrecognized arguments:")
    assert "--foo-bar 3" in error
    assert "unrecognized arguments" in capsys.readouterr().err
