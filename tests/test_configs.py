"""Config selection: no search unless asked, the rules, the model's choice, the generated code."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import subprocess
import sys
import warnings

import helion
import pytest
import torch
from conftest import DEVICE, HAS_CUDA
from reference import assert_matches

from helion_ops import (
    candidates,
    configs,
    loads,
    long_k,
    model,
    narrow_tiles,
    ops,
    pipelines,
    plans,
    shapes,
    staging,
    tune,
)
from helion_ops.kernel import (
    _kernel_for,
    long_k_product,
    matmul_kernel,
    matmul_kernel_tf32,
    modelled,
    pair_kernel,
    scaled,
    scaled_plus_bias,
    side_by_side,
    split_k_kernel,
    split_k_pieces_kernel,
    transposed_kernel,
    wants_pair,
    wants_split_k,
)


def bound_for(a: torch.Tensor, b: torch.Tensor, kernel=matmul_kernel):
    return kernel.bind((a, b, lambda acc, tile: 2.0 * acc))


def operand_loads_through_descriptors(code: str) -> list[bool]:
    """For each load in generated Triton code, whether it reads through a tensor descriptor."""
    return ["desc" in line for line in code.splitlines() if "load(" in line and "=" in line]


def test_tensor_descriptor_candidates_load_every_operand_through_descriptors():
    """Helion falls back to a pointer for a load it cannot express by descriptor (a mask it
    keeps, as torch.addmm's at a K piece's end made of the last-wave split's tail: NOTES 81),
    silently. The model's tensor-descriptor candidates on every layout, the transposed kernel,
    and their pair configs on the backward's two layouts, at sizes that end mid-tile: every
    operand load through a descriptor. (Helion's bound kernels are reset for each: code
    generated once per bound kernel can depend on what was generated before.)"""
    m, n, k = 1000, 776, 336
    a, b, g = (
        torch.randn(s, dtype=torch.bfloat16, device=DEVICE) for s in ((m, k), (k, n), (m, n))
    )
    tensor_descriptors = [
        c for c in model.MODEL_CANDIDATES if c.config.get("indexing") == "tensor_descriptor"
    ]
    assert tensor_descriptors
    for candidate in tensor_descriptors:
        cases = [
            (matmul_kernel, (a, b, scaled(1.0)), candidate),
            (matmul_kernel, (g, b.T, scaled(1.0)), candidate),
            (matmul_kernel, (a.T, g, scaled(1.0)), candidate),
            (transposed_kernel, (a, b, scaled(1.0)), candidate),
            (pair_kernel, (g, b.T, a.T, g, scaled(1.0), scaled(1.0)), model.pair_of(candidate)),
            (pair_kernel, (a.T, g, g, b.T, scaled(1.0), scaled(1.0)), model.pair_of(candidate)),
        ]
        for kernel, args, config in cases:
            kernel.reset()
            loads = operand_loads_through_descriptors(kernel.bind(args).to_triton_code(config))
            assert loads and all(loads), (kernel.name, candidate, loads)


def test_pair_configs_give_each_product_its_blocks():
    assert configs.interpreter_config((8, 100, 40), (1000, 16, 17)).config["block_sizes"] == [
        *(16, 64, 64),
        *(64, 16, 32),
    ]
    small = configs.pair_rule((512, 512, 512), (512, 512, 512), torch.bfloat16)
    assert small.config["block_sizes"] == [64, 64, 64] * 2  # 32 tiles of 128x128
    large = configs.pair_rule((1024, 1024, 1024), (1024, 1024, 1024), torch.float32)
    assert large.config["block_sizes"] == [128, 128, 32] * 2  # 128 tiles; 4-byte elements


@pytest.mark.parametrize("size,block", [(1, 16), (16, 16), (17, 32), (64, 64), (1000, 64)])
def test_interpreter_blocks(size, block):
    assert configs.interpreter_config((size, size, size)).config["block_sizes"] == [block] * 3


def test_no_search_by_default(monkeypatch):
    def no_search(*args, **kwargs):
        raise AssertionError("Helion's autotuner ran without being asked")

    monkeypatch.setattr(configs, "default_autotuner_fn", no_search)
    a, b = torch.randn(24, 40, device=DEVICE), torch.randn(40, 8, device=DEVICE)
    chosen = configs.select_config(bound_for(a, b), (a, b)).autotune()
    assert isinstance(chosen, helion.Config)


def test_autotuning_is_opt_in(monkeypatch):
    sentinel = object()
    monkeypatch.setattr(configs, "default_autotuner_fn", lambda bound, args, **kw: sentinel)
    monkeypatch.setenv(configs.AUTOTUNE_ENV, "1")
    a, b = torch.randn(24, 40, device=DEVICE), torch.randn(40, 8, device=DEVICE)
    assert configs.select_config(bound_for(a, b), (a, b)) is sentinel


def test_few_columns_products():
    """Products of at most 8 columns over at least 4096 rows, b's rows back to back, both
    operands loadable by tensor descriptors, a K that fills the narrow tiles' pipeline, and
    narrow tiles that pay as a thin product's would; fp16 and bf16 only. They run on the
    transposed kernel."""
    for dtype in (torch.float16, torch.bfloat16):
        router = torch.empty(4096, 1024, dtype=dtype), torch.empty(1024, 8, dtype=dtype)
        head = torch.empty(4096, 1024, dtype=dtype), torch.empty(1024, 1, dtype=dtype)
        assert narrow_tiles.few_columns(*router) and narrow_tiles.few_columns(*head)
        assert narrow_tiles.few_columns(torch.empty(1024, 4096, dtype=dtype).T, router[1])
        assert configs.transposed_pays(*head) and configs.transposed_pays(*router)
        assert not narrow_tiles.few_columns(router[0][:4095], router[1])  # rows
        assert not narrow_tiles.few_columns(router[0], torch.empty(1024, 9, dtype=dtype))
        assert not narrow_tiles.few_columns(router[0], torch.empty(1024, 4, dtype=dtype))  # 8 bytes
        # Rows of 4 columns staged, each on a line of its own (the backward's grad_out, copied
        # for grad_out @ mat2.T, as mat1.T @ grad_out reads it): row-major, not contiguous.
        staged = staging.aligned_copy(torch.empty(8192, 4, dtype=dtype))
        mat1_t = torch.empty(8192, 5120, dtype=dtype).T
        assert not staged.is_contiguous() and narrow_tiles.few_columns(mat1_t, staged)
        # b column-major loads along K in vectors: the model's tiles (call 313); one column
        # is the same memory either way (nn.Linear's weight.T of one output).
        assert not narrow_tiles.few_columns(router[0], torch.empty(8, 1024, dtype=dtype).T)
        assert narrow_tiles.few_columns(head[0], torch.empty(1, 1024, dtype=dtype).T)
        # K short of one pass of the tiles' pipeline (4 stages of 256): 65536x1x256 (call 313).
        assert narrow_tiles.pipeline_k(narrow_tiles.few_rows_config(8, 4096, tma=True)) == 1024
        assert not narrow_tiles.few_columns(router[0][:, :1000], torch.empty(1000, 8, dtype=dtype))
        tall = torch.empty(65536, 512, dtype=dtype), torch.empty(512, 1, dtype=dtype)
        assert narrow_tiles.few_columns(*tall)  # 128 columns, 4 stages of 128
        assert not narrow_tiles.few_columns(tall[0][:, :256], tall[1][:256])
        long_k = torch.empty(4096, 8192, dtype=dtype), torch.empty(8192, 8, dtype=dtype)
        assert not narrow_tiles.narrow_tiles_pay(8, 4096, 8192, dtype.itemsize)
        assert not narrow_tiles.few_columns(*long_k)  # it splits over K instead
    fp32 = torch.empty(4096, 1024), torch.empty(1024, 1)
    assert not narrow_tiles.few_columns(*fp32) and not configs.transposed_pays(*fp32)


def test_few_columns_over_a_long_k_split_over_k():
    """Where a few columns' narrow tiles do not pay, the product splits over K, in fp16 and
    bf16, on tiles of 16 columns and as many programs as come nearest two an SM."""
    for m, n, k in ((4096, 8, 8192), (4096, 1, 16384), (4096, 2, 16384)):
        assert narrow_tiles.few_columns_long_k(m, n, k, 2)
        assert long_k_product(m, n, k, torch.bfloat16)
        assert long_k_product(m, n, k, torch.float16)
        assert not long_k_product(m, n, k, torch.float32)
        chosen = long_k.split_rule(m, n, k, 132).config
        bm, bn, _ = chosen["block_sizes"]
        assert (bm, bn) == (128, 16)
        programs = m // bm * -(-k // model.split_k_block(k, chosen["split_k"]))
        assert programs == 256  # 32 row tiles in 8 pieces: nearest 264
    # Under 4096 rows (too short for a wave of narrow tiles) from a K of 2048.
    for m, n, k in ((4095, 8, 8192), (2048, 1, 2048), (65, 8, 4096)):
        assert narrow_tiles.few_columns_long_k(m, n, k, 2)
        assert long_k_product(m, n, k, torch.bfloat16)
        assert long_k.split_rule(m, n, k, 132).config["block_sizes"][:2] == [128, 16]
    # 8 columns on tiles of 32 (4096 to 4160 rows) from a K of 4096 (``eight_columns_split``,
    # NOTES 136); K short of that, tiles of 64 (4161 rows), or 4 columns keep the narrow tiles.
    for m in (4096, 4160):
        assert narrow_tiles.eight_columns_split(m, 8, 4096)
        assert narrow_tiles.few_columns_long_k(m, 8, 4096, 2)
        assert not narrow_tiles.few_columns_tiles_pay(m, 8, 4096, 2)
        assert narrow_tiles.few_columns_tiles_pay(m, 8, 4095, 2)
        assert narrow_tiles.narrow_tiles_pay(8, m, 4096, 2)  # (a thin product's still pay)
    assert not narrow_tiles.eight_columns_split(4161, 8, 7168)
    assert not narrow_tiles.eight_columns_split(4096, 4, 7168)
    assert narrow_tiles.few_columns_tiles_pay(4161, 8, 7168, 2)
    assert narrow_tiles.few_columns_tiles_pay(4096, 4, 7168, 2)
    # Narrow tiles that pay (from 4096 rows: 4096x1x4096 on them 9.9 us, against 19.1 on the
    # model's choice, NOTES 133; 64 columns from 4161 rows), a K too short, rows of a thin
    # product (its own split) or too many columns.
    for m, n, k in (
        (4096, 1, 4096),
        (8192, 8, 4096),
        (4608, 8, 16384),
        (4095, 8, 2047),
        (64, 8, 4096),
        (4096, 9, 8192),
        (2048, 9, 8192),
    ):
        assert not narrow_tiles.few_columns_long_k(m, n, k, 2)


def test_narrow_layers_weight_gradients_split_over_k():
    """A weight gradient of 33 to 128 columns over at most 4096 rows (``x.T @ grad_out`` of a
    router, an adapter or a small head, K the tokens) splits over K from a K of M and 4096,
    at 128 columns from 2x M and 8192, in fp16 and bf16 (NOTES 182-185: 4096x40x16384 ran
    plain at 0.67 of aten)."""
    for m, n, k in (
        (4096, 40, 16384),
        (4096, 128, 16384),
        (4096, 127, 4096),
        (2048, 128, 8192),
        (4096, 33, 8192),
        (3584, 64, 8192),
        (3000, 100, 8192),
        (2048, 96, 8192),
        (3000, 100, 4096),
        (4096, 40, 4096),
    ):
        assert narrow_tiles.narrow_columns_long_k(m, n, k)
        assert long_k_product(m, n, k, torch.bfloat16)
        assert long_k_product(m, n, k, torch.float16)
        assert not long_k_product(m, n, k, torch.float32)
    # One wave of 128x128 programs: 32 tiles in 4 pieces at 4096 rows.
    chosen = long_k.split_rule(4096, 100, 16384, 132).config
    assert chosen["block_sizes"][:2] == [128, 128] and chosen["split_k"] == 4
    # 32 columns or fewer (plain at 0.95 of aten), more than 128, more than 4096 rows (the
    # plain kernel's programs fill waves: 6144x64x12288 0.88x as fast split), K short of
    # M or of 4096 (at 128 columns of 2x M or of 8192: 4096x128x7168's forward 0.92x as fast
    # split), the rows of a thin product, and the forwards (K the hidden size) stay as they
    # were.
    for m, n, k in (
        (4096, 128, 8191),
        (3072, 128, 7168),
        (2048, 128, 8191),
        (4096, 32, 16384),
        (4096, 129, 16384),
        (4097, 64, 16384),
        (6144, 64, 12288),
        (4096, 40, 4095),
        (1024, 40, 4095),
        (64, 40, 16384),
        (16384, 40, 4096),
    ):
        assert not narrow_tiles.narrow_columns_long_k(m, n, k)
    assert not long_k_product(16384, 40, 4096, torch.bfloat16)


def test_narrow_columns():
    """Tall products of 9 to 64 columns."""
    assert narrow_tiles.narrow_columns(16384, 60) and narrow_tiles.narrow_columns(4096, 9)
    assert not narrow_tiles.narrow_columns(16384, 65) and not narrow_tiles.narrow_columns(16384, 8)
    assert not narrow_tiles.narrow_columns(4095, 60)


@pytest.mark.skipif(HAS_CUDA, reason="the CPU config is what CI compiles")
def test_generated_triton_code_has_a_dot():
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    code = bound_for(a, b).to_triton_code(configs.interpreter_config((64, 64, 64)))
    assert "tl.dot(" in code
    assert "input_precision='ieee'" in code


def test_fp32_follows_torch_tf32_switch(restore_tf32):
    torch.backends.cuda.matmul.allow_tf32 = False
    assert _kernel_for(torch.float32) is matmul_kernel
    torch.backends.cuda.matmul.allow_tf32 = True
    assert _kernel_for(torch.float32) is matmul_kernel_tf32
    assert _kernel_for(torch.float16) is matmul_kernel
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    code = bound_for(a, b, matmul_kernel_tf32).to_triton_code(
        configs.interpreter_config((64, 64, 64))
    )
    assert "input_precision='tf32'" in code


@pytest.mark.parametrize(
    "m,n,k,split",
    [
        (1536, 512, 20120, True),
        (512, 512, 1000000, True),
        (1024, 1024, 4096, False),
        (20120, 512, 1536, False),
        (4096, 4096, 4096, False),
        (16, 4096, 14336, True),  # thin, K twice N or more: split (narrow_tiles_pay)
        (40, 4096, 14336, False),  # more rows than NARROW_ROWS: narrow tiles
        (16, 6144, 4096, False),  # thin, K in vectors: narrow tiles of the plain kernel
        (16, 4096, 14339, True),  # thin, K off 16 bytes: loaded element by element
        (64, 8192, 4099, True),
        (16, 8200, 8195, False),  # N of more tiles than measured
        (65, 4096, 8191, True),  # a serving batch's of few tiles (split where K loads in vectors)
        (65, 4096, 8195, True),
        (16, 14336, 4099, False),  # N of 112 tiles
        (16, 4096, 2043, False),  # K shorter than measured
        (24, 2048, 8192, True),  # thin, too few narrow tiles to stream the weight
        (96, 4096, 11008, True),  # a serving batch's: 16 tiles of 128x256, K of THIN_K or more
        (128, 2048, 4096, True),  # streaming: 64 programs in 4 pieces, 32 unsplit
        (128, 6144, 4096, False),  # streaming: 96 programs of 64x128 tiles, as many split
        (129, 4096, 14336, True),
        (704, 1536, 8960, True),  # 36 tiles
        (300, 4096, 8192, False),  # 48 tiles: past a third of a wave
        (705, 1536, 8960, False),  # more rows than the batch model's
        (96, 1024, 2048, False),  # K short of THIN_K
    ],
)
def test_split_k_rule(m, n, k, split):
    assert wants_split_k(m, n, k, torch.bfloat16) is split
    assert wants_split_k(m, n, k, torch.float16) is split


def test_fp32_thin_products_are_not_for_the_split_k_kernel():
    """fp32's split-K config (``configs.fp32_split``) was never measured on thin products."""
    assert not wants_split_k(16, 4096, 14339, torch.float32)
    assert wants_split_k(1536, 512, 20120, torch.float32)  # few tiles, long K


@pytest.mark.parametrize(
    "m,n,k", [(16, 4096, 14336), (16, 4096, 14339), (1536, 512, 20120), (96, 4096, 11008)]
)
def test_thin_and_split_k_products_are_not_the_models(m, n, k):
    """The wave model neither chooses for nor pairs a split-K or thin fp16/bf16 product;
    an fp32 thin one runs the plain kernel on its choice."""
    for dtype in (torch.float16, torch.bfloat16):
        assert not modelled(m, n, k, dtype)
        assert not wants_pair((m, n, k), (64, 64, 64), dtype)
    assert modelled(m, n, k, torch.float32) is not wants_split_k(m, n, k, torch.float32)
    assert modelled(1024, 1024, 4096, torch.bfloat16)


@pytest.mark.parametrize(
    "m,n,k,beside",
    [
        (20120, 512, 1536, True),  # tritonbench's addmm: dX on 14 waves beside dW's split
        (32768, 512, 2048, True),  # 31 waves
        (1000000, 512, 512, False),  # 237 waves: the streams would only contend for memory
        (4096, 4096, 4096, False),  # no long-K product
        (4096, 50257, 768, True),  # an LM head's: dX the long-K product, dW on 18 waves
    ],
)
def test_a_tall_backward_runs_side_by_side_where_the_other_product_fills_the_tails(m, n, k, beside):
    """``kernel.side_by_side`` on a backward's two products (``a.T @ dy``, ``dy @ b.T``) of an
    ``m x n x k`` forward on 132 SMs, in either order."""
    dw, dx = (k, n, m), (m, k, n)
    for dtype in (torch.bfloat16, torch.float16):
        assert side_by_side(dw, dx, dtype, 132) is beside
        assert side_by_side(dx, dw, dtype, 132) is beside


def test_side_by_side_launches_fork_from_the_current_stream_and_join_it(monkeypatch):
    """``kernel.two_launches`` where ``side_by_side``: the side stream waits on the current one,
    runs the second product, the first runs on the current stream, which then waits on the
    side one, and the side's output is marked as used on the current stream (its memory is
    made on the side stream)."""
    from helion_ops import kernel

    log = []

    class Stream(str):
        def wait_stream(self, stream):
            log.append(f"{self} waits on {stream}")

    class Output(str):
        def record_stream(self, stream):
            log.append(f"{self} used on {stream}")

    main, side, on = Stream("main"), Stream("side"), ["main"]

    @contextlib.contextmanager
    def on_stream(stream):
        on.append(stream)
        yield
        on.pop()

    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(kernel, "side_by_side", lambda *args: True)
    monkeypatch.setattr(kernel, "sm_count", lambda device: 132)
    monkeypatch.setattr(kernel, "side_stream", lambda device: side)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: main)
    monkeypatch.setattr(torch.cuda, "stream", on_stream)

    def launch_mm(a, b, alpha):
        log.append(f"{a.shape[0]}x{b.shape[1]} on {on[-1]}")
        return Output(f"{a.shape[0]}x{b.shape[1]}")

    monkeypatch.setattr(kernel, "launch_mm", launch_mm)
    a1, b1, a2, b2 = (torch.empty(s) for s in [(8, 64), (64, 4), (16, 8), (8, 64)])
    assert kernel.two_launches(a1, b1, a2, b2, 1.0) == ("8x4", "16x64")
    assert log == [
        "side waits on main",
        "16x64 on side",
        "8x4 on main",
        "main waits on side",
        "16x64 used on main",
    ]


