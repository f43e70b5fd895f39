"""Products of a long K over few output tiles: where the split-K kernel cuts K and in how
many equal pieces (``split_rule``), and the tile that gives a streaming product of 65 to 128
rows the most programs of one wave (``one_wave_stream``).

The rules read sizes and the GPU's SM count only, never tensors; ``one_wave_stream``, which
the launchers ask on every call, is cached.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import helion
import torch

from helion_ops.candidates import split_config
from helion_ops.model import BATCH_MODEL_ROWS, k_block, power_of_two_pieces, split_k_block
from helion_ops.narrow_tiles import (
    THIN_K,
    THIN_ROWS,
    THIN_TILE,
    WAVE_PROGRAMS,
    few_columns_long_k,
    narrow_columns_long_k,
    thin,
)

# The dtypes the wave model and the rules for thin, narrow and streaming products cover.
FAST_DTYPES = (torch.float16, torch.bfloat16)


def few_tiles_long_k(m: int, n: int, k: int) -> bool:
    """At most 1024 output tiles of 64x64 and K at least 8x M and N."""
    return m * n <= 1024 * 64 * 64 and k >= 8 * max(m, n)


# A serving batch's products past the thin class (65 to 704 rows: the batch model's, a decode
# batch, a short prompt, an MoE expert) whose 128x256 tiles would fill at most a third of a
# wave (an H200's 132 SMs) and whose K is longer than ``THIN_K``: the plain kernel leaves most
# SMs idle or, on smaller tiles, reads the weight once a row tile; they split over K in equal
# pieces (``split_rule``). On the 25 batch training shapes (H200, bf16, under CUDA graphs,
# call 266, NOTES 118) all seven such products ran faster split or within 1% (208x4096x11008
# 0.82 -> 0.97 of aten, 232x3072x8192 0.88 -> 1.11, 336x2048x8192 0.58 -> 0.87); of the
# others the split lost on every one of more tiles and K at most 8192 (300x4096x4096: 48
# tiles, 0.82 -> 0.70) and tied on K short of THIN_K (272x3584x3584, 400x1408x2048). A K of
# THIN_K itself is too short to pay for the split's extra passes (zeroing and rounding the
# fp32 sums): on the held-out batch draw (call 267) 128x6144x4096 0.83 -> 0.62, 96x11008x4096
# 0.84 -> 0.74, 80x4096x4096 1.04 -> 1.00, where the one such training shape had gained
# (88x4096x4096 0.79 -> 0.85): that bound was set on the draw, which no longer holds it out.
# Products of 65 to 128 rows and a K of at least 2048 now follow ``one_wave_stream`` instead.
BATCH_SPLIT_ROWS = range(THIN_ROWS + 1, BATCH_MODEL_ROWS.stop)
BATCH_SPLIT_MAX_TILES = 132 // 3  # a third of an H200's SMs


def long_k_batch(m: int, n: int, k: int) -> bool:
    """Whether ``m x n x k`` is a serving batch's product that splits over K
    (``BATCH_SPLIT_ROWS`` and the rest above)."""
    tiles = math.ceil(m / 128) * math.ceil(n / 256)
    return m in BATCH_SPLIT_ROWS and k > THIN_K and tiles <= BATCH_SPLIT_MAX_TILES


# A product of 65 to 128 rows and a K of at least STREAM_MIN_K (a linear layer's forward at a
# decode or small prefill batch, or its backward's grad_out @ w.T) is bound by reading the
# weight once (``model.bandwidth_bound``); its programs each stream their columns of it in a
# deep pipeline (``pipelines.streaming``), at most one an SM. What sets its time is how many SMs
# stream in one wave: a second wave, even of a few programs, costs about as much as the first.
# ``one_wave_stream`` picks 128x128 tiles (the weight read once), 64x128 (two row tiles),
# 128x128 split over K in equal pieces of at least STREAM_MIN_PIECE, or 64x64 (two row
# tiles), whichever gives the most programs that fit one wave. On the H200 (bf16, 'rc', under
# CUDA graphs, call 285, NOTES 125) seven such products of no set ran fastest on the configs
# of most programs up to a wave, each in one wave: 120x8704x3072 on 68 programs of 128x128
# 19.5 us against 26.1 on 136 of 64x128 (aten 17.5); 96x6656x5120 on 104 of 64x128 23.0
# against 30.0 on 52 of 128x128; 80x4864x4864 in 3 pieces (114 programs) 18.4; 100x10752x4096
# on 84 of 128x128 30.1 against 39.1 on 168 of 64x128. Six of the seven took the measured
# best; 72x5632x4608's 132 programs in 3 pieces ran 20.7 against 19.5 on 88 of 64x128. Eight
# more (call 288, NOTES 126), with 64x64, 128x64 and 128x256 tiles too: 64x64 where it alone
# gives the most programs, 92x4096x2560 on 128 programs 8.6 us against 11.1 on 64 of 64x128
# (aten 6.7), 76x3072x3072 on 96 10.8 against 12.6 in 3 pieces (72); where it ties a split
# it lost (84x3584x5120: 112 programs, 15.7 against 14.7 in 4 pieces), so it comes last on a
# tie; 128x64 and 128x256 never ran more than 3% faster than the rule's choice. The 64x64
# tile steps K by 256 (3 stages, as many as fit): on the four products of no set where it
# ran (call 292, NOTES 127) 1.02-1.11x as fast as by 64 in 8 stages (76x3072x3072 10.9 ->
# 9.8 us, 92x4096x2560 8.6 -> 8.5, 66x2560x10240 33.2 -> 30.2); the other tiles ran 0.82-1.08x
# as fast by 128 (64x128 faster on four of nine), 0.52-0.94x by 256. On the ten products of
# our sets that run 64x64 (call 293, both layouts): 1.054x, 116x2304x2304 and 100x4096x2048
# 'rc' 5-8% slower.
STREAM_ROWS = range(THIN_ROWS + 1, 129)
STREAM_MIN_K = 2048
STREAM_MIN_PIECE = 1024


class StreamTile(NamedTuple):
    """``one_wave_stream``'s choice: the tile, the number of equal K pieces (1: plain) and
    the K step of a plain tile's loop."""

    rows: int
    columns: int
    pieces: int
    block_k: int = 64


