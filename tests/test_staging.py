"""Unaligned operands staged into aligned copies (``helion_ops.staging``)."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE
from reference import assert_matches
from test_ops import check_addmm, check_matmul, make, staged_copies

from helion_ops import configs, kernel, loads, narrow_tiles, staging
from helion_ops.model import Product, bandwidth_bound, shipped_model

SMS = 132  # an H100's or H200's


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    "make_view",
    [
        lambda dt: torch.randn(37, 29, dtype=dt),  # rows of 29 elements
        lambda dt: torch.randn(29, 37, dtype=dt).T,  # a column-major view, columns of 29
        lambda dt: torch.randn(40, 33, dtype=dt)[3:, 1:30],  # a slice at an odd offset
        lambda dt: torch.randn(37, 58, dtype=dt)[:, ::2],  # no unit stride
    ],
    ids=["rows", "columns", "offset", "strided"],
)
def test_aligned_copy(dtype, make_view):
    t = make_view(dtype)
    copy = staging.aligned_copy(t)
    assert not loads.tma_aligned(t)
    assert loads.tma_aligned(copy)
    assert loads.rows_off_lines(copy, copy) == (False, False)  # padded to whole lines
    assert torch.equal(copy, t)
    assert copy.data_ptr() != t.data_ptr()
    if 1 in t.stride():  # the layout kept: a transposed view stays one
        assert copy.stride().index(1) == t.stride().index(1)


def test_staged_copies_a_shared_operand_once(monkeypatch):
    monkeypatch.setattr(staging, "worth_staging", lambda a, b: True)
    g = torch.randn(48, 37)  # unaligned rows, read by both products
    a, b = torch.randn(48, 64), torch.randn(64, 37)
    at, bt = a.T, b.T
    (x1, y1), (x2, y2) = staging.staged([(at, g), (g, bt)])
    assert x1 is at  # aligned: not copied
    assert y1 is x2 and loads.tma_aligned(y1) and torch.equal(y1, g)
    assert loads.tma_aligned(y2) and torch.equal(y2, bt)
    monkeypatch.setattr(staging, "worth_staging", lambda a, b: False)
    assert staging.staged([(a.T, g), (g, b.T)]) is None


def test_nothing_staged_without_a_gpu_model():
    a, b = torch.randn(48, 64, dtype=torch.float16), torch.randn(64, 37, dtype=torch.float16)
    assert not staging.worth_staging(a, b)  # on the CPU


def test_staging_pays_where_the_copy_is_small_against_the_product():
    """The shipped model's decision: the GPT-2 head's three products (the H200 measured each
    staged at 0.43-0.52 of its unstaged time, copies included) stage; a decode step, whose
    product reads the unaligned weight once, does not."""
    model = shipped_model("sm90")
    m, n, k = 4096, 50257, 768
    logits, weight = m * n * 2, k * n * 2
    assert staging.staging_pays(model, Product(m, n, k, "rr", False, SMS), [weight])
    assert staging.staging_pays(model, Product(m, k, n, "rc", False, SMS), [logits, weight])
    assert staging.staging_pays(model, Product(k, n, m, "cr", False, SMS), [logits])
    assert not staging.staging_pays(model, Product(16, n, k, "rr", False, SMS), [weight])
    # A near tie: 256 rows against a vocabulary of 32001 ran 405 us staged and 408 unstaged
    # (call 298, NOTES 129); the copy is predicted within ``UNSTAGED_GAIN`` of paying.
    assert staging.staging_pays(
        model, Product(256, 32001, 4096, "rr", False, SMS), [4096 * 32001 * 2]
    )
    # An odd K (rows of 958 bytes), staged onto tensor descriptors: 0.18 -> 0.10 ms measured.
    assert staging.staging_pays(
        model, Product(32768, 1024, 479, "rr", False, SMS), [32768 * 479 * 2], tma_only=True
    )


@pytest.mark.parametrize("m, n, k, stages", [(1700, 1700, 1700, False), (3100, 2300, 1900, True)])
def test_rows_of_8_bytes_are_staged_where_the_copy_pays(m, n, k, stages):
    """The shipped model's decision for rows of 8 bytes (sizes of 4 mod 8), against the H200
    (bf16, call 300, NOTES 129): 1700^3 ran unstaged 1.17-1.27x as fast as staged;
    3100x2300x1900 stays staged, as before (74.0 us, 74.5 on the code before)."""
    product = Product(m, n, k, "rr", False, SMS, row_bytes=8)
    assert staging.staging_pays(shipped_model("sm90"), product, [m * k * 2, k * n * 2]) is stages


@pytest.fixture
def always_stage(monkeypatch):
    """Stage every unaligned operand (the CPU has no model to decide), counting the copies."""
    copies = staged_copies(monkeypatch)
    monkeypatch.setattr(staging, "worth_staging", lambda a, b: not loads.tma_aligned(a, b))
    kernel.reset()
    return copies


@pytest.mark.parametrize("dtype_mode", [torch.float32, torch.float16], indirect=True, ids=str)
@pytest.mark.parametrize("layout", ["rr", "rc", "cr"])
def test_staged_matmul_against_float64(always_stage, dtype_mode, layout):
    """Forward and both grads from staged operands (37-wide rows: none aligned), the
    backward's grad_out copied once for both of its products."""
    a = make((45, 70), dtype_mode, transposed=layout[0] == "c")
    b = make((70, 37), dtype_mode, transposed=layout[1] == "c")
    check_matmul(a, b)
    assert (45, 37) in always_stage  # grad_out
    assert always_stage.count((45, 37)) == 1
    assert all(loads.tma_aligned(*operands) for operands in _compiled_operands())