@pytest.mark.parametrize(
    "m,n,tma,blocks,stages,indexing",
    [
        (1, 4096, True, [16, 32, 256], 4, "tensor_descriptor"),
        (2, 8192, True, [16, 64, 256], 4, "tensor_descriptor"),
        (32, 6144, True, [32, 64, 256], 4, "tensor_descriptor"),
        (48, 5120, True, [64, 64, 128], 6, "tensor_descriptor"),
        (1, 9216, True, [16, 64, 256], 4, "tensor_descriptor"),
        (12, 18176, True, [16, 128, 128], 4, "tensor_descriptor"),
        (4, 50257, False, [16, 64, 64], 1, "pointer"),
        (33, 50257, False, [64, 64, 64], 1, "pointer"),
    ],
)
def test_few_rows_configs(m, n, tma, blocks, stages, indexing):
    """The narrow tiles measured fastest or within 4% on the H200 (calls 250 and 255, NOTES
    114-115), each within an SM's shared memory."""
    chosen = narrow_tiles.few_rows_config(m, n, tma).config
    assert chosen["block_sizes"] == blocks and chosen["num_stages"] == stages
    assert chosen["indexing"] == indexing and chosen["pid_type"] == "flat"
    bm, bn, bk = blocks
    assert (bm + bn) * bk * 2 * stages + 2 * bm * bn * 2 <= pipelines.SHARED_MEMORY_BYTES


