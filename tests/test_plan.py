"""Launch plans: built on a specialization's first call, never reused for another one.

On the CPU the plans launch through Triton's interpreter, so a plan reused for a changed
layout computes with the first call's sizes and strides and its result is wrong; a plan
whose compiled-kernel launch is faked shows what it would pass to the GPU.
"""

from __future__ import annotations

import contextlib
import threading
import types

import helion
import pytest
import torch
from conftest import DEVICE, HAS_CUDA
from reference import assert_matches
from triton.compiler import CompiledKernel
from triton.knobs import HookChain
from triton.runtime import _allocation
from triton.tools.tensor_descriptor import TensorDescriptor

from helion_ops import kernel, plans
from helion_ops.kernel import launch_addmm, launch_mm, launch_mm_pair
from helion_ops.plans import LaunchPlan


@pytest.fixture(autouse=True)
def fresh_plans():
    kernel.reset()
    yield
    kernel.reset()


def rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(shape, dtype=dtype, device=DEVICE)


def at_offset(shape: tuple[int, int], elements: int, dtype=torch.float32) -> torch.Tensor:
    """A contiguous view whose data starts ``elements`` past a fresh allocation's start."""
    flat = torch.randn(shape[0] * shape[1] + elements, dtype=dtype, device=DEVICE)
    return flat[elements:].view(shape)


def check_mm(name: str, a: torch.Tensor, b: torch.Tensor, alpha: float = 1.0) -> None:
    ours = launch_mm(a, b, alpha)
    assert_matches(name, ours, alpha * (a @ b), alpha * (a.double() @ b.double()))


def kept_plans() -> list:
    return list(kernel._compiled.values())


def test_every_kernel_gets_a_plan():
    a, b = rand(48, 40), rand(40, 24)
    check_mm("mm", a, b)
    bias = rand(24)
    out = launch_addmm(bias, a, b, 2.0, 0.5)
    want = torch.addmm(bias.double(), a.double(), b.double(), beta=0.5, alpha=2.0)
    assert_matches("addmm", out, torch.addmm(bias, a, b, beta=0.5, alpha=2.0), want)
    g = rand(48, 24)
    one, two = launch_mm_pair(g, b.T, a.T, g, 3.0)
    assert_matches("pair, first", one, 3 * g @ b.T, 3 * g.double() @ b.T.double())
    assert_matches("pair, second", two, 3 * a.T @ g, 3 * a.T.double() @ g.double())
    long_k = rand(16, 2048), rand(2048, 16)
    assert kernel.wants_split_k(16, 16, 2048, torch.float32)
    check_mm("split-K", *long_k)
    # The last-wave kernel writes into its arguments and returns nothing.
    for alpha, beta in ((1.5, 1.0), (-2.0, 0.5)):  # the second call through the plan
        out = kernel.launch_last_wave(bias, a, b, alpha, beta, rows=16)
        want = torch.addmm(bias.double(), a.double(), b.double(), beta=beta, alpha=alpha)
        theirs = torch.addmm(bias, a, b, beta=beta, alpha=alpha)
        assert_matches(f"last wave, alpha {alpha}", out, theirs, want)
    assert len(kept_plans()) == 5 and all(isinstance(p, LaunchPlan) for p in kept_plans())
    # The second call of each goes through its plan, split-K's zeroed output included.
    check_mm("mm again", a, b)
    check_mm("split-K again", *long_k, alpha=0.5)
    assert len(kept_plans()) == 5
    # Scales of 1 run epilogues without multiplies, each a specialization of its own.
    want = a.double() @ b.double()
    out = kernel.launch_last_wave(bias, a, b, 1.0, 1.0, rows=16)
    assert_matches("last wave, scales 1", out, torch.addmm(bias, a, b), want + bias.double())
    out = kernel.launch_last_wave(None, a, b, 1.0, 1.0, rows=16)
    assert_matches("last wave, no bias", out, a @ b, want)
    assert len(kept_plans()) == 7 and all(isinstance(p, LaunchPlan) for p in kept_plans())


