"""The public API: matmul and addmm, differentiable, with torch's semantics.

``MatMulFunction`` and ``AddMMFunction`` are autograd Functions built from the same context and
backward formulas as the custom ops in ``helion_ops.ops``; they are the eager path. Under
``torch.compile`` the public functions call the custom ops instead, whose registered autograd
is those same formulas.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd import forward_ad

from helion_ops import native, ops, plans
from helion_ops.checks import check_addmm_args, check_matmul_args, scalars
from helion_ops.kernel import launch_addmm, launch_mm


class MatMulFunction(torch.autograd.Function):
    """``mat1 @ mat2`` for 2-D fp16, bf16 or fp32 tensors."""

    @staticmethod
    def forward(ctx: Any, mat1: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
        out = ops.mm(mat1, mat2, check=check_matmul_args)
        ops.setup_mm_context(ctx, (mat1, mat2, 1.0), None)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        return ops.mm_backward(ctx, grad_out, *_backward_products())[:2]


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
        alpha, beta = scalars(alpha, beta)
        out = ops.addmm(bias, mat1, mat2, alpha, beta, check=check_addmm_args)
        ops.setup_addmm_context(ctx, (bias, mat1, mat2, alpha, beta), None)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        return ops.addmm_backward(ctx, grad_out, *_backward_products())


# Forward-mode AD and functorch's transforms take subclasses of the Functions with a
# ``setup_context``, a ``jvp`` and a ``vmap``, which the public functions pick under a dual
# level or a transform (``_transformed``). The exported Functions keep none of them:
# torch.compile traces no autograd.Function with a custom jvp, and a separate setup_context
# costs an eager call microseconds of host time.


class _TransformableMatMul(MatMulFunction):
    @staticmethod
    def forward(mat1: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
        return ops.mm(mat1, mat2, check=check_matmul_args)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ops.setup_mm_context(ctx, (*inputs, 1.0), output)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def jvp(ctx: Any, mat1_t: torch.Tensor | None, mat2_t: torch.Tensor | None) -> torch.Tensor:
        return ops.product_tangent(*ctx.saved_tensors, (mat1_t, mat2_t), 1.0, mm=_tangent_mm())

    @staticmethod
    def vmap(info: Any, in_dims: tuple[int | None, ...], *args: Any) -> tuple[torch.Tensor, int]:
        return _per_sample(_TransformableMatMul, info.batch_size, in_dims, args), 0


class _TransformableAddMM(AddMMFunction):
    @staticmethod
    def forward(
        bias: torch.Tensor,
        mat1: torch.Tensor,
        mat2: torch.Tensor,
        alpha: float = 1.0,
        beta: float = 1.0,
    ) -> torch.Tensor:
        # Only _python_addmm applies this Function, with scalars already converted: its
        # setup_context reads the inputs as given.
        return ops.addmm(bias, mat1, mat2, alpha, beta, check=check_addmm_args)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ops.setup_addmm_context(ctx, inputs, output)
        ctx.save_for_forward(*inputs[1:3])

    @staticmethod
    def jvp(
        ctx: Any,
        bias_t: torch.Tensor | None,
        mat1_t: torch.Tensor | None,
        mat2_t: torch.Tensor | None,
        alpha_t: None,
        beta_t: None,
    ) -> torch.Tensor:
        mat1, mat2 = ctx.saved_tensors
        tangents = (mat1_t, mat2_t)
        return ops.product_tangent(
            mat1, mat2, tangents, ctx.alpha, bias_t, ctx.beta, mm=_tangent_mm()
        )

    @staticmethod
    def vmap(info: Any, in_dims: tuple[int | None, ...], *args: Any) -> tuple[torch.Tensor, int]:
        return _per_sample(_TransformableAddMM, info.batch_size, in_dims, args), 0


def _per_sample(
    function: type[torch.autograd.Function],
    batch_size: int,
    in_dims: tuple[int | None, ...],
    args: tuple[Any, ...],
) -> torch.Tensor:
    """``function`` under ``torch.func.vmap``: applied to each element of the batch in turn
    (one launch each), the results stacked along a new first dimension."""

    def element(arg: Any, dim: int | None, index: int) -> Any:
        return arg if dim is None else arg.select(dim, index)

    def element_shape(t: torch.Tensor, dim: int | None) -> list[int]:
        return [size for i, size in enumerate(t.shape) if dim is None or i != dim % t.dim()]

    if batch_size == 0:  # no element to apply it to: an empty batch of [m, n] results
        # (mat1 and mat2 are both Functions' last two tensor arguments)
        *_, (mat1, dim1), (mat2, dim2) = [
            (a, d) for a, d in zip(args, in_dims, strict=True) if isinstance(a, torch.Tensor)
        ]
        m, n = element_shape(mat1, dim1)[0], element_shape(mat2, dim2)[1]
        return mat1.new_empty((0, m, n))
    return torch.stack(
        [
            function.apply(*(element(a, d, i) for a, d in zip(args, in_dims, strict=True)))
            for i in range(batch_size)
        ]
    )


def _tangent_mm() -> ops.MM:
    """How the Functions' ``jvp`` multiplies: the launcher, or under a functorch transform
    (``torch.func.jvp``, whose tensors here are still its wrappers) these Functions."""
    return _function_mm if torch._C._are_functorch_transforms_active() else launch_mm


def _transformed() -> bool:
    """Whether a call takes the transformable Functions: a forward-mode AD level is open
    (``torch.autograd.forward_ad.dual_level``: its tangents need a ``jvp``), or a functorch
    transform is active (``torch.func``: ``vmap`` batches, ``jvp`` pushes tangents)."""
    return forward_ad._current_level >= 0 or torch._C._are_functorch_transforms_active()


def _backward_products() -> tuple[ops.MM, ops.MMPair]:
    """How a backward multiplies: the launchers, or, where autograd records the backward
    itself (``create_graph=True``: a gradient penalty, a Hessian-vector product), the custom
    ops, whose registered autograd makes the gradients differentiable too; under a functorch
    transform (``torch.func.jacrev`` runs backwards under ``vmap``), these Functions, which
    every transform can batch and differentiate."""
    if torch._C._are_functorch_transforms_active():
        return _function_mm, _function_mm_pair
    if torch.is_grad_enabled():
        return ops.mm_op, ops.mm_pair_op
    return ops.mm, ops.mm_pair


def _function_mm(a: torch.Tensor, b: torch.Tensor, alpha: float) -> torch.Tensor:
    out = _TransformableMatMul.apply(a, b)
    return out if alpha == 1 else out * alpha


def _function_mm_pair(
    a1: torch.Tensor, b1: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor, alpha: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return _function_mm(a1, b1, alpha), _function_mm(a2, b2, alpha)


# torch.autograd.Function.apply less its Python layer (1-2 microseconds a call): that layer
# binds default arguments only for Functions with a separate setup_context (``_apply``'s
# callers pass every argument anyway) and unwraps functorch's wrappers only where a functorch
# transform is active, where ``_apply`` below still goes through it.
_function_apply = torch._C._FunctionBase.__dict__["apply"]


def _apply(function: type[torch.autograd.Function], *args: object) -> torch.Tensor:
    if torch._C._are_functorch_transforms_active():
        return function.apply(*args)
    return _function_apply.__get__(None, function)(*args)


def _autocast(mat1: object, *operands: object) -> tuple[Any, ...]:
    """The operands as ``torch.autocast`` hands them to torch.mm and torch.addmm, where it is
    on for mat1's device type: each floating tensor but a float64 one in autocast's dtype.

    The copies are differentiable: gradients reach the operands in their own dtype. (torch
    keeps its copies of leaf weights for the autocast region; these are made each call.)
    """
    if not isinstance(mat1, torch.Tensor) or not torch.is_autocast_enabled(mat1.device.type):
        return operands
    dtype = torch.get_autocast_dtype(mat1.device.type)
    return tuple(
        t.to(dtype)
        if isinstance(t, torch.Tensor)
        and t.is_floating_point()
        and t.dtype not in (dtype, torch.float64)
        else t
        for t in operands
    )


def _records_a_graph(*args: object) -> bool:
    """Whether autograd would record this call; where not, the Function is skipped."""
    if torch.is_grad_enabled():
        for t in args:  # a loop, not any() over a generator: this runs on every call
            if isinstance(t, torch.Tensor) and t.requires_grad:
                return True
    return False


def matmul(mat1: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    """Differentiable ``mat1 @ mat2`` through the Helion kernel; works under torch.compile.

    Args:
        mat1: [m, k] fp16, bf16 or fp32 tensor on a CUDA device.
        mat2: [k, n] tensor of mat1's dtype and device; transposed views are fine.

    Returns:
        [m, n] tensor of mat1's dtype (under ``torch.autocast``, of its dtype, as torch.mm).
    """
    if torch._C._is_any_autocast_enabled():
        mat1, mat2 = _autocast(mat1, mat1, mat2)
    if torch.compiler.is_compiling():
        return ops.mm(mat1, mat2, check=check_matmul_args)  # the custom op, checked first
    fast = native.module
    if fast is None:
        if not native.started:
            native.start(mat1)
    elif plans.no_launch_hooks():
        # The C++ path: a tensor, False (this call is Python's), or None (a new key, which
        # the Python path runs and then teaches it).
        out = fast.matmul(mat1, mat2)
        if out is None:
            return native.learned_matmul(mat1, mat2, _python_matmul)
        if out is not False:
            return out
    return _python_matmul(mat1, mat2)


def _python_matmul(mat1: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    if _transformed():
        return _apply(_TransformableMatMul, mat1, mat2)
    if not _records_a_graph(mat1, mat2):
        # The bare launcher, which checks the arguments unless they match a launch it made
        # before.
        return launch_mm(mat1, mat2, 1.0, check_matmul_args)
    return _apply(MatMulFunction, mat1, mat2)


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
        alpha: scale of the product; 0 never reads the product, as in BLAS.
        beta: scale of the bias; 0 ignores the bias entirely, NaN included.
            Both are converted to float32 as torch converts them: one that rounds to 0
            there counts as 0, and a finite one past float32's range is an error.

    Returns:
        [m, n] tensor of mat1's dtype (under ``torch.autocast``, of its dtype, as torch.addmm).
    """
    alpha, beta = scalars(alpha, beta)
    if torch._C._is_any_autocast_enabled():
        bias, mat1, mat2 = _autocast(mat1, bias, mat1, mat2)
    if torch.compiler.is_compiling():
        return ops.addmm(bias, mat1, mat2, alpha, beta, check_addmm_args)
    fast = native.module
    if fast is None:
        if not native.started:
            native.start(mat1)
    elif plans.no_launch_hooks():
        out = fast.addmm(bias, mat1, mat2, alpha, beta)  # as in matmul
        if out is None:
            return native.learned_addmm(bias, mat1, mat2, alpha, beta, _python_addmm)
        if out is not False:
            return out
    return _python_addmm(bias, mat1, mat2, alpha, beta)


def _python_addmm(
    bias: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, alpha: float, beta: float
) -> torch.Tensor:
    if _transformed():  # as in matmul
        return _apply(_TransformableAddMM, bias, mat1, mat2, alpha, beta)
    if not _records_a_graph(bias, mat1, mat2):
        return launch_addmm(bias, mat1, mat2, alpha, beta, check=check_addmm_args)
    return _apply(AddMMFunction, bias, mat1, mat2, alpha, beta)


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
