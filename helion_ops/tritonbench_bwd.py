"""Backward benchmarking for tritonbench operators that lack it (OLD tritonbench's gemm and addmm).

NEW tritonbench times and checks gemm/addmm backwards itself. OLD tritonbench (66b557c) makes
their inputs without grad, has no ``get_bwd_fn`` (a "not supported" cell) and, in bwd mode,
compares ``fn().grad`` with ``baseline_fn().grad``, which never matches.
``add_backward_support`` gives such an Operator class what NEW has built in: grad-requiring
leaf inputs, NEW's default ``get_bwd_fn`` and an accuracy check over every input gradient, so
every backend, aten included, runs its real backward and speedups compare like with like.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

logger = logging.getLogger(__name__)

BWD_MODES = ("bwd", "fwd_bwd")


def add_backward_support(operator_cls: type) -> bool:
    """Install grad-requiring inputs, ``get_bwd_fn`` and a gradient accuracy check on a class.

    Only where the class has no backward of its own (``has_bwd()`` is False), so calling it
    again, or on NEW tritonbench, changes nothing.

    Args:
        operator_cls: a tritonbench ``Operator`` class (a BenchmarkOperator subclass).

    Returns:
        True if the support was installed now, False if the class already had a backward.
    """
    if operator_cls.has_bwd():
        return False
    original_input_iter = operator_cls.get_input_iter
    original_accuracy = operator_cls.accuracy

    def get_input_iter(self: Any) -> Iterator[Any]:
        for inputs in original_input_iter(self):
            yield grad_leaves(inputs) if self.requires_grad else inputs

    def accuracy(self: Any, fn: Callable[[], Any], baseline_fn: Callable[[], Any]) -> bool:
        if self.mode.value not in BWD_MODES:
            return original_accuracy(self, fn, baseline_fn)
        return backward_accuracy(self.mode.value, fn, baseline_fn)

    operator_cls.get_input_iter = get_input_iter
    operator_cls.get_bwd_fn = get_bwd_fn
    operator_cls.accuracy = accuracy
    return True


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

    return bwd_fn


def backward_accuracy(mode: str, fn: Callable[[], Any], baseline_fn: Callable[[], Any]) -> bool:
    """Whether a backend's input gradients (and forward output, in fwd_bwd) match the baseline's.

    Both functions fill the grads of the same input tensors, so the backend's are cloned before
    the baseline runs.

    Args:
        mode: "bwd" (the functions return the inputs) or "fwd_bwd" (they return
            ``(output, inputs)``).
        fn: the backend's benchmarked function.
        baseline_fn: the baseline's.

    Returns:
        True when every gradient matches under torch's default tolerances.
    """
    output, grads = _run_keeping_grads(mode, fn)
    expected_output, expected_grads = _run_keeping_grads(mode, baseline_fn)
    try:
        if mode == "fwd_bwd":
            torch.testing.assert_close(output, expected_output, msg=lambda m: f"output: {m}")
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
    return output, [None if x.grad is None else x.grad.clone() for x in inputs]


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
            torch.testing.assert_close(got, want, msg=lambda m, i=i: f"grad of input {i}: {m}")