def test_threads_recording_at_once_each_keep_their_own_launches():
    """Autograd runs a backward that spans two GPUs on one thread per GPU, and each thread's
    Python backward records its launches (``helion_ops.native``): while both record, each
    recording holds its own thread's launches and none of the other's."""
    a, b = rand(48, 40), rand(40, 24)
    launch_mm(a, b)  # compiles; the threads' calls go through the plan
    both_recording, first_launched = threading.Barrier(2), threading.Event()
    recorded = {}

    def record(name: str, operand: torch.Tensor, first: bool) -> None:
        with plans.recorded() as launches:
            both_recording.wait()
            if not first:  # one launch at a time (the interpreter), both recordings open
                first_launched.wait()
            out = launch_mm(operand, b)
            first_launched.set()
            both_recording.wait()
        recorded[name] = launches, operand, out

    threads = [
        threading.Thread(target=record, args=(name, rand(48, 40), name == "first"))
        for name in ("first", "second")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert sorted(recorded) == ["first", "second"], "a thread failed"
    for name, (launches, operand, out) in recorded.items():
        assert len(launches) == 1, f"{name}: {len(launches)} launches recorded"
        plan, args, outs = launches[0]
        assert isinstance(plan, LaunchPlan) and args[0] is operand and outs[0] is out, name
    assert not plans.recordings


def test_a_nested_recording_gives_the_outer_one_back():
    with plans.recorded() as outer:
        with plans.recorded() as inner:
            assert plans.recordings[threading.get_ident()] is inner
        assert plans.recordings[threading.get_ident()] is outer
    assert not plans.recordings


def transposed(a: torch.Tensor) -> torch.Tensor:
    return a.T.contiguous().T  # same sizes and values, column-major strides


CHANGES = {
    "dtype": lambda a, b: (a.float(), b.float()) if a.dtype == torch.half else (a.half(), b.half()),
    "stride of a": lambda a, b: (transposed(a), b),
    "stride of b": lambda a, b: (a, transposed(b)),
    "alignment of a": lambda a, b: (at_offset(a.shape, 1, a.dtype).copy_(a), b),
    "alignment of b": lambda a, b: (a, at_offset(b.shape, 3, b.dtype).copy_(b)),
    "size": lambda a, b: (torch.cat([a, a[:8]]), b),
}


# fp16 takes the launchers' fast path (one look-up per call), fp32 the specialization key.
dtypes = pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)


class RecordingLauncher:
    """A plan's launcher that compiles nothing (as in the interpreter) and keeps each launch."""

    def __init__(self) -> None:
        self.compiled, self.launches = {}, []

    def __call__(self, triton_kernel, grid, *args, **options):
        self.launches.append(args)


def test_a_plan_makes_each_calls_tensor_descriptors_on_its_tensors():
    """Helion's ``host_tensor_descriptors`` configs pass Triton tensor descriptors built on
    the host from the call's operands and outputs; the plan keeps the first call's fields
    and gives each call descriptors of its own tensors (never the first call's memory)."""

    def host_function(x, y, epilogue, _launcher):
        out = x.new_empty(x.shape[0], y.shape[1])
        x_desc = TensorDescriptor(x, [x.size(1), x.size(0)], [x.stride(1), 1], [16, 8])
        out_desc = TensorDescriptor(out, list(out.shape), [out.stride(0), 1], [16, 32])
        _launcher("triton kernel", (4,), x_desc, y, out_desc, 64)
        return out

    x, y = rand(32, 24).T, rand(32, 48)  # x column-major: its descriptor transposed
    launcher = RecordingLauncher()
    plan = plans.plan_for(host_function, launcher, (x, y, kernel.scaled(1.0)))
    assert isinstance(plan, LaunchPlan) and plan.constants == (64,)
    x2, y2 = rand(32, 24).T, rand(32, 48)
    out2 = plan(x2, y2, kernel.scaled(1.0))
    ((x_desc, y_arg, out_desc, block),) = launcher.launches
    assert y_arg is y2 and block == 64
    assert type(x_desc) is TensorDescriptor and x_desc.base is x2 and out_desc.base is out2
    assert (x_desc.shape, x_desc.strides, x_desc.block_shape) == ([32, 24], [24, 1], [16, 8])
    assert (out_desc.shape, out_desc.strides, out_desc.block_shape) == (
        [24, 48], [48, 1], [16, 32]
    )  # fmt: skip
    assert plan.descriptors[0][1].base is x  # the first call's descriptor as it was


def test_a_pairs_plan_makes_descriptors_of_each_products_operands_and_output():
    """A pair's host function (as Helion generates ``pair_kernel``'s on host-built
    descriptors) passes a descriptor of each of its four operands and two outputs, in the
    kernel's order (x1, y1, out1, y2, x2, out2): each call's are of its own tensors."""

    def descriptor(t, block):
        return TensorDescriptor(t, list(t.shape), [t.stride(0), 1], block)

    blocks = [("x1", [16, 8]), ("y1", [8, 16]), ("out1", [16, 16])]
    blocks += [("y2", [8, 16]), ("x2", [16, 8]), ("out2", [16, 16])]

    def host_function(x1, y1, x2, y2, epilogue1, epilogue2, _launcher):
        out1 = x1.new_empty(x1.shape[0], y1.shape[1])
        out2 = x2.new_empty(x2.shape[0], y2.shape[1])
        tensors = {"x1": x1, "y1": y1, "out1": out1, "y2": y2, "x2": x2, "out2": out2}
        _launcher("triton kernel", (8,), *(descriptor(tensors[n], b) for n, b in blocks), 64)
        return out1, out2

    def operands():
        return rand(24, 32), rand(32, 40), rand(48, 24), rand(24, 40)

    launcher = RecordingLauncher()
    scales = (kernel.scaled(1.0), kernel.scaled(1.0))
    plan = plans.plan_for(host_function, launcher, (*operands(), *scales))
    assert isinstance(plan, LaunchPlan) and len(plan.descriptors) == 6
    second = operands()
    out1, out2 = plan(*second, *scales)
    ((*descriptors, block),) = launcher.launches
    x1, y1, x2, y2 = second
    assert [d.base for d in descriptors] == [x1, y1, out1, y2, x2, out2] and block == 64
    assert [d.block_shape for d in descriptors] == [b for _, b in blocks]