def test_a_staged_product_keeps_its_scale(always_stage):
    """``launch_mm`` with alpha, no bias (the backward's products take it where no pair
    runs): staged, then scaled."""
    a = torch.randn(45, 64, dtype=torch.float16, device=DEVICE)
    b = torch.randn(64, 37, dtype=torch.float16, device=DEVICE)
    out = kernel.launch_mm(a, b, 2.5)
    assert always_stage
    assert_matches("staged", out, 2.5 * (a @ b), 2.5 * (a.double() @ b.double()))


@pytest.mark.parametrize("dtype_mode", [torch.float32, torch.float16], indirect=True, ids=str)
@pytest.mark.parametrize("bias_shape", [(45, 37), (37,), ()], ids=str)
def test_staged_addmm_against_float64(always_stage, dtype_mode, bias_shape):
    bias = make(bias_shape, dtype_mode)
    a, b = make((45, 70), dtype_mode), make((70, 37), dtype_mode)
    check_addmm(bias, a, b, alpha=1.5, beta=-0.5)
    assert always_stage


def test_a_staged_product_never_takes_the_fast_path_with_its_unaligned_operands(always_stage):
    """The fast path holds the plans of the aligned copies only: a call with the unaligned
    operands stages again (a plan of the copies' strides would read them wrongly)."""
    a = torch.randn(45, 64, dtype=torch.float16, device=DEVICE)
    b = torch.randn(64, 37, dtype=torch.float16, device=DEVICE)
    for calls in (1, 2):
        torch.testing.assert_close(kernel.launch_mm(a, b), a @ b, rtol=2e-3, atol=2e-3)
        assert always_stage == [(64, 37)] * calls
    a_key = (a.shape, b.shape, a.stride(), b.stride())
    assert all(key[:4] != a_key for key in kernel._fast_mm)


def _compiled_operands():
    """The tensor arguments of every specialization compiled so far."""
    for key in kernel._compiled:
        yield [
            torch.empty_strided(shape, stride, dtype=dtype)
            for dtype, _, shape, stride, _ in (k for k in key[1:] if isinstance(k, tuple))
        ]


@pytest.mark.parametrize("dtype_mode", [torch.float32, torch.float16], indirect=True, ids=str)
def test_staged_backward_of_an_lm_head(always_stage, dtype_mode):
    """The GPT-2 head's backward in small: grad_out's rows unaligned, and its product with
    mat2.T of the split-K kernel's shape (40x24, K = 601), but an odd K along which both
    operands are contiguous: the plain kernel (``loads.k_masks_vectorize``)."""
    assert kernel.wants_split_k(40, 24, 601, dtype_mode)
    bias = make((40, 601), dtype_mode)
    a, b = make((40, 24), dtype_mode), make((24, 601), dtype_mode)
    check_addmm(bias, a, b)
    assert (40, 601) in always_stage
    assert kernel.split_k_kernel not in {key[0] for key in kernel._compiled}