@pytest.mark.parametrize(
    "m,n,enough",
    [(24, 2048, False), (1, 2560, True), (1, 4096, True), (2, 8192, True), (64, 4096, True)],
)
def test_narrow_tiles_in_flight(m, n, enough):
    """Where a thin product's narrow tiles keep enough of the weight in flight: the bound
    lies between the measured 3 MiB (24x2048x8192: 64 programs, the split 2x faster) and
    3.75 MiB (1x2560x10240: 80 programs, the narrow tiles faster; call 251, NOTES 114)."""
    assert narrow_tiles.narrow_in_flight(m, n, torch.bfloat16.itemsize) is enough


@pytest.mark.parametrize(
    "m,n,k,narrow",
    [
        (3, 3072, 8192, False),  # 32 columns, K twice N or more, at most NARROW_ROWS rows
        (8, 3584, 18944, False),
        (4, 6144, 24576, True),  # 64 columns
        (1, 4096, 4096, True),
        (7, 4544, 4544, True),
        (40, 3584, 14336, True),  # more rows than NARROW_ROWS
        (24, 2048, 4096, False),  # too little in flight
    ],
)
def test_narrow_tiles_pay(m, n, k, narrow):
    """A thin product runs narrow tiles where they keep enough of the weight in flight and,
    where they are 32 columns wide for at most 32 rows, K is under twice N; else it splits
    over K (calls 255-256, NOTES 115)."""
    assert narrow_tiles.narrow_tiles_pay(m, n, k, torch.bfloat16.itemsize) is narrow


def test_few_rows_products():
    """Thin products, products of at most 32 rows and a K of 3072 or more (short of thin's
    or with a weight wide enough for a wave of 128-column tiles), and products of at most 64
    rows whose weight's rows are off 16 bytes (the GPT-2 head's forward); fp16 and bf16
    only."""
    for dtype in (torch.float16, torch.bfloat16):
        assert narrow_tiles.few_rows(
            torch.empty(16, 4096, dtype=dtype), torch.empty(4096, 8192, dtype=dtype)
        )
        head = torch.empty(4, 768, dtype=dtype), torch.empty(768, 50257, dtype=dtype)
        assert narrow_tiles.few_rows(*head)
        assert not narrow_tiles.few_rows(torch.empty(65, 768, dtype=dtype), head[1])
        wide = torch.empty(16, 4096, dtype=dtype), torch.empty(4096, 8200, dtype=dtype)
        assert not narrow_tiles.few_rows(*wide)  # more columns than thin, rows on 16 bytes
        assert narrow_tiles.few_rows(wide[0][:, :3072], wide[1][:3072])  # K short of THIN_K
        assert not narrow_tiles.few_rows(wide[0][:, :3064], wide[1][:3064])  # ... of NARROW_MIN_K
        odd_k = torch.empty(16, 3073, dtype=dtype), torch.empty(3073, 8200, dtype=dtype)
        assert not narrow_tiles.few_rows(*odd_k)  # a's rows off 16 bytes: the model's choice
        head = torch.empty(32, 4096, dtype=dtype), torch.empty(4096, 132 * 128, dtype=dtype)
        assert narrow_tiles.few_rows(*head)  # a wave of programs of 128 columns
        assert not narrow_tiles.few_rows(head[0][:, :3064], head[1][:3064])
        assert not narrow_tiles.few_rows(torch.empty(33, 4096, dtype=dtype), head[1])
    fp32 = torch.empty(4, 768), torch.empty(768, 50257)
    assert not narrow_tiles.few_rows(*fp32)


@pytest.mark.skipif(HAS_CUDA, reason="the CPU config is what CI compiles")
def test_split_k_kernel_adds_partial_tiles_atomically():
    a, b = torch.randn(32, 512), torch.randn(512, 16)
    bound = split_k_kernel.bind((a, b))
    config = configs.choose_config(bound, a, b)
    assert config.config["split_k"] == 4
    assert "tl.atomic_add(" in bound.to_triton_code(config)


@pytest.mark.skipif(HAS_CUDA, reason="the CPU config is what CI compiles")
def test_the_split_in_pieces_stores_each_piece_without_atomics():
    """The deterministic split stores each K piece's sums in a slice of its own (no atomic
    add), one slice per piece of ``split_k``'s cut."""
    a, b = torch.randn(32, 500), torch.randn(500, 16)
    bound = split_k_pieces_kernel.bind((a, b))
    config = configs.choose_config(bound, a, b)
    assert config.config["split_k"] == 4
    assert "atomic" not in bound.to_triton_code(config)
    assert bound(a, b).shape == (4, 32, 16)  # pieces of 128, the last of 116


def test_a_config_that_does_not_compile_falls_back_to_the_reference_config(monkeypatch, caplog):
    """...and the compile log names the config that runs, not the one chosen."""
    import helion_ops
    from helion_ops import kernel

    broken = helion.Config(block_sizes=[16, 16, 16], indexing=["pointer"] * 3)  # bias load: 4
    monkeypatch.setattr(configs, "choose_config", lambda bound, a, b: broken)
    kernel.reset()
    bias = torch.randn(19, device=DEVICE)
    a, b = torch.randn(24, 40, device=DEVICE), torch.randn(40, 19, device=DEVICE)
    with pytest.warns(UserWarning, match="does not run"):
        with caplog.at_level(logging.INFO, logger="helion_ops"):
            out = helion_ops.addmm(bias, a, b)
    torch.testing.assert_close(out, torch.addmm(bias, a, b))
    epilogue = kernel.scaled_plus_bias(1.0, 1.0, bias.expand(24, 19))
    reference = matmul_kernel.bind((a, b, epilogue)).config_spec.autotune_reference_config()
    (record,) = [r for r in caplog.records if r.name.startswith("helion_ops")]
    assert record.getMessage().endswith(f": {dict(reference.config)}"), record.getMessage()
    kernel.reset()


def test_each_new_specialization_logs_its_kernel_tensors_and_config(caplog):
    """Which kernel and config a shape runs, for a user who asks: one INFO record on the
    ``helion_ops`` logger when a new specialization compiles, none when it runs again."""
    import helion_ops
    from helion_ops import kernel

    kernel.reset()
    a, b = torch.randn(24, 40, device=DEVICE), torch.randn(19, 40, device=DEVICE).T
    with caplog.at_level(logging.INFO, logger="helion_ops"):
        helion_ops.matmul(a, b)
        helion_ops.matmul(a, b)
    (record,) = [r for r in caplog.records if r.name.startswith("helion_ops")]
    chosen = configs.choose_config(matmul_kernel.bind((a, b, scaled(1.0))), a, b)
    message = record.getMessage()
    assert message.startswith(
        "_matmul on float32[24, 40] strides [40, 1], float32[40, 19] strides [1, 40]: {"
    ), message
    assert f"'block_sizes': {chosen.config['block_sizes']}" in message, message
    # addmm: the bias the epilogue loads, as the kernel sees it (a row broadcast over M).
    with caplog.at_level(logging.INFO, logger="helion_ops"):
        helion_ops.addmm(torch.randn(19, device=DEVICE), a, b)
    message = caplog.records[-1].getMessage()
    assert message.startswith(
        "_matmul on float32[24, 40] strides [40, 1], float32[40, 19] strides [1, 40], "
        "bias float32[24, 19] strides [0, 1]: {"
    ), message
    kernel.reset()


def test_a_config_out_of_shared_memory_falls_back_to_the_reference_config(monkeypatch):
    """Triton reports shared memory only when it compiles, at the first launch. A chosen
    config of one stage has no shallower pipeline: Helion's conservative reference config."""
    from triton.runtime.errors import OutOfResources

    import helion_ops
    from helion_ops import kernel

    chosen = helion.Config(block_sizes=[32, 32, 32], num_warps=4, num_stages=1)
    monkeypatch.setattr(configs, "choose_config", lambda bound, a, b: chosen)
    launched = []

    class OutOfSharedMemoryOnce(plans.DirectLauncher):
        def __call__(self, *args, **options):
            launched.append(self)
            if len(launched) == 1:
                raise OutOfResources(262168, 232448, "shared memory")
            return super().__call__(*args, **options)

    monkeypatch.setattr(kernel, "DirectLauncher", OutOfSharedMemoryOnce)
    kernel.reset()
    a, b = torch.randn(24, 40, device=DEVICE), torch.randn(40, 19, device=DEVICE)
    with pytest.warns(UserWarning, match="out of resource: shared memory") as record:
        out = helion_ops.matmul(a, b)
    reference = matmul_kernel.bind((a, b)).config_spec.autotune_reference_config()
    assert str(dict(reference.config)) in str(record[0].message)
    torch.testing.assert_close(out, a @ b)
    assert len(launched) == 2 and launched[0] is not launched[1]
    torch.testing.assert_close(helion_ops.matmul(a, b), a @ b)  # the fallback, kept
    # Through the second launcher again in the interpreter; on a GPU the fallback's launch
    # plan calls the compiled kernel itself, past any launcher.
    assert launched[2:] == ([] if HAS_CUDA else [launched[1]])
    kernel.reset()