def test_a_host_function_that_passes_another_tensor_gets_no_plan():
    """A launch argument built on a tensor other than the call's operands and outputs (a
    scratch tensor the host function made, or a descriptor of one) cannot be a plan's
    constant: later calls would read the first call's memory. Such host functions run on
    every call."""

    def descriptor_of_scratch(x, y, epilogue, _launcher):
        out, scratch = x.new_empty(x.shape[0], y.shape[1]), y.clone()
        descriptor = TensorDescriptor(scratch, list(y.shape), list(y.stride()), [16, 16])
        _launcher("triton kernel", (4,), x, descriptor, out, 64)
        return out

    def scratch_tensor(x, y, epilogue, _launcher):
        out = x.new_empty(x.shape[0], y.shape[1])
        _launcher("triton kernel", (4,), x, y.clone(), out, 64)
        return out

    x, y = rand(32, 32), rand(32, 32)
    args = (x, y, kernel.scaled(1.0))
    launcher = plans.DirectLauncher()
    assert plans.plan_for(descriptor_of_scratch, launcher, args) is None
    assert plans.plan_for(scratch_tensor, launcher, args) is None

    def with_constants_only(x, y, epilogue, _launcher):
        out = x.new_empty(x.shape[0], y.shape[1])
        _launcher("triton kernel", (4,), x, y, out, 64, 0.5, torch.float16)
        return out

    plan = plans.plan_for(with_constants_only, launcher, args)
    assert isinstance(plan, LaunchPlan) and plan.constants == (64, 0.5, torch.float16)


@dtypes
@pytest.mark.parametrize("change", CHANGES)
def test_a_changed_layout_never_reuses_a_plan(change, dtype):
    a, b = rand(40, 32, dtype=dtype), rand(32, 24, dtype=dtype)
    check_mm("first", a, b)
    changed = CHANGES[change](a, b)
    check_mm(f"after a change of {change}", *changed)
    assert len(kept_plans()) == 2, f"a change of {change} reused the first call's plan"
    check_mm("first again", a, b)
    assert len(kept_plans()) == 2


@dtypes
@pytest.mark.parametrize("change", ["stride", "alignment", "shape"])
def test_a_changed_bias_never_reuses_a_plan(change, dtype):
    a, b = rand(40, 32, dtype=dtype), rand(32, 24, dtype=dtype)
    first = rand(24, dtype=dtype)
    bias = {
        "stride": rand(40, 1, dtype=dtype),  # expands to [40, 24] with strides (1, 0)
        "alignment": at_offset((1, 24), 1, dtype)[0],
        "shape": rand(40, 24, dtype=dtype),
    }[change]
    for name, b1 in (("first bias", first), (f"bias of another {change}", bias)) * 2:
        out = launch_addmm(b1, a, b, 1.0, 1.0)
        want = torch.addmm(b1.double(), a.double(), b.double())
        assert_matches(name, out, torch.addmm(b1, a, b), want)
    assert len(kept_plans()) == 2


def test_the_fast_path_serves_repeated_calls_with_this_calls_values(monkeypatch):
    a, b, bias, g = rand(40, 32), rand(32, 24), rand(24), rand(40, 24)
    a, b, bias, g = (t.half() for t in (a, b, bias, g))
    launch_mm(a, b, 3.0)
    launch_addmm(bias, a, b, 2.0, 0.5)
    launch_mm_pair(g, b.T, a.T, g, 1.5)
    assert (len(kernel._fast_mm), len(kernel._fast_addmm), len(kernel._fast_pair)) == (1, 1, 1)

    def no_slow_path(*args, **kwargs):
        raise AssertionError("a repeated call left the fast path")

    monkeypatch.setattr(kernel, "_run", no_slow_path)
    a2, b2, bias2, g2 = (torch.randn_like(t) for t in (a, b, bias, g))
    check_mm("mm, fast", a2, b2, -2.5)
    out = launch_addmm(bias2, a2, b2, 0.5, 3.0)
    want = torch.addmm(bias2.double(), a2.double(), b2.double(), beta=3.0, alpha=0.5)
    assert_matches("addmm, fast", out, torch.addmm(bias2, a2, b2, beta=3.0, alpha=0.5), want)
    one, two = launch_mm_pair(g2, b2.T, a2.T, g2, 2.0)
    assert_matches("pair, first", one, 2 * g2 @ b2.T, 2 * g2.double() @ b2.T.double())
    assert_matches("pair, second", two, 2 * a2.T @ g2, 2 * a2.T.double() @ g2.double())


