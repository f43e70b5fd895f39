"""The checks of test_ops must be able to fail: deliberately wrong backwards are caught."""

from __future__ import annotations

import pytest
import reference
import torch
from test_ops import check_fwd_bwd, make

from helion_ops import AddMMFunction, MatMulFunction


class MissingAlpha(AddMMFunction):
    @staticmethod
    def backward(ctx, grad_out):
        ctx.alpha = 1.0
        return AddMMFunction.backward(ctx, grad_out)


class FirstRowBiasGrad(AddMMFunction):
    # An unreduced [m, n] grad would be summed down by autograd itself; a bias grad that
    # keeps one row instead of summing them is the reduction bug that gets through.
    @staticmethod
    def backward(ctx, grad_out):
        grads = AddMMFunction.backward(ctx, grad_out)
        return (grad_out[0] * ctx.beta, *grads[1:])


class MissingBeta(AddMMFunction):
    @staticmethod
    def backward(ctx, grad_out):
        ctx.beta = 1.0
        return AddMMFunction.backward(ctx, grad_out)


class SwappedOperands(MatMulFunction):
    @staticmethod
    def backward(ctx, grad_out):
        g1, g2 = MatMulFunction.backward(ctx, grad_out)
        return g1, g2.T.reshape(g2.shape)


class OneElementOff(MatMulFunction):
    @staticmethod
    def backward(ctx, grad_out):
        g1, g2 = MatMulFunction.backward(ctx, grad_out)
        g1 = g1.clone()
        g1[3, 4] += 0.01 * g1.abs().max()
        return g1, g2


@pytest.mark.parametrize(
    "wrong", [MissingAlpha, MissingBeta, FirstRowBiasGrad], ids=lambda c: c.__name__
)
def test_wrong_addmm_backward_fails(wrong):
    bias, a, b = (
        make((29,), torch.float32),
        make((37, 50), torch.float32),
        make((50, 29), torch.float32),
    )
    with pytest.raises(AssertionError, match="grad of"):
        check_fwd_bwd(
            lambda *t: wrong.apply(*t, 2.0, 0.5),
            lambda *t: torch.addmm(*t, alpha=2.0, beta=0.5),
            [bias, a, b],
            ["bias", "mat1", "mat2"],
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("wrong", [SwappedOperands, OneElementOff], ids=lambda c: c.__name__)
def test_wrong_matmul_backward_fails(wrong, dtype):
    a, b = make((37, 37), dtype), make((37, 37), dtype)
    with pytest.raises(AssertionError, match="grad of mat"):
        check_fwd_bwd(wrong.apply, torch.matmul, [a, b], ["mat1", "mat2"])


@pytest.mark.parametrize("at", [0, 9, 23])
def test_the_reference_compares_every_chunk(monkeypatch, at):
    """One element off, NaN or missing an inf anywhere in a result of several ``CHUNK``s
    fails the check; the result as given passes."""
    monkeypatch.setattr(reference, "CHUNK", 8)
    ref = torch.randn(4, 6, dtype=torch.float64)
    theirs = ref.to(torch.bfloat16)
    reference.assert_matches("as given", theirs.clone(), theirs, ref)
    off = theirs.clone()
    off.view(-1)[at] += 1.0
    with pytest.raises(AssertionError, match="1 of 24 elements off"):
        reference.assert_matches("one off", off, theirs, ref)
    off.view(-1)[at] = float("nan")
    with pytest.raises(AssertionError, match="NaN where the reference has none"):
        reference.assert_matches("one NaN", off, theirs, ref)
    ref.view(-1)[at] = float("inf")
    theirs = ref.to(torch.bfloat16)
    reference.assert_matches("an inf", theirs.clone(), theirs, ref)
    with pytest.raises(AssertionError, match="inf mismatch"):
        reference.assert_matches("an inf missed", theirs.nan_to_num(posinf=0.0), theirs, ref)
