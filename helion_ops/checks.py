"""Argument checks that run before any kernel launch, each error naming the argument at fault."""

from __future__ import annotations

import math
import numbers
import os
import sys

import torch

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _fast_device(t: torch.Tensor) -> bool:
    """A device accepted without reading the environment (CPU tensors take the full checks)."""
    return t.is_cuda


def _shape(t: torch.Tensor) -> str:
    return str(tuple(t.shape))


FLOAT32_MAX = torch.finfo(torch.float32).max
# Half float32's least subnormal (2**-149): a magnitude at most this rounds to 0 in float32.
_ROUNDS_TO_ZERO = 2.0**-150
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def check_scalar(name: str, value: object) -> None:
    if _numpy_bool(value):
        return
    if isinstance(value, torch.Tensor) or not isinstance(value, numbers.Real):
        kind = type(value)
        raise TypeError(f"{name} must be a real number, got {kind.__module__}.{kind.__name__}")


def _numpy_bool(value: object) -> bool:
    """A NumPy bool, which torch takes as a scalar but ``numbers.Real`` does not hold."""
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.bool_)


def scalar(name: str, value: object) -> float:
    """addmm's ``alpha`` or ``beta`` as the float the kernels scale by, converted as torch
    converts a Scalar to float32: a real number (a NumPy bool too; an int within int64), a
    finite one at most float32's largest in magnitude (inf and NaN pass, as in torch), and
    0.0 where float32 rounds it to 0, so that a scale of 0 in float32 never reads what it
    scales. Checked before the launchers, whose fast path skips the tensor checks."""
    if type(value) is not float:
        check_scalar(name, value)
        if type(value) is int and not _INT64_MIN <= value <= _INT64_MAX:
            raise OverflowError(f"{name}={value} does not fit in int64, as torch's scalars must")
        value = float(value)  # type: ignore[arg-type]
    if _ROUNDS_TO_ZERO < abs(value) <= FLOAT32_MAX or value == 0.0:
        return value
    if abs(value) <= _ROUNDS_TO_ZERO:
        return 0.0
    if math.isfinite(value):
        raise ValueError(
            f"{name}={value!r} cannot be converted to float32 without overflow "
            f"(at most {FLOAT32_MAX:.8g} in magnitude; inf is allowed)"
        )
    return value  # inf or NaN


def scalars(alpha: object, beta: object) -> tuple[float, float]:
    """addmm's alpha and beta, each as :func:`scalar` (floats that float32 holds as they
    are, the common case, in one expression)."""
    if (
        type(alpha) is float
        and type(beta) is float
        and (_ROUNDS_TO_ZERO < abs(alpha) <= FLOAT32_MAX or alpha == 0.0)
        and (_ROUNDS_TO_ZERO < abs(beta) <= FLOAT32_MAX or beta == 0.0)
    ):
        return alpha, beta
    return scalar("alpha", alpha), scalar("beta", beta)


def check_matrix(name: str, t: object) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.layout != torch.strided:
        raise ValueError(f"{name} must be a dense (strided) tensor, got layout {t.layout}")
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D, got a {t.dim()}-D tensor of shape {_shape(t)}")
    if t.dtype not in SUPPORTED_DTYPES:
        names = ", ".join(str(d).removeprefix("torch.") for d in SUPPORTED_DTYPES)
        raise TypeError(f"{name} has unsupported dtype {t.dtype}; supported: {names}")


def _check_device(name: str, t: torch.Tensor) -> None:
    if t.is_cuda:
        return
    if t.device.type == "cpu" and (
        os.environ.get("TRITON_INTERPRET") == "1" or os.environ.get("HELION_INTERPRET") == "1"
    ):
        return
    raise ValueError(
        f"{name} is on {t.device}; helion_ops runs on CUDA tensors "
        "(CPU tensors only under TRITON_INTERPRET=1, for tests)"
    )


def check_matmul_args(
    mat1: object, mat2: object, names: tuple[str, str] = ("mat1", "mat2")
) -> None:
    """Raise a TypeError or ValueError naming the argument unless ``mat1 @ mat2`` is supported.

    Well-formed input passes one expression (about a microsecond); the checks that name the
    argument at fault run only where it fails.
    """
    if (
        isinstance(mat1, torch.Tensor)
        and isinstance(mat2, torch.Tensor)
        and mat1.dim() == 2
        and mat2.dim() == 2
        and mat1.dtype == mat2.dtype
        and mat1.dtype in SUPPORTED_DTYPES
        and mat1.device == mat2.device
        and _fast_device(mat1)
        and mat1.shape[1] == mat2.shape[0]
        and mat1.layout == mat2.layout == torch.strided
    ):
        return
    n1, n2 = names
    check_matrix(n1, mat1)
    check_matrix(n2, mat2)
    assert isinstance(mat1, torch.Tensor) and isinstance(mat2, torch.Tensor)
    if mat1.dtype != mat2.dtype:
        raise TypeError(
            f"{n1} and {n2} must have the same dtype, got {mat1.dtype} and {mat2.dtype}"
        )
    if mat1.device != mat2.device:
        raise ValueError(
            f"{n1} and {n2} must be on the same device, got {mat1.device} and {mat2.device}"
        )
    _check_device(n1, mat1)
    if mat1.shape[1] != mat2.shape[0]:
        raise ValueError(
            f"{n1} and {n2} shapes cannot be multiplied: {n1} is {_shape(mat1)} and {n2} is "
            f"{_shape(mat2)} ({n1}.shape[1] must equal {n2}.shape[0])"
        )


def check_addmm_args(bias: object, mat1: object, mat2: object, alpha: object, beta: object) -> None:
    """Raise a TypeError or ValueError naming the argument unless addmm of these is supported."""
    check_matmul_args(mat1, mat2)
    assert isinstance(mat1, torch.Tensor) and isinstance(mat2, torch.Tensor)
    if (
        type(alpha) in (float, int)
        and type(beta) in (float, int)
        and isinstance(bias, torch.Tensor)
        and bias.layout == torch.strided
        and bias.dtype == mat1.dtype
        and bias.device == mat1.device
        and bias.dim() <= 2
        and (bias.dim() < 1 or bias.shape[-1] in (1, mat2.shape[1]))
        and (bias.dim() < 2 or bias.shape[0] in (1, mat1.shape[0]))
    ):
        return
    check_scalar("alpha", alpha)
    check_scalar("beta", beta)
    if not isinstance(bias, torch.Tensor):
        raise TypeError(f"bias must be a torch.Tensor, got {type(bias).__name__}")
    if bias.layout != torch.strided:
        raise ValueError(f"bias must be a dense (strided) tensor, got layout {bias.layout}")
    if bias.dtype != mat1.dtype:
        raise TypeError(f"bias must have the dtype of mat1 ({mat1.dtype}), got {bias.dtype}")
    if bias.device != mat1.device:
        raise ValueError(f"bias must be on the device of mat1 ({mat1.device}), got {bias.device}")
    out_shape = (mat1.shape[0], mat2.shape[1])
    broadcastable = bias.dim() <= 2 and all(
        size in (1, want)
        for size, want in zip(reversed(bias.shape), reversed(out_shape), strict=False)
    )
    if not broadcastable:
        raise ValueError(
            f"bias of shape {_shape(bias)} is not broadcastable to the output shape {out_shape}"
        )
