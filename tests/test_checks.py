"""Bad input fails with an error naming the argument, before any kernel launch."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE

import helion_ops
from helion_ops import autograd, kernel, plans


def t(*shape: int, dtype: torch.dtype = torch.float32, device: str = DEVICE) -> torch.Tensor:
    return torch.randn(shape, device=device).to(dtype)


CASES = [
    ("mm", (t(2, 3, 4), t(4, 5)), ValueError, "mat1 must be 2-D, got a 3-D tensor"),
    ("mm", (t(2, 3), t(3)), ValueError, "mat2 must be 2-D, got a 1-D tensor"),
    ("mm", (t(2, 3), t(4, 5)), ValueError, "mat1.shape[1] must equal mat2.shape[0]"),
    ("mm", (t(2, 3), t(3, 5, dtype=torch.float16)), TypeError, "same dtype"),
    (
        "mm",
        (t(2, 3, dtype=torch.float64), t(3, 5, dtype=torch.float64)),
        TypeError,
        "mat1 has unsupported dtype torch.float64",
    ),
    (
        "mm",
        (t(2, 3, dtype=torch.int32), t(3, 5)),
        TypeError,
        "mat1 has unsupported dtype torch.int32",
    ),
    ("mm", ([[1.0]], t(1, 5)), TypeError, "mat1 must be a torch.Tensor, got list"),
    ("mm", (t(2, 3), t(3, 5, device="meta")), ValueError, "same device"),
    (
        "addmm",
        (t(3, 5), t(2, 3), t(3, 5)),
        ValueError,
        "bias of shape (3, 5) is not broadcastable to the output shape (2, 5)",
    ),
    ("addmm", (t(4), t(2, 3), t(3, 5)), ValueError, "bias of shape (4,) is not broadcastable"),
    (
        "addmm",
        (t(1, 2, 5), t(2, 3), t(3, 5)),
        ValueError,
        "bias of shape (1, 2, 5) is not broadcastable",
    ),
    (
        "addmm",
        (t(5, dtype=torch.float16), t(2, 3), t(3, 5)),
        TypeError,
        "bias must have the dtype of mat1",
    ),
    (
        "addmm",
        (t(5, device="meta"), t(2, 3), t(3, 5)),
        ValueError,
        "bias must be on the device of mat1",
    ),
    ("addmm", (None, t(2, 3), t(3, 5)), TypeError, "bias must be a torch.Tensor, got NoneType"),
    ("addmm", (t(5), t(2, 3), t(3, 5, dtype=torch.bfloat16)), TypeError, "same dtype"),
    (
        "mm",
        (t(2, 3).to_sparse(), t(3, 5)),
        ValueError,
        "mat1 must be a dense (strided) tensor, got layout torch.sparse_coo",
    ),
    (
        "mm",
        (t(2, 3), t(3, 5).to_sparse_csr()),
        ValueError,
        "mat2 must be a dense (strided) tensor, got layout torch.sparse_csr",
    ),
    (
        "addmm",
        (t(5).to_sparse(), t(2, 3), t(3, 5)),
        ValueError,
        "bias must be a dense (strided) tensor, got layout torch.sparse_coo",
    ),
]


@pytest.mark.parametrize("op,args,error,message", CASES, ids=[c[3][:40] for c in CASES])
def test_bad_input_is_named_before_launch(op, args, error, message, monkeypatch):
    def no_launch(*args, **kwargs):
        raise AssertionError("a kernel was launched for bad input")

    monkeypatch.setattr(kernel, "_run", no_launch)
    monkeypatch.setattr(plans.LaunchPlan, "__call__", no_launch)
    fn = helion_ops.matmul if op == "mm" else helion_ops.addmm
    with pytest.raises(error) as info:
        fn(*args)
    assert message in str(info.value)


SCALAR_CASES = [
    (1j, TypeError, "{} must be a real number, got builtins.complex"),
    ("2", TypeError, "{} must be a real number, got builtins.str"),
    (torch.tensor(2.0), TypeError, "{} must be a real number, got torch.Tensor"),
    (None, TypeError, "{} must be a real number"),
    # Finite but past float32's range, and an int past int64's: torch refuses both.
    (1e39, ValueError, "{}=1e+39 cannot be converted to float32 without overflow"),
    (-3.5e38, ValueError, "{}=-3.5e+38 cannot be converted to float32 without overflow"),
    (2**70, OverflowError, "{}=1180591620717411303424 does not fit in int64"),
]


@pytest.mark.parametrize("name", ["alpha", "beta"])
@pytest.mark.parametrize(
    "value,error,message", SCALAR_CASES, ids=[c[2][3:24] for c in SCALAR_CASES]
)
@pytest.mark.parametrize("entry", ["addmm", "AddMMFunction"])
def test_bad_scalars_are_named(name, value, error, message, entry, monkeypatch):
    def no_launch(*args, **kwargs):
        raise AssertionError("a kernel was launched for bad input")

    monkeypatch.setattr(kernel, "_run", no_launch)
    monkeypatch.setattr(plans.LaunchPlan, "__call__", no_launch)
    scales = {"alpha": 1.0, "beta": 1.0, name: value}
    with pytest.raises(error) as info:
        if entry == "addmm":
            helion_ops.addmm(t(5), t(2, 3), t(3, 5), **scales)
        else:
            helion_ops.AddMMFunction.apply(t(5), t(2, 3), t(3, 5), *scales.values())
    assert message.format(name) in str(info.value)


def test_scales_are_converted_to_float32_as_torch_converts_them():
    """alpha and beta reach the kernels as float32: one that rounds to 0 there is 0 (never
    reading what it scales, NaN included), inf passes, and any real number torch takes (a
    Fraction, a NumPy bool or float) is one, in the backward too."""
    bias, a, b = t(5), t(4, 3), t(3, 5)
    nan_a, nan_bias = a.clone(), torch.full_like(bias, float("nan"))
    nan_a[1, 2] = float("nan")
    torch.testing.assert_close(helion_ops.addmm(bias, nan_a, b, alpha=1e-50), bias.expand(4, 5))
    torch.testing.assert_close(helion_ops.addmm(nan_bias, a, b, beta=-1e-46), a @ b)
    assert helion_ops.addmm(bias, a, b, beta=float("inf")).isinf().all()
    numpy = pytest.importorskip("numpy")
    torch.testing.assert_close(
        helion_ops.addmm(bias, a, b, alpha=numpy.bool_(True), beta=numpy.float32(0.5)),
        torch.addmm(bias, a, b, beta=0.5),
    )
    from fractions import Fraction

    grad_out = torch.randn(4, 5, device=DEVICE)
    for entry in (helion_ops.addmm, helion_ops.AddMMFunction.apply):
        inputs = [x.clone().requires_grad_() for x in (bias, a, b)]
        if entry is helion_ops.addmm:
            out = entry(*inputs, alpha=Fraction(3, 2), beta=Fraction(1, 2))
        else:
            out = entry(*inputs, Fraction(3, 2), Fraction(1, 2))
        ours = [out, *torch.autograd.grad(out, inputs, grad_out)]
        out = torch.addmm(*inputs, alpha=1.5, beta=0.5)
        theirs = [out, *torch.autograd.grad(out, inputs, grad_out)]
        for o, th in zip(ours, theirs, strict=True):
            torch.testing.assert_close(o, th)


def test_cpu_tensors_need_an_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("HELION_INTERPRET", raising=False)
    with pytest.raises(ValueError) as info:
        helion_ops.matmul(t(2, 3, device="cpu"), t(3, 4, device="cpu"))
    # (Only the interpreter that runs every dtype is offered: Helion's ref mode alone needs
    # a CPU matmul of a dtype out that only the tests register.)
    assert str(info.value) == (
        "mat1 is on cpu; helion_ops runs on CUDA tensors "
        "(CPU tensors only under TRITON_INTERPRET=1, for tests)"
    )


@pytest.mark.parametrize("op,args,error,message", CASES, ids=[c[3][:40] for c in CASES])
def test_the_fast_path_passes_no_bad_input(op, args, error, message, monkeypatch):
    """Well-formed CUDA input passes one quick expression; on the CPU it is reached only by
    accepting every device, so that bad input must still fail through the full checks."""
    from helion_ops import checks

    monkeypatch.setattr(checks, "_fast_device", lambda t: True)
    check = checks.check_matmul_args if op == "mm" else checks.check_addmm_args
    with pytest.raises(error) as info:
        check(*args) if op == "mm" else check(*args, 1.0, 1.0)
    assert message in str(info.value)


def test_the_fast_path_takes_well_formed_input(monkeypatch):
    from helion_ops import checks

    def full_checks(*args):
        raise AssertionError("the full checks ran on well-formed input")

    monkeypatch.setattr(checks, "_fast_device", lambda t: True)
    monkeypatch.setattr(checks, "check_matrix", full_checks)
    monkeypatch.setattr(checks, "check_scalar", full_checks)
    a, b = t(4, 3), t(3, 5)
    checks.check_matmul_args(a, b)
    for bias in (t(5), t(1, 5), t(4, 1), t(4, 5), t(1), t()):
        checks.check_addmm_args(bias, a, b, 2, 0.5)


def test_a_launch_seen_before_skips_only_the_checks_it_passed(monkeypatch):
    """Operands that match an earlier launch's fast-path key skip the tensor checks (the key
    holds all they read); a change in any of it (device, dtype, size) runs them again."""
    fp16 = torch.float16
    a, b, bias = t(4, 3, dtype=fp16), t(3, 5, dtype=fp16), t(5, dtype=fp16)
    kernel.reset()
    helion_ops.matmul(a, b), helion_ops.addmm(bias, a, b)
    with monkeypatch.context() as patched:
        calls = []
        patched.setattr(autograd, "check_matmul_args", lambda *args: calls.append(args))
        patched.setattr(autograd, "check_addmm_args", lambda *args: calls.append(args))
        helion_ops.matmul(a, b), helion_ops.addmm(bias, a, b)
        assert calls == []
        helion_ops.matmul(t(4, 3, dtype=fp16), t(3, 6, dtype=fp16))
        assert len(calls) == 1
    with pytest.raises(ValueError, match="same device"):
        helion_ops.matmul(a, b.to("meta"))
    with pytest.raises(TypeError, match="same dtype"):
        helion_ops.matmul(a, b.float())
    with pytest.raises(ValueError, match="bias must be on the device"):
        helion_ops.addmm(bias.to("meta"), a, b)
    with pytest.raises(TypeError, match="alpha must be a real number"):
        helion_ops.addmm(bias, a, b, alpha=torch.tensor(2.0))


@pytest.mark.parametrize(
    "op,which",
    [("mm", "mat1"), ("mm", "mat2"), ("addmm", "bias"), ("addmm", "mat1"), ("addmm", "mat2")],
)
def test_a_seen_launch_with_any_one_tensor_of_another_dtype_is_checked(op, which):
    """After a launch of fp16 operands, the same call with any one of its tensors in fp32
    (every size, stride and alignment unchanged) misses the fast path and fails the check."""
    fp16 = torch.float16
    a, b, bias = t(4, 3, dtype=fp16), t(3, 5, dtype=fp16), t(5, dtype=fp16)
    kernel.reset()
    args = {"bias": bias, "mat1": a, "mat2": b}
    for _ in range(2):  # the second call takes the fast path
        helion_ops.matmul(a, b) if op == "mm" else helion_ops.addmm(bias, a, b)
    args[which] = args[which].float()
    message = "bias must have the dtype of mat1" if which == "bias" else "same dtype"
    if op == "addmm" and which == "mat1":
        message = "bias must have the dtype of mat1|same dtype"
    with pytest.raises(TypeError, match=message):
        if op == "mm":
            helion_ops.matmul(args["mat1"], args["mat2"])
        else:
            helion_ops.addmm(args["bias"], args["mat1"], args["mat2"])


@pytest.mark.parametrize("fast", [True, False], ids=["fast checks", "full checks"])
def test_the_checks_take_every_broadcastable_bias_and_no_other(fast, monkeypatch):
    """Both the one-expression check and the full checks (reached where a scale is a real
    number of another type, such as a numpy scalar or a Fraction) accept exactly the biases
    torch broadcasts to the output [m, n], with m, n and k all different."""
    from fractions import Fraction

    from helion_ops import checks

    monkeypatch.setattr(checks, "_fast_device", lambda t: True)
    a, b = t(4, 3), t(3, 5)
    alpha = 2.0 if fast else Fraction(1, 2)
    for bias in (t(5), t(1, 5), t(4, 1), t(4, 5), t(1), t(), t(1, 1)):
        checks.check_addmm_args(bias, a, b, alpha, 0.5)
    for bias in (t(4), t(3), t(5, 4), t(4, 3), t(3, 5), t(1, 4), t(5, 1), t(2), t(1, 4, 5)):
        with pytest.raises(ValueError, match=r"bias of shape .* is not broadcastable"):
            checks.check_addmm_args(bias, a, b, alpha, 0.5)
