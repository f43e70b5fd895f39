"""What torch's matmul does with tensors that carry more than sizes and strides: a negative
bit, forward-mode tangents, a 1x1 result modified in place. Each against torch in the same
dtype and a float64 reference."""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from conftest import DEVICE
from reference import assert_matches
from test_ops import check_fwd_bwd

import helion_ops

dtypes = pytest.mark.parametrize(
    "dtype_mode", [torch.float32, torch.float16], indirect=True, ids=str
)

M, K, N = 37, 29, 23


def fresh(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(shape, dtype=dtype, device=DEVICE).requires_grad_()


def negated_at(which: str, names: tuple[str, ...], fn):
    """``fn`` whose argument ``which`` reaches it as a negative-bit view (``torch._neg_view``:
    what ``z.conj().imag`` of a complex ``z`` gives): its values are the negation of its
    memory."""

    def call(*args: torch.Tensor) -> torch.Tensor:
        args = [
            torch._neg_view(t) if name == which else t for name, t in zip(names, args, strict=True)
        ]
        assert any(t.is_neg() for t in args)
        return fn(*args)

    return call


@dtypes
@pytest.mark.parametrize("which", ["mat1", "mat2"])
@pytest.mark.parametrize("m,n", [(M, N), (N, M)])  # (with m <= n mat1 is the pair's second a)
def test_matmul_reads_a_negative_bit(dtype_mode, which, m, n):
    a, b = fresh(m, K, dtype=dtype_mode), fresh(K, n, dtype=dtype_mode)
    names = ("mat1", "mat2")
    for _ in range(2):  # the second call of a key takes the fast path
        check_fwd_bwd(
            negated_at(which, names, helion_ops.matmul),
            negated_at(which, names, torch.matmul),
            [a, b],
            list(names),
            torch.matmul,  # (the magnitude: of the terms' absolute values)
        )
    with torch.no_grad():  # the bare launcher, no Function; twice, as above
        negated = [-t if name == which else t for name, t in zip(names, (a, b), strict=True)]
        for _ in range(2):
            ours = negated_at(which, names, helion_ops.matmul)(a, b)
            assert torch.equal(ours, helion_ops.matmul(*negated))


@dtypes
@pytest.mark.parametrize("which", ["bias", "mat1", "mat2"])
def test_addmm_reads_a_negative_bit(dtype_mode, which):
    bias = fresh(N, dtype=dtype_mode)
    a, b = fresh(M, K, dtype=dtype_mode), fresh(K, N, dtype=dtype_mode)
    names = ("bias", "mat1", "mat2")
    check_fwd_bwd(
        negated_at(which, names, lambda *t: helion_ops.addmm(*t, alpha=0.5, beta=-2.0)),
        negated_at(which, names, lambda *t: torch.addmm(*t, alpha=0.5, beta=-2.0)),
        [bias, a, b],
        list(names),
        lambda *t: torch.addmm(*t, alpha=0.5, beta=2.0),
    )


@dtypes
def test_a_negative_bit_grad_out_is_read(dtype_mode):
    a, b = fresh(M, K, dtype=dtype_mode), fresh(K, N, dtype=dtype_mode)
    grad_out = torch.randn(M, N, dtype=dtype_mode, device=DEVICE)
    ours = torch.autograd.grad(helion_ops.matmul(a, b), [a, b], torch._neg_view(grad_out))
    # The same kernels on the negation itself (against torch and float64 in test_ops).
    negated = torch.autograd.grad(helion_ops.matmul(a, b), [a, b], -grad_out)
    for name, o, n in zip(("mat1", "mat2"), ours, negated, strict=True):
        assert torch.equal(o, n), f"grad of {name}"


def tangent_of(fn, primals: list[torch.Tensor], tangents: list[torch.Tensor | None]):
    """``fn(*primals)``'s forward-mode derivative along ``tangents`` (None: no tangent)."""
    with fwAD.dual_level():
        duals = [
            p if t is None else fwAD.make_dual(p, t) for p, t in zip(primals, tangents, strict=True)
        ]
        out = fwAD.unpack_dual(fn(*duals))
    assert out.tangent is not None, "the output has no tangent"
    return out.primal, out.tangent


def check_tangent(ours_fn, torch_fn, magnitude_fn, primals, tangents) -> None:
    """Ours against torch in the same dtype and float64, the output and its tangent."""
    ours, ours_t = tangent_of(ours_fn, primals, tangents)
    theirs, theirs_t = tangent_of(torch_fn, primals, tangents)

    def double(ts):
        return [None if t is None else t.detach().double() for t in ts]

    def absolute(ts):
        return [None if t is None else t.detach().double().abs() for t in ts]

    ref, ref_t = tangent_of(torch_fn, double(primals), double(tangents))
    magnitude, magnitude_t = tangent_of(magnitude_fn, absolute(primals), absolute(tangents))
    assert_matches("output", ours, theirs, ref, magnitude)
    assert_matches("tangent", ours_t, theirs_t, ref_t, magnitude_t)


@dtypes
@pytest.mark.parametrize("along", ["mat1", "mat2", "both"])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_matmul_forward_mode_tangents(dtype_mode, along, requires_grad):
    a, b = fresh(M, K, dtype=dtype_mode), fresh(K, N, dtype=dtype_mode).detach().T.contiguous().T
    primals = [a.detach().requires_grad_(requires_grad), b.detach()]
    tangents = [
        torch.randn_like(p) if along in (name, "both") else None
        for name, p in zip(("mat1", "mat2"), primals, strict=True)
    ]
    check_tangent(helion_ops.matmul, torch.matmul, torch.matmul, primals, tangents)


@dtypes
@pytest.mark.parametrize("bias_shape", [(M, N), (N,), (M, 1), ()], ids=str)
@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.5, -2.0), (0.0, 3.0), (2.0, 0.0)])
def test_addmm_forward_mode_tangents(dtype_mode, bias_shape, alpha, beta):
    primals = [
        torch.randn(bias_shape, dtype=dtype_mode, device=DEVICE),
        torch.randn(M, K, dtype=dtype_mode, device=DEVICE),
        torch.randn(K, N, dtype=dtype_mode, device=DEVICE),
    ]
    tangents = [torch.randn_like(p) for p in primals]
    check_tangent(
        lambda *t: helion_ops.addmm(*t, alpha=alpha, beta=beta),
        lambda *t: torch.addmm(*t, alpha=alpha, beta=beta),
        lambda *t: torch.addmm(*t, alpha=abs(alpha), beta=abs(beta)),
        primals,
        tangents,
    )