@functools.cache
def one_wave_stream(m: int, n: int, k: int, sms: int, splits: bool = True) -> StreamTile | None:
    """The tile and number of equal K pieces of a streaming product (``STREAM_ROWS`` and the
    rest above): the most programs that fit one wave of ``sms``; on a tie the plain kernel
    of 128 columns, then fewer pieces, then 64x64 tiles; ``splits=False``: the plain
    kernel's only. None for other products, and where no choice fits one wave. Cached: the
    launchers' slow path asks on every call (through ``long_k_product``), and costing
    the splits takes about 24 microseconds."""
    if m not in STREAM_ROWS or k < STREAM_MIN_K or few_tiles_long_k(m, n, k):
        return None
    options = [
        StreamTile(128, 128, 1),
        StreamTile(64, 128, 1),
        StreamTile(64, 64, 1, 256),
    ]
    if splits:
        for split in range(2, 65):
            pieces = math.ceil(k / split_k_block(k, split))
            if k // pieces >= STREAM_MIN_PIECE:
                options.append(StreamTile(128, 128, pieces))

    def programs(tile: StreamTile) -> int:
        return math.ceil(m / tile.rows) * math.ceil(n / tile.columns) * tile.pieces

    fitting = [tile for tile in options if programs(tile) <= sms]
    if not fitting:
        return None
    return max(fitting, key=lambda t: (programs(t), t.columns, -t.pieces))


