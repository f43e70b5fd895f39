"""How a run is scored: the accuracy rules (built-in harness and tritonbench's backward
support) and the geomeans, counts and comparisons that reports and CI gates compute. Each
test here failed a mutant the rest of the suite let through."""

from __future__ import annotations

import time

import pytest
import torch

from benchmarks import harness, validate
from benchmarks.compare import latencies_in, latencies_of_results, relative_speedups
from benchmarks.report import ci_failures, summary_table
from benchmarks.results import JobResult, Row, parse_tritonbench_csv, write_json
from benchmarks.suite import BACKENDS, Job
from helion_ops import tritonbench_bwd


def _summary(speedups, accuracies=None):
    rows = [
        {"op": "gemm", "mode": "fwd", "dtype": "fp16", "shape": f"({i}, 8, 8)",
         "speedup": s, "accuracy": 1.0 if accuracies is None else accuracies[i]}
        for i, s in enumerate(speedups)
    ]  # fmt: skip
    (line,) = validate.summarize(rows)
    return line


def test_below_085_is_strict_and_at_085():
    assert _summary([0.84, 0.85, 0.88, 2.0]).endswith("1 below 0.85")


@pytest.mark.parametrize("accuracy", [None, "RuntimeError: boom"])
def test_summary_flags_a_missing_or_error_accuracy(accuracy):
    assert "accuracy not 1 at ['(1, 8, 8)']" in _summary([1.0, 1.0], [1.0, accuracy])


def test_summary_table_counts_an_error_accuracy_cell_as_not_passing():
    text = "(M, N, K);helion_matmul_tritonbench-accuracy\n(1, 2, 3);1.0\n(4, 5, 6);Error: x\n"
    rows = parse_tritonbench_csv(text)[1]
    table = summary_table([JobResult(Job("gemm", "fwd", ()), "(M, N, K)", rows)])
    assert "1/2" in table and "2/2" not in table
    assert len(ci_failures([JobResult(Job("gemm", "fwd", ()), "(M, N, K)", rows)])) == 1


def test_summary_table_speedup_is_a_geomean():
    rows = [Row(f"({i}, 2, 3)", "helion_matmul_tritonbench", {"speedup": s})
            for i, s in enumerate([4.0, 0.25])]  # fmt: skip
    table = summary_table([JobResult(Job("gemm", "fwd", ()), "(M, N, K)", rows)])
    line = next(li for li in table.splitlines() if "helion_matmul" in li)
    assert line.split()[-1] == "1"  # geomean of 4 and 0.25; a mean would be 2.125


def _then(tmp_path, mode, precision):
    names = BACKENDS["gemm"]
    rows = [Row("(1, 2, 3)", names.baseline, {"latency": 1.0}),
            Row("(1, 2, 3)", names.helion, {"latency": 1.0})]  # fmt: skip
    meta = {"op": "gemm", "mode": mode, "precision": precision}
    write_json(tmp_path / "r.json", meta, JobResult(Job("gemm", mode, ()), "(M, N, K)", rows))
    return latencies_in(tmp_path)


def _now(mode, precision):
    names = BACKENDS["gemm"]
    rows = [Row("(1, 2, 3)", names.baseline, {"latency": 1.0}),
            Row("(1, 2, 3)", names.helion, {"latency": 2.0})]  # fmt: skip
    return latencies_of_results([JobResult(Job("gemm", mode, ()), "", rows, precision=precision)])


@pytest.mark.parametrize(("then", "now"), [(("bwd", "fp16"), ("bwd", "bf16")),
                                           (("fwd", "fp16"), ("bwd", "fp16"))])  # fmt: skip
def test_compare_never_matches_another_dtype_or_mode(tmp_path, then, now):
    assert relative_speedups(_now(*now), _then(tmp_path, *then)) == {}
    assert relative_speedups(_now(*then), _then(tmp_path, *then)) != {}


