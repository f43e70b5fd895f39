"""The tritonbench plugin: registration, OLD-tritonbench backward support, end-to-end accuracy.

The unit tests run without tritonbench (a fake module stands in for it where needed); the
end-to-end ones run the real harness on tiny shapes (the CPU interpreter without a GPU) and
are skipped when tritonbench is not importable.
"""

from __future__ import annotations

import contextlib
import enum
import importlib.util
import json
import logging
import sys
import types
from pathlib import Path

import pytest
import torch
from conftest import DEVICE

import helion_ops
from benchmarks.main import main
from benchmarks.results import parse_tritonbench_csv
from benchmarks.suite import BACKENDS, BIAS_1D_FLAGS
from benchmarks.tritonbench_runner import addmm_sizes_need_bias_1d, run_tritonbench
from helion_ops import AddMMFunction, MatMulFunction, native, tritonbench_bwd, tritonbench_plugin

HAS_TRITONBENCH = importlib.util.find_spec("tritonbench") is not None
needs_tritonbench = pytest.mark.skipif(not HAS_TRITONBENCH, reason="tritonbench not installed")


class Mode(enum.Enum):
    FWD = "fwd"
    BWD = "bwd"
    FWD_BWD = "fwd_bwd"
    FWD_NO_GRAD = "fwd_no_grad"


class FakeBenchmarkOperator:
    """The parts of OLD tritonbench's BenchmarkOperator that the backward support touches."""

    mode = Mode.BWD
    requires_grad = True
    example_inputs: tuple = ()

    def get_input_iter(self):
        a = torch.randn(6, 4)
        w = torch.randn(5, 4).T  # column-major, as gemm's default layout makes it
        yield a, w, None, 3

    def get_bwd_fn(self, fwd_fn):
        raise NotImplementedError("Each operator must implement its own backward function.")

    def _get_bm_func(self, bm_func_name):  # makes the backend's function, then wraps it
        fwd_fn = getattr(self, bm_func_name)(*self.example_inputs)
        return fwd_fn if self.mode == Mode.FWD else self.get_bwd_fn(fwd_fn)

    @classmethod
    def has_bwd(cls) -> bool:
        return cls.get_bwd_fn is not FakeBenchmarkOperator.get_bwd_fn


@pytest.fixture
def fake_operator() -> type:
    class Operator(FakeBenchmarkOperator):
        pass

    assert tritonbench_bwd.add_backward_support(Operator)
    return Operator


# --- OLD-tritonbench backward support ---------------------------------------------------------


def test_backward_support_installs_once_and_only_where_missing():
    class Operator(FakeBenchmarkOperator):
        pass

    class HasOwnBackward(FakeBenchmarkOperator):
        def get_bwd_fn(self, fwd_fn):
            return fwd_fn

    assert tritonbench_bwd.add_backward_support(Operator)
    assert Operator.has_bwd()
    iter_after_first = Operator.get_input_iter
    assert not tritonbench_bwd.add_backward_support(Operator)
    assert Operator.get_input_iter is iter_after_first
    assert not tritonbench_bwd.add_backward_support(HasOwnBackward)
    assert "accuracy" not in vars(HasOwnBackward)


def test_inputs_become_grad_leaves_keeping_layout(fake_operator):
    a, w, bias, scalar = next(fake_operator().get_input_iter())
    for t in (a, w):
        assert t.is_leaf and t.requires_grad
    assert w.stride() == (1, 4)
    assert bias is None and scalar == 3


def test_inputs_untouched_without_grad(fake_operator):
    op = fake_operator()
    op.requires_grad = False
    a, w, _, _ = next(op.get_input_iter())
    assert not a.requires_grad and not w.requires_grad


def _matmul_case(op):
    a, w, bias, _ = next(op.get_input_iter())
    op.example_inputs = (a, w, bias)
    return a, w


