"""helion_ops.matmul / addmm forward and backward against torch and a float64 reference."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import DEVICE, DTYPES
from reference import assert_matches

import helion_ops
from helion_ops import (
    AddMMFunction,
    MatMulFunction,
    configs,
    kernel,
    long_k,
    model,
    narrow_tiles,
    staging,
)

dtypes = pytest.mark.parametrize("dtype_mode", DTYPES, indirect=True, ids=str)


@pytest.fixture(params=["pair", "two launches"])
def backward_launches(request, monkeypatch) -> str:
    """The backward's two products in one launch where ``wants_pair`` (the default for small
    shapes), or forced into two launches."""
    if request.param == "two launches":
        monkeypatch.setattr(kernel, "wants_pair", lambda *shapes: False)
    return request.param


def make(shape: tuple[int, ...], dtype: torch.dtype, *, transposed: bool = False) -> torch.Tensor:
    """A fresh random leaf tensor that requires grad; ``transposed`` gives a column-major view."""
    if transposed:
        t = torch.randn(shape[::-1], dtype=dtype, device=DEVICE).T
    else:
        t = torch.randn(shape, dtype=dtype, device=DEVICE)
    return t.requires_grad_()


def grads_of(out: torch.Tensor, inputs: list[torch.Tensor], grad_out: torch.Tensor) -> list:
    return list(torch.autograd.grad(out, inputs, grad_out, allow_unused=True))


def check_fwd_bwd(
    ours_fn, torch_fn, inputs: list[torch.Tensor], names: list[str], magnitude_fn=None
) -> None:
    """Forward output and every input gradient: ours vs torch (same dtype) vs float64.

    ``magnitude_fn`` (default ``torch_fn``) must give the sum of the terms' magnitudes when fed
    absolute values: the same function with absolute scalars.
    """
    ref_inputs = [t.detach().double().requires_grad_(t.requires_grad) for t in inputs]
    abs_inputs = [t.detach().double().abs().requires_grad_(t.requires_grad) for t in inputs]
    theirs = torch_fn(*inputs)
    ref = torch_fn(*ref_inputs)
    magnitude = (magnitude_fn or torch_fn)(*abs_inputs)
    ours = ours_fn(*inputs)
    assert_matches("output", ours, theirs, ref, magnitude)
    grad_out = torch.randn_like(theirs)
    ours_g = grads_of(ours, inputs, grad_out)
    theirs_g = grads_of(theirs, inputs, grad_out)
    ref_g = grads_of(ref, ref_inputs, grad_out.double())
    magnitude_g = grads_of(magnitude, abs_inputs, grad_out.double().abs())
    for name, o, t, r, mag in zip(names, ours_g, theirs_g, ref_g, magnitude_g, strict=True):
        assert_matches(f"grad of {name}", o, t, r, mag)


def check_matmul(a: torch.Tensor, b: torch.Tensor, fn=helion_ops.matmul) -> None:
    """``check_fwd_bwd`` of ``fn(a, b)`` against torch.matmul."""
    check_fwd_bwd(fn, torch.matmul, [a, b], ["mat1", "mat2"])


def check_addmm(bias, a, b, alpha=1.0, beta=1.0, fn=helion_ops.addmm) -> None:
    """``check_fwd_bwd`` of ``fn(bias, a, b, alpha=, beta=)`` against torch.addmm."""
    check_fwd_bwd(
        lambda *t: fn(*t, alpha=alpha, beta=beta),
        lambda *t: torch.addmm(*t, alpha=alpha, beta=beta),
        [bias, a, b],
        ["bias", "mat1", "mat2"],
        lambda *t: torch.addmm(*t, alpha=abs(alpha), beta=abs(beta)),
    )


@dtypes
# (600, 24, 16) sends the backward's mat1.T @ grad_out, and (24, 600, 16) the forward, to
# the split-K kernel.
@pytest.mark.parametrize(
    "m,k,n", [(128, 256, 128), (37, 50, 29), (1, 1, 1), (65, 130, 17), (600, 24, 16), (24, 600, 16)]
)
def test_matmul_bwd(dtype_mode, backward_launches, m, k, n):
    a, b = make((m, k), dtype_mode), make((k, n), dtype_mode)
    check_matmul(a, b, fn=helion_ops.matmul_autograd)


# A thin product (``narrow_tiles.thin``) with K off 16 bytes runs split-K all the same (its plain
# kernel would load element by element too): the forward of 3x40x4099, and the backward's
# grad_out @ mat2.T of a 3x4101x40 product (3x40x4101). fp16 (and bf16) only: fp32 thin
# products keep the plain kernel.
@pytest.mark.parametrize("dtype_mode", [torch.float16], indirect=True, ids=str)
@pytest.mark.parametrize("m,k,n,thin", [(3, 4099, 40, (3, 40, 4099)), (3, 40, 4101, (3, 40, 4101))])
def test_thin_products_run_split_k_with_k_off_16_bytes(dtype_mode, monkeypatch, m, k, n, thin):
    launched = launches(monkeypatch)
    a, b = make((m, k), dtype_mode), make((k, n), dtype_mode)
    assert narrow_tiles.thin(*thin)
    check_matmul(a, b)
    assert kernel.split_k_kernel in launched


def test_fp32_thin_products_keep_the_plain_kernel(monkeypatch):
    """fp32 split-K products get Helion's default config, never measured on thin ones."""
    launched = launches(monkeypatch)
    check_matmul(make((3, 4099), torch.float32), make((4099, 40), torch.float32))
    assert kernel.split_k_kernel not in launched


@dtypes
@pytest.mark.parametrize(
    "alpha,beta", [(1.0, 1.0), (2.0, 0.5), (-1.5, 3.0), (0.0, 1.0), (1.0, 0.0), (0, 0)]
)
def test_addmm_bwd(dtype_mode, backward_launches, alpha, beta):
    bias, a, b = make((37, 29), dtype_mode), make((37, 50), dtype_mode), make((50, 29), dtype_mode)
    check_addmm(bias, a, b, alpha=alpha, beta=beta, fn=helion_ops.addmm_autograd)