def matmul_out_of_shared_memory_where(monkeypatch, chosen, fails):
    """``helion_ops.matmul`` on small operands, ``chosen`` for its config and a launcher that
    runs out of shared memory where ``fails(depths)`` (the pipeline depth of every launch so
    far, this one's last). The depths launched and the one helion_ops warning."""
    from triton.runtime.errors import OutOfResources

    import helion_ops
    from helion_ops import kernel

    monkeypatch.setattr(configs, "choose_config", lambda bound, a, b: chosen)
    depths = []

    class OutOfSharedMemoryWhere(plans.DirectLauncher):
        def __call__(self, *args, **options):
            depths.append(options["num_stages"])
            if fails(depths):
                raise OutOfResources(360568, 232448, "shared memory")
            return super().__call__(*args, **options)

    monkeypatch.setattr(kernel, "DirectLauncher", OutOfSharedMemoryWhere)
    kernel.reset()
    a, b = torch.randn(24, 40, device=DEVICE), torch.randn(40, 19, device=DEVICE)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        out = helion_ops.matmul(a, b)
    kernel.reset()
    torch.testing.assert_close(out, a @ b)
    (warning,) = [w for w in record if "helion_ops" in str(w.message)]
    return depths, str(warning.message)


def test_a_pipeline_too_deep_for_shared_memory_runs_shallower(monkeypatch):
    """The chosen tiles in fewer stages before anything else, down to the first that fits;
    a fallback that does not run either is skipped, with one warning for the call."""
    chosen = helion.Config(block_sizes=[32, 32, 32], num_warps=4, num_stages=4)
    depths, warning = matmul_out_of_shared_memory_where(monkeypatch, chosen, lambda d: d[-1] > 2)
    assert depths[:3] == [4, 3, 2]
    assert "'block_sizes': [32, 32, 32]" in warning and "'num_stages': 2" in warning


def test_tiles_too_large_at_any_depth_run_halved(monkeypatch):
    """Where no depth of the chosen tiles fits (as for the backward's pair with every operand
    column-major before NOTES 111's load order: NOTES 110), the tiles halved along their
    longer side run next, before Helion's reference config (16x16 tiles: 7.7-19x slower than
    halved ones there)."""
    chosen = helion.Config(block_sizes=[32, 64, 32], num_warps=4, num_stages=3)
    # The chosen tiles fail in 3 stages and in 2.
    depths, warning = matmul_out_of_shared_memory_where(monkeypatch, chosen, lambda d: len(d) <= 2)
    assert depths[:3] == [3, 2, 3]
    assert "'block_sizes': [32, 32, 32]" in warning and "'num_stages': 3" in warning


def test_halved_tiles_halve_each_products_longer_side():
    from helion_ops.kernel import _halved_tiles

    pair = helion.Config(block_sizes=[128, 256, 64, 128, 128, 64], num_stages=3)
    assert _halved_tiles(pair).config == {
        **pair.config,
        "block_sizes": [128, 128, 64, 64, 128, 64],
    }
    assert _halved_tiles(helion.Config(block_sizes=[16, 16, 64])) is None
    assert _halved_tiles(helion.Config(block_sizes=[64, 64])) is None
    assert _halved_tiles(helion.Config(num_stages=3)) is None


# Compiles a generated module's kernel (bf16 operands, 16-byte aligned as torch allocates
# them, which Triton specializes on at launch; tensor descriptors built on the host of the
# block shapes its host code gives them) for sm90 and prints its shared memory.
COMPILE_FOR_SM90 = """
import importlib.util, re, sys, torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import mangle_type
from triton.tools.tensor_descriptor import TensorDescriptor
spec = importlib.util.spec_from_file_location("generated", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
(fn,) = [v for n, v in vars(module).items() if n.startswith("_helion_") and hasattr(v, "arg_names")]
code = open(sys.argv[1]).read()
sizes = dict(re.findall(r"^(_BLOCK_SIZE_\\d+) = tl.constexpr\\((\\d+)\\)", code, re.M))
blocks = iter(re.findall(r"\\[(_BLOCK_SIZE_\\d+), (_BLOCK_SIZE_\\d+)\\]\\)", code))
def descriptor(rows, cols):
    base = torch.empty(4096, 4096, dtype=torch.bfloat16)
    return mangle_type(TensorDescriptor(base, [4096, 4096], [4096, 1], [rows, cols]))
signature = {
    arg: "constexpr" if arg == "_NUM_SM"
    else descriptor(*(int(sizes[b]) for b in next(blocks))) if arg.endswith("_desc")
    else "*bf16"
    for arg in fn.arg_names
}
persistent = "_NUM_SM" in fn.arg_names
constexprs = {(fn.arg_names.index("_NUM_SM"),): 132} if persistent else {}
aligned = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(signature.values()) if a[0] == "*"}
source = ASTSource(fn, signature, constexprs=constexprs, attrs=aligned)
options = {"num_warps": int(sys.argv[2]), "num_stages": int(sys.argv[3])}
print(triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options).metadata.shared)
"""