def test_bwd_fn_runs_the_backward_with_a_fixed_dy(fake_operator):
    op = fake_operator()
    a, w = _matmul_case(op)
    bwd_fn = op.get_bwd_fn(lambda: a @ w)
    torch.manual_seed(0)
    dy = 0.1 * torch.randn(6, 5)
    for _ in range(2):  # the grads are reset each call, never accumulated
        inputs = bwd_fn()
        assert inputs == [a, w]
        torch.testing.assert_close(a.grad, dy @ w.T)
        torch.testing.assert_close(w.grad, a.T @ dy)


@pytest.mark.parametrize("graphs", [False, True])
def test_bwd_fn_ends_synchronized_under_graphs_except_in_captures(
    fake_operator, monkeypatch, graphs
):
    # Under --cudagraph triton sizes the timed graph from five eager calls: each must end with
    # the GPU idle, or a queued backward makes the estimate tiny and the graph huge (NOTES
    # 104). Captured calls must not synchronize (illegal in a capture); without graphs nothing
    # is added to the timed call.
    op = fake_operator()
    op.use_cuda_graphs = graphs
    a, w = _matmul_case(op)
    monkeypatch.setattr(
        tritonbench_bwd, "on_the_capture_stream", lambda on: contextlib.nullcontext()
    )
    syncs, capturing = [], [False]
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: syncs.append("sync"))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    bwd_fn = op.get_bwd_fn(lambda: a @ w)
    assert bwd_fn() == [a, w]
    assert syncs == (["sync"] if graphs else [])
    capturing[0] = True
    bwd_fn()
    assert syncs == (["sync"] if graphs else [])
    torch.testing.assert_close(w.grad, a.T @ (0.1 * _seeded_randn(6, 5)))


@pytest.mark.parametrize("called_from", ["capture", "other"])
def test_forwards_under_graphs_run_on_the_capture_stream(monkeypatch, called_from):
    # The forward goes to forward_stream (torch.cuda.graph's capture stream, NOTES 165), with
    # waits both ways from any other caller; a call on that stream (a capture's) waits on
    # nothing and switches nothing.
    log = []

    class Stream(str):
        device = "cuda:0"

        def wait_stream(self, stream):
            log.append(f"{self} waits on {stream}")

    capture = Stream("capture")
    caller = capture if called_from == "capture" else Stream("other")
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: caller)
    monkeypatch.setattr(tritonbench_bwd, "forward_stream", lambda device: capture)
    monkeypatch.setattr(
        torch.cuda, "stream", lambda s: log.append(f"on {s}") or contextlib.nullcontext()
    )
    with tritonbench_bwd.on_the_capture_stream(True):
        log.append("forward")
    if called_from == "capture":
        assert log == ["forward"]
    else:
        assert log == ["capture waits on other", "on capture", "forward", "other waits on capture"]
    log.clear()
    with tritonbench_bwd.on_the_capture_stream(False):
        log.append("forward")
    assert log == ["forward"]


def _seeded_randn(*shape):
    torch.manual_seed(0)
    return torch.randn(*shape)


def test_bwd_fn_of_a_backend_without_autograd_is_not_supported(fake_operator):
    op = fake_operator()
    a, w = _matmul_case(op)
    with pytest.raises(NotImplementedError):
        op.get_bwd_fn(lambda: (a @ w).detach())


@pytest.mark.parametrize("mode", [Mode.BWD, Mode.FWD_BWD])
def test_accuracy_compares_every_input_grad(fake_operator, mode):
    op = fake_operator()
    op.mode = mode
    a, w = _matmul_case(op)

    def as_benchmarked(fwd_fn):
        bwd_fn = op.get_bwd_fn(fwd_fn)
        return bwd_fn if mode is Mode.BWD else lambda: (fwd_fn(), bwd_fn())

    baseline = as_benchmarked(lambda: a @ w)
    same = as_benchmarked(lambda: torch.mm(a, w))
    wrong_w_grad = as_benchmarked(lambda: a @ (w * 1.5 - w.detach() * 0.5))
    assert op.accuracy(same, baseline) is True
    assert op.accuracy(wrong_w_grad, baseline) is False


