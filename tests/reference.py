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


# Elements compared at a time: a 1,000,000 x 768 output's float64 copies and differences at once
# took 30 GiB of the GPU, more than eight test workers share.
CHUNK = 1 << 24


def _chunks(*tensors: torch.Tensor):
    """The same ``CHUNK`` consecutive elements of each tensor (all of one shape), in float64."""
    flat = [t.detach().reshape(-1) for t in tensors]
    for start in range(0, flat[0].numel(), CHUNK):
        yield [f[start : start + CHUNK].double() for f in flat]


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
    given = [ours, theirs, ref] + ([] if magnitude is None else [magnitude])
    bad_nan, bad_inf = 0, False
    worst = torch_err = scale = largest_magnitude = 0.0
    for o, t, r, *m in _chunks(*given):
        bad_nan += int((o.isnan() != r.isnan()).sum())
        finite = r.isfinite()
        bad_inf |= not torch.equal(o[~finite].nan_to_num(), r[~finite].nan_to_num())
        if not finite.any():
            continue
        worst = max(worst, (o - r).abs()[finite].max().item())
        torch_err = max(torch_err, (t - r).abs()[finite].max().item())
        scale = max(scale, r[finite].abs().max().item())
        if m:
            assert m[0][finite].isfinite().all(), f"{name}: the magnitude is not finite"
            largest_magnitude = max(largest_magnitude, m[0][finite].max().item())
    assert not bad_nan, (
        f"{name}: NaN where the reference has none, or the reverse, at {bad_nan} elements"
    )
    assert not bad_inf, f"{name}: inf mismatch"
    tol = ERROR_FACTOR[ours.dtype] * torch_err + ULPS * EPS[ours.dtype] * scale
    tol += ACCUMULATION_EPS * largest_magnitude
    if worst > tol:
        errors = [(o - r).abs()[r.isfinite()] for o, _, r, *_ in _chunks(*given)]
        count = sum(int((e > tol).sum()) for e in errors)
        total = sum(e.numel() for e in errors)
        top = torch.cat([e.topk(min(3, e.numel())).values for e in errors])
        top = top.topk(min(3, top.numel())).values
        raise AssertionError(
            f"{name}: {count} of {total} elements off by more than {tol:.3g} "
            f"(torch's worst error {torch_err:.3g}); worst errors {top.tolist()}"
        )
