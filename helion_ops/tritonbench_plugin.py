"""helion_ops as tritonbench backends of the ``gemm`` and ``addmm`` operators.

``register()`` attaches ``helion_matmul_tritonbench`` to gemm and ``helion_addmm_tritonbench`` to
addmm. It is the target of NEW tritonbench's ``--plugin helion_ops.tritonbench_plugin.register``
(called by every operator's ``__init__``, so it is idempotent and cheap) and what run_bench
calls. tritonbench is imported only inside ``register()``: this module imports without it.
On an OLD tritonbench it also installs the backward support of ``helion_ops.tritonbench_bwd``.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from typing import TYPE_CHECKING, Any

import torch

from helion_ops import native
from helion_ops.autograd import addmm, matmul
from helion_ops.tritonbench_bwd import add_backward_support, on_the_capture_stream

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

ADDMM_SUBMODULE_HINT = (
    "in the tritonbench clone run: git submodule update --init submodules/generative-recommenders"
)


def helion_matmul_tritonbench(
    self: Any, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None
) -> Callable[[], torch.Tensor]:
    """gemm backend: ``a @ b``; a bias is added in the kernel's epilogue, not by a second op.

    Args:
        self: the gemm Operator instance (unused).
        a: [M, K] tensor.
        b: [K, N] tensor.
        bias: None or a [N] tensor.

    Returns:
        A zero-argument function computing the product, already compiled forward and backward.
    """
    if bias is None:
        return _warmed_up(self, lambda: matmul(a, b), (a, b))
    return _warmed_up(self, lambda: addmm(bias, a, b), (bias, a, b))


def helion_addmm_tritonbench(
    self: Any, bias: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor
) -> Callable[[], torch.Tensor]:
    """addmm backend: ``bias + mat1 @ mat2`` with the bias fused into the kernel's epilogue.

    Args:
        self: the addmm Operator instance (unused).
        bias: [M, N] or [N] tensor.
        mat1: [M, K] tensor.
        mat2: [K, N] tensor.

    Returns:
        A zero-argument function computing addmm, already compiled forward and backward.
    """
    return _warmed_up(self, lambda: addmm(bias, mat1, mat2), (bias, mat1, mat2))


BACKENDS: dict[str, Callable[..., Callable[[], torch.Tensor]]] = {
    "gemm": helion_matmul_tritonbench,
    "addmm": helion_addmm_tritonbench,
}


def _warmed_up(
    operator: Any, fn: Callable[[], torch.Tensor], inputs: Sequence[torch.Tensor]
) -> Callable[[], torch.Tensor]:
    # The harness times fn right away: compile the forward now, and the backward's kernels
    # too when there is a graph, then leave the inputs' grads as they were given. Under CUDA
    # graphs on the backends' forward stream, where the inputs' grads accumulate. The passes
    # also teach helion_ops' C++ path (begun at registration) the key and the backward
    # (native.warm_up_passes).
    graphs = getattr(operator, "use_cuda_graphs", False)
    with on_the_capture_stream(graphs):
        for _ in native.warm_up_passes(inputs[-1], graphs):
            out = fn()
            if out.requires_grad:
                # ones_like, not randn_like: the inputs of later shapes come from the same RNG.
                out.backward(torch.ones_like(out))
                for x in inputs:
                    x.grad = None
    return fn


def register() -> list[str]:
    """Attach the helion backends to tritonbench's gemm and addmm Operator classes.

    Uses tritonbench's public ``register_benchmark`` (never as baseline) and ``setattr`` on
    ``tritonbench.operators.<op>.operator.Operator``. An operator that fails to import (addmm
    without its generative-recommenders submodule) is skipped with a warning. With a GPU it
    begins the C++ fast path's build (``helion_ops.native``). Repeated calls change nothing.

    Returns:
        The names of the operators that carry the helion backend.
    """
    from tritonbench.utils.triton_op import register_benchmark

    registered = []
    for op_name, variant in BACKENDS.items():
        operator = _operator_class(op_name)
        if operator is None:
            continue
        name = variant.__name__
        if name not in vars(operator):
            wrapped = register_benchmark(operator_name=op_name, func_name=name, label=name)(variant)
            setattr(operator, name, wrapped)
        add_backward_support(operator)
        registered.append(op_name)
    if registered and torch.cuda.is_available():
        native.begin()  # the C++ path builds while tritonbench makes inputs and compiles
    return registered


@functools.cache
def _operator_class(op_name: str) -> type | None:
    try:
        module = importlib.import_module(f"tritonbench.operators.{op_name}.operator")
    except Exception as err:
        # A third-party module can fail in many ways (missing submodule, renamed symbol);
        # the other operator must still be benchmarked.
        hint = f"; {ADDMM_SUBMODULE_HINT}" if op_name == "addmm" else ""
        warnings.warn(
            f"helion_ops: tritonbench operator {op_name!r} failed to import ({err!r}); "
            f"its helion backend is not registered{hint}",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return module.Operator