def test_harness_speedup_is_baseline_over_helion(monkeypatch):
    names = BACKENDS["gemm"]

    def slow(a, b):
        time.sleep(0.02)
        return torch.matmul(a, b)

    monkeypatch.setattr(harness, "functions", lambda op: {names.baseline: torch.matmul,
                                                           names.helion: slow})  # fmt: skip
    argv = ["--op", "gemm", "--mode", "fwd", "--metrics", "latency,speedup", "--only",
            f"{names.baseline},{names.helion}", "--device", "cpu", "--m", "8", "--n", "8",
            "--k", "8"]  # fmt: skip
    _, helion = harness.run_call(argv)
    assert helion.metrics["speedup"] < 0.5


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_gemm_tolerance_fails_a_result_30_percent_off(precision):
    args = harness._parser().parse_args(["--op", "gemm", "--precision", precision])
    want = {"output": torch.tensor([1.0, 2.0, 4.0], dtype=harness.DTYPES[precision])}
    got = {"output": want["output"] * 1.3}
    assert not harness.accurate(got, want, harness.tolerance("gemm", args))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_baseline_rule_fails_a_result_10_percent_off(dtype):
    want = torch.tensor([40.0, 20.0, 10.0], dtype=dtype)
    with pytest.raises(AssertionError):
        tritonbench_bwd.assert_matches_baseline(want * 1.1, want, "output")


@pytest.mark.parametrize("tf32", [False, True], ids=["ieee", "tf32"])
def test_baseline_rule_under_tf32_takes_tf32s_rounding(restore_tf32, tf32):
    """Under torch's TF32 switch fp32 results are TF32's: a difference of 1.5e-3 of the
    largest value passes (two correct TF32 products differ by about 1e-3, call 352), one of
    1e-2 fails; without the switch fp32's rule fails the first."""
    torch.backends.cuda.matmul.allow_tf32 = tf32
    want = torch.randn(64, 64, dtype=torch.float32)
    scale = want.abs().max()
    near = want + 1.5e-3 * scale * torch.randn_like(want).sign()
    if tf32:
        tritonbench_bwd.assert_matches_baseline(near, want, "output")
    else:
        with pytest.raises(AssertionError):
            tritonbench_bwd.assert_matches_baseline(near, want, "output")
    with pytest.raises(AssertionError):
        tritonbench_bwd.assert_matches_baseline(want + 1e-2 * scale, want, "output")
    tritonbench_bwd.assert_matches_baseline(
        want.half().float() if tf32 else want.clone(), want, "output"
    )


def test_baseline_rule_fails_a_sign_flip():
    want = torch.tensor([40.0, -20.0], dtype=torch.bfloat16)
    with pytest.raises(AssertionError):
        tritonbench_bwd.assert_matches_baseline(want.abs(), want, "output")


def test_explicit_tolerance_fails_nan_even_where_the_baseline_has_nan():
    want = {"output": torch.tensor([40.0, float("nan")], dtype=torch.float16)}
    assert not harness.accurate({"output": want["output"].clone()}, want, (0.1, 1e-2))


def test_fwd_bwd_accuracy_checks_the_gradients():
    a, b = torch.ones(2, 2), torch.ones(2, 2)

    def run(scale):
        def fn():
            a.grad, b.grad = torch.ones(2, 2), scale * torch.ones(2, 2)
            return a @ b, [a, b]

        return fn

    assert tritonbench_bwd.backend_accuracy("fwd_bwd", run(1.0), run(1.0))
    assert not tritonbench_bwd.backend_accuracy("fwd_bwd", run(2.0), run(1.0))


def test_settled_grads_are_copies_and_keep_a_missing_grad_missing():
    """The accuracy pass's grads outlive the next backward, which may write into the same
    tensors (accumulating) or their memory: copies, not the grads themselves."""
    a, b = torch.ones(2, 2, requires_grad=True), torch.ones(2, 2, requires_grad=True)
    a.grad = torch.full((2, 2), 3.0)
    copies = tritonbench_bwd.settled_grads([a, b])
    a.grad.add_(1.0)
    assert torch.equal(copies[0], torch.full((2, 2), 3.0)) and copies[1] is None


@pytest.mark.parametrize("rule", ["baseline", "harness"])
def test_a_nan_in_the_baseline_scores_0_rather_than_raising(rule):
    """A NaN made the baseline rule's atol NaN, and assert_close raised a RuntimeError out of
    the accuracy check (the built-in harness's call failed; tritonbench got the error)."""
    want = torch.tensor([40.0, float("nan")], dtype=torch.float16)
    if rule == "baseline":
        with pytest.raises(AssertionError):
            tritonbench_bwd.assert_matches_baseline(want.clone(), want, "output")
    else:
        assert not harness.accurate({"output": want.clone()}, {"output": want}, None)