def shared_memory_on_sm90(code: str, config: helion.Config, tmp_path) -> int:
    """Bytes of shared memory Triton gives the kernel of Helion-generated ``code`` compiled
    for sm90 (H100, H200), which needs no GPU. In a process of its own: Triton decides at
    import whether its own helpers are interpreted, as they are in this one on a CPU."""
    path = tmp_path / "generated.py"
    path.write_text(code)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    depth = [str(config.config[k]) for k in ("num_warps", "num_stages")]
    run = subprocess.run(
        [sys.executable, "-c", COMPILE_FOR_SM90, str(path), *depth],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(run.stdout.split()[-1])


def assert_holds_its_pipeline(code: str, config: helion.Config, tmp_path) -> None:
    """Compiled for sm90, ``code`` holds ``config``'s whole pipeline (each stage an x and a y
    tile of 2-byte elements, of its first product's tile) and asks for no more than an H200's
    shared memory."""
    bm, bn, bk = config.config["block_sizes"][:3]
    pipeline = config.config["num_stages"] * (bm * bk + bk * bn) * 2
    assert pipeline <= shared_memory_on_sm90(code, config, tmp_path) <= 232448


def backward_pair_operands(mat1, mat2, grad_out, column_major) -> tuple:
    """The four operands ``ops`` passes the backward's pair kernel for ``mat1 @ mat2``."""
    pairs = []

    def pair(*args):
        pairs.append(args[:4])
        return grad_out, grad_out

    ops._operand_grads(mat1, mat2, (True, True), grad_out, 1.0, None, pair, column_major)
    (operands,) = pairs
    return operands


@pytest.fixture
def host_descriptors_on_the_cpu(monkeypatch):
    """Helion generates code for descriptors built on the host (``host_tensor_descriptors``)
    for CUDA devices of sm90 and later only; for these CPU-bound kernels its config spec
    accepts the key, so that the code can be generated (then compiled for sm90, or run in
    Triton's interpreter)."""
    from helion.autotuner.config_spec import ConfigSpec

    supports = ConfigSpec.supports_config_key
    monkeypatch.setattr(
        ConfigSpec,
        "supports_config_key",
        lambda spec, key: key == "host_tensor_descriptors" or supports(spec, key),
    )


@pytest.mark.skipif(HAS_CUDA, reason="the CUDA tests run host-built descriptors on the GPU")
@pytest.mark.parametrize("columns", [(False, False), (True, False), (False, True)], ids=str)
def test_host_descriptor_configs_compute_both_kernels_products(
    columns, host_descriptors_on_the_cpu
):
    """The code Helion generates for descriptors built on the host, run by Triton's
    interpreter on sizes that leave partial tiles in every dimension: a product and the
    backward's pair (whose loads of column-major operands transpose the loaded tile), each
    against float64 and torch."""
    mat1, mat2 = (torch.randn(s) for s in [(40, 56), (56, 24)])
    mat1, mat2 = (
        t.T.contiguous().T if c else t for t, c in zip((mat1, mat2), columns, strict=True)
    )
    grad_out = torch.randn(40, 24)
    config = {"num_warps": 4, "num_stages": 2, "pid_type": "flat"}
    config |= {"indexing": "tensor_descriptor", "host_tensor_descriptors": True}
    matmul_kernel.reset()
    pair_kernel.reset()
    product = matmul_kernel.bind((mat1, mat2, scaled(1.0)))
    tiles = helion.Config(block_sizes=[16, 16, 16], **config)
    assert product.to_triton_code(tiles).count("_helion_tensor_descriptor(") == 3
    out = product.compile_config(tiles)(mat1, mat2, scaled(1.0))
    assert_matches("product", out, mat1 @ mat2, mat1.double() @ mat2.double())
    operands = backward_pair_operands(mat1, mat2, grad_out, columns)
    bound = pair_kernel.bind((*operands, scaled(1.0), scaled(1.0)))
    tiles = helion.Config(block_sizes=[16, 16, 16] * 2, **config)
    assert bound.to_triton_code(tiles).count("_helion_tensor_descriptor(") == 6
    outs = bound.compile_config(tiles)(*operands, scaled(1.0), scaled(1.0))
    products = (operands[:2], operands[2:])
    for name, got, (x, y) in zip(("first", "second"), outs, products, strict=True):
        assert_matches(f"pair's {name}", got, x @ y, x.double() @ y.double())


POINTER_CANDIDATES = [c for c in model.BATCH_CANDIDATES if c.config.get("indexing") == "pointer"]


@pytest.mark.parametrize("candidate", POINTER_CANDIDATES, ids=lambda c: str(c["block_sizes"]))
def test_pointer_tiles_on_host_descriptors_fit_shared_memory(
    candidate, host_descriptors_on_the_cpu, tmp_path
):
    """``loads.pointer_tiles_on_host_descriptors`` moves a pointer candidate onto descriptors
    built on the host at its own depth. Compiled for sm90, each holds its pipeline and asks no
    more than an H200's shared memory: the output tile's store reuses the pipeline's buffers
    (128x256x64 in 4 stages: 192 KiB of operands, no room for another 64 KiB)."""
    x, y = (torch.randn(size, dtype=torch.bfloat16) for size in [(1400, 1200), (1200, 1000)])
    config = helion.Config(
        **{**candidate.config, "indexing": "tensor_descriptor", "host_tensor_descriptors": True}
    )
    matmul_kernel.reset()  # (bound by an earlier case on tensors now freed: no alignment proof)
    code = matmul_kernel.bind((x, y, scaled(1.0))).to_triton_code(config)
    assert code.count("_helion_tensor_descriptor(") == 3  # x, y and the output
    assert_holds_its_pipeline(code, config, tmp_path)


@pytest.mark.parametrize(
    "config",
    [configs.pair_rule((1000, 1000, 1000), (1000, 1000, 1000), torch.bfloat16)]
    + [configs.pair_of(c) for c in POINTER_CANDIDATES],
    ids=lambda c: str(c["block_sizes"][:3]),
)
def test_a_pairs_pointer_tiles_on_host_descriptors_fit_shared_memory(
    config, host_descriptors_on_the_cpu, tmp_path
):
    """The backward pair's pointer configs (``pair_rule``'s, the wave model's candidates as a
    pair) moved onto descriptors built on the host: compiled for sm90, one pipeline for both
    loops within an H200's shared memory."""
    sizes = [(1400, 1200), (1200, 1000), (1400, 1000)]
    mat1, mat2, grad_out = (torch.randn(size, dtype=torch.bfloat16) for size in sizes)
    operands = backward_pair_operands(mat1, mat2, grad_out, (False, False))
    config = helion.Config(
        **{**config.config, "indexing": "tensor_descriptor", "host_tensor_descriptors": True}
    )
    pair_kernel.reset()  # (bound by an earlier case on tensors now freed: no alignment proof)
    code = pair_kernel.bind((*operands, scaled(1.0), scaled(1.0))).to_triton_code(config)
    assert code.count("_helion_tensor_descriptor(") == 6  # both products: x, y and the output
    assert_holds_its_pipeline(code, config, tmp_path)


@pytest.mark.parametrize("layout", ["tt", "tn", "nt", "nn"])
def test_the_backward_pair_shares_one_pipelines_shared_memory(layout, tmp_path):
    """The pair's two K loops never run at once, so their pipelines can share shared memory.
    Triton 3.6-3.9 shares it only where the loops load their operands in a different order
    of tile shapes (NOTES 111); the backward with both operands column-major (tritonbench's
    'nn') loaded them in the same order, and 128x128x64 tiles in 4 stages asked for 295040
    bytes of the H200's 232448. On every layout: one pipeline (4 stages of two 16 KiB tiles)
    and the output tile, not two."""
    mat1, mat2, grad_out = (torch.randn(1536, 1536, dtype=torch.bfloat16) for _ in range(3))
    column_major = layout[0] == "n", layout[1] == "n"
    mat1, mat2 = (t.T if col else t for t, col in zip((mat1, mat2), column_major, strict=True))
    operands = backward_pair_operands(mat1, mat2, grad_out, column_major)
    config = helion.Config(
        block_sizes=[128, 128, 64] * 2,
        num_warps=8,
        num_stages=4,
        indexing="tensor_descriptor",
        pid_type="persistent_interleaved",
    )
    pair_kernel.reset()
    code = pair_kernel.bind((*operands, scaled(1.0), scaled(1.0))).to_triton_code(config)
    pipeline, out_tile = 4 * 2 * 128 * 64 * 2, 128 * 128 * 2
    shared = shared_memory_on_sm90(code, config, tmp_path)
    assert pipeline + out_tile <= shared < pipeline + out_tile + 2048


@pytest.mark.parametrize("m,n,k", [(1100, 1000, 333), (200, 150, 70)], ids=str)
def test_fp32_ieee_tiles_compute_the_product(m, n, k):
    """``FP32_IEEE_TILE`` on sizes no tile divides: as close to the float64 product as
    torch's fp32 one."""
    x, y = torch.randn(m, k, device=DEVICE), torch.randn(k, n, device=DEVICE)
    matmul_kernel.reset()
    bound = matmul_kernel.bind((x, y, scaled(1.0)))
    out = bound.compile_config(configs.FP32_IEEE_TILE)(x, y, scaled(1.0))
    assert_matches("FP32_IEEE_TILE's product", out, x @ y, x.double() @ y.double())


def test_fp32_splits_config_computes_the_product():
    """``fp32_split``'s config (K blocks of 32 in pieces of whole steps of 64) on sizes no
    tile or piece divides: as close to the float64 product as torch's fp32 one."""
    m, n, k = 96, 80, 5000
    x, y = torch.randn(m, k, device=DEVICE), torch.randn(k, n, device=DEVICE)
    config = configs.fp32_split(m, n, k, 132)
    assert config.config["block_sizes"][2] == 32 and config.config["split_k"] > 1
    split_k_kernel.reset()
    out = split_k_kernel.bind((x, y)).compile_config(config)(x, y)
    assert_matches("fp32_split's product", out, x @ y, x.double() @ y.double())


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize(
    "m,n,k,tile",
    [
        (120, 8704, 3072, (128, 128, 64)),
        (96, 6656, 5120, (64, 128, 64)),
        (92, 4096, 2560, (64, 64, 256)),
    ],
)
def test_a_streaming_products_plain_tile_fits_shared_memory(m, n, k, tile, bias, tmp_path):
    """``one_wave_stream``'s plain tiles (64x64 stepping K by 256) run as many stages as
    ``streaming`` counts beside the output tile (and an [m, n] bias tile). Compiled for sm90,
    the kernel of a linear layer's x @ w.T holds them all and asks for no more than an H200's
    shared memory."""
    x, w_t = torch.randn(m, k, dtype=torch.bfloat16), torch.randn(n, k, dtype=torch.bfloat16).T
    chosen = long_k.one_wave_stream(m, n, k, 132, splits=False)
    assert (chosen.rows, chosen.columns, chosen.block_k) == tile
    plain = candidates.config(*tile, 4, 2, "flat", "pointer")
    config = pipelines.streaming(plain, 2, m, n, k, tiles=2 if bias else 1)
    epilogue = scaled_plus_bias(1.0, 1.0, torch.randn(m, n, dtype=x.dtype)) if bias else scaled(1.0)
    code = matmul_kernel.bind((x, w_t, epilogue)).to_triton_code(config)
    assert config.config["block_sizes"] == list(tile)
    assert_holds_its_pipeline(code, config, tmp_path)


def test_an_epilogue_is_plain_or_loads_a_bias():
    a, b = torch.randn(256, 64), torch.randn(64, 128)
    bias = torch.randn(128).expand(256, 128)
    assert configs.epilogue_of(bound_for(a, b)) == "plain"
    with_bias = matmul_kernel.bind((a, b, lambda acc, tile: acc + bias[tile[0], tile[1]]))
    assert configs.epilogue_of(with_bias) == "bias"
    assert configs.epilogue_of(split_k_kernel.bind((a, b))) == "plain"
    pair = pair_kernel.bind((a, b, b.T, a.T, *[lambda acc, tile: acc] * 2))
    assert configs.epilogue_of(pair, products=2) == "plain"


def test_a_flattened_plain_entry_runs_a_bias_epilogue_unflattened_where_it_would_not_fit():
    """128x256x64 in 3 stages with a bias tile asks 272 KiB of bf16 (227 on sm90): unflattened;
    128x128x64 in 4 stages 192 KiB: kept, but not as two programs per SM, nor in fp32."""
    entry = candidates.config(128, 256, 64, 8, 3, "persistent_interleaved", flatten=True)
    fitted = pipelines.fit_for_bias(entry, 2)
    assert "range_flattens" not in fitted.config
    assert {**fitted.config, "range_flattens": [True, None]} == entry.config
    plain = candidates.config(128, 256, 64, 8, 3, "persistent_interleaved")
    assert pipelines.fit_for_bias(plain, 2) is plain
    small = candidates.config(128, 128, 64, 4, 4, "persistent_interleaved", flatten=True)
    assert pipelines.fit_for_bias(small, 2) is small
    assert "range_flattens" not in pipelines.fit_for_bias(small, 4).config
    two = candidates.config(128, 128, 64, 8, 2, "persistent_interleaved", flatten=True)
    assert pipelines.fit_for_bias(two, 2) is two
    two_per_sm = candidates.config(
        128, 128, 64, 8, 2, "persistent_interleaved", flatten=True, sm_multiplier=2
    )
    assert "range_flattens" not in pipelines.fit_for_bias(two_per_sm, 2).config


def test_a_flattened_candidate_of_8_to_16_k_steps_runs_as_many_stages_as_shared_memory_holds():
    """128x128x64 bf16 tiles: 32 KiB a stage beside a 32 KiB output tile, 227 KiB in all: 6
    stages, 5 beside a bias tile too, for K loops of 8 to 16 steps (448 < K <= 1024). Other
    K loops, the larger flattened tiles (full in 3 stages), unflattened loops, two programs
    per SM and fp32 keep their depth."""
    small = candidates.config(128, 128, 64, 4, 4, "persistent_interleaved", flatten=True)
    for k in (449, 768, 1024):
        assert pipelines.deepened(small, 2, k).config == {**small.config, "num_stages": 6}
        assert pipelines.deepened(small, 2, k, tiles=2).config == {**small.config, "num_stages": 5}
    for k in (64, 256, 448, 1025):
        assert pipelines.deepened(small, 2, k) is small
    assert pipelines.deepened(small, 4, 768) is small
    for bm, bn, bk in ((128, 256, 64), (256, 128, 64), (128, 128, 128)):
        large = candidates.config(bm, bn, bk, 8, 3, "persistent_interleaved", flatten=True)
        assert pipelines.deepened(large, 2, 1024) is large
    unflattened = candidates.config(128, 128, 64, 4, 3, "flat", "pointer")
    assert pipelines.deepened(unflattened, 2, 768) is unflattened
    two_per_sm = candidates.config(
        128, 128, 64, 8, 2, "persistent_interleaved", flatten=True, sm_multiplier=2
    )
    assert pipelines.deepened(two_per_sm, 2, 768) is two_per_sm


def test_a_bandwidth_bound_products_flat_tiles_run_as_many_stages_as_shared_memory_holds():
    """96x6656x5120 (bf16, 68 FLOPs a byte, under the ridge): 64x128x64 tiles (24 KiB a
    stage) in 8 stages, the cap; 128x128x64 (32 KiB) in 6, 5 beside a bias tile; the split-K
    kernel's tiles alike, where a program's K piece has a step a stage. Products above the
    ridge, persistent tiles, full ones and K loops shorter than the pipeline keep their
    depth."""
    narrow = candidates.config(64, 128, 64, 4, 5, "flat", "pointer")
    wide = candidates.config(128, 128, 64, 4, 3, "flat", "pointer")
    mnk = (96, 6656, 5120)
    assert pipelines.streaming(narrow, 2, *mnk).config == {**narrow.config, "num_stages": 8}
    assert pipelines.streaming(wide, 2, *mnk).config == {**wide.config, "num_stages": 6}
    assert pipelines.streaming(wide, 2, *mnk, tiles=2).config == {**wide.config, "num_stages": 5}
    assert pipelines.streaming(narrow, 2, 4096, 4096, 4096) is narrow  # above the ridge
    persistent = candidates.config(128, 128, 64, 4, 4, "persistent_interleaved", flatten=True)
    assert pipelines.streaming(persistent, 2, *mnk) is persistent
    full = candidates.config(128, 256, 64, 8, 3, "flat", "pointer")
    assert pipelines.streaming(full, 2, *mnk) is full
    assert pipelines.streaming(wide, 2, 3584, 4096, 68) is wide  # a K loop of 2 steps
    split = long_k.split_rule(80, 4864, 4864, 132)
    assert split.config["split_k"] == 3 and split.config["num_stages"] == 4
    assert pipelines.streaming(split, 2, 80, 4864, 4864).config == {
        **split.config,
        "num_stages": 6,
    }
    # 64 pieces of a K of 16384: 4 steps a program.
    pieces = candidates.split_config(128, 128, 64, 64, 4)
    assert pipelines.streaming(pieces, 2, 256, 512, 16384) is pieces


def test_a_streaming_products_programs_fill_one_wave_at_most():
    """65-128 rows and a K of at least 2048: 128x128 tiles, 64x128 (two row tiles), 128x128
    split over K in pieces of at least 1024 or 64x64 (two row tiles, K stepped by 256),
    whichever gives the most programs that fit one wave (132 SMs); on a tie the plain kernel
    of 128 columns, then fewer pieces, then 64x64. On the H200 (calls 285 and 288) these are
    the fastest configs timed, or within 1%, on seven of the probe shapes."""
    tile = long_k.StreamTile
    assert long_k.one_wave_stream(120, 8704, 3072, 132) == tile(128, 128, 1)  # 68
    assert long_k.one_wave_stream(96, 6656, 5120, 132) == tile(64, 128, 1)  # 104, as 2 pieces
    assert long_k.one_wave_stream(80, 4864, 4864, 132) == tile(128, 128, 3)  # 114
    assert long_k.one_wave_stream(112, 3840, 6144, 132) == tile(128, 128, 4)  # 120
    assert long_k.one_wave_stream(100, 10752, 4096, 132) == tile(128, 128, 1)  # 84
    assert long_k.one_wave_stream(92, 4096, 2560, 132) == tile(64, 64, 1, 256)  # 128
    assert long_k.one_wave_stream(76, 3072, 3072, 132) == tile(64, 64, 1, 256)  # 96; 72 in 3
    assert long_k.one_wave_stream(84, 3584, 5120, 132) == tile(128, 128, 4)  # 112, as 64x64
    # A batch training shape whose splits call 266 timed (128x256 in 3 pieces fastest, 120
    # programs): 80 programs of 128x128, not timed then.
    assert long_k.one_wave_stream(72, 10240, 8192, 132) == tile(128, 128, 1)
    assert long_k.one_wave_stream(80, 4864, 4864, 132, splits=False) == tile(64, 128, 1)
    assert long_k.one_wave_stream(84, 3584, 5120, 132, splits=False) == tile(64, 64, 1, 256)
    assert long_k.one_wave_stream(100, 2048, 8192, 132) == tile(128, 128, 8)  # pieces of 1024
    assert long_k.one_wave_stream(100, 4096, 2048, 132) == tile(64, 64, 1, 256)  # 2 pieces at most
    for outside in [(64, 8704, 3072), (129, 8704, 3072), (120, 8704, 2047), (100, 1024, 8192)]:
        assert long_k.one_wave_stream(*outside, 132) is None
    assert long_k.one_wave_stream(100, 18944, 3584, 132) is None  # 148 columns of 128
    # K steps of 256 on 64x64 tiles: 3 stages of 64 KiB fit beside the output tile, and
    # beside a bias tile too.
    by_256 = candidates.config(64, 64, 256, 4, 2, "flat", "pointer")
    for tiles in (1, 2):
        deepest = pipelines.streaming(by_256, 2, 92, 4096, 2560, tiles=tiles)
        assert deepest.config["num_stages"] == 3
    # The launcher splits where the rule does, and the split-K rule cuts as many pieces.
    assert long_k_product(80, 4864, 4864, torch.bfloat16)
    assert long_k.split_rule(80, 4864, 4864, 132).config["split_k"] == 3
    assert not long_k_product(120, 8704, 3072, torch.bfloat16)
    assert long_k.split_rule(120, 8704, 3072, 132).config["split_k"] == 1
    assert not long_k_product(80, 4864, 4864, torch.float32)


def test_table_lookup_by_epilogue_then_dtype():
    """A bias epilogue takes its own entry, else the plain entry fit for it; fp16 takes
    bf16's entry where it has none; a key not in the table gets None (Helion's default)."""
    plain = candidates.config(128, 256, 64, 8, 3, "persistent_interleaved", flatten=True)
    bias = candidates.BIAS_CANDIDATES[0]
    fp16_plain = candidates.config(128, 128, 64, 4, 4, "flat")
    table = {
        (4096, 4096, 512, "bfloat16", "rr", "plain"): plain,
        (4096, 4096, 512, "float16", "rr", "plain"): fp16_plain,
        (8192, 8192, 512, "bfloat16", "rr", "plain"): plain,
        (8192, 8192, 512, "bfloat16", "rr", "bias"): bias,
    }

    def lookup(m, dtype, layout, epilogue):
        return configs.table_config(table, (m, m, 512, dtype, layout), epilogue)

    assert lookup(8192, "bfloat16", "rr", "plain") is plain
    assert lookup(8192, "bfloat16", "rr", "bias") is bias
    assert lookup(8192, "float16", "rr", "bias") is bias
    assert lookup(8192, "float16", "rr", "plain") is plain
    assert lookup(4096, "bfloat16", "rr", "bias") == pipelines.fit_for_bias(plain, 2)
    assert "range_flattens" not in lookup(4096, "bfloat16", "rr", "bias").config
    assert lookup(4096, "float16", "rr", "plain") is fp16_plain
    assert lookup(4096, "float16", "rr", "bias") is fp16_plain
    assert lookup(4096, "bfloat16", "rc", "plain") is None
    assert lookup(4096, "float32", "rr", "bias") is None


def test_describe_names_what_tells_candidates_apart():
    flattened = candidates.config(128, 256, 64, 8, 3, "persistent_interleaved", flatten=True)
    assert tune.describe(flattened) == (
        "[128, 256, 64] w8 s3 persistent_interleaved flattened tensor_descriptor"
    )
    two_per_sm = candidates.config(128, 128, 64, 4, 2, "persistent_interleaved", sm_multiplier=2)
    assert "2 per SM" in tune.describe(two_per_sm)
    assert tune.describe(candidates.SPLIT_CANDIDATES[-1]) == "[128, 256, 64] w8 s3 flat split_k 64"


def test_tune_shape_flag_parses_mxnxk():
    assert tune.parse_shape("1024x512X256") == (1024, 512, 256)
    with pytest.raises(argparse.ArgumentTypeError, match="--shape"):
        tune.parse_shape("1024x512")
    with pytest.raises(argparse.ArgumentTypeError, match="every size must be positive"):
        tune.parse_shape("0x512x256")


@pytest.mark.parametrize(
    "mnk,kind",
    [
        ((512, 512, 512), "small"),
        ((1024, 1024, 1024), "small"),
        ((4096, 1024, 1024), "medium"),
        ((8192, 8192, 8192), "large"),
        ((1536, 512, 20120), "split"),
        ((24, 2048, 8192), "split"),  # thin, too few narrow tiles
        ((16, 4096, 14336), "split"),  # thin, K twice N or more
        ((16, 6144, 4096), "thin"),
        ((1, 9216, 3072), "thin"),  # at most 32 rows and a long K
    ],
)
def test_tune_candidates_are_sized_to_the_output(mnk, kind):
    """The tuner times the kernel and configs the launcher would choose among: a narrow
    product's narrow tiles among the small candidates."""
    narrow = narrow_tiles.few_rows_config(mnk[0], mnk[1], tma=True)
    want = {
        "small": candidates.SMALL_CANDIDATES,
        "medium": candidates.SMALL_CANDIDATES + candidates.CANDIDATES,
        "large": candidates.CANDIDATES,
        "split": candidates.SPLIT_CANDIDATES,
        "thin": [narrow, *candidates.SMALL_CANDIDATES],
    }[kind]
    assert tune.candidates_for(*mnk, torch.bfloat16) == want
    assert (kind == "split") == all("split_k" in c.config for c in want)
    with_bias = tune.candidates_for(*mnk, torch.bfloat16, "bias")
    if kind in ("medium", "large"):
        assert with_bias == [*want, *candidates.BIAS_CANDIDATES]
    else:
        assert with_bias == want


def test_bias_candidates_load_the_bias_by_pointer():
    """x, y, bias, output: the generated code loads the bias with tl.load (registers), the
    operands and the output through tensor descriptors."""
    a, b = torch.randn(512, 256), torch.randn(256, 512)
    bias = torch.randn(512, 512)
    bound = matmul_kernel.bind((a, b, lambda acc, tile: acc + bias[tile[0], tile[1]]))
    code = bound.to_triton_code(candidates.BIAS_CANDIDATES[0])
    assert code.count("tl.make_tensor_descriptor(") == 3
    assert code.count("tl.load(") == 1
    assert "flatten=True" in code


def test_tune_candidates_are_distinct_and_valid_blocks():
    every = (
        candidates.SMALL_CANDIDATES,
        candidates.CANDIDATES,
        candidates.BIAS_CANDIDATES,
        candidates.SPLIT_CANDIDATES,
        candidates.PAIR_CANDIDATES,
        candidates.MEDIUM_PAIR_CANDIDATES,
    )
    for listed in every:
        configs_ = [repr(sorted(c.config.items())) for c in listed]
        assert len(set(configs_)) == len(configs_)
        for c in listed:
            assert all(b & (b - 1) == 0 and 16 <= b <= 256 for b in c.config["block_sizes"])


def test_tune_keys_cover_each_matmul_once_and_addmms_bias_epilogue():
    keys = tune.keys_of(None, None, "bfloat16", None)
    assert len(keys) == len(set(keys))
    assert (256, 256, 256, "bfloat16", "cr", "plain") in keys
    bias_keys = [key for key in keys if key[5] == "bias"]
    assert bias_keys == [(*s, "bfloat16", "rr", "bias") for s in shapes.ADDMM_SHAPES]
    one = tune.keys_of("addmm", [(20120, 512, 1536)], "float16", None)
    assert one == [
        (20120, 512, 1536, "float16", "rr", "plain"),
        (20120, 1536, 512, "float16", "rc", "plain"),
        (1536, 512, 20120, "float16", "cr", "plain"),
        (20120, 512, 1536, "float16", "rr", "bias"),
    ]
    assert tune.keys_of("addmm", [(20120, 512, 1536)], "float16", "bias") == one[3:]
    # 1024^3 is in both sets; its bias key comes with addmm, and its backward's two
    # products run as one pair.
    squares = tune.keys_of(None, [(1024, 1024, 1024)], "bfloat16", None)
    assert [key[4:] for key in squares] == [
        ("rr", "plain"),
        ("rc", "plain"),
        ("cr", "plain"),
        ("rccr", "plain"),
        ("rr", "bias"),
    ]
    # Pairs where both outputs are at most 4096x1024, the longer K first.
    pairs = [(key[:3], key[4]) for key in keys if len(key[4]) == 4]
    assert pairs == [
        *(((s, s, s), "rccr") for s in (256, 512, 1024, 2048)),
        ((1024, 1024, 4096), "crrc"),  # 4096x1024x1024: a.T @ g sums over 4096
        ((1024, 1024, 4096), "rccr"),  # 1024x4096x1024: g @ b.T sums over 4096
    ]


def test_pair_of_gives_each_product_the_candidates_settings():
    candidate = candidates.config(128, 256, 64, 8, 3, "persistent_interleaved", flatten=True)
    pair = model.pair_of(candidate).config
    assert pair["block_sizes"] == [128, 256, 64, 128, 256, 64]
    assert (pair["num_warps"], pair["num_stages"]) == (8, 3)
    assert (pair["pid_type"], pair["indexing"]) == ("persistent_interleaved", "tensor_descriptor")
    assert pair["l2_groupings"] == [8, 8] and "range_flattens" not in pair


def test_model_pair_is_for_gpus_only():
    a, b = torch.randn(2048, 1024), torch.randn(1024, 2048)
    assert configs.model_pair(a, b, b.T, a.T) is None


def test_tune_starts_a_pair_with_its_rule():
    key = (48, 40, 32, "float32", "rccr", "plain")
    assert tune.candidates_of_key(key, torch.float32) == [
        configs.pair_rule((48, 40, 32), (40, 32, 48), torch.float32),
        *candidates.PAIR_CANDIDATES,
    ]
    medium = (1024, 1024, 4096, "bfloat16", "crrc", "plain")
    assert tune.candidates_of_key(medium, torch.bfloat16) == [
        configs.pair_rule((1024, 1024, 4096), (4096, 1024, 1024), torch.bfloat16),
        *candidates.MEDIUM_PAIR_CANDIDATES,
    ]


def test_tune_times_what_a_key_gets_without_an_entry(monkeypatch):
    """On the GPU a key's candidates start with Helion's default and the config the runtime
    gives it without an entry (``choose_config`` without the table), each timed once: a
    serving batch's split-K key (200x3584x18944: 4 pieces of 128x256 as deep as they fit,
    which the tuner's own candidates, 8 to 64 pieces, lack), and a streaming product's plain
    key (96x6656x5120: 64x128 tiles in 8 stages)."""
    asked = []

    class Bound:
        class config_spec:
            default_config = staticmethod(lambda: "default")

    def without_table(bound, a, b, table=True):
        asked.append(table)
        m, k = a.shape
        n = b.shape[1]
        if wants_split_k(m, n, k, torch.bfloat16):
            return pipelines.streaming(long_k.split_rule(m, n, k, 132), 2, m, n, k)
        tile = long_k.one_wave_stream(m, n, k, 132, splits=False)
        plain = candidates.config(tile.rows, tile.columns, tile.block_k, 4, 2, "flat", "pointer")
        return pipelines.streaming(plain, 2, m, n, k)

    def bound(m, n, k, layout, epilogue, dtype, fill):
        return Bound, (torch.empty(m, k, dtype=dtype), torch.empty(k, n, dtype=dtype)), None

    monkeypatch.setattr(tune, "_bound", bound)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(configs, "choose_config", without_table)
    split = (200, 3584, 18944, "bfloat16", "rr", "plain")
    rule = pipelines.streaming(long_k.split_rule(200, 3584, 18944, 132), 2, 200, 3584, 18944)
    assert rule.config["split_k"] == 4 and rule not in candidates.SPLIT_CANDIDATES
    assert tune.candidates_of_key(split, torch.bfloat16) == [
        "default",
        rule,
        *candidates.SPLIT_CANDIDATES,
    ]
    stream = tune.candidates_of_key((96, 6656, 5120, "bfloat16", "rc", "plain"), torch.bfloat16)
    assert stream[1].config["block_sizes"] == [64, 128, 64]
    assert stream[1].config["num_stages"] == 8 and stream[2:].count(stream[1]) == 0
    assert asked == [False, False]


def test_tune_compile_jobs_cover_every_candidate_once():
    some = candidates.SMALL_CANDIDATES[:5]
    key = (512, 512, 512, "bfloat16", "rc", "plain")
    jobs = tune.compile_jobs(key, torch.bfloat16, some)
    assert {job[:6] for job in jobs} == {(512, 512, 512, "rc", "plain", "bfloat16")}
    shipped = [config for job in jobs for config in job[6]]
    assert shipped == [dict(c) for c in some]
    assert all(helion.Config(**config) == c for config, c in zip(shipped, some, strict=True))
    # A pair's jobs also compile its two launches (no configs), which tune_key times too.
    pair_jobs = tune.compile_jobs(
        (512, 512, 512, "bfloat16", "rccr", "plain"), torch.bfloat16, some
    )
    assert [job[6] for job in pair_jobs if job[6] is None] == [None]


@pytest.mark.parametrize(
    "dtype, a_shape, b_shape, b_transposed, pays",
    [
        (torch.bfloat16, (64, 32), (32, 1000), False, True),  # rows of 2000 bytes
        (torch.float16, (64, 32), (32, 40), False, True),
        (torch.bfloat16, (64, 32), (32, 1024), False, False),  # on lines
        (torch.bfloat16, (64, 32), (32, 1008), False, False),  # 2016 bytes: on 32
        (torch.float32, (64, 32), (32, 1000), False, False),  # 4000 bytes: on 32
        (torch.float32, (64, 32), (32, 1004), False, False),  # fp32 keeps the plain kernel
        (torch.bfloat16, (64, 32), (32, 1000), True, False),  # b contiguous along K
    ],
)
def test_transposed_pays_for_b_rows_on_16_bytes_only(dtype, a_shape, b_shape, b_transposed, pays):
    a = torch.randn(a_shape, dtype=dtype)
    b = (
        torch.randn(b_shape[::-1], dtype=dtype).T
        if b_transposed
        else torch.randn(b_shape, dtype=dtype)
    )
    assert configs.transposed_pays(a, b) is pays


@pytest.mark.parametrize("k, pays", [(64, True), (1024, True), (1000, False), (2000, False)])
def test_transposed_pays_for_a_along_m_with_columns_on_lines(k, pays):
    """The backward's mat1.T @ grad_out: mat1.T contiguous along M, its columns of k."""
    mat1 = torch.randn(48, k, dtype=torch.bfloat16)
    grad_out = torch.randn(48, 1000, dtype=torch.bfloat16)
    assert configs.transposed_pays(mat1.T, grad_out) is pays


def test_the_transposed_kernel_gets_the_config_of_the_transposed_product():
    from helion_ops.kernel import matmul_kernel, transposed_kernel

    a, b = torch.randn(64, 48, dtype=torch.float16), torch.randn(48, 24, dtype=torch.float16)
    ours = configs.choose_config(transposed_kernel.bind((a, b)), a, b)
    theirs = configs.choose_config(matmul_kernel.bind((b.T, a.T)), b.T, a.T)
    assert ours.config["block_sizes"] == theirs.config["block_sizes"] == [32, 64, 64]


@pytest.mark.parametrize("transposed_ms, keeps_entry", [(0.5, False), (2.0, True)])
def test_tune_keeps_an_entry_only_where_it_beats_the_transposed_kernel(
    monkeypatch, transposed_ms, keeps_entry
):
    """An entry makes the launchers run a product plain that they would run transposed."""
    args = (torch.randn(8, 8), torch.randn(8, 8), scaled(1.0))

    class Bound:
        def compile_config(self, config):
            return lambda *args: "candidate"

    times = {"aten": 1.5, "transposed": transposed_ms, "candidate": 1.0}
    monkeypatch.setattr(tune, "_bound", lambda *key: (Bound(), args, lambda: "aten"))
    monkeypatch.setattr(tune, "bench", lambda fn: times[fn()])
    monkeypatch.setattr(tune, "_run", lambda kernel, run_args, captured: "transposed")
    monkeypatch.setattr(configs, "transposed_pays", lambda a, b, epilogue: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "a GPU")
    key = (8, 8, 8, "bfloat16", "rr", "plain")
    entry = tune.tune_key(
        key,
        torch.bfloat16,
        [helion.Config(block_sizes=[16, 16, 16], num_warps=4, num_stages=2)],
        False,
    )
    assert (entry is not None) is keeps_entry


def test_tune_times_each_candidate_as_the_runtime_launches_it(monkeypatch):
    """The tuner compiles ``configs.as_launched`` of each candidate on the key's operands
    (host-built descriptors where rows start off lines), and the entry keeps the candidate
    as chosen, to which the runtime applies the same rules."""
    args = (torch.randn(8, 8), torch.randn(8, 8), scaled(1.0))
    compiled, launched_on = [], []

    class Bound:
        def compile_config(self, config):
            compiled.append(config)
            return lambda *args: "candidate"

    def as_launched(config, *operands):
        launched_on.append(operands)
        return helion.Config(**{**config.config, "host_tensor_descriptors": True})

    monkeypatch.setattr(tune, "_bound", lambda *key: (Bound(), args, lambda: "aten"))
    monkeypatch.setattr(tune, "bench", lambda fn: {"aten": 2.0, "candidate": 1.0}[fn()])
    monkeypatch.setattr(configs, "transposed_pays", lambda a, b, epilogue: False)
    monkeypatch.setattr(configs, "as_launched", as_launched)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "a GPU")
    candidate = helion.Config(block_sizes=[16, 16, 16], num_warps=4, num_stages=2)
    key = (8, 8, 8, "bfloat16", "rr", "plain")
    entry = tune.tune_key(key, torch.bfloat16, [candidate], False)
    assert [c.config.get("host_tensor_descriptors") for c in compiled] == [True]
    assert launched_on == [args[:2]]
    assert "host_tensor_descriptors" not in entry["config"]


