"""benchmarks.validate: its summary, and ``--gpus``' one process per (op, dtype) and GPU."""

from __future__ import annotations

import json
import os
import threading
import time
import types
from pathlib import Path

import pytest

from benchmarks import validate


def write_result(out, op, precision, mode, speedups):
    """A run_bench JSON as validate's folders hold it: one helion and one aten row per shape."""
    folder = out / f"{op}_{precision}"
    folder.mkdir(parents=True, exist_ok=True)
    aten, helion = validate.BACKENDS[op]
    rows = []
    for i, speedup in enumerate(speedups):
        shape = f"({i + 1}, 8, 8)"
        rows.append({"shape": shape, "backend": aten, "latency": speedup})
        rows.append({"shape": shape, "backend": helion, "latency": 1.0, "accuracy": 1.0})
    meta = {"op": op, "mode": mode}
    (folder / f"{op}_{mode}.json").write_text(json.dumps({"meta": meta, "rows": rows}))


def test_summary_gives_geomean_min_and_shapes_below_085(tmp_path):
    write_result(tmp_path, "gemm", "bf16", "fwd", [2.0, 0.5, 1.0])
    (line,) = validate.summarize(validate.collect(tmp_path))
    assert line == "gemm fwd bf16: 3 shapes, geomean 1.000, min 0.500 at (2, 8, 8), 1 below 0.85"


def test_gpus_run_each_unit_once_and_never_two_on_one_gpu():
    active, ran, lock = {}, [], threading.Lock()

    def spawn(command, env):
        gpu = env["CUDA_VISIBLE_DEVICES"]
        with lock:
            assert gpu not in active, f"two units at once on GPU {gpu}"
            active[gpu] = command
        time.sleep(0.05)
        with lock:
            del active[gpu]
            ran.append((command[command.index("--op") + 1], command, gpu))
        return types.SimpleNamespace(returncode=3 if "fp16" in command else 0)

    units = [("gemm", "bf16"), ("addmm", "bf16"), ("gemm", "fp16"), ("addmm", "fp16")]
    dealt = validate.dealt_out(units, 2)
    assert dealt == [(op, p, "0/1") for op, p in units]  # as many units as GPUs or more
    assert validate.run_on_gpus(dealt, 2, ["--mode", "bwd"], spawn) == 3
    assert sorted((op, c[c.index("--precision") + 1]) for op, c, _ in ran) == sorted(units)
    assert {gpu for *_, gpu in ran} == {"0", "1"}
    assert all("--no-summary" in c and c[-2:] == ["--mode", "bwd"] for _, c, _ in ran)
    assert all(c[c.index("--part") + 1] == "0/1" for _, c, _ in ran)


def test_fewer_units_than_gpus_are_dealt_out_in_parts(tmp_path, monkeypatch):
    """One (op, dtype) on two GPUs: its shapes in two parts, one process each, every shape in
    exactly one; gemm's parts in folders of their own, which the summary reads."""
    assert validate.dealt_out([("gemm", "bf16")], 2) == [
        ("gemm", "bf16", "0/2"),
        ("gemm", "bf16", "1/2"),
    ]
    assert len(validate.dealt_out([("gemm", "bf16"), ("addmm", "bf16")], 3)) == 4
    calls = []

    def run_bench(argv):  # gemm's shapes (from its --input file), or addmm's argv
        if "--input" in argv:
            lines = Path(argv[argv.index("--input") + 1]).read_text().splitlines()[1:]
            calls.append([line.split(",")[:3] for line in lines])
        else:
            calls.append(argv)
        return 0

    monkeypatch.setattr(validate, "run_bench", run_bench)
    shapes = [(i, 8, 8) for i in range(1, 6)]
    out = tmp_path / "out"
    for part in ("0/2", "1/2"):
        assert validate.run("gemm", "bf16", "fwd", shapes, out, [], part) == 0
    assert calls == [
        [["1", "8", "8"], ["3", "8", "8"], ["5", "8", "8"]],
        [["2", "8", "8"], ["4", "8", "8"]],
    ]
    assert (out / "gemm_bf16" / "part0" / "shapes.csv").is_file()
    calls.clear()
    assert validate.run("addmm", "bf16", "fwd", shapes, out, [], "1/2") == 0
    assert [c[c.index("--m") + 1] for c in calls] == ["2", "4"]


