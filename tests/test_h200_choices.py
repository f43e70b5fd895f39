"""What the runtime chooses on an H200, walked on the CPU: the choices that only a GPU's operands
reach (``configs.choose_config`` past the interpreter's config, ``configs.transposed_pays``),
made on fake CUDA tensors (torch's ``FakeTensorMode``: sizes, strides and a device, no memory)
with an H200's 132 SMs, the shipped sm90 table and models. The kernel is bound on CPU tensors
of the same sizes and strides. On a GPU the CUDA tests check these on real tensors."""

from __future__ import annotations

import pytest
import torch
from conftest import HAS_CUDA
from test_configs import backward_pair_operands
from torch._subclasses.fake_tensor import FakeTensorMode

from helion_ops import configs, loads, long_k, narrow_tiles, staging
from helion_ops.kernel import (
    long_k_product,
    matmul_kernel,
    matmul_kernel_tf32,
    pair_kernel,
    reset,
    scaled,
    scaled_plus_bias,
    split_k_kernel,
    split_k_kernel_tf32,
    transposed_kernel,
)
from helion_ops.model import output_tiles

pytestmark = [
    pytest.mark.skipif(HAS_CUDA, reason="the CUDA tests check these on real tensors"),
    # Alignment is read from data_ptr(), which fake tensors answer (0: aligned) with a warning.
    pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor"),
]


@pytest.fixture(autouse=True)
def h200(monkeypatch):
    monkeypatch.setattr(configs, "gpu_arch", lambda device: "sm90")
    monkeypatch.setattr(configs, "sm_count", lambda device: 132)


def operand(rows: int, cols: int, column_major: bool) -> torch.Tensor:
    if column_major:
        return torch.empty(cols, rows, dtype=torch.bfloat16).T
    return torch.empty(rows, cols, dtype=torch.bfloat16)


def on_gpu(t: torch.Tensor) -> torch.Tensor:
    """A fake CUDA tensor of ``t``'s sizes, strides and dtype (inside a ``FakeTensorMode``)."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda")


def choice(kernel, a: torch.Tensor, b: torch.Tensor) -> tuple[bool, bool, object]:
    """Whether ``a @ b`` would be staged and run transposed, and ``kernel``'s config for it."""
    bound = kernel.bind((a, b, scaled(1.0)))
    with FakeTensorMode(allow_non_fake_inputs=True):
        x, y = on_gpu(a), on_gpu(b)
        return (
            staging.worth_staging(x, y),
            configs.transposed_pays(x, y),
            configs.choose_config(bound, x, y),
        )


@pytest.mark.parametrize(
    "m, k, n, b_column_major",
    [(4096, 1024, 1, False), (4096, 1024, 1, True), (4096, 1024, 8, False)],
    ids=str,
)
def test_a_few_columns_run_transposed_on_the_tiles_of_a_few_rows(m, k, n, b_column_major):
    a, b = operand(m, k, False), operand(k, n, b_column_major)
    assert narrow_tiles.few_columns(a, b)
    staged, transposed, config = choice(transposed_kernel, a, b)
    assert not staged and transposed
    assert config == narrow_tiles.few_rows_config(n, m, tma=True)


@pytest.mark.parametrize("k", [8192, 5120, 4608], ids=str)
def test_a_few_columns_over_a_long_k_split_on_tiles_of_16_columns(k):
    """4096x8x8192 (a LoRA A of rank 8): 32 row tiles, K in 8 pieces (call 313: 21.6 us
    against 37.5 transposed, aten 24.6); 4096x8x5120 and 4096x8x4608 too (on an H100: 13.6 us
    against 20.7, call 315; 11.7 against 15.6, call 317)."""
    a, b = operand(4096, k, False), operand(k, 8, False)
    assert long_k_product(4096, 8, k, a.dtype)
    bound = split_k_kernel.bind((a, b))
    with FakeTensorMode(allow_non_fake_inputs=True):
        config = configs.choose_config(bound, on_gpu(a), on_gpu(b)).config
    assert config["block_sizes"][:2] == [128, 16] and config["split_k"] == 8
    assert config["num_stages"] == 4  # as measured: two programs an SM, not deepened