def test_accuracy_compares_the_forward_in_fwd_bwd(fake_operator):
    op = fake_operator()
    op.mode = Mode.FWD_BWD
    a, w = _matmul_case(op)

    def fwd_bwd(fwd_fn):
        bwd_fn = op.get_bwd_fn(fwd_fn)
        return lambda: (fwd_fn(), bwd_fn())

    shifted_output = fwd_bwd(lambda: a @ w + 1.0)  # same gradients, another output
    assert op.accuracy(shifted_output, fwd_bwd(lambda: a @ w)) is False


def test_accuracy_in_fwd_mode_compares_outputs(fake_operator):
    op = fake_operator()
    op.mode = Mode.FWD
    want = torch.tensor([40.0, 0.0, -3.0], dtype=torch.bfloat16)
    cancelled = torch.tensor([40.0, 0.01, -3.0], dtype=torch.bfloat16)
    assert op.accuracy(lambda: cancelled, lambda: want) is True
    assert op.accuracy(lambda: 2 * want, lambda: want) is False
    op.mode = Mode.FWD_NO_GRAD
    assert op.accuracy(lambda: None, lambda: None) is True


@pytest.mark.parametrize(
    ("dtype", "near_zero_error", "passes"),
    [
        (torch.bfloat16, 0.5, True),  # under two bf16 eps of the largest value (80 * 2^-7)
        (torch.bfloat16, 0.75, False),
        (torch.float16, 0.07, True),  # 80 * 2^-10 = 0.078
        (torch.float16, 0.1, False),
    ],
)
def test_atol_is_two_rounding_units_of_the_largest_value(dtype, near_zero_error, passes):
    want = torch.tensor([40.0, 0.0], dtype=dtype)
    got = torch.tensor([40.0, near_zero_error], dtype=dtype)
    if passes:
        tritonbench_bwd.assert_matches_baseline(got, want, "output")
    else:
        with pytest.raises(AssertionError, match="output"):
            tritonbench_bwd.assert_matches_baseline(got, want, "output")


@pytest.mark.parametrize(
    ("actual", "expected", "match"),
    [
        ([torch.ones(2)], [torch.ones(2), torch.ones(2)], "1 gradients, the baseline has 2"),
        ([None, torch.ones(2)], [torch.ones(2), torch.ones(2)], "differ from the baseline"),
        ([None, None], [None, None], "no input received a gradient"),
        ([torch.ones(2), torch.ones(2)], [torch.ones(2), torch.zeros(2)], "grad of input 1"),
    ],
    ids=["count", "none-pattern", "all-none", "values"],
)
def test_assert_grads_close_failures(actual, expected, match):
    with pytest.raises(AssertionError, match=match):
        tritonbench_bwd.assert_grads_close(actual, expected)


# --- registration -------------------------------------------------------------------------------


@pytest.fixture
def fake_tritonbench(monkeypatch):
    """A minimal tritonbench: gemm's Operator class and a recording register_benchmark; its
    addmm operator fails to import, as without the generative-recommenders submodule."""
    calls = []

    def register_benchmark(
        operator_name=None, func_name=None, baseline=False, enabled=True, fwd_only=False, label=None
    ):
        def decorator(function):
            calls.append((operator_name, func_name, label, baseline))

            def _inner(self, *args, **kwargs):
                return function(self, *args, **kwargs)

            return _inner

        return decorator

    class Operator(FakeBenchmarkOperator):
        pass

    modules = {
        name: types.ModuleType(name)
        for name in (
            "tritonbench",
            "tritonbench.utils",
            "tritonbench.utils.triton_op",
            "tritonbench.operators",
            "tritonbench.operators.gemm",
            "tritonbench.operators.gemm.operator",
        )
    }
    modules["tritonbench.utils.triton_op"].register_benchmark = register_benchmark
    modules["tritonbench.operators.gemm.operator"].Operator = Operator
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setitem(sys.modules, "tritonbench.operators.addmm", None)
    monkeypatch.setitem(sys.modules, "tritonbench.operators.addmm.operator", None)
    tritonbench_plugin._operator_class.cache_clear()
    yield types.SimpleNamespace(calls=calls, gemm=Operator)
    tritonbench_plugin._operator_class.cache_clear()