def test_the_fast_path_keeps_torchs_zero_scales():
    """alpha == 0 never reads the product and beta == 0 never reads the bias (NaN included),
    also for operands whose plain launch is on the fast path."""
    a, b, bias = rand(40, 32).half(), rand(32, 24).half(), rand(24).half()
    launch_mm(a, b)
    launch_addmm(bias, a, b, 1.0, 1.0)
    nan_a, nan_bias = torch.full_like(a, float("nan")), torch.full_like(bias, float("nan"))
    assert torch.equal(launch_mm(nan_a, b, 0.0), torch.zeros_like(a[:, :24]))
    out = launch_addmm(nan_bias, a, b, 1.0, 0.0)
    assert_matches("beta 0", out, a @ b, a.double() @ b.double())
    out = launch_addmm(bias, nan_a, b, 0.0, 2.0)
    assert torch.equal(out, (2 * bias.float()).half().expand(40, 24))


def test_the_key_holds_the_device():
    a = torch.empty(8, 8)
    meta = torch.empty(8, 8, device="meta")
    epilogue = kernel.scaled(1.0)
    key = kernel.specialization_key(kernel.matmul_kernel, (a, a, epilogue))
    assert key != kernel.specialization_key(kernel.matmul_kernel, (meta, meta, epilogue))
    assert key == kernel.specialization_key(kernel.matmul_kernel, (a, a.clone(), epilogue))


def test_alpha_and_beta_are_this_calls_values():
    a, b, bias = rand(40, 32), rand(32, 24), rand(24)
    for alpha, beta in ((2.0, 0.5), (-1.5, 3.0), (1, 1), (0.25, 0.25), (7, 2)):
        out = launch_addmm(bias, a, b, alpha, beta)
        want = torch.addmm(bias.double(), a.double(), b.double(), beta=beta, alpha=alpha)
        theirs = torch.addmm(bias, a, b, beta=beta, alpha=alpha)
        assert_matches(f"alpha {alpha}, beta {beta}", out, theirs, want)
    for alpha in (3, 1, -0.5):
        check_mm(f"alpha {alpha}", a, b, alpha)
    assert len(kept_plans()) == 4, "a plan for each epilogue, with and without its multiplies"


def test_scales_of_1_never_take_the_plan_of_other_scales():
    """alpha (and beta) of 1 run epilogues without multiplies, a specialization and fast-path
    key of their own: calls that alternate between them and other scales (the repeated ones on
    the fast path) get their own values, from two keys and two kernels per launcher."""
    a, b, bias, g = (t.half() for t in (rand(40, 32), rand(32, 24), rand(24), rand(40, 24)))
    scales = ((1.0, 1.0), (2.0, 1.0), (1, 1), (1.0, -0.5), (1.0, 1.0), (-0.5, 1.0))
    for alpha, beta in scales:
        check_mm(f"mm, alpha {alpha}", a, b, alpha)
        out = launch_addmm(bias, a, b, alpha, beta)
        want = torch.addmm(bias.double(), a.double(), b.double(), beta=beta, alpha=alpha)
        theirs = torch.addmm(bias, a, b, beta=beta, alpha=alpha)
        assert_matches(f"addmm, alpha {alpha}, beta {beta}", out, theirs, want)
        one, two = launch_mm_pair(g, b.T, a.T, g, alpha)
        want_one, want_two = g.double() @ b.T.double(), a.T.double() @ g.double()
        assert_matches(f"pair, alpha {alpha}", one, alpha * g @ b.T, alpha * want_one)
        assert_matches(f"pair, alpha {alpha}", two, alpha * a.T @ g, alpha * want_two)
    assert len(kernel._fast_mm) == len(kernel._fast_addmm) == len(kernel._fast_pair) == 2
    epilogues = {
        part for key in kernel._compiled for part in key if isinstance(part, types.CodeType)
    }
    assert kernel._unscaled.__code__ in epilogues and len(epilogues) == 4  # two each


class FakeCompiled(CompiledKernel):
    def __init__(self) -> None:  # no binary behind it
        self.module = None
        self.function, self.packed_metadata = "function", "packed"
        self.runs: list[tuple] = []
        self._run = lambda *args: self.runs.append(args)

    def __getitem__(self, grid):
        return lambda *args: self.runs.append(("runner", grid, *args))


def addmm_plan_on_a_fake_gpu(monkeypatch) -> tuple[LaunchPlan, FakeCompiled]:
    """An addmm plan built through the interpreter, then given a fake compiled kernel, as if
    its operands were on cuda:3, the current device (each device's stream: 10 x its index)."""
    a, b, bias = rand(40, 32), rand(32, 24), rand(24)
    launch_addmm(bias, a, b, 2.0, 0.5)
    (plan,) = kept_plans()
    fake = FakeCompiled()
    plan.launcher.compiled[plan.triton_kernel] = fake
    plan.device = 3
    active = types.SimpleNamespace(
        get_current_device=lambda: 3, get_current_stream=lambda d: d * 10
    )
    monkeypatch.setattr(plans, "driver", types.SimpleNamespace(active=active))
    return plan, fake