# The split-K rule's tiles: (BM, BN, stages, warps, the cost of one K step of 64). The costs
# are the wave model's per-step coefficients of the plain kernel's tiles of these shapes
# (sm90, bf16: 680-713 ns for 128x256, 374-410 for 128x128), relative; on a tie the wider.
SPLIT_TILES = ((128, 256, 3, 8, 1.8), (128, 128, 4, 4, 1.0))
# A serving batch's split (``split_rule``) also has 64x256 tiles of one warpgroup: as many
# MACs a K step as 128x128, so its step cost. With them it picks the fastest timed split on
# all seven batch training shapes of that class (H200, bf16, call 266, 3-9 splits timed on
# each); with ``SPLIT_TILES`` alone it missed two (144x5120x13824 and 704x1536x8960: 128x256
# in 3 pieces, 0.91 of 64x256 in 2).
BATCH_SPLIT_TILES = (*SPLIT_TILES, (64, 256, 4, 4, 1.0))
# What the split-K kernel's atomic add of one fp32 tile costs, in the tile's K steps of 64.
ATOMIC_STEPS = 8


def thin_split(m: int, n: int, k: int, sms: int) -> helion.Config:
    """A thin product's split-K config: ``THIN_TILE``, K cut so that the programs (tiles
    times pieces) come nearest, by ratio, to two per SM: the pieces of power-of-two blocks
    that it was measured with (``power_of_two_pieces``), now of equal length."""
    bm, bn, stages, warps = THIN_TILE
    tiles = math.ceil(m / bm) * math.ceil(n / bn)
    split = two_per_sm(tiles, k, sms, [1 << e for e in range(9)], k_block)
    return split_config(bm, bn, 64, power_of_two_pieces(k, split), stages, warps=warps)


def two_per_sm(
    tiles: int, k: int, sms: int, splits: Sequence[int], block: Callable[[int, int], int]
) -> int:
    """The split of ``splits`` whose programs (``tiles`` times K's pieces of ``block(k,
    split)``) come nearest, by ratio, to two per SM; on a tie the first."""

    def distance(split: int) -> float:
        return abs(math.log(tiles * math.ceil(k / block(k, split)) / (2 * sms)))

    return min(splits, key=distance)


# A product of a few columns and a long K (``narrow_tiles.few_columns_long_k``: a LoRA A of
# rank 8 over 4096 rows, the weight gradients of a value head or a router over a long run of
# tokens) splits K over tiles of FEW_COLUMNS_TILE (BM, BN, stages, warps), 16 columns, as
# many programs as come nearest, by ratio, to two an SM. On the H200 (bf16, under CUDA graphs,
# call 313, NOTES 133): 4096x8x8192 in 8 pieces 21.6 us against the transposed kernel's 37.5
# (aten 24.6), 4 pieces 22.4, 2 27.9; 128x128 tiles in 4 pieces 24.5; 4096x8x16384 'cr' 36.5
# in 8 or 4 against 76.2 (37.6); 4096x1x16384 'cr' 38.6 in 8 against 87.9 (35.2).
FEW_COLUMNS_TILE = (128, 16, 4, 4)


def few_columns_split(m: int, n: int, k: int, sms: int) -> helion.Config:
    """A few columns' split-K config (``FEW_COLUMNS_TILE``): K in the equal pieces
    (``split_k_block``, 1 to 64) whose programs come nearest, by ratio, to two per SM; on a
    tie the fewer."""
    bm, bn, stages, warps = FEW_COLUMNS_TILE
    tiles = math.ceil(m / bm) * math.ceil(n / bn)
    split = two_per_sm(tiles, k, sms, range(1, 65), split_k_block)
    return split_config(bm, bn, 64, split, stages, warps=warps)