BIAS_SHAPES = [(37, 29), (29,), (1, 29), (37, 1), (1,), ()]


@pytest.mark.parametrize("dtype_mode", [torch.float32, torch.float16], indirect=True, ids=str)
@pytest.mark.parametrize("bias_shape", [(24, 16), (16,), ()], ids=str)
@pytest.mark.parametrize("alpha,beta", [(1.5, -0.5), (1.0, 2.0), (-2.0, 0.0)])
def test_addmm_split_k(dtype_mode, bias_shape, alpha, beta):
    from helion_ops.kernel import wants_split_k

    assert wants_split_k(24, 16, 600, dtype_mode)
    bias, a, b = (
        make(bias_shape, dtype_mode),
        make((24, 600), dtype_mode),
        make((600, 16), dtype_mode),
    )
    check_addmm(bias, a, b, alpha=alpha, beta=beta)


@dtypes
@pytest.mark.parametrize("bias_shape", BIAS_SHAPES, ids=str)
def test_addmm_every_bias_shape(dtype_mode, bias_shape):
    bias, a, b = (
        make(bias_shape, dtype_mode),
        make((37, 50), dtype_mode),
        make((50, 29), dtype_mode),
    )
    check_addmm(bias, a, b, alpha=0.75, beta=-2.0)


@pytest.mark.parametrize("dtype_mode", [torch.float32, torch.float16], indirect=True, ids=str)
@pytest.mark.parametrize("a_t,b_t", [(True, False), (False, True), (True, True)])
def test_transposed_views(dtype_mode, a_t, b_t):
    bias = make((29,), dtype_mode)
    a, b = make((37, 50), dtype_mode, transposed=a_t), make((50, 29), dtype_mode, transposed=b_t)
    assert not (a.is_contiguous() and b.is_contiguous())
    check_addmm(bias, a, b)