def test_k_masks_vectorize():
    rows = torch.empty(64, 600, dtype=torch.bfloat16)  # K of 1200 bytes
    odd = torch.empty(64, 601, dtype=torch.bfloat16)
    assert loads.k_masks_vectorize(rows, rows.T)
    assert not loads.k_masks_vectorize(odd, odd.T)  # both contiguous along K
    assert not loads.k_masks_vectorize(odd, torch.empty(601, 64, dtype=torch.bfloat16))
    assert loads.k_masks_vectorize(odd.T.contiguous().T, torch.empty(601, 64))  # neither


def test_masks_vectorize_reads_every_contiguous_dimension():
    bf16 = {"dtype": torch.bfloat16}
    a, odd_n = torch.empty(64, 768, **bf16), torch.empty(768, 50304, **bf16)[:, :50257]
    assert loads.masks_vectorize(a, torch.empty(768, 512, **bf16))
    assert not loads.masks_vectorize(a, odd_n)  # the GPT-2 head's forward, staged: N
    assert loads.masks_vectorize(a, odd_n.T.contiguous().T)  # contiguous along K = 768
    assert not loads.masks_vectorize(torch.empty(601, 64, **bf16).T, a.T)  # a.T along M
    assert not loads.masks_vectorize(torch.empty(64, 601, **bf16), torch.empty(601, 64, **bf16))
    fp32 = torch.empty(64, 604)  # K of 2416 bytes, a whole number of 16 in fp32
    assert loads.masks_vectorize(fp32, fp32.T)


def test_staged_keeps_every_product_where_only_some_are_staged(monkeypatch):
    """Products not worth staging come back as they are, in their places."""
    monkeypatch.setattr(staging, "worth_staging", lambda a, b: not loads.tma_aligned(a, b))
    a, b = torch.randn(48, 64), torch.randn(64, 32)  # aligned
    u, v = torch.randn(48, 37), torch.randn(37, 32)  # unaligned rows of 37
    for products in ([(a, b), (u, v)], [(u, v), (a, b)]):
        out = staging.staged(products)
        assert len(out) == 2
        for (x, y), (x0, y0) in zip(out, products, strict=True):
            assert torch.equal(x, x0) and torch.equal(y, y0) and loads.tma_aligned(x, y)
            assert (x is x0 and y is y0) == (x0 is a)  # only the unaligned product copied


@pytest.mark.parametrize("dtype_mode", [torch.float32, torch.float16], indirect=True, ids=str)
def test_staged_backward_where_one_product_is_aligned(always_stage, dtype_mode):
    """mat1 [45, 37] (rows of 37: mat1.T @ grad_out unaligned), mat2 [37, 64] and grad_out
    [45, 64] aligned: the backward's pair stages its second product only."""
    a, b = make((45, 37), dtype_mode), make((37, 64), dtype_mode)
    check_matmul(a, b)
    assert (45, 37) in always_stage and (45, 64) not in always_stage


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("transposed", [False, True], ids=["row-major", "column-major"])
def test_contiguous_copy(dim, transposed):
    t = torch.randn(37, 29) if not transposed else torch.randn(29, 37).T
    copy = staging.contiguous_copy(t, dim)
    assert torch.equal(copy, t) and copy.data_ptr() != t.data_ptr()
    assert copy.stride(dim) == 1 and staging.contiguous_along(copy, dim)
    assert copy.stride(1 - dim) == (64 if dim == 0 else 32)  # runs on 128-byte lines
    assert loads.tma_aligned(copy)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize(
    "make_view",
    [
        lambda dt: torch.randn(290, 70, dtype=dt, device=DEVICE).T,  # column-major: transposed
        lambda dt: torch.randn(70, 290, dtype=dt, device=DEVICE),  # row-major: rows padded
        lambda dt: torch.randn(300, 80, dtype=dt, device=DEVICE)[3:293, 5:75].T,  # at an offset
        lambda dt: torch.randn(140, 290, dtype=dt, device=DEVICE)[::2],  # no unit stride
    ],
    ids=["columns", "rows", "offset", "strided"],
)
def test_tiled_padded_copy_matches_torchs(dtype, make_view):
    """The launchers' copy (a Helion kernel, through its launch plan: second call too) gives
    torch's padded copy: the same sizes, strides and values, in a new buffer."""
    view = make_view(dtype)
    expected = staging.padded_copy(view)
    for _ in range(2):
        copy = kernel.tiled_padded_copy(view)
        assert copy.shape == expected.shape == (70, 320) and copy.stride() == expected.stride()
        assert torch.equal(copy[:, :290], view) and copy.data_ptr() != view.data_ptr()


