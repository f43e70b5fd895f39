"""Helion matmul and addmm with forward and backward, as torch.autograd Functions."""

from __future__ import annotations

from helion_ops.autograd import (
    AddMMFunction,
    MatMulFunction,
    addmm,
    addmm_autograd,
    matmul,
    matmul_autograd,
)

__all__ = [
    "AddMMFunction",
    "MatMulFunction",
    "addmm",
    "addmm_autograd",
    "matmul",
    "matmul_autograd",
]
