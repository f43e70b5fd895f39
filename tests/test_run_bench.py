"""run_bench's parts that need no tritonbench: command line, plan, CSV parsing, files, summary."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from benchmarks import main as main_module
from benchmarks.cli import parse_args, parse_shard
from benchmarks.plot import write_plot
from benchmarks.report import ci_failures, summary_table
from benchmarks.results import (
    JobResult,
    add_corrected_tflops,
    parse_tritonbench_csv,
    tritonbench_commit,
    write_csv,
    write_json,
)
from benchmarks.suite import (
    CPU_METRICS,
    GPU_METRICS,
    Job,
    plan_jobs,
    shard_range,
)
from benchmarks.tritonbench_runner import (
    INSTALL_COMMAND,
    addmm_sizes_need_bias_1d,
    has_tolerance_flags,
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
    argv = ["--op", "gemm", "--m", "64", "--precision=bf16", "--ci", "--shard", "1/2"]
    argv += ["--output-dir", "out", "--metrics", "accuracy", "--layout", "tt"]
    options = parse_args(argv)
    assert options.ops == ("gemm",)
    assert options.modes is None
    assert options.metrics == "accuracy"
    assert (options.ci, options.shard, options.output_dir) == (True, (1, 2), Path("out"))
    assert options.passthrough == ("--m", "64", "--precision=bf16", "--layout", "tt")


def test_defaults_are_the_suite_and_a_timestamped_folder():
    options = parse_args([])
    assert (options.ops, options.modes, options.ci, options.shard) == (None, None, False, None)
    assert options.output_dir.parent == Path("bench_results")
    assert options.output_dir.name.endswith("Z")


def test_modes_from_lists_and_flags():
    assert parse_args(["--mode", "fwd,bwd"]).modes == ("fwd", "bwd")
    assert parse_args(["--fwd-bwd"]).modes == ("fwd_bwd",)
    assert parse_args(["--op", "addmm,gemm"]).ops == ("addmm", "gemm")


@pytest.mark.parametrize(("text", "shard"), [("0/2", (0, 2)), ("1/2", (1, 2)), ("0/1", (0, 1))])
def test_parse_shard(text, shard):
    assert parse_shard(text) == shard


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shard", "2/2"], "0 <= i < n"),
        (["--shard", "1/0"], "0 <= i < n"),
        (["--shard", "1"], "must look like i/n"),
        (["--shard=-1/2"], "must look like i/n"),
        (["--shard", "a/b"], "must look like i/n"),
        (["--shard", "0/2", "--num-inputs", "3"], "--shard chooses --input-id"),
        (["--suite", "--op", "gemm"], "drop --op or --suite"),
        (["--mode", "backward"], "unknown ['backward']"),
        (["--isolate"], "lose the helion registration"),
        (["--output=x.csv"], "--output is not supported"),
    ],
)
def test_bad_command_lines_exit_2_with_a_reason(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


# --- the plan ------------------------------------------------------------------------------------


def only_of(job: Job) -> list[str]:
    return job.argv[job.argv.index("--only") + 1].split(",")


def test_gpu_suite():
    jobs = plan_jobs(parse_args([]), gpu=True)
    assert [job.name for job in jobs] == ["gemm_fwd", "gemm_bwd", "addmm_fwd", "addmm_bwd"]
    gemm_fwd, gemm_bwd, addmm_fwd, addmm_bwd = jobs
    assert only_of(gemm_fwd) == [
        "aten_matmul",
        "helion_matmul_tritonbench",
        "triton_tutorial_matmul",
        "pt2_triton_matmul",
    ]
    # The tutorial kernel has no backward; triton_addmm has one.
    assert only_of(gemm_bwd) == ["aten_matmul", "helion_matmul_tritonbench", "pt2_triton_matmul"]
    assert (
        only_of(addmm_fwd)
        == only_of(addmm_bwd)
        == [
            "aten_addmm",
            "helion_addmm_tritonbench",
            "triton_addmm",
            "pt2_triton_matmul",
        ]
    )
    for job in jobs:
        assert job.argv[job.argv.index("--metrics") + 1] == GPU_METRICS
        assert "--keep-going" in job.argv
        assert "--device" not in job.argv
        assert ("--layout" in job.argv) == (job.name == "gemm_bwd")


def test_cpu_suite_runs_aten_and_helion_on_tiny_shapes():
    gemm_fwd, _, addmm_fwd, _ = plan_jobs(parse_args([]), gpu=False)
    assert only_of(gemm_fwd) == ["aten_matmul", "helion_matmul_tritonbench"]
    assert only_of(addmm_fwd) == ["aten_addmm", "helion_addmm_tritonbench"]
    for job in (gemm_fwd, addmm_fwd):
        argv = " ".join(job.argv)
        assert f"--metrics {CPU_METRICS}" in argv
        assert "--device cpu" in argv
    assert "--m 64 --n 48 --k 32" in " ".join(gemm_fwd.argv)
    assert "--m 64 --k 32 --n 48" in " ".join(addmm_fwd.argv)


def test_the_command_line_overrides_the_suite():
    argv = ["--op", "gemm", "--mode", "fwd_bwd", "--only", "aten_matmul", "--m", "128"]
    argv += ["--layout", "nt", "--device", "cpu", "--metrics", "latency", "--ci"]
    (job,) = plan_jobs(parse_args(argv), gpu=False)
    assert job.argv.count("--layout") == job.argv.count("--device") == 1
    assert job.argv.count("--m") == 1
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
    assert "--m 64 --k 32 --n 48 --bias-1D-y 1" in " ".join(addmm.argv)
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
    argv = ["--op", "addmm", "--m", "1024", "--k", "1024", "--n", "1024"]
    assert main_module.main([*argv, "--output-dir", str(tmp_path / "out")]) == 2
    assert "--bias-1D-y" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_unknown_ops_pass_through_without_suite_defaults():
    (job,) = plan_jobs(parse_args(["--op", "softmax", "--mode", "fwd"]), gpu=True)
    assert "--only" not in job.argv


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


def test_main_without_tritonbench_says_how_to_install(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "tritonbench", None)
    assert main_module.main(["--output-dir", str(tmp_path / "out")]) == 2
    assert INSTALL_COMMAND in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


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