@pytest.mark.parametrize(
    "warm, chosen",
    [
        ({"few stages": 1.00, "more stages": 1.03, "far": 1.20}, "more stages"),
        ({"few stages": 1.00, "more stages": 1.06, "far": 1.20}, "few stages"),
        ({"more stages": 1.00, "few stages": 1.02, "far": 1.20}, "more stages"),
    ],
)
def test_tune_breaks_near_ties_by_the_flushed_time(monkeypatch, warm, chosen):
    """Candidates within NEAR_TIE of the fastest under CUDA graphs are timed flushed, the
    fastest there wins; one alone is not timed flushed. (Flushed, 'few stages' takes 1.9,
    'more stages' 1.2, 'far' 0.5: the far one never wins.)"""
    args = (torch.randn(8, 8), torch.randn(8, 8), scaled(1.0))
    cold = {"few stages": 1.9, "more stages": 1.2, "far": 0.5}
    names = {}

    class Bound:
        def compile_config(self, config):
            return lambda *args: names[id(config)]

    timed_flushed = []

    def bench_flushed(fn):
        timed_flushed.append(fn())
        return cold[fn()]

    monkeypatch.setattr(tune, "_bound", lambda *key: (Bound(), args, lambda: "aten"))
    monkeypatch.setattr(tune, "bench", lambda fn: {"aten": 2.0, **warm}[fn()])
    monkeypatch.setattr(tune, "bench_flushed", bench_flushed)
    monkeypatch.setattr(configs, "transposed_pays", lambda a, b, epilogue: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "a GPU")
    candidates = []
    for i, name in enumerate(warm):
        config = helion.Config(block_sizes=[16, 16, 16 * (i + 1)], num_warps=4, num_stages=2)
        names[id(config)] = name
        candidates.append(config)
    key = (8, 8, 8, "bfloat16", "rr", "plain")
    entry = tune.tune_key(key, torch.bfloat16, candidates, False)
    expected = candidates[list(warm).index(chosen)]
    assert entry["config"]["block_sizes"] == expected.config["block_sizes"]
    assert entry["ms"] == warm[chosen]
    near = [name for name, ms in warm.items() if ms <= tune.NEAR_TIE]
    assert sorted(timed_flushed) == (sorted(near) if len(near) > 1 else [])
    assert entry.get("flushed_ms") == (cold[chosen] if len(near) > 1 else None)
    # --training's timings (break_ties False): the fastest under graphs, nothing flushed.
    timed_flushed.clear()
    entry = tune.tune_key(key, torch.bfloat16, candidates, False, break_ties=False)
    assert entry["ms"] == min(warm.values()) and not timed_flushed


