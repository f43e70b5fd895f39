"""Compare a result with a float64 reference, allowing a small multiple of torch's own error."""

from __future__ import annotations

import torch

EPS = {torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}
# Our worst error may exceed torch's (same dtype, same inputs) by this factor, plus one ulp of
# the largest reference value. In fp16/bf16 the final rounding dominates both errors, so 2x
# is ample. In fp32 the summation order dominates: cuBLAS splits long reductions and sums more
# accurately than one pass over K; on the H200 (2026-11-29) our fp32 error reached 6x torch's
# at K = 20120, while still about 1e-6 of the largest value.
ERROR_FACTOR = {torch.float32: 8.0, torch.float16: 2.0, torch.bfloat16: 2.0}
ULPS = 1.0
# Sums accumulate in fp32 whatever the dtype. Their rounding error is bounded by the sum of the
# terms' magnitudes, not by the result, which cancellation can make tiny (a bias grad summed
# over m*n random values); where a magnitude is given, one fp32 ulp of it is allowed too.
ACCUMULATION_EPS = EPS[torch.float32]


def assert_matches(
    name: str,
    ours: torch.Tensor,
    theirs: torch.Tensor,
    ref: torch.Tensor,
    magnitude: torch.Tensor | None = None,
) -> None:
    """Assert ``ours`` is as close to the float64 ``ref`` as torch's ``theirs`` is, or nearly.

    Args:
        name: what is compared, e.g. "grad of mat2", for the failure message.
        ours: helion_ops' result.
        theirs: torch's result for the same inputs in the same dtype.
        ref: the float64 result.
        magnitude: the float64 result computed on the absolute values of every term, which
            bounds the accumulation error (e.g. ``|a| @ |b|`` for ``a @ b``).
    """
    assert ours.shape == ref.shape, f"{name}: shape {tuple(ours.shape)} != {tuple(ref.shape)}"
    assert ours.dtype == theirs.dtype, f"{name}: dtype {ours.dtype} != torch's {theirs.dtype}"
    ours64, theirs64, ref = ours.detach().double(), theirs.detach().double(), ref.detach().double()
    bad_nan = ours64.isnan() != ref.isnan()
    assert not bad_nan.any(), (
        f"{name}: NaN where the reference has none, or the reverse, "
        f"at {int(bad_nan.sum())} elements"
    )
    finite = ref.isfinite()
    assert torch.equal(ours64[~finite].nan_to_num(), ref[~finite].nan_to_num()), (
        f"{name}: inf mismatch"
    )
    if ref.numel() == 0 or not finite.any():
        return
    err = (ours64 - ref).abs()[finite]
    torch_err = (theirs64 - ref).abs()[finite].max().item()
    scale = ref[finite].abs().max().item()
    tol = ERROR_FACTOR[ours.dtype] * torch_err + ULPS * EPS[ours.dtype] * scale
    if magnitude is not None:
        magnitude = magnitude.detach().double()[finite]
        assert magnitude.isfinite().all(), f"{name}: the magnitude is not finite"
        tol += ACCUMULATION_EPS * magnitude.max().item()
    worst = err.max().item()
    if worst > tol:
        count = int((err > tol).sum())
        top = err.topk(min(3, err.numel()))
        raise AssertionError(
            f"{name}: {count} of {err.numel()} elements off by more than {tol:.3g} "
            f"(torch's worst error {torch_err:.3g}); worst errors {top.values.tolist()}"
        )