@pytest.mark.parametrize("op", ["matmul", "addmm"])
@pytest.mark.parametrize("a_t,b_t", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("needs", [(True, True), (True, False), (False, True)])
def test_grads_come_in_their_operands_layout(backward_launches, op, a_t, b_t, needs):
    """As torch's: a column-major leaf (tritonbench's 'n' layouts) gets a column-major grad,
    which autograd keeps as its .grad instead of copying it into the leaf's layout. (The hooks
    keep only strides and addresses: a reference to the grad would make autograd copy it.)"""
    a = make((37, 50), torch.float32, transposed=a_t).detach().requires_grad_(needs[0])
    b = make((50, 29), torch.float32, transposed=b_t).detach().requires_grad_(needs[1])
    bias = make((29,), torch.float32)
    incoming = {}
    for name, t in (("mat1", a), ("mat2", b)):
        if t.requires_grad:
            t.register_hook(lambda g, n=name: incoming.update({n: (g.stride(), g.data_ptr())}))
    out = helion_ops.matmul(a, b) if op == "matmul" else helion_ops.addmm(bias, a, b, alpha=0.5)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    alpha = 1.0 if op == "matmul" else 0.5
    a64, b64, g64 = a.detach().double(), b.detach().double(), grad_out.double()
    wants = {"mat1": alpha * g64 @ b64.T, "mat2": alpha * a64.T @ g64}
    theirs = {"mat1": alpha * grad_out @ b.detach().T, "mat2": alpha * a.detach().T @ grad_out}
    for name, t in (("mat1", a), ("mat2", b)):
        if not t.requires_grad:
            assert t.grad is None and name not in incoming
            continue
        assert incoming[name] == (t.stride(), t.grad.data_ptr()), f"{name}'s grad was copied"
        assert_matches(f"grad of {name}", t.grad, theirs[name], wants[name])


def test_a_linear_layers_weight_gets_its_grad_uncopied():
    """``x @ w.T`` with a row-major weight (nn.Linear's): w's grad arrives row-major."""
    x, w = make((37, 50), torch.float32), make((29, 50), torch.float32)
    incoming = []
    w.register_hook(lambda g: incoming.append((g.stride(), g.data_ptr())))
    out = helion_ops.matmul(x, w.T)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    assert incoming == [(w.stride(), w.grad.data_ptr())]
    want = grad_out.double().T @ x.detach().double()
    assert_matches("grad of w", w.grad, grad_out.T @ x.detach(), want)


def launches(monkeypatch) -> list:
    """The kernels ``kernel._run`` launches from now on, in order."""
    launched, real_run = [], kernel._run
    monkeypatch.setattr(
        kernel, "_run", lambda k, *args, **kw: launched.append(k) or real_run(k, *args, **kw)
    )
    return launched


def staged_copies(monkeypatch) -> list:
    """The shapes of the operands ``staging.aligned_copy`` copies from now on, in order."""
    copies, real_copy = [], staging.aligned_copy
    monkeypatch.setattr(
        staging, "aligned_copy", lambda t: copies.append(tuple(t.shape)) or real_copy(t)
    )
    return copies


# b's rows of 40 fp16/bf16 elements (80 bytes) lie on 16 bytes but not 32: the forward runs
# on the transposed kernel (configs.transposed_pays), the backward's products do not.
@pytest.mark.parametrize("dtype_mode", [torch.float16, torch.bfloat16], indirect=True, ids=str)
@pytest.mark.parametrize("bias_shape", [None, (37, 40), (40,), (1, 40), (37, 1), ()], ids=str)
def test_rows_on_16_bytes_run_transposed(dtype_mode, bias_shape, monkeypatch):
    launched = launches(monkeypatch)
    a, b = make((37, 50), dtype_mode), make((50, 40), dtype_mode)
    if bias_shape is None:
        check_matmul(a, b)
    else:
        check_addmm(make(bias_shape, dtype_mode), a, b, alpha=0.75, beta=-2.0)
    assert launched[0] is kernel.transposed_kernel
    assert kernel.transposed_kernel not in launched[1:]


# A product of a few columns (``narrow_tiles.few_columns``: a router of 8 experts, a value head
# of one output) runs transposed on a few rows' tiles; one output's b has rows of 2 bytes,
# which the transposed kernel otherwise never takes (one column: the same memory whether b is
# row- or column-major). b of 4 columns whose rows lie each on a 128-byte line of their own (as
# a staged copy's: "lines") is row-major though not contiguous, and runs transposed too.
@pytest.mark.parametrize("dtype_mode", [torch.float16, torch.bfloat16], indirect=True, ids=str)
@pytest.mark.parametrize(
    "n, b_layout, bias_shape",
    [(1, "rows", None), (1, "columns", (192, 1)), (8, "rows", (8,)), (4, "lines", None)],
    ids=str,
)
def test_few_columns_run_transposed(dtype_mode, n, b_layout, bias_shape, monkeypatch):
    # (192 rows whose narrow tiles are taken to pay, so that the interpreter runs it quickly;
    # with fewer, a K of 1024 would make it a few tiles' long-K product.)
    monkeypatch.setattr(narrow_tiles, "FEW_COLUMNS_ROWS", 192)
    monkeypatch.setattr(narrow_tiles, "narrow_tiles_pay", lambda *sizes: True)
    launched = launches(monkeypatch)
    a = make((192, 1024), dtype_mode)
    if b_layout == "lines":
        b = torch.randn(1024, 64, dtype=dtype_mode, device=DEVICE)[:, :n].detach().requires_grad_()
        assert not b.is_contiguous()
    else:
        b = make((1024, n), dtype_mode, transposed=b_layout == "columns")
    assert narrow_tiles.few_columns(a.detach(), b.detach())
    if bias_shape is None:
        check_matmul(a, b)
    else:
        check_addmm(make(bias_shape, dtype_mode), a, b, alpha=0.75, beta=-2.0)
    assert launched[0] is kernel.transposed_kernel


# A product of a few columns whose narrow tiles would not pay, or of too few rows for them and a
# long K (``few_columns_long_k``: here made of 64 rows or more, or a K of 512 or more, so that
# the interpreter runs it quickly) splits over K. (fp16: bf16 runs in Helion's ref mode here,
# which has no split-K.)
@pytest.mark.parametrize("dtype_mode", [torch.float16], indirect=True, ids=str)
@pytest.mark.parametrize("n, bias_shape", [(1, None), (8, (8,)), (3, (96, 3))], ids=str)
@pytest.mark.parametrize("bound", [("FEW_COLUMNS_ROWS", 64), ("FEW_COLUMNS_SPLIT_K", 512)], ids=str)
def test_few_columns_over_a_long_k_split_over_k(dtype_mode, n, bias_shape, bound, monkeypatch):
    monkeypatch.setattr(narrow_tiles, *bound)
    kernel.reset()  # (both bounds give the same specialization: each must choose it)
    launched = launches(monkeypatch)
    a, b = make((96, 512), dtype_mode), make((512, n), dtype_mode)
    assert narrow_tiles.few_columns_long_k(96, n, 512, a.element_size())
    if bias_shape is None:
        check_matmul(a, b)
    else:
        check_addmm(make(bias_shape, dtype_mode), a, b, alpha=0.75, beta=-2.0)
    assert launched[0] is kernel.split_k_kernel


@pytest.mark.parametrize("dtype_mode", [torch.float16, torch.bfloat16], indirect=True, ids=str)
def test_the_backwards_mat1_grad_runs_transposed_where_mat1s_rows_lie_on_lines(
    dtype_mode, monkeypatch
):
    """mat1 [37, 64] (rows of 128 bytes), grad_out [37, 40] (80 bytes): mat1.T @ grad_out
    runs transposed, grad_out @ mat2.T (mat2.T contiguous along K) does not."""
    monkeypatch.setattr(kernel, "wants_pair", lambda *shapes: False)
    launched = launches(monkeypatch)
    a, b = make((37, 64), dtype_mode), make((64, 40), dtype_mode)
    check_matmul(a, b)
    assert launched == [kernel.transposed_kernel, kernel.matmul_kernel, kernel.transposed_kernel]


@pytest.mark.parametrize("row, transposed", [(56, True), (48, False)])
def test_rows_of_a_view_decide_the_kernel(row, transposed, monkeypatch):
    """b's leading stride, not N, says where its rows lie: 112 bytes (16 but not 32) or 96."""
    launched = launches(monkeypatch)
    a = make((33, 24), torch.float16)
    b = torch.randn(24, row, dtype=torch.float16, device=DEVICE)[:, :40].requires_grad_()
    check_matmul(a, b)
    assert (launched[0] is kernel.transposed_kernel) == transposed


def test_strided_views():
    base_a = torch.randn(37, 100, device=DEVICE, requires_grad=True)
    base_b = torch.randn(60, 29, device=DEVICE, requires_grad=True)
    a, b = base_a[:, ::2], base_b[5:55]
    check_matmul(a, b)
    base_c = torch.randn(29, 200, device=DEVICE, requires_grad=True)
    c = base_c.T[::2]
    assert c.stride() == (2, 200)
    check_matmul(base_a, c)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_beta_zero_ignores_bias(bad):
    bias = torch.full((37, 29), bad, device=DEVICE, requires_grad=True)
    a, b = make((37, 50), torch.float32), make((50, 29), torch.float32)
    out = helion_ops.addmm(bias, a, b, beta=0.0)
    assert out.isfinite().all()
    check_addmm(bias, a, b, beta=0)


@pytest.mark.parametrize("m,k,n", [(0, 5, 7), (5, 0, 7), (5, 7, 0), (0, 0, 0)])
@pytest.mark.parametrize("bias_shape", [None, (7,), ()], ids=str)
def test_empty_dimensions(m, k, n, bias_shape):
    a, b = make((m, k), torch.float32), make((k, n), torch.float32)
    if bias_shape is None:
        check_matmul(a, b)
        return
    bias = make(bias_shape if n else (), torch.float32)
    check_addmm(bias, a, b, alpha=2.0, beta=0.5)


@pytest.mark.parametrize("why", ["no_grad", "no input requires grad"])
def test_calls_autograd_would_not_record_skip_the_function(why, monkeypatch):
    a, b = make((37, 50), torch.float16), make((50, 29), torch.float16)
    bias = make((29,), torch.float16)
    want_mm = MatMulFunction.apply(a, b).detach()
    want_addmm = AddMMFunction.apply(bias, a, b, 2.0, 0.5).detach()

    def not_expected(*args):
        raise AssertionError("the autograd Function ran where autograd records nothing")

    monkeypatch.setattr(MatMulFunction, "apply", not_expected)
    monkeypatch.setattr(AddMMFunction, "apply", not_expected)
    if why == "no_grad":
        with torch.no_grad():
            out_mm = helion_ops.matmul(a, b)
            out_addmm = helion_ops.addmm(bias, a, b, alpha=2.0, beta=0.5)
    else:
        a, b, bias = a.detach(), b.detach(), bias.detach()
        out_mm = helion_ops.matmul(a, b)
        out_addmm = helion_ops.addmm(bias, a, b, alpha=2.0, beta=0.5)
    for out, want in [(out_mm, want_mm), (out_addmm, want_addmm)]:
        assert out.dtype == torch.float16 and not out.requires_grad and out.grad_fn is None
        torch.testing.assert_close(out, want, rtol=0, atol=0)


@pytest.mark.parametrize("needs", [(True, False), (False, True)])
def test_only_requested_grads_are_computed_and_saved(needs, monkeypatch, python_path_only):
    """The Python Function (the C++ one's check is in test_native)."""
    a = torch.randn(37, 50, device=DEVICE, requires_grad=needs[0])
    b = torch.randn(50, 29, device=DEVICE, requires_grad=needs[1])
    out = helion_ops.matmul(a, b)
    saved = out.grad_fn.saved_tensors
    assert (saved[0] is not None, saved[1] is not None) == (needs[1], needs[0])

    from helion_ops import ops

    launches = []
    real = ops.launch_mm
    monkeypatch.setattr(ops, "launch_mm", lambda *args: launches.append(1) or real(*args))
    out.backward(torch.randn_like(out))
    assert len(launches) == 1
    assert (a.grad is not None, b.grad is not None) == needs


def penalty_grads(fn, inputs: list[torch.Tensor], grad_out: torch.Tensor) -> tuple:
    """The gradients of a gradient penalty: the squared first-order gradients, summed."""
    grads = torch.autograd.grad(fn(*inputs), inputs, grad_out, create_graph=True)
    penalty = sum((g * g).sum() for g in grads)
    return torch.autograd.grad(penalty, inputs, allow_unused=True, materialize_grads=True)


@pytest.mark.parametrize("op", ["matmul", "addmm"])
@pytest.mark.parametrize("column_major", [False, True])
def test_second_order_gradients(op, column_major):
    """create_graph=True: the backward's own products are differentiable, as torch's are,
    with operands of either layout (column-major ones get their grads transposed)."""
    a = make((24, 40), torch.float32, transposed=column_major)
    b = make((40, 16), torch.float32, transposed=column_major)
    bias = make((16,), torch.float32)
    if op == "matmul":
        ours_fn, torch_fn, inputs = helion_ops.matmul, torch.matmul, [a, b]
    else:
        ours_fn = lambda *t: helion_ops.addmm(*t, alpha=1.5, beta=-0.5)  # noqa: E731
        torch_fn = lambda *t: torch.addmm(*t, alpha=1.5, beta=-0.5)  # noqa: E731
        inputs = [bias, a, b]
    grad_out = torch.randn(24, 16, device=DEVICE)
    ours = penalty_grads(ours_fn, inputs, grad_out)
    theirs = penalty_grads(torch_fn, inputs, grad_out)
    inputs64 = [t.detach().double().requires_grad_() for t in inputs]
    ref = penalty_grads(torch_fn, inputs64, grad_out.double())
    for i, (o, t, r) in enumerate(zip(ours, theirs, ref, strict=True)):
        assert_matches(f"second-order grad of input {i}", o, t, r)


@pytest.mark.parametrize("m,n", [(29, 37), (37, 29)])
def test_backward_runs_both_products_in_one_launch_on_transposed_views(m, n, monkeypatch):
    """grad_out @ b.T sums over n, a.T @ grad_out over m: the longer goes first."""
    from helion_ops import ops

    kernel.reset()  # (a fast-path hit of an earlier test's operands would launch no _run)
    launched, seen, real_pair = launches(monkeypatch), [], ops.launch_mm_pair
    monkeypatch.setattr(ops, "launch_mm_pair", lambda *args: seen.append(args) or real_pair(*args))
    a, b = make((m, 50), torch.float32), make((50, n), torch.float32)
    out = helion_ops.matmul(a, b)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    assert launched[1:] == [kernel.pair_kernel]  # launched[0] is the forward
    ((*operands, alpha),) = seen
    bt, at = b.T, a.T
    want = (at, grad_out, grad_out, bt) if m > n else (grad_out, bt, at, grad_out)
    assert alpha == 1.0
    for got, view in zip(operands, want, strict=True):  # the views themselves, no copies
        assert (got.data_ptr(), got.shape, got.stride()) == (
            view.data_ptr(),
            view.shape,
            view.stride(),
        )


def backward_operands() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """a [61, 45], b [45, 37] and grad_out [61, 37], fp16: a backward's operands."""
    return tuple(make(s, torch.float16).detach() for s in [(61, 45), (45, 37), (61, 37)])


def check_backward_pair(a: torch.Tensor, b: torch.Tensor, g: torch.Tensor, alpha: float) -> None:
    """``launch_mm_pair`` of the backward's ``g @ b.T`` and ``a.T @ g``, each against float64."""
    first, second = kernel.launch_mm_pair(g, b.T, a.T, g, alpha)
    assert_matches("g @ b.T", first, alpha * (g @ b.T), alpha * (g.double() @ b.T.double()))
    assert_matches("a.T @ g", second, alpha * (a.T @ g), alpha * (a.T.double() @ g.double()))


@pytest.mark.parametrize("chosen", [True, False])
def test_beyond_wants_pair_the_models_choice_decides(chosen, monkeypatch):
    """Where ``wants_pair`` says no, ``configs.model_pair`` decides (on the GPU; stubbed here):
    a config, one launch of pair_kernel; None, two launches. Both right against float64,
    and the decision is kept for the operands' next call."""
    from helion_ops.candidates import config

    decision = model.pair_of(config(64, 32, 32, 4, 2, "flat")) if chosen else None
    asked, launched = [], launches(monkeypatch)
    monkeypatch.setattr(kernel, "wants_pair", lambda *mnks: False)
    monkeypatch.setattr(
        kernel, "model_pair", lambda *ops, eager=False: asked.append(eager) or decision
    )
    a, b, g = backward_operands()
    kernel.reset()
    for _ in range(2):
        check_backward_pair(a, b, g, 0.5)
    # Decided on the first call only: for captures, and for eager calls where that said no.
    assert asked == ([False] if chosen else [False, True])
    assert launched == ([kernel.pair_kernel] if chosen else [kernel.matmul_kernel] * 2)


def test_the_eager_pair_rule_leaves_a_transposed_product_its_own_launch(monkeypatch):
    """Where one product would run on the transposed kernel (``configs.transposed_pays``),
    two launches beat the model's plain ones: eager calls keep them, unasked."""
    asked = []
    monkeypatch.setattr(kernel, "wants_pair", lambda *mnks: False)
    monkeypatch.setattr(kernel, "model_pair", lambda *ops, eager=False: asked.append(eager))
    monkeypatch.setattr(kernel, "transposed_pays", lambda a, b, epilogue="plain": True)
    a, b, g = backward_operands()
    kernel.reset()
    check_backward_pair(a, b, g, 2.0)
    assert asked == [False]


@pytest.mark.parametrize("capture_first", [True, False])
def test_a_pair_for_eager_calls_only_runs_two_launches_under_a_capture(capture_first, monkeypatch):
    """A pair that only eager calls run in one launch (the host time it saves counts there,
    ``configs.model_pair(..., eager=True)``): eager calls take the pair kernel, captures two
    launches, whichever comes first; the first eager call also runs the capture's launches
    (so that a capture never compiles). Right against float64 each time; once an eager call
    and a capture have decided, neither asks again."""
    from helion_ops.candidates import config

    pair = model.pair_of(config(64, 32, 32, 4, 2, "flat"))
    asked, launched, real_mm = [], launches(monkeypatch), kernel.launch_mm
    monkeypatch.setattr(kernel, "wants_pair", lambda *mnks: False)
    monkeypatch.setattr(
        kernel, "model_pair", lambda *ops, eager=False: asked.append(eager) or (eager and pair)
    )
    monkeypatch.setattr(kernel, "launch_mm", lambda *a: launched.append("mm") or real_mm(*a))
    capture = [True]
    monkeypatch.setattr(kernel, "capturing", lambda t: capture[0])
    a, b, g = backward_operands()
    kernel.reset()
    first_asks = [False, False, True] if capture_first else [False, True]
    steps = [(True, ["mm", "mm"], [False])] if capture_first else []
    steps += [
        (False, ["mm", "mm", "pair"], first_asks),  # the first eager call
        (False, [], first_asks),  # the pair's plan, straight from the fast path
        (True, ["mm", "mm"], first_asks),
    ]
    for capturing, want_calls, want_asked in steps:
        capture[0] = capturing
        launched.clear()
        check_backward_pair(a, b, g, -0.5)
        calls = ["pair" if k is kernel.pair_kernel else k for k in launched]
        calls = [c for c in calls if c in ("mm", "pair")]  # not the products' own launches
        assert (calls, asked) == (want_calls, want_asked), capturing


@pytest.mark.parametrize(
    "mnk1,mnk2,pair",
    [
        ((1024, 1024, 1024), (1024, 1024, 1024), True),
        ((37, 29, 50), (50, 29, 37), True),
        ((4096, 1024, 1024), (1024, 1024, 4096), False),  # an output over 1024^2
        ((24, 16, 600), (16, 16, 24), False),  # the first for the split-K kernel
        ((1, 1, 50), (50, 1, 1), False),  # a 1x1 output
        ((37, 29, 0), (0, 29, 37), False),  # empty
    ],
)
def test_pair_rule(mnk1, mnk2, pair):
    assert kernel.wants_pair(mnk1, mnk2, torch.float16) is pair
    a1, b1 = torch.randn(mnk1[0], mnk1[2]), torch.randn(mnk1[2], mnk1[1])
    a2, b2 = torch.randn(mnk2[0], mnk2[2]), torch.randn(mnk2[2], mnk2[1])
    assert not configs.tuned_pair(a1, b1, a2, b2)  # no table off the GPU


@pytest.mark.parametrize("dtype_mode", [torch.float32, torch.float16], indirect=True, ids=str)
@pytest.mark.parametrize("transposed", [(False, True, True, False), (True, False, False, True)])
def test_pair_kernel_against_float64(dtype_mode, transposed):
    """Two products of different shapes in one launch, odd sizes, poisoned outputs."""
    shapes = [(37, 50), (50, 29), (61, 19), (19, 45)]
    a1, b1, a2, b2 = (
        make(s, dtype_mode, transposed=t).detach() for s, t in zip(shapes, transposed, strict=True)
    )
    assert kernel.wants_pair((37, 29, 50), (61, 45, 19), dtype_mode)
    out1, out2 = kernel.launch_mm_pair(a1, b1, a2, b2, -1.5)
    for name, out, (x, y) in [("first", out1, (a1, b1)), ("second", out2, (a2, b2))]:
        want = -1.5 * torch.mm(x, y)
        ref = -1.5 * (x.double() @ y.double())
        assert_matches(name, out, want, ref, 1.5 * (x.double().abs() @ y.double().abs()))


@pytest.mark.parametrize("layout", ["rccr", "crrc"])
def test_pair_kernel_with_a_model_candidate(layout):
    """The config shape of ``configs.model_pair`` (a model candidate through ``pair_of``:
    tensor descriptors, flat programs here, as the interpreter has no SM count for persistent
    ones) on a backward's two products, fp16, in the interpreter."""
    from helion_ops import candidates

    m, n, k = 96, 80, 112
    a = make((m, k), torch.float16).detach()
    b = make((k, n), torch.float16).detach()
    g = make((m, n), torch.float16).detach()
    x = (g, b.T, a.T, g) if layout == "rccr" else (a.T, g, g, b.T)
    args = (*x, kernel.scaled(2.0), kernel.scaled(2.0))
    config = model.pair_of(candidates.config(64, 32, 32, 4, 2, "flat"))
    bound = kernel.pair_kernel.bind(args)
    assert "tensor_descriptor" in bound.to_triton_code(config)
    out1, out2 = bound.compile_config(config)(*args)
    for name, out, (p, q) in [("first", out1, x[:2]), ("second", out2, x[2:])]:
        assert_matches(name, out, 2.0 * (p @ q), 2.0 * (p.double() @ q.double()))


@pytest.mark.parametrize("beta", [1.0, 0.5])
def test_full_bias_grad_is_copied_only_to_scale_it(beta):
    # torch's own addmm backward hands grad_out on as the [m, n] bias's gradient when beta == 1.
    bias = torch.randn(37, 29, device=DEVICE, requires_grad=True)
    a, b = torch.randn(37, 50, device=DEVICE), torch.randn(50, 29, device=DEVICE)
    out = helion_ops.addmm(bias, a, b, beta=beta)
    grad_out = torch.randn_like(out)
    (grad_bias,) = torch.autograd.grad(out, bias, grad_out)
    assert (grad_bias.data_ptr() == grad_out.data_ptr()) == (beta == 1)
    torch.testing.assert_close(grad_bias, beta * grad_out, rtol=0, atol=0)


@pytest.mark.parametrize("dtype_mode", [torch.float32, torch.float16], indirect=True, ids=str)
@pytest.mark.parametrize("bias_shape", [None, (70, 29), (29,)], ids=str)
@pytest.mark.parametrize("layout", ["rr", "cr", "rc"])
@pytest.mark.parametrize("rows", [64, 32])
def test_last_wave_kernel(monkeypatch, dtype_mode, bias_shape, layout, rows):
    """The last wave split over K: rows [0, rows) in the plain loop with the epilogue, the
    others as fp32 partial sums finished after; forward and both grads, as the GPU takes it."""
    split = configs.LastWaveSplit(rows, eager=True)
    monkeypatch.setattr(
        kernel, "last_wave_split", lambda a, b: split if a.shape[0] > rows else None
    )
    a = make((70, 90), dtype_mode, transposed=layout[0] == "c")
    b = make((90, 29), dtype_mode, transposed=layout[1] == "c")
    kernel.reset()
    if bias_shape is None:
        check_matmul(a, b)
    else:
        check_addmm(make(bias_shape, dtype_mode), a, b, alpha=1.5, beta=-0.5)
    assert any(key[0] is kernel.last_wave_kernel for key in kernel._compiled)


def test_the_last_wave_of_a_scaled_product_without_bias(monkeypatch):
    """``launch_mm`` with alpha and no bias (the backward's products where no pair runs): the
    tail's partial sums are scaled too (``check_matmul`` scales by 1 only)."""
    split = configs.LastWaveSplit(64, eager=True)
    monkeypatch.setattr(kernel, "last_wave_split", lambda a, b: split if a.shape[0] > 64 else None)
    kernel.reset()
    a, b = torch.randn(70, 90, device=DEVICE), torch.randn(90, 29, device=DEVICE)
    out = kernel.launch_mm(a, b, 1.5)
    assert_matches("last wave", out, 1.5 * (a @ b), 1.5 * (a.double() @ b.double()))
    assert any(key[0] is kernel.last_wave_kernel for key in kernel._compiled)


def test_deterministic_algorithms_keep_products_off_atomic_sums(monkeypatch):
    """Under torch.use_deterministic_algorithms(True) neither split-K's atomic adds nor the
    last-wave split (fp32 atomics, last bits varying from run to run) run: split-K products
    store their pieces apart for torch.sum (``split_k_pieces_kernel``), the others the plain
    kernel; correct, the same bits every call, and off the fast path, whose entry would
    outlive the switch."""
    split = configs.LastWaveSplit(16, eager=True)
    monkeypatch.setattr(kernel, "last_wave_split", lambda a, b: split)
    deterministic = [True]  # torch's switch is on throughout (the poisoning fixture)
    monkeypatch.setattr(kernel, "deterministic_algorithms", lambda: deterministic[0])
    kernel.reset()
    fp16 = torch.float16
    bias, a, b = make((16,), fp16), make((24, 600), fp16), make((600, 16), fp16)
    assert kernel.wants_split_k(24, 16, 600, fp16)
    check_addmm(bias, a, b, alpha=1.5, beta=-0.5)
    x, y = a.detach(), b.detach()  # (the launchers run inside the autograd Functions)
    for args in ((bias.detach(), x, y), (None, x, y)):
        first = kernel.launch_addmm(*args, 1.5, -0.5)
        assert torch.equal(first, kernel.launch_addmm(*args, 1.5, -0.5))
    check_matmul(make((70, 90), fp16), make((90, 29), fp16))
    used = {key[0] for key in kernel._compiled}
    assert {kernel.matmul_kernel, kernel.split_k_pieces_kernel} <= used
    assert not used & {kernel.split_k_kernel, kernel.last_wave_kernel}
    assert not kernel._fast_mm and not kernel._fast_addmm and not kernel._fast_split
    deterministic[0] = False
    check_addmm(bias, a, b, alpha=1.5, beta=-0.5)
    assert kernel.split_k_kernel in {key[0] for key in kernel._compiled}


def test_a_split_for_captures_only_runs_plain_in_eager_calls(monkeypatch, python_path_only):
    """A product the model splits only under a CUDA graph capture (``LastWaveSplit.eager``
    False): eager calls return the plain kernel's result, through a fast-path entry that
    captures do not read; the first also compiles the split, which the capture then runs
    without compiling."""
    split = configs.LastWaveSplit(64, eager=False)
    monkeypatch.setattr(kernel, "last_wave_split", lambda a, b: split)
    a, b = make((70, 90), torch.float16), make((90, 29), torch.float16)
    kernel.reset()
    runs = []
    launch_last_wave = kernel.launch_last_wave
    monkeypatch.setattr(
        kernel, "launch_last_wave", lambda *args: runs.append(1) or launch_last_wave(*args)
    )
    for _ in range(3):
        check_matmul(a, b)
    assert not kernel._fast_mm and len(kernel._fast_eager) == 1
    runs_plain = []
    run = kernel._run
    monkeypatch.setattr(kernel, "_run", lambda *a, **kw: runs_plain.append(1) or run(*a, **kw))
    helion_ops.matmul(a.detach(), b.detach())
    assert runs_plain == []  # the fast path's plan
    # Compiled once, its result unused (the backward's two small products run as a pair).
    assert len(runs) == 1
    compiled = set(kernel._compiled)
    assert {kernel.last_wave_kernel, kernel.matmul_kernel} <= {key[0] for key in compiled}
    monkeypatch.setattr(kernel, "capturing", lambda t: True)
    check_matmul(a, b)
    assert len(runs) == 2 and set(kernel._compiled) == compiled


def test_a_thin_product_whose_k_loads_in_vectors_runs_the_plain_kernel(
    monkeypatch, python_path_only
):
    """A thin product outside the few-tiles class whose K loads in vectors (40x576x4096 in
    fp16), whose narrow tiles pay (``NARROW_IN_FLIGHT`` lowered to keep the interpreter's
    work small; more rows than ``NARROW_ROWS``, whose K may be long), runs the plain kernel
    (those tiles on the GPU: ``narrow_tiles.few_rows_config``) in every call: after the first,
    eager calls and captures alike through the fast path's plan (NOTES 114)."""
    monkeypatch.setattr(narrow_tiles, "NARROW_IN_FLIGHT", 0)
    a, b = make((40, 4096), torch.float16), make((4096, 576), torch.float16)
    assert narrow_tiles.thin(40, 576, 4096) and not long_k.few_tiles_long_k(40, 576, 4096)
    kernel.reset()
    launched = launches(monkeypatch)
    check_matmul(a, b)
    assert launched[0] is kernel.matmul_kernel and kernel.split_k_kernel not in launched
    key = kernel._mm_key(a, b, True)
    assert key in kernel._fast_mm and not kernel._fast_split and not kernel._fast_eager
    launched.clear()
    helion_ops.matmul(a.detach(), b.detach())
    assert launched == []  # the fast path's plan
    monkeypatch.setattr(kernel, "capturing", lambda t: True)
    check_matmul(a, b)
    assert kernel.split_k_kernel not in launched


# Thin products outside the few-tiles class that split over K: one whose K loads element by
# element (K of 4100 fp16 elements: 8200 bytes a row of a, off 16 bytes), and one whose
# narrow tiles would keep too little of the weight in flight (``narrow_tiles.narrow_in_flight``).
THIN_SPLITS = [(3, 4100, 576), (3, 4096, 576)]


@pytest.mark.parametrize("m,k,n", THIN_SPLITS, ids=str)
def test_a_thin_product_that_splits_splits_in_every_call(monkeypatch, python_path_only, m, k, n):
    """Such a product runs the split-K kernel in eager calls and captures alike; after its
    first call, through the fast path's plan (``kernel._fast_split``), without ``_run``,
    whose cast reads each call's alpha. Under torch's determinism switch the same key runs
    the split in pieces (NOTES 113, 126)."""
    assert kernel.wants_split_k(m, n, k, torch.float16)
    a, b = make((m, k), torch.float16), make((k, n), torch.float16)
    assert narrow_tiles.thin(m, n, k) and not long_k.few_tiles_long_k(m, n, k)
    kernel.reset()
    launched = launches(monkeypatch)
    check_matmul(a, b)
    assert launched[0] is kernel.split_k_kernel
    x, y = a.detach(), b.detach()
    key = kernel._mm_key(x, y, True)
    assert list(kernel._fast_split) == [key] and key not in kernel._fast_mm
    launched.clear()
    for alpha in (1.0, 2.5, -1.5):  # 2.5 makes the key of scales other than 1
        ours, want = kernel.launch_mm(x, y, alpha), alpha * torch.mm(x, y)
        assert_matches(f"alpha {alpha}", ours, want, alpha * (x.double() @ y.double()))
    assert launched == [kernel.split_k_kernel]  # alpha 2.5's first call
    monkeypatch.setattr(kernel, "capturing", lambda t: True)
    check_matmul(a, b)
    assert launched == [kernel.split_k_kernel]  # the capture's forward: the fast path's plan
    monkeypatch.setattr(kernel, "deterministic_algorithms", lambda: True)
    check_matmul(a, b)
    assert launched[1:] == [kernel.split_k_pieces_kernel]


def test_a_long_k_batch_product_splits(monkeypatch, python_path_only):
    """A serving batch's product of few tiles and K past THIN_K (``long_k.long_k_batch``;
    72x1024x4608 in fp16) runs the split-K kernel, its backward's products the plain one;
    under torch's determinism switch the split in pieces (NOTES 116, 118, 126)."""
    m, k, n = 72, 4608, 1024
    assert long_k.long_k_batch(m, n, k) and not narrow_tiles.thin(m, n, k)
    assert not long_k.few_tiles_long_k(m, n, k)
    a, b = make((m, k), torch.float16), make((k, n), torch.float16)
    kernel.reset()
    launched = launches(monkeypatch)
    check_matmul(a, b)
    assert launched[0] is kernel.split_k_kernel
    assert kernel.split_k_kernel not in launched[1:]
    monkeypatch.setattr(kernel, "deterministic_algorithms", lambda: True)
    launched.clear()
    x, y = a.detach(), b.detach()
    assert_matches("deterministic", kernel.launch_mm(x, y), x @ y, x.double() @ y.double())
    assert launched == [kernel.split_k_pieces_kernel]


@pytest.mark.parametrize("bias_shape", [(3, 576), (576,), (3, 1)], ids=str)
def test_a_thin_addmm_splits_through_the_fast_path(monkeypatch, bias_shape):
    """addmm of such a product, after its first call: the split-K plan from the fast path,
    finished with each call's bias, alpha and beta."""
    m, k, n = THIN_SPLITS[0]
    fp16 = torch.float16
    a, b = make((m, k), fp16).detach(), make((k, n), fp16).detach()
    kernel.reset()
    launched = launches(monkeypatch)
    for call, (alpha, beta) in enumerate([(1.5, -0.5), (-2.0, 3.0), (0.5, 0.25)]):
        bias = make(bias_shape, fp16).detach()
        out = helion_ops.addmm(bias, a, b, alpha=alpha, beta=beta)
        want = torch.addmm(bias, a, b, alpha=alpha, beta=beta)
        ref = alpha * (a.double() @ b.double()) + beta * bias.double()
        assert_matches(f"call {call}", out, want, ref)
    assert launched == [kernel.split_k_kernel]
    # The fast path's split-K entry does not outlive the determinism switch.
    monkeypatch.setattr(kernel, "deterministic_algorithms", lambda: True)
    out = helion_ops.addmm(bias, a, b, alpha=alpha, beta=beta)
    assert_matches("deterministic", out, want, ref)
    assert launched[1:] == [kernel.split_k_pieces_kernel]


def test_a_thin_split_on_the_fast_path_keeps_a_scale_of_zero():
    """alpha 0 never reads the product, also once the split's plan serves the key."""
    m, k, n = THIN_SPLITS[0]
    fp16 = torch.float16
    x, y = make((m, k), fp16).detach(), make((k, n), fp16).detach()
    kernel.reset()
    for _ in range(2):
        kernel.launch_mm(x, y, 2.5)
    nan_x = torch.full_like(x, float("nan"))
    assert torch.equal(kernel.launch_mm(nan_x, y, 0.0), x.new_zeros(m, n))


@pytest.mark.parametrize("layout", ["rr", "cr", "rc"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_last_wave_kernel_with_tensor_descriptors(layout, with_bias):
    """The config shape the GPU runs (``configs.last_wave_config``: tensor descriptors; flat
    programs here, as the interpreter has no SM count for persistent ones), fp16: the rows
    in whole waves with the epilogue, the tail through the fp32 buffer and the finishing
    pass."""
    import helion

    m, n, k, rows = 200, 96, 160, 128
    a = make((m, k), torch.float16, transposed=layout[0] == "c").detach()
    b = make((k, n), torch.float16, transposed=layout[1] == "c").detach()
    bias = make((n,), torch.float16).detach().expand(m, n)
    out = torch.full((m, n), float("nan"), dtype=torch.float16, device=DEVICE)
    partial = torch.zeros(m - rows, n, device=DEVICE)
    epilogue = kernel.scaled_plus_bias(1.5, -0.5, bias) if with_bias else kernel.scaled(1.5)
    args = (a[:rows], a[rows:], b, out[:rows], partial, epilogue)
    config = helion.Config(
        block_sizes=[64, 32, 32, 64, 32, 32],
        num_warps=4,
        num_stages=2,
        pid_type="flat",
        indexing="tensor_descriptor",
        l2_groupings=[8, 1],
        range_unroll_factors=[0] * 4,
        range_num_stages=[0] * 4,
        split_k=4,
    )
    bound = kernel.last_wave_kernel.bind(args)
    # Every operand's load through a descriptor, the tail's too: its K pieces (64 here, of K
    # blocks of 32) end on whole blocks, so none is masked there (a masked load is a
    # pointer's). (The bias's [N] expand, of stride 0, loads by pointer.)
    code = bound.to_triton_code(config)
    assert "tl.load(x_" not in code and "tl.load(y" not in code
    bound.compile_config(config)(*args)
    kernel._finish_split_k(partial, bias[rows:] if with_bias else None, 1.5, -0.5, out[rows:])
    want = 1.5 * (a.double() @ b.double()) + (-0.5 * bias.double() if with_bias else 0.0)
    same_dtype = torch.addmm(bias, a, b, alpha=1.5, beta=-0.5) if with_bias else 1.5 * (a @ b)
    assert_matches(f"last wave {layout}", out, same_dtype, want)