def test_the_tiled_copys_64_bit_twin_copies_as_it_does():
    """The twin a copy past 2**31 elements runs on (``kernel._compile_and_run``): 64-bit
    offsets, shapes specialized as the kernel's, the same copy."""
    wide = kernel.WIDE[kernel.padded_copy_kernel]
    assert wide.settings.index_dtype == torch.int64
    assert wide.settings.static_shapes == kernel.padded_copy_kernel.settings.static_shapes
    view = torch.randn(290, 70, device=DEVICE).T
    assert torch.equal(kernel._run(wide, (view,))[:, :290], view)


def test_tiled_padded_copies_of_other_strides_or_offsets_never_share_a_plan():
    """Views of one shape, in turn and again: column-major, its columns spaced further, then
    at an offset off 16 bytes; each copy holds its own view's values."""
    base = torch.randn(300, 80, device=DEVICE)
    views = [torch.randn(290, 70, device=DEVICE).T, base[:290, :70].T, base[3:293, 5:75].T]
    assert views[2].data_ptr() % 16 != 0
    for view in views * 2:
        assert torch.equal(kernel.tiled_padded_copy(view)[:, :290], view)


@pytest.fixture(params=[False, True], ids=["ieee", "tf32"])
def tf32(request, restore_tf32):
    """torch's TF32 switch set for the test (both ways), restored after."""
    torch.backends.cuda.matmul.allow_tf32 = request.param
    return request.param


def _fast_dims(tf32: bool) -> tuple:
    """Along which dimension each operand's dots read fast (None: any)."""
    return (1, 0) if tf32 else (None, 1)


def _layouts(products):
    """The products as the launchers run them: each fp32 operand that their dots read slowly
    replaced by its copy (``fp32_copies``, ``relaid``); None where none is copied."""
    dims = staging.fp32_copies(products)
    if dims is None:
        return None
    flat = staging.relaid([t for p in products for t in p], dims)
    return list(zip(flat[::2], flat[1::2], strict=True))


def _read_fast(products, tf32: bool) -> bool:
    """Whether every operand is laid out as the products' dots read it fastest."""
    return all(
        d is None or staging.contiguous_along(t, d)
        for p in products
        for t, d in zip(p, _fast_dims(tf32), strict=True)
    )


@pytest.mark.parametrize("layout", ["rr", "rc", "cr", "cc"])
def test_fp32_products_run_from_the_layouts_their_dots_read_fast(tf32, layout, monkeypatch):
    """TF32: a row-major and b column-major as they are, any other operand copied; IEEE: b
    row-major. fp16 keeps every layout."""
    m, n, k = 300, 260, 70
    a = torch.randn(m, k) if layout[0] == "r" else torch.randn(k, m).T
    b = torch.randn(k, n) if layout[1] == "r" else torch.randn(n, k).T
    assert _read_fast([(a, b)], tf32) == (layout in (("rc",) if tf32 else ("rr", "cr")))
    out = _layouts([(a, b)])
    if _read_fast([(a, b)], tf32):
        assert out is None
    else:
        ((x, y),) = out
        assert _read_fast(out, tf32) and torch.equal(x, a) and torch.equal(y, b)
        assert (x is a) == (not tf32 or layout[0] == "r")
        assert (y is b) == (layout[1] == ("c" if tf32 else "r"))

    def no_copy(*args):
        raise AssertionError("an fp16 operand was copied for its layout")

    monkeypatch.setattr(staging, "contiguous_copy", no_copy)
    a16, b16 = a.half().to(DEVICE), b.half().to(DEVICE)
    assert_matches("fp16", kernel.launch_mm(a16, b16), a16 @ b16, a16.double() @ b16.double())


