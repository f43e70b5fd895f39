"""matmul and addmm as torch.library custom ops, and the autograd formulas they share.

``torch.compile`` cannot trace into a Helion kernel call, so under compilation every launch
goes through the opaque custom ops ``helion_ops::mm`` and ``helion_ops::addmm`` (with fake
implementations for shape propagation and registered autograd). Eager calls skip the
custom-op dispatcher, which would add tens of microseconds of host time per call, and run
the launchers directly: ``mm`` and ``addmm`` below pick the path.

For ``out = beta * bias + alpha * (mat1 @ mat2)`` and an incoming ``grad_out``:
``grad_mat1 = alpha * (grad_out @ mat2.T)`` and ``grad_mat2 = alpha * (mat1.T @ grad_out)``,
both through the forward kernel on transposed views (no copies), alpha fused in its epilogue,
and in one launch where both are small (``launch_mm_pair``); each in its operand's layout, as
torch gives it (a column-major operand's as the transposed product), so that autograd keeps it
rather than copying it into its leaf's layout;
``grad_bias = beta * grad_out`` summed down to the bias's own shape. Only the gradients in
``ctx.needs_input_grad`` are computed, and only the operands they need are saved. The same
``setup_*_context`` and ``*_backward`` functions serve the custom ops' registered autograd
and the autograd Functions of ``helion_ops.autograd``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from helion_ops.kernel import launch_addmm, launch_mm, launch_mm_pair

if TYPE_CHECKING:
    from collections.abc import Callable

    MM = Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]
    MMPair = Callable[..., tuple[torch.Tensor, torch.Tensor]]


@torch.library.custom_op("helion_ops::mm", mutates_args=())
def mm_op(mat1: torch.Tensor, mat2: torch.Tensor, alpha: float) -> torch.Tensor:
    """``alpha * (mat1 @ mat2)`` through the Helion kernel."""
    return launch_mm(mat1, mat2, alpha)


@torch.library.custom_op("helion_ops::addmm", mutates_args=())
def addmm_op(
    bias: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, alpha: float, beta: float
) -> torch.Tensor:
    """``beta * bias + alpha * (mat1 @ mat2)`` through the Helion kernel."""
    return launch_addmm(bias, mat1, mat2, alpha, beta)


@torch.library.custom_op("helion_ops::mm_pair", mutates_args=())
def mm_pair_op(
    a1: torch.Tensor, b1: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor, alpha: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(alpha * (a1 @ b1), alpha * (a2 @ b2))``, in one launch where both are small."""
    return launch_mm_pair(a1, b1, a2, b2, alpha)


