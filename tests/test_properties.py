"""Property test: random small shapes, operand layouts, bias shapes and scalars, fp32."""

from __future__ import annotations

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_ops import check_addmm, check_matmul, make

SCALARS = st.sampled_from([1.0, 0.0, -1.0, 0.5, 2.5, -3.0])


@st.composite
def addmm_case(draw):
    m, k, n = (draw(st.integers(1, 48)) for _ in range(3))
    bias_shape = draw(st.sampled_from([None, (m, n), (n,), (1, n), (m, 1), (1,), ()]))
    a_t, b_t = draw(st.booleans()), draw(st.booleans())
    # The tensors' values come from torch's RNG seeded by hypothesis, so that a failure
    # hypothesis reports (and its @reproduce_failure blob) replays with the same values.
    seed = draw(st.integers(0, 2**32 - 1))
    return m, k, n, bias_shape, a_t, b_t, draw(SCALARS), draw(SCALARS), seed


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(addmm_case())
def test_matches_torch_on_random_cases(case):
    m, k, n, bias_shape, a_t, b_t, alpha, beta, seed = case
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        a = make((m, k), torch.float32, transposed=a_t)
        b = make((k, n), torch.float32, transposed=b_t)
        if bias_shape is None:
            check_matmul(a, b)
            return
        check_addmm(make(bias_shape, torch.float32), a, b, alpha=alpha, beta=beta)