def test_contiguous_along():
    t = torch.randn(6, 8)
    assert staging.contiguous_along(t, 1) and not staging.contiguous_along(t, 0)
    assert staging.contiguous_along(t.T, 0) and not staging.contiguous_along(t[:, ::2], 1)
    assert staging.contiguous_along(t[:, :1], 1)  # one element along it
    assert not staging.contiguous_along(t[:1, ::2], 1)  # one row, but strided along it
    assert staging.contiguous_along(t[:, :0], 0)  # nothing to copy


@pytest.mark.parametrize("m,k,n", [(45, 0, 37), (0, 70, 37), (45, 70, 0)])
def test_fp32_empty_products_copy_nothing(tf32, monkeypatch, m, k, n):
    """Forward and both grads of products with an empty dimension, every operand in the
    layout its dots read slowly (the bound lowered to 1)."""
    monkeypatch.setattr(staging, "LAYOUT_REUSE", 1)
    a = make((m, k), torch.float32, transposed=True)
    b = make((k, n), torch.float32, transposed=not tf32)
    check_matmul(a, b)


def test_fp32_operands_read_a_few_times_stay(tf32):
    """An operand that feeds fewer than ``LAYOUT_REUSE`` multiply-adds an element (b of a
    product of 255 rows; with TF32, a of one of 255 columns) is read as it is."""
    reuse = staging.LAYOUT_REUSE
    a, b = torch.randn(64, reuse - 1).T, torch.randn(reuse, 64).T  # both column-major
    out = _layouts([(a, b)])  # 255 rows, 256 columns
    assert out is None if not tf32 else (out[0][0] is not a and out[0][1] is b)
    assert _layouts([(a, b[:, : reuse - 1])]) is None


def test_fp32_backward_copies_each_tensor_once_per_layout(tf32):
    """The backward's pair, mat1 and mat2 row-major: grad_out @ mat2.T reads mat2.T column-
    major (copied for IEEE), mat1.T @ grad_out reads mat1.T column-major (copied for TF32)
    and grad_out row-major (copied for TF32, once)."""
    at, bt, g = torch.randn(300, 280).T, torch.randn(280, 270).T, torch.randn(300, 270)
    products = [(g, bt), (at, g), (at, g)]
    out = _layouts(products)
    assert _read_fast(out, tf32)
    assert all(
        torch.equal(x, x0) and torch.equal(y, y0)
        for (x, y), (x0, y0) in zip(out, products, strict=True)
    )
    assert out[0][0] is g
    assert (out[0][1] is bt) == tf32
    assert (out[1][0] is at) == (not tf32) and (out[1][1] is g) == (not tf32)
    assert out[1][0] is out[2][0] and out[1][1] is out[2][1]


@pytest.mark.parametrize("layout", ["rr", "rc", "cr", "cc"])
def test_fp32_matmul_from_relaid_operands_against_float64(tf32, monkeypatch, layout):
    """Forward and both grads, every product launched on the layouts its dots read fast (the
    bound lowered to fit the interpreter's sizes); grad_out copied once at most."""
    monkeypatch.setattr(staging, "LAYOUT_REUSE", 1)
    copies, real_copy = [], staging.contiguous_copy

    def contiguous_copy(t, dim, copy_rows):
        assert copy_rows is kernel.tiled_padded_copy  # the launchers copy by the tiled kernel
        copies.append(tuple(t.shape))
        return real_copy(t, dim, copy_rows)

    monkeypatch.setattr(staging, "contiguous_copy", contiguous_copy)
    kernel.reset()
    a = make((45, 70), torch.float32, transposed=layout[0] == "c")
    b = make((70, 37), torch.float32, transposed=layout[1] == "c")
    check_matmul(a, b)
    assert copies  # the backward's products cannot all read fast as they come
    assert sum(shape in ((45, 37), (37, 45)) for shape in copies) <= 1
    launched = [operands for operands in _compiled_operands() if len(operands) in (2, 4)]
    assert launched
    for operands in launched:
        assert _read_fast(list(zip(operands[::2], operands[1::2], strict=True)), tf32)