def test_narrow_columns_that_load_by_tensor_descriptors_alone_take_64_columns():
    """16384x60x2048 (a router of 60 experts), b staged onto rows of 64: 128x64 tiles (call
    313: 20.9 us against 55.6 on the model's 128x128, aten 33.5)."""
    a = operand(16384, 2048, False)
    b = torch.empty_strided((2048, 60), (64, 1), dtype=torch.bfloat16)
    staged, transposed, config = choice(matmul_kernel, a, b)
    assert not staged and not transposed
    assert config.config["block_sizes"][:2] == [128, 64]
    assert config.config["indexing"] == "tensor_descriptor"
    assert config.config["num_stages"] == 4  # as measured


def test_a_few_rows_run_their_narrow_tiles_plain():
    a, b = operand(16, 4096, False), operand(4096, 6144, False)
    staged, transposed, config = choice(matmul_kernel, a, b)
    assert not staged and not transposed
    assert config == narrow_tiles.few_rows_config(16, 6144, tma=True)


def test_unstaged_rows_of_2_bytes_take_the_models_pointer_tile():
    """736x1303x333 (rows of 666 and 2606 bytes), left unstaged: the model's choice among
    every candidate, a pointer tile (call 311: 9.9 us, against 17.8 on the tensor-descriptor
    choice; NOTES 131)."""
    a, b = operand(736, 333, False), operand(333, 1303, False)
    staged, transposed, config = choice(matmul_kernel, a, b)
    assert not staged and not transposed
    assert config.config["indexing"] == "pointer"


