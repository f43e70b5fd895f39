"""Products of a few rows (decode steps, small batches) against a long weight: which run
narrow tiles of their own rather than the wave model's choice (``few_rows``), and the tiles
they run (``few_rows_config``). A thin product whose narrow tiles would keep too little of
the weight in flight splits over K instead (``narrow_tiles_pay``, ``long_k.thin_split``).
"""

from __future__ import annotations

import math

import helion
import torch

from helion_ops.candidates import config as plain_config
from helion_ops.loads import tma_aligned

# Thin products: a few rows (decode steps of a batch of at most 64) times a weight of a long K
# and a narrow N. Reading the weight is all their time; the wave model's tiles along N
# (ceil(N / 128) of 64x128) leave most SMs idle and the rest short of loads in flight.
# Where K loads in vectors and enough narrow tiles stream the weight (``narrow_in_flight``)
# they run the plain kernel on those (``few_rows_config``); else, and where K loads element
# by element (K off 16 bytes: the GPT-2 head's grad_out @ mat2.T, 4x768x50257), they split
# over K into about two programs an SM of ``THIN_TILE`` (4 stages of bf16 tiles: 96 KiB of
# shared memory, so two fit an SM): 1162 us -> 55.5 (aten 79.5) on the H200 (bf16, call
# 243, NOTES 112). The bounds are the most measured: N of 768 to 8192, K of 4096
# to 50257. With more columns (16x14336x4096, 112 tiles of 128) the model's choice ran 1.07x
# faster than the narrow tiles (31.3 us against 33.3, call 250).
THIN_ROWS = 64
THIN_COLUMNS = 64 * 128
THIN_K = 4096
THIN_TILE = (64, 128, 4, 4)  # BM, BN, stages, warps


def thin(m: int, n: int, k: int) -> bool:
    """Whether ``m x n x k`` is a thin product (``THIN_ROWS`` and the rest above)."""
    return m <= THIN_ROWS and n <= THIN_COLUMNS and k >= THIN_K


# Narrow tiles of 128 columns where they give a wave of programs (an H200's 132 SMs), else
# of 64 where those give half of one, else of 32 (``few_rows_config``). On the H200 (bf16,
# call 255): 1x9216x3072 on 72 programs of 128 columns 23.3 us, on 144 of 64 17.0.
WAVE_PROGRAMS = 132
WIDE_TILE_PROGRAMS = 66


def wide_tiles_fill_a_wave(n: int) -> bool:
    """Whether a few rows' ``n`` columns give ``WAVE_PROGRAMS`` tiles of 128."""
    return math.ceil(n / 128) >= WAVE_PROGRAMS


# Products of at most this many rows outside the thin class that run narrow tiles too
# (``narrow``): a K of NARROW_MIN_K to THIN_K, or a weight wide enough for a wave of
# programs of 128 columns. On the H200 (bf16, under CUDA graphs, against aten; NOTES 115):
# 1x9216x3072 17.0-17.2 us on 16x64x256 against the model's 49.2 (aten 17.9-19.1; calls 255
# and 256), 28x8192x3584 18.1-18.4 against 19.9 (16.5-16.9), 12x18176x4544 on 16x128x128
# 46.1 against 53.1 (45.1-45.2), the LM heads of 128256-256000 columns 0.99-1.00 of aten
# against 0.95-0.99. Where 128 columns give 86-112 programs and K is 4096 (8x14336x4096,
# 12x11008x4096, 32x14336x4096; call 256) the model's choice ran 10-23% faster than 64
# columns, and with 64 rows the model's tile is about the narrow one (64x20480x5120: 60.8 us
# against 63.6, call 255): those stay the model's.
NARROW_ROWS = 32
NARROW_MIN_K = 3072  # the shortest measured


def narrow(m: int, n: int, k: int) -> bool:
    """Whether an fp16 or bf16 ``m x n x k`` product runs narrow tiles (``few_rows_config``,
    or a split over K where those do not pay: ``narrow_tiles_pay``): thin, or of at most
    ``NARROW_ROWS`` rows and a K of at least ``NARROW_MIN_K``, short of ``THIN_K`` or with
    128 columns for ``WAVE_PROGRAMS`` programs."""
    if thin(m, n, k):
        return True
    return m <= NARROW_ROWS and k >= NARROW_MIN_K and (k < THIN_K or wide_tiles_fill_a_wave(n))