class _Rates:
    """A stand-in wave model: a product takes ``ms`` plus ``off_ms`` for each operand off
    128-byte lines."""

    def __init__(self, ms: float, off_ms: float) -> None:
        self.ms, self.off_ms = ms, off_ms

    def best_plain(self, product: Product):
        return self.ms + self.off_ms * sum(product.off_lines), None


def _ms_of_copying(size: int) -> float:
    return staging.COPY_MS + staging.LINED_COPY_MS_PER_BYTE * size


def test_cheapest_lines_weighs_the_copies_against_what_they_save():
    """Copies onto lines where they save more than they cost; of two operands off lines the
    cheaper to copy; nothing on a tie; a tensor that both products read counts once."""
    size = 10_000_000  # bytes
    copy = _ms_of_copying(size)
    product = Product(2600, 2600, 2600, "rr", True, SMS, (True, True))
    saves_more = _Rates(0.1, 2 * copy)
    assert staging.cheapest_lines(saves_more, [product], [(0, 1)], [size, size]) == {0, 1}
    assert staging.cheapest_lines(saves_more, [product], [(0, 1)], [size, 2 * size]) == {0, 1}
    saves_less = _Rates(0.1, 0.9 * copy)
    assert staging.cheapest_lines(saves_less, [product], [(0, 1)], [size, size]) == set()
    # Saving 1.5 copies' time an operand: the smaller one only (copying the larger, 3x the
    # bytes, costs more than it saves).
    one = _Rates(0.1, 1.5 * copy)
    assert staging.cheapest_lines(one, [product], [(0, 1)], [size, 3 * size]) == {0}
    tie = _Rates(0.1, copy)
    assert staging.cheapest_lines(tie, [product], [(0, 1)], [size, 10 * size]) == set()
    on_lines = product._replace(off_lines=(False, False))
    assert staging.cheapest_lines(saves_more, [on_lines], [(0, 1)], [size, size]) == set()
    # A backward's pair: grad_out (0) is read by both products, b.T (1) and a.T (2) by one
    # each. Saving 0.6 copies' time per product it is read by: grad_out alone pays.
    pair = [product, product]
    shared = _Rates(0.1, 0.6 * copy)
    assert staging.cheapest_lines(shared, pair, [(0, 1), (2, 0)], [size] * 3) == {0}


def test_the_shipped_model_copies_grad_out_once_for_a_backward_off_lines():
    """The shipped model's choice for 1800x6200x2200 (bf16, every size off lines; H100, call
    425, NOTES 176: forward 1.32x as fast with a copied, backward 1.16x with grad_out and b
    copied): the forward copies a, the smaller operand; the backward's pair copies grad_out,
    which both its products read, and b."""
    m, n, k = 1800, 6200, 2200
    model = shipped_model("sm90")
    forward = Product(m, n, k, "rr", True, SMS, (True, True))
    assert staging.cheapest_lines(model, [forward], [(0, 1)], [m * k * 2, k * n * 2]) == {0}
    grad_a = Product(m, k, n, "rc", True, SMS, (True, True))  # grad_out @ b.T
    grad_b = Product(k, n, m, "cr", True, SMS, (True, True))  # a.T @ grad_out
    sizes = [m * n * 2, k * n * 2, m * k * 2]  # grad_out, b, a
    chosen = staging.cheapest_lines(model, [grad_a, grad_b], [(0, 1), (2, 0)], sizes)
    assert chosen == {0, 1}