def test_a_product_that_splits_over_k_as_it_is_is_not_staged():
    """The weight gradient of 32768x1024x479 (x.T @ grad_out: 479x1024x32768, x.T on columns
    of 958 bytes) splits over K unstaged; the model's plain kernels predicted it faster
    staged, and its backward ran 1.2x slower so (NOTES 161 (e)). 256x1024x30001, which runs
    the plain kernel (its K's masks do not load in vectors), is still staged."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        x_t, grad_out = on_gpu(operand(479, 32768, True)), on_gpu(operand(32768, 1024, False))
        assert staging.splits_over_k_as_it_is(x_t, grad_out)
        assert not staging.worth_staging(x_t, grad_out)
        a, b = on_gpu(operand(256, 30001, False)), on_gpu(operand(30001, 1024, False))
        assert not staging.splits_over_k_as_it_is(a, b)
        assert staging.worth_staging(a, b)
    bound = split_k_kernel.bind((operand(479, 32768, True), operand(32768, 1024, False)))
    with FakeTensorMode(allow_non_fake_inputs=True):
        config = configs.choose_config(bound, x_t, grad_out).config
    assert config["split_k"] > 1


def test_a_thin_product_with_a_off_16_bytes_is_never_staged():
    """64x4096x4097 (a's rows 8194 bytes, off 16): thin, so the few-rows rules' narrow tiles,
    never staged, though the model alone predicts that a copy of a pays there."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        x, y = on_gpu(operand(64, 4097, False)), on_gpu(operand(4097, 4096, False))
        assert narrow_tiles.few_rows(x, y)
        assert not staging.worth_staging(x, y)


def test_a_few_rows_laid_out_by_column_are_copied_for_the_narrow_tiles():
    """The weight gradient of a rank-4 LoRA B, 8192x5120x4 (a.T @ grad_out: 4x5120x8192,
    a.T's columns of 8 bytes): the few rows are copied (``staging.few_rows_worth_copying``)
    and the copy runs the narrow tiles on tensor descriptors, where unstaged both operands,
    the weight too, would load by pointer in one stage."""
    a, b = operand(4, 8192, True), operand(8192, 5120, False)
    staged, transposed, config = choice(matmul_kernel, a, b)
    assert staged and not transposed
    assert config == narrow_tiles.few_rows_config(4, 5120, tma=False)
    copy = staging.aligned_copy(a)
    assert choice(matmul_kernel, copy, b)[2] == narrow_tiles.few_rows_config(4, 5120, tma=True)
    # Beside a weight off 16 bytes, or laid out by rows (K off 16 bytes): not copied.
    assert not choice(matmul_kernel, a[:, :8191], operand(8191, 5121, False))[0]
    assert not choice(matmul_kernel, operand(4, 8191, False), operand(8191, 5120, False))[0]


def test_a_long_k_of_exactly_8_times_the_output_splits():
    """``long_k.few_tiles_long_k``'s bound holds K of 8x the larger output side (fp32, so
    that neither the batch nor the few-columns rules answer instead)."""
    assert long_k.few_tiles_long_k(256, 256, 2048)
    assert long_k_product(256, 256, 2048, torch.float32)
    assert not long_k_product(256, 256, 2047, torch.float32)


@pytest.mark.parametrize(
    "m, n, k, host",
    [(3000, 3000, 3000, True), (5000, 3000, 1000, True), (4096, 4096, 4096, False)],
    ids=str,
)
def test_descriptors_of_rows_off_lines_are_built_on_the_host(m, n, k, host):
    """Rows of 3000 or 1000 elements start off 128-byte lines: a tensor-descriptor config
    builds its descriptors on the host, with the L2 promotion Triton's launcher gives them
    (``loads.host_descriptors_pay``, NOTES 138); rows on lines keep the device's."""
    a, b = operand(m, k, False), operand(k, n, False)
    bound = matmul_kernel.bind((a, b, scaled(1.0)))
    with FakeTensorMode(allow_non_fake_inputs=True):
        x, y = on_gpu(a), on_gpu(b)
        chosen = configs.choose_config(bound, x, y).config
        selected = configs.select_config(bound, (x, y, scaled(1.0))).config.config
    assert "tensor_descriptor" in chosen["indexing"]
    assert selected.get("host_tensor_descriptors", False) is host
    assert {**selected, "host_tensor_descriptors": None} == {
        **chosen,
        "host_tensor_descriptors": None,
    }


def assert_pointer_tiles_moved(chosen: dict, selected: dict, moved: bool) -> None:
    """``select_config`` launches ``choose_config``'s pointer tiles by descriptors built on
    the host where ``moved``, else as chosen; the tiles the same either way."""
    assert chosen["indexing"] == "pointer"
    assert selected["indexing"] == ("tensor_descriptor" if moved else "pointer")
    assert selected.get("host_tensor_descriptors", False) is moved
    assert selected["block_sizes"] == chosen["block_sizes"]


@pytest.mark.parametrize(
    "m, n, k, tiles",
    [(1000, 1000, 1000, True), (1024, 1024, 1024, False), (1000, 1000, 1004, False)],
    ids=str,
)
def test_pointer_tiles_of_rows_off_lines_load_by_host_descriptors(m, n, k, tiles):
    """1000^3's 64x128 pointer tiles load by descriptors built on the host (rows of 2000
    bytes: off lines, on 16 bytes; ``loads.pointer_tiles_on_host_descriptors``, NOTES 138);
    1024^3's rows lie on lines, and 1000x1000x1004's a rows of 2008 bytes are off 16 bytes:
    those keep their pointer tiles."""
    a, b = operand(m, k, False), operand(k, n, False)
    with FakeTensorMode(allow_non_fake_inputs=True):
        x, y = on_gpu(a), on_gpu(b)
        kernel = transposed_kernel if configs.transposed_pays(x, y) else matmul_kernel
        bound = kernel.bind((a, b, scaled(1.0)))
        chosen = configs.choose_config(bound, x, y).config
        selected = configs.select_config(bound, (x, y, scaled(1.0))).config.config
    assert_pointer_tiles_moved(chosen, selected, tiles)


@pytest.mark.parametrize(
    "m, n, k, tiles",
    [(1000, 1000, 1000, True), (1000, 2000, 1000, True), (1024, 1024, 1024, False)],
    ids=str,
)
def test_a_backward_pairs_pointer_tiles_of_rows_off_lines_load_by_host_descriptors(m, n, k, tiles):
    """The backward's pair at 1000^3 (``pair_rule``'s 128x128 pointer tiles) and at
    1000x2000x1000 (the wave model's) loads by descriptors built on the host, its rows of 2000
    bytes off lines (``loads.pointer_tiles_on_host_descriptors``, NOTES 141); 1024^3's rows
    lie on lines and keep their pointer tiles."""
    mat1, mat2, grad_out = operand(m, k, False), operand(k, n, False), operand(m, n, False)
    operands = backward_pair_operands(mat1, mat2, grad_out, (False, False))
    bound = pair_kernel.bind((*operands, scaled(1.0), scaled(1.0)))
    with FakeTensorMode(allow_non_fake_inputs=True):
        fakes = [on_gpu(t) for t in operands]
        chosen = configs.choose_config(bound, *fakes).config
        selected = configs.select_config(bound, (*fakes, scaled(1.0), scaled(1.0))).config.config
    assert_pointer_tiles_moved(chosen, selected, tiles)


@pytest.mark.parametrize(
    "m, n, k, bias, moved",
    [
        (1024, 4096, 3072, False, True),  # the model's 128x256x64 pointer tiles
        (768, 1536, 1024, False, True),  # 128x128x64
        (1280, 512, 512, False, True),  # 64x128x64
        (1024, 4096, 3072, True, False),  # a bias epilogue keeps its pointer tiles
        (1024, 4096, 1024, False, False),  # the table's entry, measured on pointer tiles
    ],
    ids=str,
)
def test_the_models_pointer_tiles_on_lines_load_by_host_descriptors(
    monkeypatch, m, n, k, bias, moved
):
    """Rows on 128-byte lines: the wave model's pointer choice for a plain product loads by
    descriptors built on the host, its tiles and depth kept
    (``loads.model_tiles_on_host_descriptors``, NOTES 142); a bias epilogue's choice and
    a table entry keep their pointer tiles."""
    a, b = operand(m, k, False), operand(k, n, False)
    epilogue = scaled_plus_bias(1.0, 1.0, operand(m, n, False)) if bias else scaled(1.0)
    bound = matmul_kernel.bind((a, b, epilogue))
    with FakeTensorMode(allow_non_fake_inputs=True):
        x, y = on_gpu(a), on_gpu(b)
        assert not configs.transposed_pays(x, y)
        selected = configs.select_config(bound, (x, y, epilogue)).config.config
        monkeypatch.setattr(configs, "model_tiles_on_host_descriptors", lambda *args: False)
        pointer = configs.select_config(bound, (x, y, epilogue)).config.config
    assert pointer["indexing"] == "pointer"
    moved_fields = {"indexing": "tensor_descriptor", "host_tensor_descriptors": True}
    assert selected == ({**pointer, **moved_fields} if moved else pointer)


@pytest.mark.parametrize("b_column_major", [False, True], ids=["b rows", "b columns"])
@pytest.mark.parametrize("m,n,k", [(4096, 4096, 4096), (1000, 777, 333)], ids=str)
def test_fp32_products_with_ieee_dots_take_64x64_tiles_unless_b_is_column_major(
    m, n, k, b_column_major
):
    """fp32 without an entry: with IEEE dots 64x64x32 tiles in 3 stages (call 347: 1.16-2.16x
    Helion's default), where b is column-major and with TF32 Helion's default (no tile
    measured 5% faster)."""
    a, b = torch.empty(m, k), operand(k, n, b_column_major).float()
    with FakeTensorMode(allow_non_fake_inputs=True):
        x, y = on_gpu(a), on_gpu(b)
        chosen = {}
        for kernel in (matmul_kernel, matmul_kernel_tf32):
            bound = kernel.bind((a, b, scaled(1.0)))
            chosen[kernel] = configs.choose_config(bound, x, y), bound.config_spec.default_config()
    ieee, default = chosen[matmul_kernel]
    assert ieee == (default if b_column_major else configs.FP32_IEEE_TILE)
    assert chosen[matmul_kernel_tf32][0] == chosen[matmul_kernel_tf32][1]


@pytest.mark.parametrize("kernel", [split_k_kernel, split_k_kernel_tf32], ids=["ieee", "tf32"])
def test_an_fp32_weight_gradient_splits_as_bf16_does_in_k_blocks_of_128_bytes(kernel):
    """512x512x65536 (a weight gradient over 64k rows) in fp32 splits over K. With IEEE dots:
    split-K's rule, the same tiles and pieces as bf16's, K blocks of 32 elements instead of
    64 (call 347: 1.09x Helion's default); with TF32 Helion's default (0.93x)."""
    m, n, k = 512, 512, 65536
    assert long_k_product(m, n, k, torch.float32)
    a, b = torch.empty(m, k), torch.empty(k, n)
    bound = kernel.bind((a, b))
    with FakeTensorMode(allow_non_fake_inputs=True):
        config = configs.choose_config(bound, on_gpu(a), on_gpu(b))
    if kernel is split_k_kernel_tf32:
        assert config == bound.config_spec.default_config()
        return
    bf16 = long_k.split_rule(m, n, k, 132).config
    assert config.config == {**bf16, "block_sizes": [*bf16["block_sizes"][:2], 32]}
    assert bf16["block_sizes"][2] == 64


def staged_columns(rows: int, cols: int) -> torch.Tensor:
    """A (rows, cols) operand on rows padded to 64 elements, as ``staging`` copies one."""
    return torch.empty_strided((rows, cols), (-(-cols // 64) * 64, 1), dtype=torch.bfloat16)


def without_unmasked_tiles(monkeypatch) -> None:
    """``loads.pointer_tiles_unmasked`` off wherever the package holds it."""
    for module in (configs, loads):
        monkeypatch.setattr(module, "pointer_tiles_unmasked", lambda *operands: False)


@pytest.mark.parametrize(
    "a, b, least",
    [
        # 3000x100x2048's weight gradient x.T @ grad_out (grad_out staged): 16 programs of
        # 128x128 on tensor-descriptor candidates (call 452: 67.2 us), 128 of 64x32 (28.3).
        (operand(2048, 3000, True), staged_columns(3000, 100), 128),
        # 3000x250x5000's forward, b staged: 48 programs (40.8 us), 94 of 64x128 (27.1).
        (operand(3000, 5000, False), staged_columns(5000, 250), 94),
    ],
    ids=["dW 2048x100x3000", "3000x250x5000"],
)
@pytest.mark.parametrize("bias", [False, True], ids=["plain", "bias"])
def test_masks_that_do_not_vectorize_take_the_models_tiles_on_host_descriptors(
    monkeypatch, a, b, least, bias
):
    """Aligned operands whose pointer loads' masks would not vectorize (N of 100 or 250),
    with or without a bias epilogue: the wave model chooses among every candidate, and its
    pointer tiles load by descriptors built on the host (``loads.pointer_tiles_unmasked``),
    on more programs than the tensor-descriptor candidates' 128x128 give."""
    assert loads.tensor_descriptors_only(a, b)
    m, n = a.shape[0], b.shape[1]
    epilogue = scaled_plus_bias(1.0, 1.0, operand(m, n, False)) if bias else scaled(1.0)
    bound = matmul_kernel.bind((a, b, epilogue))
    with FakeTensorMode(allow_non_fake_inputs=True):
        x, y = on_gpu(a), on_gpu(b)
        assert not staging.worth_staging(x, y) and not configs.transposed_pays(x, y)
        moved = configs.select_config(bound, (x, y, epilogue)).config
        without_unmasked_tiles(monkeypatch)
        kept = configs.select_config(bound, (x, y, epilogue)).config
    assert moved["indexing"] == "tensor_descriptor" and moved["host_tensor_descriptors"]
    assert output_tiles(moved, m, n) == least
    assert kept["block_sizes"][:2] == [128, 128] and output_tiles(kept, m, n) < least


@pytest.mark.parametrize("bias", [False, True], ids=["plain", "bias"])
def test_a_column_keeps_the_tensor_descriptor_candidates(monkeypatch, bias):
    """Products under ``loads.UNMASKED_MIN_SIDE`` columns (65536x1x256's forward ran 0.90x
    as fast moved) choose as before."""
    a, b = operand(65536, 256, False), operand(256, 1, False)
    m, n = a.shape[0], b.shape[1]
    epilogue = scaled_plus_bias(1.0, 1.0, operand(m, n, False)) if bias else scaled(1.0)
    bound = matmul_kernel.bind((a, b, epilogue))
    with FakeTensorMode(allow_non_fake_inputs=True):
        x, y = on_gpu(a), on_gpu(b)
        chosen = configs.select_config(bound, (x, y, epilogue)).config.config
        without_unmasked_tiles(monkeypatch)
        assert chosen == configs.select_config(bound, (x, y, epilogue)).config.config


def test_a_backward_pair_whose_masks_do_not_vectorize_loads_by_host_descriptors(monkeypatch):
    """The wave model's pair for 4096x100x3000's backward outside CUDA graphs (grad_out and
    the weight staged onto rows of 128) chooses among every candidate, its pointer tiles
    loading by descriptors built on the host; off, among tensor-descriptor candidates. The
    decision is cached per operands' key until ``kernel.reset`` (as ``benchmarks.rule_ab``
    resets between a rule on and off)."""
    mat1, mat2, grad_out = (
        operand(4096, 3000, False),
        staged_columns(3000, 100),
        staged_columns(4096, 100),
    )
    operands = backward_pair_operands(mat1, mat2, grad_out, (False, False))
    with FakeTensorMode(allow_non_fake_inputs=True):
        fakes = [on_gpu(t) for t in operands]
        moved = configs.as_launched(configs.model_pair(*fakes, eager=True), *fakes).config
        reset()
        without_unmasked_tiles(monkeypatch)
        kept = configs.model_pair(*fakes, eager=True).config
        reset()
    assert moved["indexing"] == "tensor_descriptor" and moved["host_tensor_descriptors"]
    assert moved["block_sizes"] != kept["block_sizes"]
    assert kept["indexing"] == "tensor_descriptor"


def test_a_staged_product_is_priced_among_the_tiles_it_will_run(monkeypatch):
    """511x12345x511's input gradient (grad_out, on lines, @ w.T on columns of 2 bytes):
    staged, its masks (N = 511, K = 12345) would not vectorize, but its pointer tiles load
    unmasked by host-built descriptors (``loads.pointer_tiles_unmasked``), so the model
    prices it among every tile, as the launch chooses, and stages it. Priced among
    tensor-descriptor tiles alone (16 programs of 128x128) it stayed unstaged, on pointer
    tiles that load w.T element by element."""
    grad_out, w_t = staged_columns(511, 12345), operand(12345, 511, True)
    with FakeTensorMode(allow_non_fake_inputs=True):
        x, y = on_gpu(grad_out), on_gpu(w_t)
        assert not loads.tma_aligned(x, y) and not staging.splits_over_k_as_it_is(x, y)
        assert staging.staged_tiles_unmasked(x, y)
        assert staging.worth_staging(x, y)
        staging.forget_decisions()
        monkeypatch.setattr(staging, "staged_tiles_unmasked", lambda a, b: False)
        assert not staging.worth_staging(x, y)
        staging.forget_decisions()


@pytest.mark.parametrize(
    ("m", "n", "k"),
    [
        (1024, 250, 3072),  # b's rows on 4 bytes: they load in vectors of 2 unstaged
        (2048, 100, 4096),  # on 8 bytes: vectors of 4
        (6000, 61, 3072),  # on 2 bytes, but its copies run the narrow-columns tile
    ],
)
def test_a_staged_product_is_priced_among_every_tile_only_where_it_runs_them(m, n, k):
    """Rows on 4 or 8 bytes ran slower staged where priced among every tile (H100, call 458:
    1024x250x3072's forward 13.2 -> 15.5 us); 6000x61's copies run
    ``NARROW_COLUMNS_TILE``, a tensor-descriptor tile, whatever every tile would price.
    2049x127x2048, rows on 2 bytes, is priced among every tile (28.9 -> 13.1 us)."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        x, y = on_gpu(operand(m, k, False)), on_gpu(operand(k, n, False))
        assert not loads.tma_aligned(x, y)
        assert not staging.staged_tiles_unmasked(x, y)
        odd = on_gpu(operand(2048, 127, False))
        assert staging.staged_tiles_unmasked(on_gpu(operand(2049, 2048, False)), odd)