def test_a_split_of_one_piece_is_left_to_the_plain_kernel(monkeypatch):
    """``splits_k`` on an H200's 132 SMs (faked): 2048x2048 outputs of a K of 16384 make 128
    tiles of 128x256, a wave already, which ``split_rule`` keeps in one piece; 700x300 of
    30000 it cuts; a table entry keeps its own split. Off the GPU, the kernel as asked."""
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(configs, "gpu_arch", lambda device: "sm90")
    monkeypatch.setattr(configs, "sm_count", lambda device: 132)
    monkeypatch.setattr(configs, "tuned_table", lambda arch: {})
    configs._key_splits_k.cache_clear()
    one, cut = (2048, 2048, 16384, "bfloat16", "rr"), (700, 300, 30000, "bfloat16", "cr")
    assert long_k.split_rule(*one[:3], 132).config["split_k"] == 1
    assert not configs._key_splits_k(one, cuda)
    assert configs._key_splits_k(cut, cuda)
    entry = long_k.split_rule(*one[:3], 132)
    monkeypatch.setattr(configs, "tuned_table", lambda arch: {(*one, "plain"): entry})
    configs._key_splits_k.cache_clear()
    assert configs._key_splits_k(one, cuda)
    configs._key_splits_k.cache_clear()
    a, b = (torch.empty(size, dtype=torch.bfloat16) for size in ((2048, 16384), (16384, 2048)))
    assert configs.splits_k(a, b)