@mm_pair_op.register_fake
def _mm_pair_fake(
    a1: torch.Tensor, b1: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor, alpha: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return a1.new_empty((a1.shape[0], b1.shape[1])), a2.new_empty((a2.shape[0], b2.shape[1]))


@mm_op.register_fake
def _mm_fake(mat1: torch.Tensor, mat2: torch.Tensor, alpha: float) -> torch.Tensor:
    return mat1.new_empty((mat1.shape[0], mat2.shape[1]))


@addmm_op.register_fake
def _addmm_fake(
    bias: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, alpha: float, beta: float
) -> torch.Tensor:
    return mat1.new_empty((mat1.shape[0], mat2.shape[1]))


def mm(
    mat1: torch.Tensor,
    mat2: torch.Tensor,
    alpha: float = 1.0,
    check: Callable[[Any, Any], None] | None = None,
) -> torch.Tensor:
    """``alpha * (mat1 @ mat2)``: the custom op while compiling, the launcher in eager mode.

    ``check``: the argument check, run first while compiling; the launcher runs it unless the
    operands match a launch it made before (``kernel._fast_mm``)."""
    if torch.compiler.is_compiling():
        if check is not None:
            check(mat1, mat2)
        return mm_op(mat1, mat2, alpha)
    return launch_mm(mat1, mat2, alpha, check)


def addmm(
    bias: torch.Tensor,
    mat1: torch.Tensor,
    mat2: torch.Tensor,
    alpha: float,
    beta: float,
    check: Callable[..., None] | None = None,
) -> torch.Tensor:
    """``beta * bias + alpha * (mat1 @ mat2)``, dispatched and checked like :func:`mm`."""
    if torch.compiler.is_compiling():
        if check is not None:
            check(bias, mat1, mat2, alpha, beta)
        return addmm_op(bias, mat1, mat2, alpha, beta)
    return launch_addmm(bias, mat1, mat2, alpha, beta, check=check)


def mm_pair(
    a1: torch.Tensor, b1: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor, alpha: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(alpha * (a1 @ b1), alpha * (a2 @ b2))``, dispatched like :func:`mm`."""
    if torch.compiler.is_compiling():
        return mm_pair_op(a1, b1, a2, b2, alpha)
    return launch_mm_pair(a1, b1, a2, b2, alpha)


def _operands_to_save(
    mat1: torch.Tensor, mat2: torch.Tensor, needs: tuple[bool, bool]
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """What the backward of ``mat1 @ mat2`` reads: mat1 for mat2's grad, mat2 for mat1's."""
    need_mat1, need_mat2 = needs
    return mat1 if need_mat2 else None, mat2 if need_mat1 else None


def _column_major(t: torch.Tensor) -> bool:
    """Whether a 2-D tensor is laid out column by column, by torch's own test in its mm
    backward (a transposed contiguous tensor: ``x.T``, tritonbench's 'n' layouts). (One
    ``stride()``: ``stride(0)`` and ``stride(1)`` each cost torch's argument parser.)"""
    strides = t.stride()
    return strides[0] == 1 and strides[1] == t.shape[0]


def _operand_grads(
    mat1: torch.Tensor | None,
    mat2: torch.Tensor | None,
    needs: tuple[bool, bool],
    grad_out: torch.Tensor,
    alpha: float,
    mm: MM,
    mm_pair: MMPair,
    column_major: tuple[bool, bool],
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The grads of ``alpha * (mat1 @ mat2)`` in ``needs``, from the saved operands.

    Each grad comes in its operand's layout, as torch's mm backward gives it: for an operand
    that was column-major (``column_major``), the transposed product, transposed back as a
    view. A grad of another layout than its leaf's would be copied by autograd into the
    leaf's (one more kernel and allocation a step)."""
    if alpha == 0:
        # torch's gradients: the products times 0, so that NaN and inf in them propagate
        # (the forward never reads the product).
        grads = _operand_grads(mat1, mat2, needs, grad_out, 1.0, mm, mm_pair, column_major)
        return tuple(None if g is None else g * 0.0 for g in grads)
    need_mat1, need_mat2 = needs
    col1, col2 = column_major
    # grad_mat1 = grad_out @ mat2.T, or (mat2 @ grad_out.T).T; likewise grad_mat2.
    first = ((mat2, grad_out.T) if col1 else (grad_out, mat2.T)) if need_mat1 else None
    second = ((grad_out.T, mat1) if col2 else (mat1.T, grad_out)) if need_mat2 else None
    if first and second:
        # One launch where it pays; the product with the longer K first, so that its tiles
        # start first (grad_mat1's sums over grad_out's columns, grad_mat2's over its rows).
        if grad_out.shape[0] > grad_out.shape[1]:
            grad_mat2, grad_mat1 = mm_pair(*second, *first, alpha)
        else:
            grad_mat1, grad_mat2 = mm_pair(*first, *second, alpha)
    else:
        grad_mat1 = mm(*first, alpha) if first else None
        grad_mat2 = mm(*second, alpha) if second else None
    return (
        grad_mat1.T if col1 and grad_mat1 is not None else grad_mat1,
        grad_mat2.T if col2 and grad_mat2 is not None else grad_mat2,
    )


def product_tangent(
    mat1: torch.Tensor,
    mat2: torch.Tensor,
    tangents: tuple[torch.Tensor | None, torch.Tensor | None],
    alpha: float,
    bias_tangent: torch.Tensor | None = None,
    beta: float = 0.0,
    mm: MM = launch_mm,
) -> torch.Tensor:
    """The forward-mode derivative of ``beta * bias + alpha * (mat1 @ mat2)`` by torch's own
    formula for addmm: ``alpha * (dmat1 @ mat2) + alpha * (mat1 @ dmat2) + beta * dbias``,
    a term for each tangent given (None: zero), scales of 1 left out and scales of 0
    multiplied, so that NaN and inf in a tangent propagate as in torch's (the forward's
    ``alpha == 0`` and ``beta == 0`` never read the product or the bias). ``mm``: how it
    multiplies, ``mm(a, b, alpha)``."""
    tangent1, tangent2 = tangents
    products = [
        mm(a, b, alpha) if alpha != 0 else mm(a, b, 1.0) * 0.0
        for a, b in ((tangent1, mat2), (mat1, tangent2))
        if a is not None and b is not None
    ]
    if products:
        out = sum(products[1:], products[0])
    else:
        out = mat1.new_zeros(mat1.shape[0], mat2.shape[1])
    if bias_tangent is not None:
        out = out + (bias_tangent if beta == 1 else bias_tangent * beta)
    return out


def setup_mm_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor | None) -> None:
    """Autograd context of ``mm(mat1, mat2, alpha)``."""
    mat1, mat2, alpha = inputs
    ctx.save_for_backward(*_operands_to_save(mat1, mat2, ctx.needs_input_grad[:2]))
    ctx.column_major = _column_major(mat1), _column_major(mat2)
    ctx.alpha = alpha


def mm_backward(
    ctx: Any, grad_out: torch.Tensor, mm: MM = mm_op, mm_pair: MMPair = mm_pair_op
) -> tuple[Any, ...]:
    """Gradients of ``mm(mat1, mat2, alpha)`` for (mat1, mat2, alpha)."""
    needs = ctx.needs_input_grad[:2]
    grads = _operand_grads(
        *ctx.saved_tensors, needs, grad_out, ctx.alpha, mm, mm_pair, ctx.column_major
    )
    return (*grads, None)


def setup_addmm_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor | None) -> None:
    """Autograd context of ``addmm(bias, mat1, mat2, alpha, beta)``."""
    bias, mat1, mat2, alpha, beta = inputs
    ctx.save_for_backward(*_operands_to_save(mat1, mat2, ctx.needs_input_grad[1:3]))
    ctx.column_major = _column_major(mat1), _column_major(mat2)
    ctx.bias_shape = bias.shape
    ctx.alpha, ctx.beta = alpha, beta


def addmm_backward(
    ctx: Any, grad_out: torch.Tensor, mm: MM = mm_op, mm_pair: MMPair = mm_pair_op
) -> tuple[Any, ...]:
    """Gradients of ``addmm(bias, mat1, mat2, alpha, beta)`` for all five inputs."""
    grad_bias = None
    if ctx.needs_input_grad[0]:
        # As torch's own addmm backward: scaled by beta (no pass over the gradient where beta
        # is 1), then summed, so that a sum past the dtype's range times a small beta is not
        # inf, nor NaN at beta 0.
        grad_bias = (grad_out if ctx.beta == 1 else grad_out * ctx.beta).sum_to_size(ctx.bias_shape)
    needs = ctx.needs_input_grad[1:3]
    grad_mat1, grad_mat2 = _operand_grads(
        *ctx.saved_tensors, needs, grad_out, ctx.alpha, mm, mm_pair, ctx.column_major
    )
    return grad_bias, grad_mat1, grad_mat2, None, None


def setup_mm_pair_context(
    ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """Autograd context of ``mm_pair(a1, b1, a2, b2, alpha)``: two independent products."""
    a1, b1, a2, b2, alpha = inputs
    need = ctx.needs_input_grad
    ctx.save_for_backward(
        *_operands_to_save(a1, b1, need[0:2]), *_operands_to_save(a2, b2, need[2:4])
    )
    ctx.column_major = tuple(_column_major(t) for t in (a1, b1, a2, b2))
    ctx.alpha = alpha


def mm_pair_backward(ctx: Any, grad1: torch.Tensor, grad2: torch.Tensor) -> tuple[Any, ...]:
    """Gradients of ``mm_pair`` for (a1, b1, a2, b2, alpha): those of each product. (The
    pair runs in backwards: these are the terms of a double backward.)"""
    a1, b1, a2, b2 = ctx.saved_tensors
    need, alpha, cols = ctx.needs_input_grad, ctx.alpha, ctx.column_major
    first = _operand_grads(a1, b1, need[0:2], grad1, alpha, mm_op, mm_pair_op, cols[0:2])
    second = _operand_grads(a2, b2, need[2:4], grad2, alpha, mm_op, mm_pair_op, cols[2:4])
    return (*first, *second, None)


mm_op.register_autograd(mm_backward, setup_context=setup_mm_context)
mm_pair_op.register_autograd(mm_pair_backward, setup_context=setup_mm_pair_context)
addmm_op.register_autograd(addmm_backward, setup_context=setup_addmm_context)
