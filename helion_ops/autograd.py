"""matmul and addmm as autograd Functions whose forward and backward run the one Helion kernel.

For ``out = beta * bias + alpha * (mat1 @ mat2)`` and an incoming ``grad_out``:
``grad_mat1 = alpha * (grad_out @ mat2.T)`` and ``grad_mat2 = alpha * (mat1.T @ grad_out)``,
both through the forward kernel on transposed views (no copies), alpha fused in its epilogue;
``grad_bias = beta * grad_out`` summed down to the bias's own shape. Only the gradients in
``ctx.needs_input_grad`` are computed, and only the operands they need are saved.
"""

from __future__ import annotations

from typing import Any

import torch

from helion_ops.checks import check_addmm_args, check_matmul_args
from helion_ops.kernel import launch_addmm, launch_mm


def matmul_input_grads(
    needs_input_grad: tuple[bool, bool],
    grad_out: torch.Tensor,
    mat1: torch.Tensor | None,
    mat2: torch.Tensor | None,
    alpha: float = 1.0,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The gradients of ``alpha * (mat1 @ mat2)`` that are asked for, None for the others."""
    need_mat1, need_mat2 = needs_input_grad
    grad_mat1 = launch_mm(grad_out, mat2.T, alpha) if need_mat1 else None
    grad_mat2 = launch_mm(mat1.T, grad_out, alpha) if need_mat2 else None
    return grad_mat1, grad_mat2


def operands_to_save(
    needs_input_grad: tuple[bool, bool], mat1: torch.Tensor, mat2: torch.Tensor
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """grad_mat1 needs only mat2, grad_mat2 only mat1."""
    need_mat1, need_mat2 = needs_input_grad
    return (mat1 if need_mat2 else None, mat2 if need_mat1 else None)


class MatMulFunction(torch.autograd.Function):
    """``mat1 @ mat2`` for 2-D fp16, bf16 or fp32 tensors."""

    @staticmethod
    def forward(ctx: Any, mat1: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
        check_matmul_args(mat1, mat2)
        ctx.save_for_backward(*operands_to_save(ctx.needs_input_grad, mat1, mat2))
        return launch_mm(mat1, mat2)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        mat1, mat2 = ctx.saved_tensors
        return matmul_input_grads(ctx.needs_input_grad, grad_out, mat1, mat2)


class AddMMFunction(torch.autograd.Function):
    """``beta * bias + alpha * (mat1 @ mat2)`` with torch.addmm's semantics."""

    @staticmethod
    def forward(
        ctx: Any,
        bias: torch.Tensor,
        mat1: torch.Tensor,
        mat2: torch.Tensor,
        alpha: float = 1.0,
        beta: float = 1.0,
    ) -> torch.Tensor:
        check_addmm_args(bias, mat1, mat2, alpha, beta)
        ctx.save_for_backward(*operands_to_save(ctx.needs_input_grad[1:3], mat1, mat2))
        ctx.bias_shape = bias.shape
        ctx.alpha, ctx.beta = alpha, beta
        return launch_addmm(bias, mat1, mat2, alpha, beta)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        mat1, mat2 = ctx.saved_tensors
        grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_bias = grad_out.sum_to_size(ctx.bias_shape) * ctx.beta
        grad_mat1, grad_mat2 = matmul_input_grads(
            ctx.needs_input_grad[1:3], grad_out, mat1, mat2, ctx.alpha
        )
        return grad_bias, grad_mat1, grad_mat2, None, None


def matmul(mat1: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    """Differentiable ``mat1 @ mat2`` through the Helion kernel.

    Args:
        mat1: [m, k] fp16, bf16 or fp32 tensor on a CUDA device.
        mat2: [k, n] tensor of mat1's dtype and device; transposed views are fine.

    Returns:
        [m, n] tensor of mat1's dtype.
    """
    return MatMulFunction.apply(mat1, mat2)


def addmm(
    bias: torch.Tensor,
    mat1: torch.Tensor,
    mat2: torch.Tensor,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
) -> torch.Tensor:
    """Differentiable ``beta * bias + alpha * (mat1 @ mat2)``, as torch.addmm.

    Args:
        bias: tensor broadcastable to [m, n] ([m, n], [n], [1, n], [m, 1], [1] or 0-d).
        mat1: [m, k] fp16, bf16 or fp32 tensor on a CUDA device.
        mat2: [k, n] tensor of mat1's dtype and device.
        alpha: scale of the product.
        beta: scale of the bias; 0 ignores the bias entirely, NaN included.

    Returns:
        [m, n] tensor of mat1's dtype.
    """
    return AddMMFunction.apply(bias, mat1, mat2, alpha, beta)


def matmul_autograd(mat1: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    """The original design's name for :func:`matmul`."""
    return matmul(mat1, mat2)


def addmm_autograd(
    bias: torch.Tensor,
    mat1: torch.Tensor,
    mat2: torch.Tensor,
    alpha: float = 1.0,
    beta: float = 1.0,
) -> torch.Tensor:
    """The original design's name for :func:`addmm`, with alpha and beta positional."""
    return addmm(bias, mat1, mat2, alpha=alpha, beta=beta)