def test_register_attaches_gemm_and_warns_about_addmm(fake_tritonbench):
    with pytest.warns(RuntimeWarning, match="'addmm' failed to import.*generative-recommenders"):
        assert tritonbench_plugin.register() == ["gemm"]
    name = "helion_matmul_tritonbench"
    assert fake_tritonbench.calls == [("gemm", name, name, False)]
    assert callable(vars(fake_tritonbench.gemm)[name])
    assert fake_tritonbench.gemm.has_bwd()


def test_register_is_idempotent(fake_tritonbench):
    with pytest.warns(RuntimeWarning):
        tritonbench_plugin.register()
    attached = vars(fake_tritonbench.gemm)["helion_matmul_tritonbench"]
    bwd_fn = fake_tritonbench.gemm.get_bwd_fn
    assert tritonbench_plugin.register() == ["gemm"]  # no second warning, no second import
    assert len(fake_tritonbench.calls) == 1
    assert vars(fake_tritonbench.gemm)["helion_matmul_tritonbench"] is attached
    assert fake_tritonbench.gemm.get_bwd_fn is bwd_fn


@pytest.mark.parametrize("gpu", [False, True])
def test_register_begins_the_cpp_build_where_there_is_a_gpu(fake_tritonbench, monkeypatch, gpu):
    begun = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(native, "begin", lambda: begun.append(True))
    with pytest.warns(RuntimeWarning):
        tritonbench_plugin.register()
    assert begun == [True] * gpu


@pytest.mark.parametrize("graphs", [False, True])
def test_the_first_pass_compiles_before_the_wait_for_the_cpp_build(monkeypatch, graphs):
    # The build (25-40 s on a fresh machine) overlaps the first shape's compiles; the two
    # passes that teach the C++ path its key and backward come after it. Under CUDA graphs,
    # whose captures take the Python path, nothing waits for it.
    events = []
    monkeypatch.setattr(native, "ready", lambda t, *args: events.append("ready"))
    # (The capture stream that graphs need: the stream is not what this test is about.)
    monkeypatch.setattr(
        tritonbench_plugin, "on_the_capture_stream", lambda on: contextlib.nullcontext()
    )
    x = torch.randn(4, 4, requires_grad=True)

    def fn():
        events.append("pass")
        return x * 2

    operator = types.SimpleNamespace(use_cuda_graphs=graphs)
    assert tritonbench_plugin._warmed_up(operator, fn, (x,)) is fn
    assert events == (["pass"] * 3 if graphs else ["pass", "ready", "pass", "pass"])
    assert x.grad is None


def test_suite_names_the_plugin_backends():
    assert {op: b.helion for op, b in BACKENDS.items()} == {
        op: variant.__name__ for op, variant in tritonbench_plugin.BACKENDS.items()
    }


def test_plugin_imports_no_tritonbench(monkeypatch):
    name = "helion_ops.tritonbench_plugin"
    monkeypatch.setattr(helion_ops, "tritonbench_plugin", sys.modules[name])
    monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tritonbench", None)  # any tritonbench import now fails
    assert callable(importlib.import_module(name).register)


def test_variant_returns_a_warmed_up_lambda_and_clears_grads():
    a = torch.randn(64, 32, device=DEVICE, dtype=torch.float16, requires_grad=True)
    b = torch.randn(32, 48, device=DEVICE, dtype=torch.float16, requires_grad=True)
    bias = torch.randn(48, device=DEVICE, dtype=torch.float16, requires_grad=True)
    fn = tritonbench_plugin.helion_matmul_tritonbench(None, a, b, bias)
    assert a.grad is None and b.grad is None and bias.grad is None
    torch.testing.assert_close(fn(), torch.addmm(bias, a, b))


# --- the real tritonbench, end to end -----------------------------------------------------------