@pytest.mark.skipif(HAS_CUDA, reason="fakes the compiled kernel of the CPU interpreter")
def test_a_plan_launches_the_compiled_kernel_with_this_calls_arguments(monkeypatch):
    plan, fake = addmm_plan_on_a_fake_gpu(monkeypatch)
    a2, b2, bias2 = rand(40, 32), rand(32, 24), rand(24)
    out = launch_addmm(bias2, a2, b2, -1.0, 4.0)
    ((*launch, bias_arg, out_arg, alpha, beta),) = fake.runs
    grid, (stream, function, packed), hooks = tuple(launch[:3]), launch[3:6], launch[6:9]
    assert grid == plan.grid and stream == 30 and (function, packed) == ("function", "packed")
    assert hooks == [None, None, None]  # no launch metadata where no hook reads it
    x, y = launch[9:]
    assert x is a2 and y is b2 and out_arg is out and (alpha, beta) == (-1.0, 4.0)
    assert bias_arg is bias2  # the fast path's: the plan reads its address only
    assert out.shape == (40, 24) and out.dtype == a2.dtype

    # A launch hook (a profiler) sends the launch through Triton's own runner.
    hook = HookChain()
    hook.add(lambda metadata: None)
    monkeypatch.setattr(plans.knobs.runtime, "launch_enter_hook", hook)
    launch_addmm(bias2, a2, b2, 1.5, 1.0)
    assert len(fake.runs) == 2 and fake.runs[-1][0] == "runner"


class Runner36:
    """Triton 3.6's CudaLauncher as a plan sees it: ``__call__`` allocates the kernel's scratch
    and forwards to the C ``launch`` with its flags and scratch after the function."""

    launch_cooperative_grid, launch_pdl, num_ctas, global_scratch_align = False, True, 1, 64

    def __init__(self, scratch: int = 0, profile_scratch: int = 0) -> None:
        self.global_scratch_size, self.profile_scratch_size = scratch, profile_scratch
        self.called, self.launched = [], []
        self.launch = lambda *args: self.launched.append(args)

    def __call__(self, gx, gy, gz, stream, function, *args):
        self.called.append(args)
        size = gx * gy * gz * self.num_ctas * self.global_scratch_size
        scratch = (
            _allocation._allocator.get()(size, self.global_scratch_align, stream) if size else None
        )
        flags = (self.launch_cooperative_grid, self.launch_pdl)
        self.launch(gx, gy, gz, stream, function, *flags, scratch, None, *args)


class RunnerWithoutFlags(Runner36):
    """A runner with a C launch function but none of 3.6's flags (an older Triton's, say)."""

    def __getattribute__(self, name):
        if name in ("launch_cooperative_grid", "launch_pdl"):
            raise AttributeError(name)
        return super().__getattribute__(name)

    def __call__(self, gx, gy, gz, stream, function, *args):
        self.called.append(args)
        self.launch(gx, gy, gz, stream, function, None, None, *args)


class RunnerOfAnotherLayout(Runner36):
    """A runner that forwards its arguments in another order (as Triton 3.9's does)."""

    def __call__(self, gx, gy, gz, stream, function, metadata, *args):
        self.called.append((metadata, *args))
        self.launch(gx, gy, gz, stream, function, metadata, False, True, None, None, args)


@pytest.mark.skipif(HAS_CUDA, reason="fakes the compiled kernel of the CPU interpreter")
@pytest.mark.parametrize(
    "runner, direct",
    [
        (Runner36(), True),
        (Runner36(scratch=128), True),
        (Runner36(profile_scratch=64), False),
        (RunnerOfAnotherLayout(), False),
        (RunnerWithoutFlags(), False),
    ],
    ids=["triton-3.6", "scratch", "profile-scratch", "another-layout", "no-flags"],
)
def test_a_plan_calls_the_c_launcher_only_where_the_runner_only_forwards(
    monkeypatch, runner, direct
):
    plan, fake = addmm_plan_on_a_fake_gpu(monkeypatch)
    fake._run = runner
    allocations = []

    def allocator(size: int, alignment: int, stream: int) -> torch.Tensor:
        allocations.append((size, alignment, stream))
        return torch.empty(size, dtype=torch.int8)

    token = _allocation._allocator.set(allocator)
    try:
        check_the_launch(plan, runner, direct, allocations)
    finally:
        _allocation._allocator.reset(token)