@pytest.mark.parametrize("along", ["bias", "mat2"])
def test_addmm_tangent_of_one_input(along):
    primals = [torch.randn(N, device=DEVICE), torch.randn(M, K, device=DEVICE)]
    primals.append(torch.randn(K, N, device=DEVICE))
    names = ("bias", "mat1", "mat2")
    tangents = [
        torch.randn_like(p) if n == along else None for n, p in zip(names, primals, strict=True)
    ]
    check_tangent(helion_ops.addmm, torch.addmm, torch.addmm, primals, tangents)


@dtypes
@pytest.mark.parametrize("op", ["matmul", "addmm"])
def test_a_one_by_one_result_can_be_modified_in_place(dtype_mode, op):
    a, b = fresh(1, K, dtype=dtype_mode), fresh(K, 1, dtype=dtype_mode)
    bias = fresh(1, dtype=dtype_mode)

    inputs = [a, b] if op == "matmul" else [bias, a, b]

    def tripled(matmul, addmm):
        def fn(*inputs: torch.Tensor) -> torch.Tensor:
            out = matmul(*inputs) if op == "matmul" else addmm(*inputs)
            assert not out._is_view()
            return out.mul_(3.0)  # an in-place op on a result autograd records

        return fn

    check_fwd_bwd(
        tripled(helion_ops.matmul, helion_ops.addmm),
        tripled(torch.matmul, torch.addmm),
        inputs,
        ["mat1", "mat2"] if op == "matmul" else ["bias", "mat1", "mat2"],
    )