@pytest.fixture
def harness(monkeypatch):
    """The real tritonbench with the helion backends registered."""
    # Every tritonbench Operator replaces torch.manual_seed with a fixed-seed version:
    # put the real one back afterwards for the other tests.
    monkeypatch.setattr(torch, "manual_seed", torch.manual_seed)
    assert "gemm" in tritonbench_plugin.register()


def metrics_by_backend(
    op: str, mode: str, tmp_path: Path, metrics: str = "accuracy", *extra: str
) -> dict[str, dict]:
    """Run aten and helion on one tiny shape through tritonbench; the metrics by backend."""
    b = BACKENDS[op]
    csv_path = tmp_path / f"{op}_{mode}.csv"
    argv = [
        "--op", op, "--mode", mode, "--device", DEVICE, "--metrics", metrics,
        "--only", f"{b.baseline},{b.helion}", "--m", "64", "--n", "48", "--k", "32",
        "--output", str(csv_path), *extra,
    ]  # fmt: skip
    if op == "gemm":
        argv += ["--layout", "tt"]
    if op == "addmm" and addmm_sizes_need_bias_1d():
        argv += BIAS_1D_FLAGS  # NEW's addmm runs its 42 large shapes without it
    run_tritonbench(argv)
    _, rows = parse_tritonbench_csv(csv_path.read_text())
    return {row.backend: row.metrics for row in rows}


def accuracy_scores(op: str, mode: str, tmp_path: Path) -> dict[str, float]:
    """Accuracy by backend (the baseline has none) on one tiny shape."""
    found = metrics_by_backend(op, mode, tmp_path)
    return {name: m["accuracy"] for name, m in found.items() if "accuracy" in m}


@needs_tritonbench
@pytest.mark.parametrize("mode", ["fwd", "bwd", "fwd_bwd"])
@pytest.mark.parametrize("op", ["gemm", "addmm"])
def test_helion_scores_accuracy_one(harness, tmp_path, op, mode):
    if op not in tritonbench_plugin.register():
        pytest.skip("tritonbench's addmm does not import (generative-recommenders submodule)")
    assert accuracy_scores(op, mode, tmp_path) == {BACKENDS[op].helion: 1.0}