def check_the_launch(plan: LaunchPlan, runner: Runner36, direct: bool, allocations: list):
    a2, b2, bias2 = rand(40, 32), rand(32, 24), rand(24)
    out = launch_addmm(bias2, a2, b2, -1.0, 4.0)
    assert (plan.direct is not None) == direct
    called = [args for args in runner.called if args[-1] is not plans._MARK]  # not the check
    if not direct:  # the runner as before, with the tensors
        ((packed, *hooks, x, y, bias_arg, out_arg, alpha, beta),) = called
        assert packed == "packed" and hooks == [None, None, None]
        assert x is a2 and y is b2 and out_arg is out
        return
    assert called == []
    (launch,) = runner.launched
    grid, (stream, function), flags, scratch = launch[:3], launch[3:5], launch[5:7], launch[7:9]
    assert grid == plan.grid and (stream, function, flags) == (30, "function", (False, True))
    size = plan.grid[0] * plan.grid[1] * plan.grid[2] * runner.global_scratch_size
    if size:  # a new allocation from Triton's allocator, on this call's stream
        assert allocations[-1] == (size, 64, 30) and scratch[0].numel() == size
        assert scratch[1] is None
    else:
        assert scratch == (None, None)
    assert launch[9:13] == ("packed", None, None, None)  # no launch metadata, no hooks
    x, y, bias_arg, out_arg, alpha, beta = launch[13:]
    # Operands and the output by address; the bias view as the tensor, its strides Triton's.
    assert (x, y, out_arg) == (a2.data_ptr(), b2.data_ptr(), out.data_ptr())
    assert bias_arg.data_ptr() == bias2.data_ptr() and (alpha, beta) == (-1.0, 4.0)
    assert out.shape == (40, 24)


@pytest.mark.skipif(HAS_CUDA, reason="fakes the compiled kernel of the CPU interpreter")
def test_a_plan_launches_on_its_operands_device_not_the_current_one(monkeypatch):
    a, b = rand(40, 32), rand(32, 24)
    launch_mm(a, b)
    (plan,) = kept_plans()
    fake = FakeCompiled()
    plan.launcher.compiled[plan.triton_kernel] = fake
    plan.device = 1  # the operands' device; the current one is 0
    current = [0]
    active = types.SimpleNamespace(
        get_current_device=lambda: current[0], get_current_stream=lambda d: d * 10
    )
    monkeypatch.setattr(plans, "driver", types.SimpleNamespace(active=active))
    launched_on = []
    fake._run = lambda *args: launched_on.append((current[0], args[3]))  # device, stream

    @contextlib.contextmanager
    def device(index):
        before, current[0] = current[0], index
        yield
        current[0] = before

    monkeypatch.setattr(torch.cuda, "device", device)
    launch_mm(rand(40, 32), rand(32, 24))
    assert launched_on == [(1, 10)] and current == [0]  # launched on cuda:1, its stream


@pytest.mark.parametrize("narrow", ["matmul_kernel", "transposed_kernel"])
def test_an_output_past_2_31_elements_compiles_with_64_bit_offsets(narrow):
    """Helion picks 32-bit offsets from the arguments' sizes alone; an output of 2**31
    elements or more from smaller operands needs the kernel's 64-bit twin."""
    narrow = getattr(kernel, narrow)
    a = torch.empty(65536, 768, dtype=torch.float16, device=DEVICE)
    b = torch.empty(768, 32776, dtype=torch.float16, device=DEVICE)  # 65536 * 32776 > 2**31
    args = (a, b, kernel.scaled(1.0))
    config = helion.Config(block_sizes=[64, 64, 64], num_warps=4, num_stages=2)
    with pytest.raises(helion.exc.IndexOffsetOutOfRangeForInt32):
        narrow.bind(args).to_triton_code(config)
    assert "int64" in kernel.WIDE[narrow].bind(args).to_triton_code(config)


def test_a_specialization_past_32_bit_offsets_runs_on_the_64_bit_twin(monkeypatch):
    narrow, wide = kernel.matmul_kernel, kernel.WIDE[kernel.matmul_kernel]
    bind_narrow, bind_wide, bound_by_wide = narrow.bind, wide.bind, []

    def refuse(config):
        raise helion.exc.IndexOffsetOutOfRangeForInt32(torch.int32)

    def bind_refusing(args):
        bound = bind_narrow(args)
        monkeypatch.setattr(bound, "compile_config", refuse)
        return bound

    def bind_recording(args):
        bound_by_wide.append(args)
        return bind_wide(args)

    monkeypatch.setattr(narrow, "bind", bind_refusing)
    monkeypatch.setattr(wide, "bind", bind_recording)
    check_mm("mm", rand(48, 40), rand(40, 24), 2.0)
    binds = len(bound_by_wide)
    assert binds > 0
    check_mm("mm again", rand(48, 40), rand(40, 24), -1.0)  # the same plan
    assert len(bound_by_wide) == binds


def test_a_pair_decided_against_goes_straight_to_two_launches(monkeypatch):
    g, b, a = rand(40, 24).half(), rand(32, 24).half(), rand(40, 32).half()
    monkeypatch.setattr(kernel, "wants_pair", lambda *mnks: False)
    launch_mm_pair(g, b.T, a.T, g, 2.0)
    assert kernel._fast_pair == {next(iter(kernel._fast_pair)): None}

    def decided_again(*args):
        raise AssertionError("the pair decision was made again for the same operands")

    monkeypatch.setattr(kernel, "wants_pair", decided_again)
    monkeypatch.setattr(kernel, "tuned_pair", decided_again)
    one, two = launch_mm_pair(g, b.T, a.T, g, -3.0)
    assert_matches("first", one, -3 * g @ b.T, -3 * g.double() @ b.T.double())
    assert_matches("second", two, -3 * a.T @ g, -3 * a.T.double() @ g.double())
    zero_one, _ = launch_mm_pair(g, b.T, a.T, g, 0.0)  # alpha 0 never reads the products
    assert torch.equal(zero_one, torch.zeros_like(one))