def test_rows_off_16_bytes_choose_among_every_candidate():
    """1100^3 in bf16 (rows of 8 bytes, masks of 8) chooses among every candidate, and the
    shipped model picks a pointer tile (call 299: 128x128x64 pointer tiles 13-16 us,
    128x256x64 tensor-descriptor ones 20-21), as do rows of 2 bytes (an LM head's vocabulary
    of 50257; calls 310-311: six such products 1.35-5.9x faster than on the
    tensor-descriptor choice); aligned rows whose masks do not vectorize (a slice of 1100
    columns of rows of 1152) keep to tensor descriptors, which need no mask."""
    odd = [torch.empty(1100, 1100, dtype=torch.bfloat16) for _ in range(2)]
    sliced = [torch.empty(1100, 1152, dtype=torch.bfloat16)[:, :1100] for _ in range(2)]
    whole = [torch.empty(1152, 1152, dtype=torch.bfloat16) for _ in range(2)]
    head = torch.empty(100, 768, dtype=torch.bfloat16), torch.empty(768, 50257).bfloat16()
    assert not loads.masks_vectorize(*odd) and not loads.masks_vectorize(*sliced)
    assert not loads.tensor_descriptors_only(*odd)
    assert loads.tensor_descriptors_only(*sliced)
    assert not loads.tensor_descriptors_only(*head)
    assert not loads.tensor_descriptors_only(*whole)
    assert (loads.row_bytes(*odd), loads.row_bytes(*sliced)) == (8, 16)
    assert loads.row_bytes(odd[0][:, 1:]) == 2  # a base off 16 bytes: element by element
    assert loads.row_bytes(odd[0][:, ::2]) == 2  # no unit stride
    product = model.Product(1100, 1100, 1100, "rr", False, 132, row_bytes=8)
    chosen = model.shipped_model("sm90").choose(product)
    assert chosen.config["indexing"] == "pointer"