@needs_tritonbench
@pytest.mark.skipif(DEVICE != "cuda", reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("op", ["gemm", "addmm"])
def test_bwd_is_timed_under_cuda_graphs(harness, tmp_path, op):
    if op not in tritonbench_plugin.register():
        pytest.skip("tritonbench's addmm does not import (generative-recommenders submodule)")
    b = BACKENDS[op]
    found = metrics_by_backend(op, "bwd", tmp_path, "accuracy,latency", "--cudagraph")
    assert found[b.helion]["accuracy"] == 1.0
    for backend in (b.baseline, b.helion):
        assert isinstance(found[backend]["latency"], float), found


def _doubled_grad(function: type, index: int):
    original = function.backward

    def backward(ctx, grad_out):
        grads = list(original(ctx, grad_out))
        grads[index] = grads[index] * 2
        return tuple(grads)

    return staticmethod(backward)


@needs_tritonbench
@pytest.mark.parametrize(
    ("op", "function", "index"),
    [("gemm", MatMulFunction, 0), ("addmm", AddMMFunction, 0)],
    ids=["gemm-grad-of-a", "addmm-grad-of-bias"],
)
def test_wrong_gradient_scores_zero(
    harness, tmp_path, monkeypatch, python_path_only, op, function, index
):
    if op not in tritonbench_plugin.register():
        pytest.skip("tritonbench's addmm does not import (generative-recommenders submodule)")
    monkeypatch.setattr(function, "backward", _doubled_grad(function, index))
    assert accuracy_scores(op, "bwd", tmp_path) == {BACKENDS[op].helion: 0.0}


def bench_argv(mode: str, tmp_path: Path, *extra: str, ops: str = "gemm") -> list[str]:
    """run_bench flags for gemm on one tiny shape; on the CPU its defaults are exactly that."""
    argv = ["--op", ops, "--mode", mode, "--metrics", "accuracy", "--ci", *extra]
    argv += ["--output-dir", str(tmp_path)]
    if DEVICE == "cuda":
        argv += ["--only", "aten_matmul,helion_matmul_tritonbench", "--m", "64", "--n", "48"]
        argv += ["--k", "32"]
    return argv


@needs_tritonbench
def test_run_bench_writes_stamped_files(harness, tmp_path):
    assert main(bench_argv("bwd", tmp_path)) == 0
    document = json.loads((tmp_path / "gemm_bwd.json").read_text())
    assert document["meta"]["mode"] == "bwd"
    assert "--layout tt" in document["meta"]["tritonbench_args"]
    # The baseline has no accuracy column, hence no row when accuracy is the only metric.
    assert [(r["backend"], r["accuracy"]) for r in document["rows"]] == [
        ("helion_matmul_tritonbench", 1.0)
    ]
    assert (tmp_path / "gemm_bwd.csv").read_text().startswith("# gpu: ")


@needs_tritonbench
def test_run_bench_ci_fails_on_a_wrong_gradient(
    harness, tmp_path, monkeypatch, capsys, python_path_only
):
    monkeypatch.setattr(MatMulFunction, "backward", _doubled_grad(MatMulFunction, 1))
    assert main(bench_argv("bwd", tmp_path)) == 1
    assert "helion_matmul_tritonbench accuracy 0.0" in capsys.readouterr().err


@needs_tritonbench
def test_run_bench_shard_without_inputs_is_skipped(harness, tmp_path):
    # One input: shard 1 of 2 has none, which is no failure.
    assert main(bench_argv("fwd", tmp_path, "--shard", "1/2")) == 0
    assert [path.name for path in tmp_path.iterdir()] == ["run_shard1of2.log"]


# --- NEW tritonbench's own backward, fixed ------------------------------------------------------


class FakeNewOperator(FakeBenchmarkOperator):
    """NEW's gemm as far as the fixes go: its own get_bwd_fn, and --layout tn's non-leaf w."""

    use_cuda_graphs = False

    def get_input_iter(self):
        a = torch.randn(6, 4).requires_grad_()
        w = torch.randn(4, 5).requires_grad_()
        w = w.T.contiguous().T  # NEW's --layout tn, after requires_grad_
        yield a, w, torch.randn(5), None

    def get_bwd_fn(self, fwd_fn):
        self.forward_ran_in = list(STREAM_CONTEXTS)
        y = fwd_fn()
        return lambda: y.backward(torch.ones_like(y), retain_graph=True)


STREAM_CONTEXTS: list[bool] = []


@pytest.fixture
def new_operator(monkeypatch):
    @contextlib.contextmanager
    def capture_stream(use_cuda_graphs):
        STREAM_CONTEXTS.append(use_cuda_graphs)
        yield
        STREAM_CONTEXTS.pop()

    monkeypatch.setattr(tritonbench_bwd, "on_the_capture_stream", capture_stream)

    class Operator(FakeNewOperator):
        pass

    assert not tritonbench_bwd.add_backward_support(Operator)  # NEW: no OLD support
    return Operator


def test_new_gets_leaf_inputs_that_keep_their_strides(new_operator, caplog):
    tritonbench_bwd._log_leaves_once.cache_clear()
    with caplog.at_level(logging.WARNING):
        a, w, bias, none = next(new_operator().get_input_iter())
    assert a.is_leaf and w.is_leaf and w.requires_grad
    assert w.stride() == (1, 4)  # column-major, as --layout tn made it
    assert not bias.requires_grad and none is None  # NEW's choice kept for the others
    assert "inputs made leaves that keep their strides" in caplog.text
    op = new_operator()
    op.requires_grad = False
    _, w_no_grad, _, _ = next(op.get_input_iter())
    assert not w_no_grad.is_leaf  # untouched without grad


def test_new_forward_runs_on_the_capture_stream_under_cuda_graphs(new_operator):
    op = new_operator()
    a, w, _, _ = next(op.get_input_iter())
    op.get_bwd_fn(lambda: a @ w)
    assert op.forward_ran_in == [False]
    op.use_cuda_graphs = True
    bwd_fn = op.get_bwd_fn(lambda: a @ w)
    assert op.forward_ran_in == [True]
    bwd_fn()
    assert w.grad is not None  # the gradient of the formerly non-leaf w now exists


class FakeLazyNewOperator(FakeNewOperator):
    """NEW's get_bwd_fn as of the copy in shared/: the forward runs in bwd_fn's first call
    (tritonbench's accuracy check, on the legacy default stream), then every call reuses it."""

    def get_bwd_fn(self, fwd_fn):
        state = {}

        def bwd_fn():
            if not state:
                self.forward_ran_in = list(STREAM_CONTEXTS)
                state["y"] = fwd_fn()
            self.backward_ran_in = list(STREAM_CONTEXTS)
            state["y"].backward(torch.ones_like(state["y"]), retain_graph=True)

        return bwd_fn


@pytest.mark.parametrize("graphs", [False, True])
def test_new_lazy_forward_and_every_backward_run_on_the_capture_stream(new_operator, graphs):
    class Operator(FakeLazyNewOperator, new_operator):
        pass

    tritonbench_bwd.fix_native_backward(Operator)
    op = Operator()
    op.use_cuda_graphs = graphs
    a, w, _, _ = next(op.get_input_iter())
    forwards = []

    def fwd_fn():
        forwards.append(list(STREAM_CONTEXTS))
        return a @ w

    bwd_fn = op.get_bwd_fn(fwd_fn)
    # Under graphs, a first graph through the inputs on forward_stream, held by bwd_fn:
    # the inputs' grad accumulators get its stream before NEW's fwd_bwd runs a forward of
    # its own on the legacy default stream.
    assert forwards == ([[True]] if graphs else [])
    assert (getattr(bwd_fn, "first_graph", None) is not None) == graphs
    assert not hasattr(op, "forward_ran_in")  # NEW's own forward is lazy
    fwd_fn()  # fwd_bwd's forward, outside the fix
    bwd_fn()
    assert op.forward_ran_in == op.backward_ran_in == ([True] if graphs else [])
    bwd_fn()  # a timed call: the backward again, on the same stream
    assert op.backward_ran_in == ([True] if graphs else [])
    torch.testing.assert_close(w.grad, 2 * a.detach().T @ torch.ones(6, 5))  # two calls


@pytest.mark.parametrize(
    "mode,graphs,side", [("bwd", True, True), ("fwd_bwd", True, True), ("fwd", True, False),
                         ("bwd", False, False)],
)  # fmt: skip
@pytest.mark.parametrize("tritonbench", ["new", "old"])
def test_benchmark_functions_are_made_on_the_capture_stream(
    new_operator, fake_operator, tritonbench, mode, graphs, side
):
    """A backend that records a graph while its benchmark function is made (NEW's
    matmul_partition_k: ``bt = b.contiguous()``, before any forward) does so on the side
    stream under graphs in the backward modes, where the inputs' grad accumulators must be;
    with NEW's own backward and with the one installed on OLD."""
    made_in = []

    class Operator(new_operator if tritonbench == "new" else fake_operator):
        def partition_k(self, a, w, bias, _):
            made_in.append(list(STREAM_CONTEXTS))
            wt = w.contiguous()
            return lambda: a @ wt

    op = Operator()
    op.mode, op.use_cuda_graphs = Mode(mode), graphs
    op.example_inputs = next(op.get_input_iter())
    op._get_bm_func("partition_k")
    assert made_in == [[side]]


def test_new_fixes_apply_once(new_operator):
    iter_once, bwd_once = new_operator.get_input_iter, new_operator.get_bwd_fn
    tritonbench_bwd.add_backward_support(new_operator)
    assert (new_operator.get_input_iter, new_operator.get_bwd_fn) == (iter_once, bwd_once)