def few_rows(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the plain kernel runs ``a @ b`` on ``few_rows_config`` rather than the model's
    choice: fp16 or bf16, at most ``THIN_ROWS`` rows, and thin, or with ``b`` (the weight)
    not loadable by tensor descriptors (the GPT-2 head's forward: b's rows of 50257
    elements), or ``narrow`` past thin with both operands loadable so. (A narrow product
    whose ``a`` is not, K off 16 bytes, keeps the model's choice, and the staging of ``a``,
    a few rows, where the model predicts it pays: narrow tiles would load K by pointer.)"""
    m, k = a.shape
    n = b.shape[1]
    return (
        a.dtype in (torch.float16, torch.bfloat16)
        and m <= THIN_ROWS
        and (thin(m, n, k) or not tma_aligned(b) or (narrow(m, n, k) and tma_aligned(a)))
    )


# Products of at most FEW_COLUMNS columns over at least FEW_COLUMNS_ROWS rows (MoE routers of 8
# experts, value heads and logits of one output) run transposed, out.T = b.T @ a.T
# (``kernel.transposed_kernel``), on the narrow tiles of a few rows (``few_rows_config`` of that
# product): reading ``a`` is all their time, and the model's tiles, 32 columns and wider, leave most
# of each tile idle. On the H200 (bf16, under CUDA graphs, call 312, NOTES 132): 20480x1x2048 29.1
# us -> 22.7 (aten 23.1), 6144x8x5120 27.0 -> 22.8 (21.2); from 16 columns the model's tiles ran
# 1.20-1.46x faster than these (3072x16x8192 17.7 us against 22.6, 12288x32x3072 23.2 against 29.7,
# 10240x64x2560 16.3 against 23.7). FEW_COLUMNS_ROWS: 128 programs of 32 columns, about a wave. Call
# 313 (eight products of no set, both rules in one process): 1.07-1.93x faster where b's rows are
# back to back (4096x1x4096 19.1 -> 9.9 us, aten 10.4); with b column-major, loading along K in
# vectors, the model's pointer tiles ran as fast (20480x2x2048 'rc' 23.9 against 23.5) or faster
# (12288x4x4096 'rc' 26.0 against 30.1, aten 51.6); and with K of 256, short of one pass of the
# 4-stage pipeline, 65536x1x256 0.80 -> 0.72 of aten: those keep the model's.
FEW_COLUMNS = 8
FEW_COLUMNS_ROWS = 4096


def few_columns(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a @ b`` runs transposed on a few rows' narrow tiles (``FEW_COLUMNS``): fp16
    or bf16, at most ``FEW_COLUMNS`` columns, at least ``FEW_COLUMNS_ROWS`` rows, ``b``
    row-major (its rows back to back, or each on a line of its own as a staged copy's: the
    backward's grad_out of 4 columns, copied for ``grad_out @ mat2.T``, which
    ``mat1.T @ grad_out`` reads too), both operands loadable by tensor descriptors (the
    tiles measured; b's rows of 2 or 4 columns are not, unless staged), a K that fills the
    tiles' pipeline, and the tiles paying (``few_columns_tiles_pay``; else the product splits
    over K: ``few_columns_long_k``)."""
    (m, k), n = a.shape, b.shape[1]
    return (
        a.dtype in (torch.float16, torch.bfloat16)
        and n <= FEW_COLUMNS
        and m >= FEW_COLUMNS_ROWS
        and (b.stride(1) == 1 or n == 1)
        and tma_aligned(a, b)
        and k >= pipeline_k(few_rows_config(n, m, tma=True))
        and few_columns_tiles_pay(m, n, k, a.element_size())
    )


def few_columns_tiles_pay(m: int, n: int, k: int, itemsize: int) -> bool:
    """Whether an ``m x n x k`` product of a few columns runs the narrow tiles of its
    transposed product rather than a split over K: they pay as that thin product's would
    (``narrow_tiles_pay``), and it is not one of ``eight_columns_split``."""
    return narrow_tiles_pay(n, m, k, itemsize) and not eight_columns_split(m, n, k)


# At FEW_COLUMNS columns (b's rows of 16 bytes) over 4096 to 4160 rows, where the transposed
# product's narrow tiles are 32 columns wide (128 programs), those fall behind the split over K
# (``few_columns_long_k``) from a K of EIGHT_COLUMNS_SPLIT_K, short of the twice M from which a
# thin product's would. On an H100 (bf16, under CUDA graphs, NOTES 136): 4096x8x4096 split
# 10.7 us against 11.1 (aten 9.7), 4096x8x4608 11.7 against 15.6 (10.9; call 317, two rounds);
# 4096x8x5120 13.6 against 20.7, 4096x8x7168 26.2 against 31.1 (call 315); the narrow tiles
# 1.10x faster at 4096x8x3072, and 1.08-1.14x at 4096x4x6144 and 4096x1x6144 (call 315).
EIGHT_COLUMNS_SPLIT_K = 4096


def eight_columns_split(m: int, n: int, k: int) -> bool:
    """Whether a product of ``FEW_COLUMNS`` columns splits over K where its transposed
    product's narrow tiles are 32 columns wide: from a K of ``EIGHT_COLUMNS_SPLIT_K``."""
    return n == FEW_COLUMNS and k >= EIGHT_COLUMNS_SPLIT_K and narrow_tile_columns(n, m) == 32


def pipeline_k(config: helion.Config) -> int:
    """The K that one pass of ``config``'s pipeline loads: its stages of its K block."""
    return config.config["num_stages"] * config.config["block_sizes"][2]


# Under FEW_COLUMNS_ROWS rows a few columns' product is too short for a wave of narrow tiles, and
# the model's tiles give fewer programs still (2048x1x4096: 16 of 128x128), each streaming a
# long run of ``a``: from FEW_COLUMNS_SPLIT_K it splits over K as a long one does, in pieces
# for about two programs an SM (``long_k.few_columns_split``).
FEW_COLUMNS_SPLIT_K = 2048


def few_columns_long_k(m: int, n: int, k: int, itemsize: int) -> bool:
    """Whether an fp16 or bf16 ``m x n x k`` product of a few columns splits over K
    (``long_k.few_columns_split``): at most ``FEW_COLUMNS`` columns over more than
    ``THIN_ROWS`` rows, and under ``FEW_COLUMNS_ROWS`` rows a K of at least
    ``FEW_COLUMNS_SPLIT_K``; from ``FEW_COLUMNS_ROWS`` rows where the narrow tiles of the
    transposed product do not pay (``few_columns_tiles_pay``), in effect 4096 to 4160 rows,
    where those tiles are 32 columns wide, from a K of twice M (at ``FEW_COLUMNS`` columns
    from ``EIGHT_COLUMNS_SPLIT_K``): from 4161 they are 64 and pay (at 8 columns on an H100,
    call 317: 1.03-1.12x faster than the split from 6144 rows; 5120x8x5120 1.05x slower)."""
    if n > FEW_COLUMNS or m <= THIN_ROWS:
        return False
    if m < FEW_COLUMNS_ROWS:
        return k >= FEW_COLUMNS_SPLIT_K
    return not few_columns_tiles_pay(m, n, k, itemsize)


# Tall products of 9 to NARROW_COLUMNS columns that load by tensor descriptors alone (N off
# 16 bytes, as a router of 60 experts: masks that do not vectorize, ``loads.
# tensor_descriptors_only``) would choose among the model's tensor-descriptor tiles, all 128
# columns or wider, half of each tile past N; they run NARROW_COLUMNS_TILE's 64 columns
# instead. On the H200 (bf16, under CUDA graphs, call 313, NOTES 133): 16384x60x2048 (b
# staged) 20.9 us on 128x64x64 tensor-descriptor tiles against 55.6 shipped (aten 33.5), 64x64
# 23.4, 64x128 28.4, 128x256 31.9; split over K on 128x64 in 2 pieces 26.8.
NARROW_COLUMNS = 64
NARROW_COLUMNS_TILE = (128, 64, 64, 4, 4)  # BM, BN, BK, warps, stages


def narrow_columns(m: int, n: int) -> bool:
    """Whether a product of ``m`` rows and ``n`` columns that loads by tensor descriptors
    alone runs ``NARROW_COLUMNS_TILE``: more than ``FEW_COLUMNS`` and at most
    ``NARROW_COLUMNS`` columns over at least ``FEW_COLUMNS_ROWS`` rows."""
    return FEW_COLUMNS < n <= NARROW_COLUMNS and m >= FEW_COLUMNS_ROWS


# A narrow layer's weight gradient (a router's, an adapter's or a small head's: ``x.T @
# grad_out``, 33 to 128 columns, K the tokens) reads x once, over few output tiles (4096x40:
# 32 of 128x128). Short of ``few_tiles_long_k``'s K of 8x M it ran plain, on the model's
# narrow tiles, at 0.67-0.88 of aten (H100, bf16, under CUDA graphs, call 445, NOTES 182).
# From a K of NARROW_SPLIT_K_RATIO x M, and at least NARROW_SPLIT_MIN_K (a shorter K's
# product may not pay for the split's zeroing and cast), over at most NARROW_SPLIT_ROWS rows,
# it splits over K (``long_k.split_rule``: 128x128 tiles, 4 pieces at 4096 rows, one wave).
# The rule on against off from a K of 2x M and 8192 (H100, calls 446-451, NOTES 183): the 15
# bf16 backwards it moved 1.04-3.65x faster (16384x40x4096 143 -> 113 us, aten 117;
# 16384x100x3000 437 -> 120, aten 170), seven forwards 1.00-1.64x (2048x96x8192 24.7 -> 15.1,
# aten 13.9), fp16 alike. Above 4096 rows the plain kernel has programs enough: six of eight
# forwards of 5120-8192 rows ran 0.88-0.98x as fast split (6144x64x12288 54.6 -> 62.3), two
# 1.07x and 1.22x; hence the bound.
# From a K of M and 4096 (H200, call 452, NOTES 185): backwards of 64-100 columns 1.09-1.15x
# faster (4096x100x3000 46.9 -> 42.8 us, aten 49.9; 6000x100x3000 63.6 -> 55.5, aten 71.9),
# forwards 4096x40x4096 18.8 -> 13.2 (aten 16.3) and 3000x100x6000 27.4 -> 17.7 (31.3),
# 2048x64x4096 1.03x. A whole tile of 128 columns keeps the floor of 2x M and 8192: from the
# lower one its forwards ran 0.92x as fast split (H100, call 456: 4096x128x4096,
# 4096x128x7168, 3072x128x7168; 0.98x on the H200), its backwards 1.03-1.05x (7168x128x4096,
# 5120x128x4096; 5000x128x2048 1.23x on the H200).
NARROW_SPLIT_COLUMNS = range(33, 129)
NARROW_SPLIT_ROWS = 4096
NARROW_SPLIT_K_RATIO = 1
NARROW_SPLIT_MIN_K = 4096
WHOLE_TILE_COLUMNS = 128
WHOLE_TILE_K_RATIO = 2
WHOLE_TILE_MIN_K = 8192


def narrow_columns_long_k(m: int, n: int, k: int) -> bool:
    """Whether an fp16 or bf16 ``m x n x k`` product of ``NARROW_SPLIT_COLUMNS`` columns over
    more than ``THIN_ROWS`` and at most ``NARROW_SPLIT_ROWS`` rows splits over K: a K of at
    least ``NARROW_SPLIT_K_RATIO`` x M and ``NARROW_SPLIT_MIN_K`` (at ``WHOLE_TILE_COLUMNS``
    columns ``WHOLE_TILE_K_RATIO`` x M and ``WHOLE_TILE_MIN_K``)."""
    if n == WHOLE_TILE_COLUMNS:
        least_k = max(WHOLE_TILE_K_RATIO * m, WHOLE_TILE_MIN_K)
    else:
        least_k = max(NARROW_SPLIT_K_RATIO * m, NARROW_SPLIT_MIN_K)
    return n in NARROW_SPLIT_COLUMNS and THIN_ROWS < m <= NARROW_SPLIT_ROWS and k >= least_k


def few_rows_config(m: int, n: int, tma: bool) -> helion.Config:
    """The plain kernel's config for a product of ``m`` rows (``few_rows``): rows in one
    tile of 16 to 64, narrow tiles along N (64 columns for 33 to 64 rows; else 128, 64 or 32
    by ``WAVE_PROGRAMS`` and ``WIDE_TILE_PROGRAMS``) in a deep pipeline, so that
    about a program an SM streams its columns of the weight with many loads in flight.
    ``tma``: both operands load by tensor descriptors; else by pointer in one stage, where
    b's rows load element by element and no asynchronous copy can pipeline them.

    On the H200 (bf16, calls 250 and 255, NOTES 114-115; each against aten and the thin
    split it replaces, under CUDA graphs) these were the fastest of 13-18 configs or within
    4%: 1x4096x4096 9.3 us (aten 10.4, split 10.0), 2x8192x8192 33.8 (33.1; the model's
    40.9), 48x5120x5120 16.1 (15.4, split 19.1), 64x4096x11008 28.8 (30.4, 31.4); the GPT-2
    head's forward at 4 tokens by pointer 29.4 (aten 39.3; the model's choice, unstaged,
    76.7); on 128 columns 12x18176x4544 43.6 (aten 45.1; 43.1 on 16x128x64 in 6 stages)."""
    bm = max(16, 1 << (m - 1).bit_length())
    if not tma:
        return plain_config(bm, 64, 64, 4, 1, "flat", "pointer")
    if bm == THIN_ROWS:
        return plain_config(bm, 64, 128, 4, 6, "flat")
    if wide_tiles_fill_a_wave(n):
        columns = 128
    else:
        columns = 64 if math.ceil(n / 64) >= WIDE_TILE_PROGRAMS else 32
    return plain_config(bm, columns, 128 if columns == 128 else 256, 4, 4, "flat")


def narrow_tile_columns(m: int, n: int) -> int:
    """The columns of a few rows' narrow tiles on tensor descriptors (``few_rows_config``)."""
    return few_rows_config(m, n, tma=True).config["block_sizes"][1]


# The bytes of the weight that a thin product's narrow tiles keep in flight, at the least:
# (programs) x (stages - 1) x (a stage's tile of the weight). Below it a thin product splits
# over K instead, its programs about two an SM. On the H200 (bf16, calls 250-251, NOTES 114):
# 24x2048x8192 on 64 programs of 32x32x256 (3 MiB) took 18.6 us against the split's 9.4
# (aten 9.4); 1x2560x10240 on 80 of 16x32x256 (3.75 MiB) 19.5-19.8 against 21.8.
NARROW_IN_FLIGHT = 3.5 * 2**20


def narrow_in_flight(m: int, n: int, itemsize: int) -> bool:
    """Whether a thin ``m x n`` product's narrow tiles (``few_rows_config`` on tensor
    descriptors) keep ``NARROW_IN_FLIGHT`` bytes of the weight in flight."""
    chosen = few_rows_config(m, n, tma=True).config
    bm, bn, bk = chosen["block_sizes"]
    programs = math.ceil(m / bm) * math.ceil(n / bn)
    return programs * (chosen["num_stages"] - 1) * bk * bn * itemsize >= NARROW_IN_FLIGHT


def narrow_tiles_pay(m: int, n: int, k: int, itemsize: int) -> bool:
    """Whether a thin product runs narrow tiles rather than a split over K: they keep enough
    of the weight in flight (``narrow_in_flight``), and, where they are 32 columns wide (a
    row of the weight read 64 bytes at a time) for at most ``NARROW_ROWS`` rows, K is under
    twice N. Past that 64x128 tiles split over K ran faster on the H200 (bf16, under CUDA
    graphs, NOTES 115): 3x3072x8192 14.3 us against 19.6 (aten 16.0-16.7; calls 255-256),
    8x3584x18944 35.7 against 40.3 (39.8-40.1); 1x2560x10240 the other way, 21.4 against
    19.6 (17.1-17.3). With 64 columns, 4x6144x24576 split 94.0 us against 70.8 (71.5)."""
    long_k = m <= NARROW_ROWS and narrow_tile_columns(m, n) == 32 and k >= 2 * n
    return narrow_in_flight(m, n, itemsize) and not long_k