def test_torch_func_transforms():
    """grad, vjp, jvp, vmap, jacrev, jacfwd and hessian through our kernels, against the same
    transforms of torch's matmul (fp32: every kernel runs, in the interpreter on the CPU)."""
    from torch import func

    a, b = torch.randn(5, 7, device=DEVICE), torch.randn(7, 3, device=DEVICE)
    bias, tangent = torch.randn(3, device=DEVICE), torch.randn(5, 7, device=DEVICE)
    batch_a, batch_b = torch.randn(4, 5, 7, device=DEVICE), torch.randn(4, 7, 3, device=DEVICE)
    cases = {
        "grad": lambda mm, addmm: func.grad(lambda x: mm(x, b).sum())(a),
        "vjp": lambda mm, addmm: func.vjp(mm, a, b)[1](torch.ones(5, 3, device=DEVICE)),
        "jvp": lambda mm, addmm: func.jvp(lambda x: mm(x, b), (a,), (tangent,)),
        "jvp addmm": lambda mm, addmm: func.jvp(
            lambda x, c: addmm(c, x, b, alpha=0.5, beta=2.0), (a, bias), (tangent, bias)
        ),
        "vmap": lambda mm, addmm: func.vmap(lambda x: mm(x, b))(batch_a),
        "vmap both": lambda mm, addmm: func.vmap(mm)(batch_a, batch_b),
        "vmap of none": lambda mm, addmm: func.vmap(mm, in_dims=(None, 2))(
            a, batch_b.permute(1, 2, 0)[:, :, :0]
        ),
        "vmap addmm": lambda mm, addmm: func.vmap(lambda x: addmm(bias, x, b, alpha=2.0))(batch_a),
        "jacrev": lambda mm, addmm: func.jacrev(lambda x: mm(x, b))(a),
        "jacfwd": lambda mm, addmm: func.jacfwd(lambda x: addmm(bias, x, b, beta=0.5))(a),
        "hessian": lambda mm, addmm: func.hessian(lambda x: (mm(x, x.T) ** 2).sum())(a[:3, :4]),
    }
    for name, case in cases.items():
        ours = case(helion_ops.matmul, helion_ops.addmm)
        theirs = case(torch.matmul, torch.addmm)
        torch.testing.assert_close(ours, theirs, msg=lambda m, name=name: f"{name}: {m}")


def nan_and_inf(*shape: int) -> torch.Tensor:
    t = torch.randn(shape, device=DEVICE)
    t[1, 2], t[-1, 0] = float("nan"), float("inf")
    return t