def test_gemm_runs_in_the_layout_asked_for(tmp_path, monkeypatch):
    """gemm's --layout reaches tritonbench: tt unless told, tn (tritonbench's default) when
    asked, in this process and in the command of each --gpus worker."""
    import torch

    layouts = []
    monkeypatch.setattr(validate, "run_bench", lambda argv: layouts.append(argv) or 0)
    assert validate.run("gemm", "bf16", "fwd", [(8, 8, 8)], tmp_path, []) == 0
    assert validate.run("gemm", "bf16", "fwd", [(8, 8, 8)], tmp_path, [], layout="tn") == 0
    assert [argv[argv.index("--layout") + 1] for argv in layouts] == ["tt", "tn"]
    assert all(argv.count("--layout") == 1 for argv in layouts)

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    workers_argv = []
    monkeypatch.setattr(validate, "run_on_gpus", lambda u, c, argv: workers_argv.extend(argv) or 0)
    argv = ["--gpus", "1", "--op", "gemm", "--layout", "tn", "--no-summary"]
    validate.main([*argv, "--output-dir", str(tmp_path)])
    assert workers_argv[workers_argv.index("--layout") + 1] == "tn"


def test_gpus_summarize_once_all_workers_wrote(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    seen = {}

    def workers(units, count, argv):
        seen.update(units=units, count=count, argv=argv)
        for op, precision, _ in units:
            write_result(tmp_path, op, precision, "fwd", [1.0])
        return 0

    monkeypatch.setattr(validate, "run_on_gpus", workers)
    argv = ["--gpus", "all", "--op", "gemm,addmm", "--mode", "fwd", "--output-dir", str(tmp_path)]
    assert validate.main([*argv, "--cudagraph"]) == 0
    assert seen["count"] == 2 and len(seen["units"]) == 4 and "--cudagraph" in seen["argv"]
    summary = json.loads((tmp_path / "validation.json").read_text())["summary"]
    assert len(summary) == 4


def test_more_gpus_than_there_are_is_an_error(tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(SystemExit) as exit_info:
        validate.main(["--gpus", "2", "--output-dir", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "--gpus 2: this machine has 1 CUDA GPU(s)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--op", "foo"], "--op: unknown foo; choose from gemm, addmm"),
        (["--precision", "fp64"], "--precision: unknown fp64; choose from fp16, bf16, fp32"),
        (["--shapes", "/nonexistent.csv"], "--shapes /nonexistent.csv: no such file"),
        (["--summarize-only", "--output-dir", "/nonexistent"], "is not a folder of an earlier"),
        (["--rounds", "0"], "--rounds 0: give 1 or more"),
        (["--mode", "fwdd"], "--mode: unknown fwdd; choose from fwd, bwd, fwd_bwd, fwd_no_grad"),
        (["--shapes", "{bad}"], "bad.csv: each row needs integer M, N and K columns"),
        (["--shapes", "{lower}"], "lower.csv: each row needs integer M, N and K columns"),
        (["--shapes", "{empty}"], "empty.csv: no shape"),
        (["--max-dim", "4", "--shapes", "{tiny}"], "no shape with M, N and K at most --max-dim 4"),
        # Without a GPU, as run_bench.py refuses each of its calls (72 errors for the set).
        (["--precision", "fp16"], "validation.csv: without a GPU the kernels run in Triton's"),
        (["--shapes", "{tiny}"], "--precision bf16: without a GPU the kernels run in Triton's"),
    ],
)
def test_bad_command_lines_fail_before_any_measuring(argv, message, tmp_path, monkeypatch, capsys):
    """Each measured every shape (or none) and then failed with a traceback, or failed once
    a run_bench.py call."""

    def no_run(*args, **kwargs):
        raise AssertionError("a benchmark ran")

    files = {"bad": "M,N,K\n12x,4,4\n", "lower": "m,n,k\n4,4,4\n", "empty": "M,N,K\n"}
    files["tiny"] = "M,N,K\n40,24,56\n"
    for name, text in files.items():
        (tmp_path / f"{name}.csv").write_text(text)
    argv = [arg.format(**{name: tmp_path / f"{name}.csv" for name in files}) for arg in argv]
    monkeypatch.setattr(validate, "run", no_run)
    monkeypatch.setattr(validate.torch.cuda, "device_count", lambda: 0)
    with pytest.raises(SystemExit) as exit_info:
        validate.main([*argv, "--output-dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_folder_of_rounds_needs_its_rounds(tmp_path, capsys):
    """A folder measured with --rounds 2 read as one round failed after all the measuring."""
    (tmp_path / "round0").mkdir()
    with pytest.raises(SystemExit):
        validate.main(["--summarize-only", "--output-dir", str(tmp_path)])
    assert "holds a run of several --rounds: give its --rounds" in capsys.readouterr().err


def test_validate_runs_in_the_cpu_interpreter(tmp_path):
    """A fresh process on the CPU: nothing validate imports may import Triton before run_bench
    sets TRITON_INTERPRET (addmm then failed: "Cannot call @triton.jit'd outside of the scope
    of a kernel")."""
    import subprocess
    import sys

    shapes = tmp_path / "shapes.csv"
    shapes.write_text("M,N,K,Bias,source\n40,24,56,,tiny\n")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "benchmarks.validate", "--op", "addmm", "--precision"]
    command += ["fp16", "--mode", "fwd", "--shapes", str(shapes), "--output-dir", str(out)]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    subprocess.run(command, check=True, env=env, cwd=Path(__file__).parent.parent)
    rows = json.loads((out / "validation.json").read_text())["rows"]
    assert [(r["shape"], r["accuracy"]) for r in rows] == [("(40, 24, 56)", 1.0)]


def test_rounds_report_each_shapes_median(tmp_path):
    """``--rounds 3``: each shape's median latencies and speedup over the rounds that ran it,
    its worst accuracy, and how many rounds that was."""
    for i, speedups in enumerate([[2.0, 0.5], [1.0, 0.7], [4.0]]):
        write_result(tmp_path / f"round{i}", "gemm", "bf16", "bwd", speedups)
    inaccurate = tmp_path / "round2" / "gemm_bf16" / "gemm_bwd.json"
    data = json.loads(inaccurate.read_text())
    data["rows"][1]["accuracy"] = 0.0  # helion's row of the first shape, third round
    inaccurate.write_text(json.dumps(data))
    # torch's spelling of the dtype, as helion_ops.tune takes it: the same folders
    argv = ["--op", "gemm", "--precision", "bfloat16", "--mode", "bwd", "--rounds", "3"]
    assert validate.main([*argv, "--summarize-only", "--output-dir", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "validation.json").read_text())["rows"]
    got = {r["shape"]: (r["speedup"], r["aten_ms"], r["accuracy"], r["rounds"]) for r in rows}
    assert got == {"(1, 8, 8)": (2.0, 2.0, 0.0, 3), "(2, 8, 8)": (0.6, 0.6, 1.0, 2)}


def test_rounds_measure_into_a_folder_each(tmp_path, monkeypatch):
    """Each round runs every (op, dtype) into its own folder, round after round."""
    ran = []
    monkeypatch.setattr(validate, "run", lambda *args: ran.append(args[4]) or 0)
    monkeypatch.setattr(validate, "collect", lambda out: [])
    shapes = tmp_path / "shapes.csv"
    shapes.write_text("M,N,K,Bias,source\n40,24,56,,tiny\n")
    argv = ["--op", "gemm,addmm", "--precision", "fp16", "--rounds", "2", "--shapes", str(shapes)]
    validate.main([*argv, "--output-dir", str(tmp_path)])
    assert ran == [tmp_path / "round0"] * 2 + [tmp_path / "round1"] * 2


def test_an_installed_package_carries_the_shape_sets():
    """validate's default --shapes and the held-out draws are package data: a non-editable
    install (pip install .) left them out."""
    import fnmatch

    tomllib = pytest.importorskip("tomllib")
    root = Path(validate.__file__).parent.parent
    data = tomllib.loads((root / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["benchmarks"]
    shapes = sorted(
        p.relative_to(root / "benchmarks") for p in (root / "benchmarks").glob("shapes/*")
    )
    assert validate.VALIDATION_CSV.relative_to(root / "benchmarks") in shapes
    assert all(any(fnmatch.fnmatch(str(s), p) for p in patterns) for s in shapes)
