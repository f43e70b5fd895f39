"""Backward benchmarking for tritonbench operators that lack it (OLD tritonbench's gemm and addmm).

NEW tritonbench times and checks gemm/addmm backwards itself. OLD tritonbench (66b557c) makes
their inputs without grad, has no ``get_bwd_fn`` (a "not supported" cell) and, in bwd mode,
compares ``fn().grad`` with ``baseline_fn().grad``, which never matches.
``add_backward_support`` gives such an Operator class what NEW has built in: grad-requiring
leaf inputs, NEW's default ``get_bwd_fn`` and an accuracy check over every input gradient, so
every backend, aten included, runs its real backward and speedups compare like with like.

OLD's check uses torch's default tolerances, whose atol (1e-5) is absolute: on addmm's randn
inputs (outputs near 40 in magnitude) two correct fp16/bf16 kernels that sum in different
orders differ by far more than that wherever an output cancels to near zero (measured on the
H200, 2026-11-29: helion and cuBLAS both within 0.3% of the float64 result, yet 0.1% of
the elements outside torch's defaults). The check installed here keeps torch's rtol and sets
atol to the rounding error of the baseline's largest value, as NEW's relative checks intend.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import TYPE_CHECKING, Any, TypeVar

import torch

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

logger = logging.getLogger(__name__)

T = TypeVar("T")

BWD_MODES = ("bwd", "fwd_bwd")


def add_backward_support(operator_cls: type) -> bool:
    """Install grad-requiring inputs, ``get_bwd_fn`` and a gradient accuracy check on a class.

    Only where the class has no backward of its own (``has_bwd()`` is False), so calling it
    again, or on NEW tritonbench, changes nothing.

    Args:
        operator_cls: a tritonbench ``Operator`` class (a BenchmarkOperator subclass).

    Returns:
        True if the support was installed now, False if the class already had a backward
        (where ``fix_native_backward`` is applied instead).
    """
    if operator_cls.get_bwd_fn is get_bwd_fn:  # installed by an earlier call
        return False
    if operator_cls.has_bwd():
        fix_native_backward(operator_cls)
        return False
    original_input_iter = operator_cls.get_input_iter

    def get_input_iter(self: Any) -> Iterator[Any]:
        for inputs in original_input_iter(self):
            yield grad_leaves(inputs) if self.requires_grad else inputs

    def accuracy(self: Any, fn: Callable[[], Any], baseline_fn: Callable[[], Any]) -> bool:
        return backend_accuracy(self.mode.value, fn, baseline_fn)

    operator_cls.get_input_iter = get_input_iter
    operator_cls.get_bwd_fn = get_bwd_fn
    operator_cls.accuracy = accuracy
    _make_benchmark_functions_on_the_capture_stream(operator_cls)
    return True


def fix_native_backward(operator_cls: type) -> None:
    """Two fixes to NEW tritonbench's own backward, for every backend of the operator.

    Leaf inputs: NEW's gemm default ``--layout tn`` makes ``w = w.T.contiguous().T`` after
    ``requires_grad_``, a non-leaf whose gradient its accuracy check never compares, so every
    backend scores 0. Each grad-requiring input becomes a leaf with the same values and strides
    (logged once). The forward on the capture stream under ``--cudagraph``: NEW's
    ``get_bwd_fn`` runs it on the legacy default stream, and the capture of the timed backward
    then fails for every backend (cudaErrorStreamCaptureImplicit), as OLD's did before
    ``forward_stream``. NEW runs the forward in get_bwd_fn or in the first call of its bwd_fn,
    as versions differ: both run on ``forward_stream``, and so does every backward, and so
    does the making of each benchmark function
    (``_make_benchmark_functions_on_the_capture_stream``).
    Applied once per class.

    Args:
        operator_cls: a tritonbench ``Operator`` class with a backward of its own.
    """
    if vars(operator_cls).get("_helion_ops_fixed"):
        return
    original_input_iter = operator_cls.get_input_iter
    original_bwd_fn = operator_cls.get_bwd_fn

    def get_input_iter(self: Any) -> Iterator[Any]:
        for inputs in original_input_iter(self):
            if not self.requires_grad:
                yield inputs
                continue
            # Only the tensors NEW meant to differentiate: the others keep requires_grad off.
            leaves = tuple(
                x.detach().requires_grad_(True) if _is_grad_non_leaf(x) else x for x in inputs
            )
            if any(_is_grad_non_leaf(x) for x in inputs):
                _log_leaves_once(operator_cls.__module__)
            yield leaves

    def get_bwd_fn(self: Any, fwd_fn: Callable[[], Any]) -> Callable[[], Any]:
        use_cuda_graphs = _graphs(self)
        with on_the_capture_stream(use_cuda_graphs):
            bwd_fn = original_bwd_fn(self, fwd_fn)
            if not use_cuda_graphs:
                return bwd_fn
            # The inputs' grad accumulators take the stream of the first graph through them
            # and keep it while any graph holds them: this graph, before any of NEW's own
            # forwards (fwd_bwd's runs on the legacy default stream first), held as long as
            # bwd_fn. Its node only: the output is freed.
            first_graph = getattr(fwd_fn(), "grad_fn", None)

        @synchronized_outside_captures
        def bwd_fn_on_the_capture_stream() -> Any:
            # NEW runs the forward in the first call of bwd_fn (the accuracy check's, on the
            # legacy default stream), not in get_bwd_fn: every call goes to ``forward_stream``.
            with on_the_capture_stream(True):
                return bwd_fn()

        bwd_fn_on_the_capture_stream.first_graph = first_graph  # type: ignore[attr-defined]
        return bwd_fn_on_the_capture_stream

    operator_cls.get_input_iter = get_input_iter
    operator_cls.get_bwd_fn = get_bwd_fn
    _make_benchmark_functions_on_the_capture_stream(operator_cls)
    operator_cls._helion_ops_fixed = True


def _make_benchmark_functions_on_the_capture_stream(operator_cls: type) -> None:
    """Under ``--cudagraph`` in the backward modes, tritonbench's ``_get_bm_func`` (which calls
    the backend's benchmark method, then ``get_bwd_fn``) runs on ``forward_stream``: a backend
    may record a graph when its function is made (NEW's matmul_partition_k copies ``b`` with
    ``b.contiguous()``), whose grad accumulators would otherwise keep the legacy default
    stream, and every capture of its backward would fail."""
    original_get_bm_func = operator_cls._get_bm_func

    def _get_bm_func(self: Any, bm_func_name: str) -> Callable[[], Any]:
        backward = getattr(self.mode, "value", None) in BWD_MODES
        with on_the_capture_stream(_graphs(self) and backward):
            return original_get_bm_func(self, bm_func_name)

    operator_cls._get_bm_func = _get_bm_func


def _is_grad_non_leaf(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.requires_grad and not x.is_leaf


@functools.cache
def _log_leaves_once(module: str) -> None:
    logger.warning(
        "helion_ops: %s inputs made leaves that keep their strides, so that every backend's "
        "input gradients are compared (a non-leaf input, as gemm's --layout tn makes, is not)",
        module,
    )


def grad_leaves(inputs: Sequence[Any]) -> tuple[Any, ...]:
    """The inputs with every floating-point tensor made a leaf that requires grad.

    Args:
        inputs: one example input tuple of an operator (tensors, None, numbers).

    Returns:
        A tuple of the same items; the floating tensors keep their values and strides.
    """

    def leaf(x: Any) -> Any:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            return x
        if x.is_leaf and x.requires_grad:
            return x
        return x.detach().requires_grad_(True)

    return tuple(leaf(x) for x in inputs)


def get_bwd_fn(self: Any, fwd_fn: Callable[[], torch.Tensor]) -> Callable[[], list[torch.Tensor]]:
    """NEW tritonbench's default backward: the timed call is ``y.backward(dy)`` on a kept graph.

    Args:
        self: the Operator instance; its ``example_inputs`` are the current input.
        fwd_fn: the backend's forward, as its benchmark method returned it.

    Returns:
        A function that clears the inputs' grads, runs the backward and returns the inputs
        that require grad.
    """
    inputs = [x for x in self.example_inputs if isinstance(x, torch.Tensor) and x.requires_grad]
    with on_the_capture_stream(_graphs(self)):
        y = fwd_fn()
    if not isinstance(y, torch.Tensor) or not y.requires_grad:
        # OLD tritonbench turns NotImplementedError into a "not supported" cell; anything
        # else from a backend without autograd aborts the whole input for every backend.
        raise NotImplementedError("this backend's output has no autograd graph")
    # The same dy for every backend of an input, as NEW tritonbench does.
    torch.manual_seed(0)
    dy = 0.1 * torch.randn_like(y)

    def bwd_fn() -> list[torch.Tensor]:
        for x in inputs:
            x.grad = None
        y.backward(dy, retain_graph=True)
        return inputs

    return synchronized_outside_captures(bwd_fn) if _graphs(self) else bwd_fn


def _graphs(operator: Any) -> bool:
    return getattr(operator, "use_cuda_graphs", False)


def synchronized_outside_captures(fn: Callable[[], T]) -> Callable[[], T]:
    """``fn``, each call ending in a device synchronize unless a CUDA graph captures it.

    For backward functions timed under ``--cudagraph``, where the time is a graph's replay.
    triton's ``do_bench_cudagraph`` puts ``rep / estimate`` calls in that graph, the estimate
    timed by events around five eager calls. A backward leaves its kernels queued on the
    forward stream; where the GPU is still busy at the first event, the five calls run back
    to back without their host time and the estimate is the GPU time alone. On the H200
    (2026-12-02, NOTES 104) aten's 4096x1024x1024 backward after the 8192x8192 inputs was
    estimated at 32 us for 190 us of host time: 3135 backwards in one graph, whose
    instantiation took about six minutes (it grows faster than the count: 637 backwards took
    1.3 s, 1129 took 7.8 s). Ending each eager call synchronized makes the estimate the
    call's host plus GPU time, and every graph some hundreds of backwards. The replay, what
    is timed, is unchanged.
    """

    @functools.wraps(fn)
    def call() -> T:
        result = fn()
        # (Not initialized: nothing ran on a GPU, as in tests of the harness on the CPU.)
        if torch.cuda.is_initialized() and not torch.cuda.is_current_stream_capturing():
            torch.cuda.synchronize()
        return result

    return call


@contextlib.contextmanager
def on_the_capture_stream(use_cuda_graphs: bool) -> Iterator[None]:
    """With CUDA graphs, run the block (the forward) on ``forward_stream``.

    Autograd runs each backward op on the stream its forward op ran on. Under ``--cudagraph``
    the timed backward is captured on a stream of its own, and a forward that ran on the legacy
    default stream puts the backward there, which no capture can include (the capture fails:
    cudaErrorStreamCaptureInvalidated). A forward on the stream the capture runs on puts the
    whole backward in the capture's own stream; on any other side stream the capture joins it
    through the events autograd waits on.
    """
    if not use_cuda_graphs:
        yield
        return
    caller = torch.cuda.current_stream()
    stream = forward_stream(caller.device)
    if stream == caller:
        yield
        return
    stream.wait_stream(caller)
    with torch.cuda.stream(stream):
        yield
    caller.wait_stream(stream)


@functools.cache
def forward_stream(device: torch.device) -> torch.cuda.Stream:
    """The one stream of every backend's forward on a device: the one CUDA graphs capture on.

    Every backend of an input gets the same leaf tensors, and a leaf's gradient is
    accumulated on the stream of the forward that created its accumulator, which lives as
    long as any graph through it: the baseline's, which tritonbench keeps. Forwards on streams
    of their own would make every later backend's timed backward synchronize with the
    baseline's stream (autograd warns: "The AccumulateGrad node's stream does not match");
    one shared stream gives every backend the same stream layout.

    That stream is ``torch.cuda.graph``'s default capture stream, on which triton's
    ``do_bench_cudagraph`` (OLD tritonbench) and NEW tritonbench's own copy capture. A
    backward captured on any other stream forks to the forward's stream and joins back, and a
    replay then runs each backward on a stream of its own after an idle gap that grows with
    the graph's length (H100, calls 393-394: 29 us of kernels a backward at 4096x1024x1024
    bf16 replayed at 34-43 us in graphs of 300-900 backwards; one stream, call 392: 29-31).
    Where that stream was made on another device, a side stream of the device's own.
    """
    with torch.cuda.device(device):
        capture_stream = torch.cuda.graph(torch.cuda.CUDAGraph()).capture_stream
    return capture_stream if capture_stream.device == device else torch.cuda.Stream(device)


# Two units of rounding at the largest value. In fp16/bf16 rounding dominates the difference
# of two correct kernels, and aten's addmm with an [M, N] bias rounds twice (the product, then
# the sum): on the H200 at 2000^3 bf16 its largest error against float64 was 0.99 where a
# kernel that rounds once (helion_ops) had 0.50, so the two can differ by 1.5 units (a fixed
# atol of 1e-2 failed such correct results on 23 of 35 validation shapes). A wrong result (a
# missing scale, a wrong operand) is off by the values themselves. In fp32 the summation
# order dominates, growing with K.
ATOL_EPS = {torch.float16: 2.0, torch.bfloat16: 2.0, torch.float32: 64.0}
# fp32 under torch's TF32 switch (tritonbench's ``--precision tf32``): the dots read their
# operands with 10 bits of mantissa, so two correct results differ by about one unit of 2**-10
# at the largest value (H100, call 352: helion_ops 7.6-8.6e-4 of the largest value from
# float64, aten 2.8-3.2e-4, at K of 1024-8192, so 5e-4 or more apart where ours is farthest);
# four such units, where fp32's rule above (7.6e-6) would fail them.
TF32_EPS = 2.0**-10
TF32_ATOL_EPS = 4.0


def assert_matches_baseline(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """Raise AssertionError unless ``got`` matches ``want`` within the tolerance above.

    Args:
        got: the backend's tensor.
        want: the baseline's.
        what: what is compared, for the message ("output", "grad of input 1").
    """
    want = want.detach()
    # Of the finite values: a NaN or inf in the baseline scores 0 (assert_close's AssertionError),
    # rather than a NaN atol making assert_close raise a RuntimeError out of the accuracy check.
    finite = want[want.isfinite()] if want.is_floating_point() else want
    scale = finite.abs().max().item() if finite.numel() else 0.0
    if want.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32:
        atol, rtol = TF32_ATOL_EPS * TF32_EPS * scale, TF32_EPS
    else:
        eps = torch.finfo(want.dtype).eps if want.is_floating_point() else 0.0
        atol = ATOL_EPS.get(want.dtype, 1.0) * eps * scale
        rtol = {torch.float16: 1e-3, torch.bfloat16: 1.6e-2}.get(want.dtype, 1.3e-6)
    torch.testing.assert_close(
        got.detach(), want, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}"
    )


def backend_accuracy(mode: str, fn: Callable[[], Any], baseline_fn: Callable[[], Any]) -> bool:
    """Whether a backend's output (fwd), input gradients (bwd) or both (fwd_bwd) match the baseline.

    Both functions fill the grads of the same input tensors, so the backend's are cloned before
    the baseline runs.

    Args:
        mode: "fwd" or "fwd_no_grad" (the functions return the output), "bwd" (they return the
            inputs) or "fwd_bwd" (they return ``(output, inputs)``).
        fn: the backend's benchmarked function.
        baseline_fn: the baseline's.

    Returns:
        True when everything compared matches (``assert_matches_baseline``).
    """
    if mode not in BWD_MODES:
        output, expected = fn(), baseline_fn()
        if output is None or expected is None:  # fwd_no_grad returns nothing to compare
            return output is None and expected is None
        try:
            assert_matches_baseline(output, expected, "output")
        except AssertionError as err:
            logger.warning("%s: accuracy check failed: %s", getattr(fn, "_name", "backend"), err)
            return False
        return True
    output, grads = _run_keeping_grads(mode, fn)
    expected_output, expected_grads = _run_keeping_grads(mode, baseline_fn)
    try:
        if mode == "fwd_bwd":
            assert_matches_baseline(output, expected_output, "output")
        assert_grads_close(grads, expected_grads)
    except AssertionError as err:
        logger.warning("%s: accuracy check failed: %s", getattr(fn, "_name", "backend"), err)
        return False
    return True


def _run_keeping_grads(
    mode: str, fn: Callable[[], Any]
) -> tuple[torch.Tensor | None, list[torch.Tensor | None]]:
    result = fn()
    output, inputs = (None, result) if mode == "bwd" else result
    return output, settled_grads(inputs)


def settled_grads(inputs: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:
    """Copies of the inputs' grads, complete when this returns.

    Under CUDA graphs a backward runs on the forward's stream (``on_the_capture_stream``),
    and its grads lie in that stream's memory pool. A copy queued on the caller's stream
    follows that backward, but nothing orders it before the next backward launched from
    another stream (do_bench's), which, once the grads are cleared, reuses their memory: a
    copy still queued would read the next backward's grads.
    """
    grads = [None if x.grad is None else x.grad.clone() for x in inputs]
    if any(g is not None and g.is_cuda for g in grads):
        torch.cuda.synchronize()
    return grads


def assert_grads_close(
    actual: Sequence[torch.Tensor | None], expected: Sequence[torch.Tensor | None]
) -> None:
    """Raise AssertionError unless two lists of input gradients match one by one.

    Args:
        actual: the backend's gradients, None where an input got none.
        expected: the baseline's.
    """
    if len(actual) != len(expected):
        raise AssertionError(f"{len(actual)} gradients, the baseline has {len(expected)}")
    missing = [g is None for g in actual]
    if missing != [g is None for g in expected]:
        raise AssertionError(f"gradients present {missing} differ from the baseline's")
    if all(missing):
        raise AssertionError("no input received a gradient")
    for i, (got, want) in enumerate(zip(actual, expected, strict=True)):
        if got is not None:
            assert_matches_baseline(got, want, f"grad of input {i}")