@pytest.mark.parametrize("where", ["mat1", "mat2"])
def test_scales_of_zero_in_the_backward_are_torchs(where):
    """``alpha == 0`` never reads the product in the forward, but its gradients are torch's:
    the products times 0, so NaN and inf in one operand reach the other's gradient."""
    bias = torch.randn(N, device=DEVICE, requires_grad=True)
    a = nan_and_inf(M, K) if where == "mat1" else torch.randn(M, K, device=DEVICE)
    b = nan_and_inf(K, N) if where == "mat2" else torch.randn(K, N, device=DEVICE)
    inputs = [bias, a.requires_grad_(), b.requires_grad_()]
    grad_out = torch.randn(M, N, device=DEVICE)

    def run(addmm):
        out = addmm(*inputs, alpha=0.0, beta=0.5)
        return [out, *torch.autograd.grad(out, inputs, grad_out)]

    for name, o, t in zip(
        ("output", "bias", "mat1", "mat2"), run(helion_ops.addmm), run(torch.addmm), strict=True
    ):
        assert (o.isnan() == t.isnan()).all(), f"{name}: NaN where torch has none, or the reverse"
        torch.testing.assert_close(o, t, equal_nan=True, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("beta", [0.0, 0.125])
@pytest.mark.parametrize("bias_shape", [(N,), (1, N), (M, 1)], ids=str)
def test_the_bias_gradient_is_scaled_before_it_is_summed(beta, bias_shape):
    """As torch's: grad_out times beta, then summed to the bias's shape. fp16 sums past its
    range here (64 rows or 23 columns of about 3000), so summing first would give inf at
    beta 0.125 and NaN at 0, where torch's are finite."""
    fp16, rows = torch.float16, M if bias_shape == (M, 1) else 64
    bias = torch.randn(bias_shape, dtype=fp16, device=DEVICE).requires_grad_()
    a = torch.randn(rows, K, dtype=fp16, device=DEVICE)
    b = torch.randn(K, N, dtype=fp16, device=DEVICE)
    grad_out = (2900 + 200 * torch.rand(rows, N, device=DEVICE)).to(fp16)

    def grad_of_bias(addmm):
        return torch.autograd.grad(addmm(bias, a, b, beta=beta), [bias], grad_out)[0]

    ours, theirs = grad_of_bias(helion_ops.addmm), grad_of_bias(torch.addmm)
    assert theirs.isfinite().all() and (theirs != 0).any() == (beta != 0)
    torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize("alpha,beta", [(0.0, 1.0), (1.0, 0.0)])
def test_scales_of_zero_in_tangents_are_torchs(alpha, beta):
    """Tangents follow torch's formula: a scale of 0 multiplies its term's tangent, so NaN and
    inf in it propagate (the forward never reads that term)."""
    primals = [torch.randn(N, device=DEVICE), torch.randn(M, K, device=DEVICE)]
    primals.append(torch.randn(K, N, device=DEVICE))
    # NaN and inf only in the tangent whose scale is 0.
    bias_t = nan_and_inf(2, N)[1] if beta == 0 else torch.randn(N, device=DEVICE)
    mat1_t = nan_and_inf(M, K) if alpha == 0 else torch.randn(M, K, device=DEVICE)
    tangents = [bias_t, mat1_t, torch.randn(K, N, device=DEVICE)]
    _, ours = tangent_of(lambda *t: helion_ops.addmm(*t, alpha=alpha, beta=beta), primals, tangents)
    _, theirs = tangent_of(lambda *t: torch.addmm(*t, alpha=alpha, beta=beta), primals, tangents)
    assert (ours.isnan() == theirs.isnan()).all()
    assert ours.isnan().any()
    torch.testing.assert_close(ours, theirs, equal_nan=True)


def autocast(fn, dtype: torch.dtype = torch.float16):
    """``fn`` called under ``torch.autocast`` on the tests' device."""

    def call(*args: torch.Tensor) -> torch.Tensor:
        with torch.autocast(DEVICE, dtype=dtype):
            return fn(*args)

    return call


@pytest.mark.parametrize("dtypes", [(torch.float32,) * 2, (torch.float16, torch.float32)], ids=str)
def test_matmul_under_autocast_is_torchs(dtypes):
    """torch.mm's policy: every floating operand in autocast's dtype (before: fp32 in, fp32
    out, and a mixed pair refused); gradients in the operands' own dtypes."""
    a, b = fresh(M, K, dtype=dtypes[0]), fresh(K, N, dtype=dtypes[1])
    for _ in range(2):  # the second call of a key takes the fast path
        check_fwd_bwd(autocast(helion_ops.matmul), autocast(torch.matmul), [a, b], ["mat1", "mat2"])
    assert autocast(helion_ops.matmul)(a, b).dtype == torch.float16
    with torch.no_grad():
        assert autocast(helion_ops.matmul)(a, b).dtype == torch.float16


@pytest.mark.parametrize("bias_shape", [(M, N), (N,), ()], ids=str)
def test_addmm_under_autocast_is_torchs(bias_shape):
    bias = fresh(*bias_shape, dtype=torch.float32)
    a, b = fresh(M, K, dtype=torch.float16), fresh(K, N, dtype=torch.float32)
    check_fwd_bwd(
        autocast(lambda *t: helion_ops.addmm(*t, alpha=0.5, beta=-2.0)),
        autocast(lambda *t: torch.addmm(*t, alpha=0.5, beta=-2.0)),
        [bias, a, b],
        ["bias", "mat1", "mat2"],
        lambda *t: torch.addmm(*t, alpha=0.5, beta=2.0),
    )


def test_autocast_under_torch_compile():
    a, b = fresh(M, K, dtype=torch.float32), fresh(K, N, dtype=torch.float32)
    bias = fresh(K, dtype=torch.float32)
    compiled = torch.compile(
        lambda *t: helion_ops.addmm(t[0], helion_ops.matmul(t[1], t[2]), t[2].T),
        backend="aot_eager",
        fullgraph=True,
    )
    check_fwd_bwd(
        autocast(compiled),
        autocast(lambda *t: torch.addmm(t[0], torch.matmul(t[1], t[2]), t[2].T)),
        [bias, a, b],
        ["bias", "mat1", "mat2"],
    )


def test_autocast_leaves_float64_operands_as_torch_does():
    """torch.autocast casts no float64 tensor: torch.mm keeps computing in float64, and
    helion_ops, which takes no float64, refuses it as it does outside autocast (rather than
    computing it in fp16), also beside an fp32 operand (which autocast casts)."""
    f64 = torch.float64
    a, b, bias = fresh(M, K, dtype=f64), fresh(K, N, dtype=f64), fresh(N, dtype=f64)
    assert autocast(torch.matmul)(a, b).dtype == f64
    with pytest.raises(TypeError, match=r"mat1 has unsupported dtype torch\.float64"):
        autocast(helion_ops.matmul)(a, b)
    with pytest.raises(TypeError, match=r"unsupported dtype torch\.float64"):
        autocast(helion_ops.addmm)(bias, a, b)
    with pytest.raises(TypeError, match=r"mat1 has unsupported dtype torch\.float64"):
        autocast(helion_ops.matmul)(a, fresh(K, N, dtype=torch.float32))
