"""helion_ops under torch.compile: custom ops with fake and autograd registrations."""

from __future__ import annotations

import shutil

import pytest
import torch
from conftest import DEVICE, HAS_CUDA
from reference import assert_matches
from test_ops import check_fwd_bwd, make

import helion_ops
from helion_ops import MatMulFunction, ops


def model(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    hidden = torch.relu(helion_ops.addmm(bias, a, b, alpha=0.5, beta=2.0))
    return helion_ops.matmul(hidden, c).sum(dim=1)


def torch_model(bias, a, b, c):
    """``model`` in torch's own ops: the same-dtype comparison and the float64 reference (on
    absolute inputs, where relu passes every term, it also gives the terms' magnitudes)."""
    return torch.relu(torch.addmm(bias, a, b, alpha=0.5, beta=2.0)).matmul(c).sum(dim=1)


def model_with_functions(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.tanh(MatMulFunction.apply(a, b))


def inputs() -> list[torch.Tensor]:
    return [
        make((29,), torch.float32),
        make((37, 50), torch.float32),
        make((50, 29), torch.float32, transposed=True),
        make((29, 16), torch.float32),
    ]


def check_compiled(backend: str) -> None:
    """Both models compiled: output and gradients against torch and float64 (``check_fwd_bwd``;
    the compiled graph may order sums differently from eager calls, so not bit for bit)."""
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    check_fwd_bwd(compiled, torch_model, inputs(), ["bias", "a", "b", "c"])
    compiled = torch.compile(model_with_functions, backend=backend, fullgraph=True)
    # tanh's slope is at most 1: the product's terms bound the error.
    check_fwd_bwd(compiled, lambda a, b: torch.tanh(a @ b), inputs()[1:3], ["a", "b"], torch.mm)


def test_compile_aot_eager():
    check_compiled("aot_eager")


@pytest.mark.parametrize("dynamic", [False, True])
def test_scales_as_arguments_of_a_compiled_function(dynamic):
    """alpha and beta passed in, so that dynamic=True traces them as symbolic ints and floats:
    each converted as in eager mode (an int, a float, one that float32 rounds to 0)."""
    torch._dynamo.reset()
    bias, a, b = (torch.randn(s, device=DEVICE) for s in ((29,), (37, 50), (50, 29)))

    def scaled(alpha, beta):
        return helion_ops.addmm(bias, a, b, alpha=alpha, beta=beta)

    compiled = torch.compile(scaled, backend="aot_eager", dynamic=dynamic, fullgraph=True)
    for alpha, beta in ((0.5, 2.0), (3, 1), (1.5, 0.25), (1e-50, -2)):
        # Against float64 as torch is (fp32 sums in another order differ in the last bits).
        alpha32 = 0.0 if alpha == 1e-50 else alpha
        theirs = torch.addmm(bias, a, b, alpha=alpha32, beta=beta)
        ref = torch.addmm(bias.double(), a.double(), b.double(), alpha=alpha32, beta=beta)
        assert_matches(f"alpha={alpha}, beta={beta}", compiled(alpha, beta), theirs, ref)


def _inductor_skip_reason() -> str | None:
    if HAS_CUDA:
        return None
    if shutil.which("g++") is None and shutil.which("c++") is None:
        return "inductor on the CPU needs a C++ compiler"
    return None


@pytest.mark.skipif(_inductor_skip_reason() is not None, reason=str(_inductor_skip_reason()))
def test_compile_inductor():
    check_compiled("inductor")


def test_eager_calls_skip_the_custom_op_dispatcher(monkeypatch):
    def no_dispatch(*args):
        raise AssertionError("eager call went through the custom op")

    monkeypatch.setattr(ops, "mm_op", no_dispatch)
    a, b = inputs()[1:3]
    helion_ops.matmul(a, b).sum().backward()


@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck_mm(requires_grad):
    a = torch.randn(37, 50, device=DEVICE, requires_grad=requires_grad)
    b = torch.randn(29, 50, device=DEVICE, requires_grad=requires_grad).T
    torch.library.opcheck(ops.mm_op, (a, b, 1.5))


@pytest.mark.parametrize("bias_shape", [(37, 29), (29,), ()], ids=str)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck_addmm(bias_shape, requires_grad):
    bias = torch.randn(bias_shape, device=DEVICE, requires_grad=requires_grad)
    a = torch.randn(37, 50, device=DEVICE, requires_grad=requires_grad)
    b = torch.randn(50, 29, device=DEVICE, requires_grad=requires_grad)
    torch.library.opcheck(ops.addmm_op, (bias, a, b, 0.5, 2.0))


@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck_mm_pair(requires_grad):
    a = torch.randn(37, 50, device=DEVICE, requires_grad=requires_grad)
    b = torch.randn(29, 50, device=DEVICE, requires_grad=requires_grad).T
    g = torch.randn(37, 29, device=DEVICE, requires_grad=requires_grad)
    torch.library.opcheck(ops.mm_pair_op, (g, b.T, a.T, g, 1.5))