@dtypes
@pytest.mark.parametrize("layout", ["expanded", "column-major"])
def test_a_bias_of_the_same_shape_and_other_strides_never_reuses_a_plan(layout, dtype):
    """Two [m, n] biases of one shape, dtype and alignment whose strides differ (a row
    expanded down the rows, a transposed copy): each call gets its own bias's values, also
    the repeated ones on the fast path."""
    a, b = rand(37, 29, dtype=dtype), rand(29, 23, dtype=dtype)
    first = rand(37, 23, dtype=dtype)
    other = {
        "expanded": rand(23, dtype=dtype).expand(37, 23),
        "column-major": rand(23, 37, dtype=dtype).T,
    }[layout]
    assert first.shape == other.shape and first.stride() != other.stride()
    for name, bias in (("contiguous bias", first), (f"{layout} bias", other)) * 2:
        for alpha, beta in ((1.0, 1.0), (2.0, -0.5)):
            out = launch_addmm(bias, a, b, alpha, beta)
            want = torch.addmm(bias.double(), a.double(), b.double(), beta=beta, alpha=alpha)
            theirs = torch.addmm(bias, a, b, beta=beta, alpha=alpha)
            assert_matches(f"{name}, alpha {alpha}, beta {beta}", out, theirs, want)


def test_epilogues_capture_scales_as_floats():
    """An int scale reaches the kernel as a Python float (the backward passes ctx.alpha as
    the caller gave it): Triton compiles an int argument by its value (1 as a constant, a
    32- or 64-bit type), and a plan launches later values into that first compilation."""
    bias = rand(24)
    for alpha, beta in ((3, 2), (-2, 7), (2**40, -(2**40)), (0, 5)):
        epilogues = (kernel.scaled(alpha), kernel.scaled_plus_bias(alpha, beta, bias))
        values = [c.cell_contents for e in epilogues for c in e.__closure__ or ()]
        scales = [v for v in values if not isinstance(v, torch.Tensor)]
        assert scales and all(type(v) is float for v in scales), (alpha, beta, values)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_zero_scales_never_take_the_plan_of_other_scales(dtype):
    """alpha == 0 never reads the product and beta == 0 never reads the bias (NaN included),
    also where an earlier call of the same operands with scales other than 1 (the same
    fast-path key: scales of 0 are not 1) left a plan on the fast path."""
    a, b, bias = rand(37, 29, dtype=dtype), rand(29, 23, dtype=dtype), rand(23, dtype=dtype)
    nan_a, nan_bias = torch.full_like(a, float("nan")), torch.full_like(bias, float("nan"))
    for _ in range(2):  # the second call of each key takes the fast path
        check_mm("mm, alpha 2", a, b, 2.0)
        out = launch_addmm(bias, a, b, 2.0, 0.5)
        want = torch.addmm(bias.double(), a.double(), b.double(), beta=0.5, alpha=2.0)
        assert_matches("addmm", out, torch.addmm(bias, a, b, beta=0.5, alpha=2.0), want)
    assert torch.equal(launch_mm(nan_a, b, 0.0), torch.zeros_like(a @ b))
    out = launch_addmm(nan_bias, a, b, 2.0, 0.0)
    want = 2.0 * (a.double() @ b.double())
    assert_matches("addmm, beta 0", out, 2.0 * (a @ b), want)
    out = launch_addmm(bias, nan_a, b, 0.0, 0.5)
    assert torch.equal(out, (0.5 * bias.float()).to(dtype).expand(37, 23))


@pytest.mark.parametrize("which", range(4))
def test_a_pair_with_one_operand_of_another_layout_never_reuses_a_plan(which):
    """The backward's pair (grad_out @ b.T, a.T @ grad_out) of fp16 operands, then the same
    with one of its four operands in the other layout (same shape, dtype and alignment),
    each call twice (the second on the fast path): each gets its own operands' values."""
    a, b, g = (t.half() for t in (rand(40, 32), rand(32, 24), rand(40, 24)))
    first = [g, b.T, a.T, g]
    other = list(first)
    x = other[which]
    other[which] = x.T.contiguous().T if x.is_contiguous() else x.contiguous()
    assert other[which].shape == x.shape and other[which].stride() != x.stride()
    for name, operands in (("first", first), (f"operand {which} relaid", other)) * 2:
        one, two = launch_mm_pair(*operands, 1.5)
        x1, y1, x2, y2 = operands
        assert_matches(f"{name}, first", one, 1.5 * x1 @ y1, 1.5 * x1.double() @ y1.double())
        assert_matches(f"{name}, second", two, 1.5 * x2 @ y2, 1.5 * x2.double() @ y2.double())


@pytest.mark.parametrize("change", ["alignment of 0", "alignment of 1", "alignment of 2",
                                    "alignment of 3", "dtype"])  # fmt: skip