def split_rule(m: int, n: int, k: int, sms: int) -> helion.Config:
    """The split-K kernel's config where the table has none: ``thin_split`` for a thin
    product (whose K loads element by element), else ``least_cost_split`` among
    ``BATCH_SPLIT_TILES`` for a serving batch's product (``long_k_batch``, not also
    ``few_tiles_long_k``) and among ``SPLIT_TILES`` for the rest.

    Costed in equal pieces since NOTES 120; before, in the power-of-two blocks the kernel
    once cut. The eight products of our sets whose split moved (a backward's
    ``grad_out @ mat2.T`` of an LM head or the weight gradient of a tall product; 1-49
    pieces -> 2-64) ran 1.002-1.082x faster on the H200 (bf16 backwards under CUDA graphs,
    call 271), for example the held-out 49152x512x1024's 198.3 -> 183.2 us (12 pieces of
    128x128 -> 8 of 128x256) and 128x152064x3584's 764.2 -> 738.7 (38 -> 9); two weight
    gradients of 999936 rows (call 272) 1.054x (62 -> 22 pieces) and 0.992x (16 -> 33). The
    table's split-K keys keep their tuned entries (256x768 outputs of a K of 1e6: 62 pieces,
    where the rule cuts 22)."""
    if thin(m, n, k):
        return thin_split(m, n, k, sms)
    if few_columns_long_k(m, n, k, 2):  # (fp16 and bf16 alone split by these rules)
        return few_columns_split(m, n, k, sms)
    stream = one_wave_stream(m, n, k, sms)
    if stream is not None:
        return split_config(128, 128, 64, stream.pieces, 4)  # (its splits' tile)
    if long_k_batch(m, n, k) and not few_tiles_long_k(m, n, k):
        return least_cost_split(m, n, k, sms, BATCH_SPLIT_TILES)
    return least_cost_split(m, n, k, sms, SPLIT_TILES)


def wave_cost(
    m: int, n: int, k: int, sms: int, tile: tuple[int, int, int, int, float], block: int
) -> float:
    """The split-K kernel's cost with a tile of ``SPLIT_TILES``' form and K in blocks of
    ``block``: its ``tiles * pieces`` programs run in ``ceil(programs / sms)`` rounds of
    ``block / 64`` steps plus the atomic add of the fp32 tile (``ATOMIC_STEPS``), each at the
    tile's cost."""
    bm, bn, _, _, step = tile
    programs = math.ceil(m / bm) * math.ceil(n / bn) * math.ceil(k / block)
    return step * math.ceil(programs / sms) * (math.ceil(min(block, k) / 64) + ATOMIC_STEPS)


def least_cost_split(
    m: int, n: int, k: int, sms: int, tiles: tuple[tuple[int, int, int, int, float], ...]
) -> helion.Config:
    """The tile of ``tiles`` and number of equal K pieces (``split_k_block``, 1 to 64) of
    least ``wave_cost``; on a tie the fewer pieces, then the tile listed first."""
    options = [
        (wave_cost(m, n, k, sms, tile, split_k_block(k, split)), split, index)
        for index, tile in enumerate(tiles)
        for split in range(1, 65)
    ]
    _, split, index = min(options)
    bm, bn, stages, warps, _ = tiles[index]
    return split_config(bm, bn, 64, split, stages, warps=warps)


def long_k_product(m: int, n: int, k: int, dtype: torch.dtype) -> bool:
    """Whether an ``m x n x k`` product of ``dtype`` splits over K wherever K loads in
    vectors: in fp16 and bf16, a streaming product (65 to 128 rows, a long K) where
    ``long_k.one_wave_stream`` cuts K (on an H200's SMs); else few output tiles and a long K
    (``few_tiles_long_k``), or, in fp16 and bf16, a serving batch's product of few tiles and
    a long K (``long_k.long_k_batch``) or a product of a few or narrow columns and a long K
    (``narrow_tiles.few_columns_long_k``, ``narrow_tiles.narrow_columns_long_k``)."""
    stream = dtype in FAST_DTYPES and one_wave_stream(m, n, k, WAVE_PROGRAMS)
    if stream:
        return stream.pieces > 1
    fast = dtype in FAST_DTYPES
    return (
        few_tiles_long_k(m, n, k)
        or (fast and long_k_batch(m, n, k))
        or (fast and few_columns_long_k(m, n, k, dtype.itemsize))
        or (fast and narrow_columns_long_k(m, n, k))
    )