@pytest.mark.parametrize(
    ("m", "n", "k", "forward", "backward"),
    [
        (1800, 6200, 2200, (1, None), (1, 0, None, 1)),  # a; grad_out (twice) and b.T
        (4400, 4400, 4400, None, None),
        (3600, 3600, 1200, None, None),
        (2000, 2000, 6000, None, None),
    ],
    ids=str,
)
def test_only_rows_off_32_byte_sectors_are_copied_onto_lines(
    monkeypatch, m, n, k, forward, backward
):
    """The shipped model's choice (bf16; forward ``a @ b``, backward ``grad_out @ b.T`` and
    ``a.T @ grad_out``) weighs only operands whose rows start off 32-byte sectors. Rows of
    8800, 7200 or 4000 bytes lie on sectors though off 128-byte lines: copied onto lines, such
    products ran 0.87-0.97x as fast, their copies costing more than they saved (H100, call
    426, NOTES 178), so none is copied; 1800x6200x2200, every size off sectors, copies as
    ``test_the_shipped_model_copies_grad_out_once_for_a_backward_off_lines`` says."""
    monkeypatch.setattr(staging, "stages_onto_lines", lambda products: True)
    monkeypatch.setattr(staging, "model_without_entry", lambda a, b: shipped_model("sm90"))
    monkeypatch.setattr(configs, "sm_count", lambda device: SMS)  # the CPU has none to count
    a = torch.empty(m, k, dtype=torch.bfloat16)
    b = torch.empty(k, n, dtype=torch.bfloat16)
    grad_out = torch.empty(m, n, dtype=torch.bfloat16)
    assert loads.rows_off_lines(a, b) == (True, True)
    assert loads.rows_off_sectors(a, b) == ((k * 2) % 32 != 0, (n * 2) % 32 != 0)
    assert staging.lined_copies([(a, b)]) == forward
    assert staging.lined_copies([(grad_out, b.T), (a.T, grad_out)]) == backward


@pytest.mark.parametrize(
    ("m", "k", "n", "b_layout", "priced"),
    [
        (16384, 4096, 1, "r", False),  # a value head's forward (few columns: narrow tiles)
        (6144, 5120, 8, "r", False),  # a router's forward, 8 experts
        (16384, 8, 4096, "c", False),  # that router's input gradient, grad_out @ w.T
        (2200, 2800, 4200, "r", True),  # the model's own tiles
    ],
    ids=str,
)
def test_bandwidth_bound_products_are_not_weighed_for_copies_onto_lines(
    monkeypatch, m, k, n, b_layout, priced
):
    """A product bound by memory bandwidth reads each operand once, so a copy onto lines
    costs more bytes than rows off 32-byte sectors waste: none of its operands is weighed
    (``staging.priced_by_model``). On d51aa69 the GPU test
    ``test_a_few_columns_product_runs_transposed_on_narrow_tiles`` caught a router's b, rows
    of 2 or 16 bytes, copied before its narrow tiles (H200, call 439); its input gradient,
    K of 8, copied grad_out and w. A compute-bound product with b off sectors is weighed."""
    monkeypatch.setattr(staging, "model_without_entry", lambda a, b: shipped_model("sm90"))
    a = torch.empty(m, k, dtype=torch.bfloat16)
    b = torch.empty(k, n, dtype=torch.bfloat16)
    if b_layout == "c":  # w.T of a weight w of n rows of k
        b = torch.empty(n, k, dtype=torch.bfloat16).T
    assert loads.rows_off_sectors(a, b)[1] and loads.tma_aligned(a, b)
    assert narrow_tiles.few_columns(a, b) is (n <= narrow_tiles.FEW_COLUMNS)
    assert bandwidth_bound(m, n, k) is not priced
    assert staging.priced_by_model(a, b) is priced


def test_nothing_is_copied_onto_lines_without_a_gpu_model():
    a = torch.randn(48, 72, dtype=torch.float16)  # rows of 144 bytes: on 16, off 128
    b = torch.randn(72, 40, dtype=torch.float16)
    assert loads.rows_off_lines(a, b) == (True, True) and loads.tma_aligned(a, b)
    assert staging.lined_copies([(a, b)]) is None  # on the CPU