def test_a_pair_of_another_alignment_or_dtype_never_reuses_a_plan(change):
    """As above, with one operand starting off 16 bytes, or all four in another dtype: each
    gets a specialization of its own. (The interpreter reads any alignment, so the count of
    plans is what shows a reused one: on a GPU it would load past its operand's start.)"""
    kernel.reset()
    a, b, g = (t.half() for t in (rand(40, 32), rand(32, 24), rand(40, 24)))
    first = [g, b.T, a.T, g]
    if change == "dtype":
        other = [t.float() for t in first]
    else:
        other, which = list(first), int(change[-1])
        x = first[which]
        rows = x if x.is_contiguous() else x.T
        moved = at_offset(tuple(rows.shape), 1, torch.float16).copy_(rows)
        other[which] = moved if x.is_contiguous() else moved.T
        assert other[which].data_ptr() % 16 != 0
    for name, operands in (("first", first), (change, other)) * 2:
        one, two = launch_mm_pair(*operands, 1.5)
        x1, y1, x2, y2 = operands
        assert_matches(f"{name}, first", one, 1.5 * x1 @ y1, 1.5 * x1.double() @ y1.double())
        assert_matches(f"{name}, second", two, 1.5 * x2 @ y2, 1.5 * x2.double() @ y2.double())
    assert len(kernel._compiled) == 2


def fp32_calls(launcher: str):
    """A call of ``launcher`` (mm, addmm, or the backward's pair) on fixed fp32 operands of
    row-major layouts, which gives each product as ours, torch's and float64's."""
    a, b, bias, g = rand(40, 32), rand(32, 24), rand(24), rand(40, 24)
    a64, b64, bias64, g64 = (t.double() for t in (a, b, bias, g))
    return {
        "mm": lambda: [(launch_mm(a, b), a @ b, a64 @ b64)],
        "addmm": lambda: [(launch_addmm(bias, a, b), torch.addmm(bias, a, b), bias64 + a64 @ b64)],
        "pair": lambda: list(
            zip(
                launch_mm_pair(g, b.T, a.T, g),
                (g @ b.T, a.T @ g),
                (g64 @ b64.T, a64.T @ g64),
                strict=True,
            )
        ),
    }[launcher]


@pytest.mark.parametrize("launcher", ["mm", "addmm", "pair"])
def test_fp32_plans_follow_the_tf32_switch(monkeypatch, restore_tf32, launcher):
    """fp32 takes the fast path too, its key holding whether the dots are TF32: after each
    flip of torch's switch, a repeated call (no specialization compiled) launches the kernel
    of the switch's state, and computes its product."""
    calls = fp32_calls(launcher)
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        calls()
    kernel_of = {id(plan): key[0] for key, plan in kernel._compiled.items()}
    launched = []
    real_call = LaunchPlan.__call__
    monkeypatch.setattr(
        LaunchPlan, "__call__", lambda plan, *args: launched.append(plan) or real_call(plan, *args)
    )

    def no_slow_path(*args, **kwargs):
        raise AssertionError("a repeated call left the fast path")

    monkeypatch.setattr(kernel, "_run", no_slow_path)
    for tf32 in (True, False, True, False):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        for out, torchs, want in calls():
            assert_matches(f"tf32 {tf32}", out, torchs, want)
        precisions = {kernel_of[id(plan)].settings.dot_precision for plan in launched}
        assert precisions == {"tf32" if tf32 else "ieee"}
        launched.clear()


@pytest.mark.parametrize("launcher", ["mm", "addmm", "pair"])
def test_fp32_keys_keep_which_operands_they_copy(monkeypatch, restore_tf32, launcher):
    """A key whose fp32 operands are copied for their dots keeps which (``_fast_relaid``):
    repeated calls copy the same operands and decide nothing again; after a flip of the TF32
    switch the key is another, decided anew."""
    from helion_ops import staging

    monkeypatch.setattr(staging, "LAYOUT_REUSE", 1)
    copied, real_copy = [], staging.contiguous_copy
    monkeypatch.setattr(
        staging,
        "contiguous_copy",
        lambda t, dim, copy_rows: (
            copied.append((tuple(t.shape), dim)) or real_copy(t, dim, copy_rows)
        ),
    )
    calls = fp32_calls(launcher)
    torch.backends.cuda.matmul.allow_tf32 = True
    calls()
    first, real_decision = list(copied), kernel.fp32_copies
    assert first  # TF32 reads b (the pair: a.T and grad_out) from copies

    def no_decision(products):
        raise AssertionError("a repeated call decided its copies again")

    monkeypatch.setattr(kernel, "fp32_copies", no_decision)
    for _ in range(2):
        copied.clear()
        for out, torchs, want in calls():
            assert_matches("repeated", out, torchs, want)
        assert copied == first
    monkeypatch.setattr(kernel, "fp32_copies", real_decision)
    torch.backends.cuda.matmul.allow_tf32 = False
    copied.clear()
    for out, torchs, want in calls():
        assert_matches("IEEE", out, torchs, want)
    assert copied == ([((24, 32), 1)] if launcher == "pair" else [])  # b.T made row-major