@pytest.fixture
def onto_lines(monkeypatch):
    """Copy every fp16/bf16 operand off 128-byte lines onto them (the CPU has no model to
    decide), counting the copies (each copied view's shape) and the decisions."""
    copies, decisions, real_copy = [], [], staging.contiguous_copy

    def contiguous_copy(t, dim, copy_rows):
        assert copy_rows is kernel.tiled_padded_copy  # the launchers copy by the tiled kernel
        copies.append(tuple(t.shape))
        return real_copy(t, dim, copy_rows)

    def lined_copies(products):
        decisions.append(len(products))
        dims = [
            t.stride().index(1) if any(loads.rows_off_lines(t, t)) else None
            for p in products
            for t in p
        ]
        return tuple(dims) if any(d is not None for d in dims) else None

    monkeypatch.setattr(staging, "contiguous_copy", contiguous_copy)
    monkeypatch.setattr(kernel, "lined_copies", lined_copies)
    kernel.reset()
    return copies, decisions


@pytest.mark.parametrize("dtype_mode", [torch.float16], indirect=True, ids=str)
@pytest.mark.parametrize("layout", ["rr", "rc", "cr"])
def test_matmul_from_operands_copied_onto_lines_against_float64(onto_lines, dtype_mode, layout):
    """Forward and both grads with every operand off lines (rows or columns of 56, 72 and 40
    elements: on 16 bytes, off 128) copied onto them (fp16: bf16 runs in Helion's ref mode
    here, which compiles no specialization to inspect); grad_out copied once for both
    backward products; every launch reads operands on lines."""
    copies, _ = onto_lines
    a = make((56, 72), dtype_mode, transposed=layout[0] == "c")
    b = make((72, 40), dtype_mode, transposed=layout[1] == "c")
    check_matmul(a, b)
    assert copies
    assert sum(shape in ((56, 40), (40, 56)) for shape in copies) == 1, copies  # grad_out, once
    launched = [operands for operands in _compiled_operands() if len(operands) in (2, 4)]
    assert launched
    for operands in launched:
        assert not any(loads.rows_off_lines(t, t)[0] for t in operands)


@pytest.mark.parametrize("bias_shape", [(56, 40), (40,), ()], ids=str)
def test_addmm_from_operands_copied_onto_lines_against_float64(onto_lines, bias_shape):
    copies, _ = onto_lines
    bias = make(bias_shape, torch.float16)
    a, b = make((56, 72), torch.float16), make((72, 40), torch.float16)
    check_addmm(bias, a, b, alpha=1.5, beta=-0.5)
    assert copies


def test_a_key_keeps_its_copies_onto_lines(onto_lines):
    """The launcher's key keeps which operands it copies (``_fast_relaid``): a repeated call
    copies the same and decides nothing again."""
    copies, decisions = onto_lines
    a = torch.randn(56, 72, dtype=torch.float16, device=DEVICE)
    b = torch.randn(72, 40, dtype=torch.float16, device=DEVICE)
    for calls in (1, 2, 3):
        out = kernel.launch_mm(a, b, 2.5)
        assert_matches("lined", out, 2.5 * (a @ b), 2.5 * (a.double() @ b.double()))
        assert copies == [(56, 72), (72, 40)] * calls
    assert decisions.count(1) == 1 + 1  # this key's, and the copies' own (nothing to copy)


def test_operands_on_lines_of_the_same_sizes_decide_anew(onto_lines):
    """A key's copies are its own: the same sizes with rows padded onto 128-byte lines
    (other strides) decide again, copy nothing, and run from the operands as given."""
    copies, decisions = onto_lines
    a = torch.randn(56, 72, dtype=torch.float16, device=DEVICE)
    b = torch.randn(72, 40, dtype=torch.float16, device=DEVICE)
    kernel.launch_mm(a, b, 1.0)
    assert copies == [(56, 72), (72, 40)] and decisions.count(1) == 2
    # (Strides of 256 and 128 elements: not the copies' 128 and 64, whose key has decided.)
    a_lined = torch.empty(56, 256, dtype=torch.float16, device=DEVICE)[:, :72].copy_(a)
    b_lined = torch.empty(72, 128, dtype=torch.float16, device=DEVICE)[:, :40].copy_(b)
    assert loads.rows_off_lines(a_lined, b_lined) == (False, False)
    out = kernel.launch_mm(a_lined, b_lined, 1.0)
    assert_matches("on lines", out, a @ b, a.double() @ b.double())
    assert copies == [(56, 72), (72, 40)]  # nothing more copied
    assert decisions.count(1) == 3  # this key's own decision
