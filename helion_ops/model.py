"""A wave model of the matmul kernel's time on any shape, and the config it picks.

An exact table fits the shapes it was tuned on; users bring their own. What decides a tile
shape's time on a new shape is mostly how its tiles fill the SMs: a product of ``tiles``
output tiles gives the busiest SM ``rounds = ceil(tiles / SMs)`` of them, each of
``steps = ceil(K / bk)`` K steps (programs that share an SM share its tensor cores, so
residency changes the rate, not the count). So for each candidate of ``MODEL_CANDIDATES``
and each operand layout the model is

    time = a * rounds * steps + b * rounds + c

``a``: one K step of a wave; ``b``: a wave's prologue and epilogue (the loads before the first
dot, the store); ``c``: the launch. Wave quantization (a last wave that leaves SMs idle),
tails (tiles that overhang M or N, counted whole) and short K loops (where ``b`` dominates) all
come out of it. ``a``, ``b`` and ``c`` are fit, per candidate and layout, by non-negative least
squares on relative error over the aligned shapes of a training grid
(``helion_ops.shapes.TRAINING_SHAPES``, timed by ``python -m helion_ops.tune --training``).
Operands whose rows are not 16-byte aligned cannot use tensor descriptors (Helion silently
falls back to pointer indexing, and every load is masked), so each candidate also gets a
factor for them, per ``row_bytes`` (the widest vector their rows allow: 2, 4 or 8 bytes, as
Triton reads them from the strides Helion bakes in), with a trend in K (``UNALIGNED_K``):
fit by least squares on the logarithm of measured over predicted time on the unaligned
training shapes of that width (H200, bf16, at K = 2048: rows of 8 bytes 1.3-2.8x the aligned
time, of 4 bytes 1.9-4.5x, of 2 bytes 2.2-8.2x; exponents of K from -0.3 to 0.3). Rows
that are 16-byte aligned but start off 128-byte lines (sizes such as 1000 or 3000,
multiples of 8 elements but not of 64 in bf16) cost more too, the more the smaller the
tile, and for pointer loads more than for tensor descriptors (H200, bf16:
1.0-1.6x for each such operand): each candidate gets one factor for ``a`` and one for ``b``
off lines (``dense_off_lines``), fit by least squares on the logarithm of measured over
predicted time on the training shapes of such sizes. (The output's rows cost nothing
measurable.) ``python -m helion_ops.fit`` does the fit and reports how well the choice holds
on shapes left out of it.

The choice (``Model.plan``): the candidate of least predicted time (``Model.choose``: among
candidates predicted within ``PREDICTED_TIE`` of it, the fewest output tiles), or, where a
product's last wave of tiles leaves SMs idle and splitting it over K in the same launch is
predicted faster by ``LAST_WAVE_GAIN`` (``last_wave``; ``LAST_WAVE_GAIN_FLATTENED`` for a
flattened candidate, whose split runs unflattened), that split. A backward's two products
(``Model.pair``) run in one launch where predicted to take at most ``PAIR_GAIN`` times
their time run as ``plan`` says, plus, outside CUDA graphs (where each launch also costs
host time) and for backwards short enough not to hide it, ``EAGER_LAUNCH_MS``: the same
per-tile times (``a * steps + b`` a tile, one ``c``), with the second product's tiles
filling the SMs the first one's last wave leaves idle (``busiest_sm``). The training grid's
backwards that the model may pair are timed in one launch of each candidate as well
(``pair_of``), to report how that choice holds on pairs left out (``helion_ops.fit``); a factor
per candidate for the pair kernel, fit on them, chose no better there (NOTES 86).

A serving batch's forward (``batch_product``: 64 to 704 rows, operands row-major and 16-byte
aligned, or a linear layer's ``x @ w.T`` of at most ``RC_BATCH_ROWS``) has few tiles, in a
partial wave, and 64-row tiles pad its rows less than 128-row ones: the form fit on the
training grid misses its time (refit with such products too, it chose no better there: 0.771x
aten leaving each shape out, against 0.770x; NOTES 117). ``shipped_batch_model`` is a model of
the same form fit on such products alone (``helion_ops.shapes.BATCH_TRAINING_SHAPES``), with a
candidate of their own (``BATCH_CANDIDATES``); it chooses their config.
"""

from __future__ import annotations

import functools
import heapq
import json
import math
from importlib import resources
from typing import TYPE_CHECKING, NamedTuple

import helion
import torch

from helion_ops.candidates import config, flattened

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

# The tile shapes that won the tuned table's keys (H200, 2026-11-30), from the largest to the
# smallest output tile: what the model chooses from.
MODEL_CANDIDATES = [
    config(128, 256, 64, 8, 3, "persistent_interleaved", flatten=True),
    config(256, 128, 64, 8, 3, "persistent_interleaved", flatten=True),
    config(128, 128, 128, 8, 3, "persistent_interleaved", flatten=True),
    config(128, 128, 64, 4, 4, "persistent_interleaved", flatten=True),
    config(128, 256, 64, 8, 3, "flat"),
    config(128, 256, 64, 8, 4, "flat", "pointer"),
    config(128, 128, 64, 4, 3, "flat", "pointer"),
    config(128, 64, 64, 4, 5, "flat", "pointer"),
    config(64, 128, 64, 4, 5, "flat", "pointer"),
    config(64, 64, 128, 4, 3, "flat", "pointer"),
    config(64, 32, 128, 4, 3, "flat", "pointer"),
]


# A serving batch's forwards choose among these (``batch_product``): the model's, and 64x256
# tiles of one warpgroup (4 warps), the widest wgmma of 64 rows. On the 25 training shapes of
# 64-704 rows (H200, bf16, call 262) those were the fastest of 18 configs on 8 (NOTES 117).
BATCH_CANDIDATES = [*MODEL_CANDIDATES, config(64, 256, 64, 4, 4, "flat", "pointer")]
# The rows of a serving batch's forward: those of its training shapes. (Those of few tiles and
# a long K split over K instead: ``long_k.long_k_batch``.)
BATCH_MODEL_ROWS = range(64, 705)
# A linear layer's x @ w.T ('rc') of 64 to this many rows takes the batch model's choice for
# the same product row-major (no 'rc' timing was fit). On the 'rc' training timings of call
# 264 its choices read 0.751 of aten, the shipped model's 0.707 (NOTES 122);
# on the H200 (bf16, call 277) it won on 7 of 8 such products of our sets of at most 128 rows
# and lost on 7 of 200-640 rows (tensor descriptors traded for pointers). On the held-out
# linear draw (call 278, NOTES 123) all 9 forwards it moved ran 7-25% faster (100x9216x2304
# 20.6 -> 15.4 us) and the 4 backwards whose `grad_out @ w.T` it moved 4-9% faster.
RC_BATCH_ROWS = 128


def output_tiles(candidate: helion.Config, m: int, n: int) -> int:
    """How many of the candidate's output tiles an m x n output takes (tails counted whole)."""
    bm, bn, _ = candidate.config["block_sizes"]
    return math.ceil(m / bm) * math.ceil(n / bn)


def k_steps(candidate: helion.Config, k: int) -> int:
    """How many K steps the candidate's loop takes over a K of ``k`` (a tail counted whole)."""
    return math.ceil(k / candidate.config["block_sizes"][2])


def features(candidate: helion.Config, m: int, n: int, k: int, sms: int) -> tuple[int, int, int]:
    """(rounds * steps, rounds, 1): the terms the model's a, b and c multiply."""
    rounds = math.ceil(output_tiles(candidate, m, n) / sms)
    return rounds * k_steps(candidate, k), rounds, 1


# What splitting the last wave adds to a product's time: zeroing the fp32 buffer of its rows
# and a pass that scales, adds the bias and rounds them (two more launches, a few us).
LAST_WAVE_MS = 0.005
# Split only where predicted at most this fraction of the plain kernel's time. Set from nine
# products of three shapes of no model (H200, bf16, ``python -m benchmarks.wave_split``):
# the six predicted at 0.93-0.97 measured 0.91-0.97, the three predicted at 1.007, 1.06-1.17.
LAST_WAVE_GAIN = 0.97
# The same for candidates with a flattened loop (``range_flattens``), whose coefficients were
# fit flattened: the split's two loops, one branch apart, are not flattened, so its full waves
# lose that pipeline. On 21 such products of neither set (H200, bf16, calls 123-124, NOTES 81)
# the split measured 0.03-0.16 (0.09 in the mean) more of the plain time than predicted:
# those predicted 0.77-0.90 measured 0.91-0.99, those predicted 0.90-0.97 0.96-1.06.
LAST_WAVE_GAIN_FLATTENED = 0.90
# The transposed kernel's time over the plain kernel's on the products whose b rows lie on 16
# bytes but not 32 and that the model splits (H200, bf16, call 74, NOTES 65 and 81: 0.89-1.04
# on eight of neither set, 0.945 in the median): where it runs a product unsplit, a split must
# beat it, not the plain kernel the coefficients predict.
TRANSPOSED_PLAIN = 0.95


def last_wave(
    candidate: helion.Config, m: int, n: int, k: int, sms: int
) -> tuple[int, int, int] | None:
    """The last partial wave of a product split over K (``helion_ops.kernel.last_wave_kernel``):
    the rows whose tiles fill whole waves run as usual, the tiles of the remaining rows are
    cut in K so that they fill the SMs in one more round. Returns (rows in whole waves, rounds,
    K steps on the busiest SM), or None where there is no whole wave or no partial one."""
    bm, bn, bk = candidate.config["block_sizes"]
    tiles_n = math.ceil(n / bn)
    tiles = math.ceil(m / bm) * tiles_n
    rows = (tiles // sms * sms) // tiles_n  # tile rows inside whole waves
    tail = tiles - rows * tiles_n
    if rows == 0 or tail == 0:
        return None
    block, chunks = tail_split(tail, k, sms)
    steps = math.ceil(k / bk)
    full_rounds = math.ceil(rows * tiles_n / sms)
    tail_rounds = math.ceil(tail * chunks / sms)
    return (
        rows * bm,
        full_rounds + tail_rounds,
        full_rounds * steps + tail_rounds * math.ceil(min(block, k) / bk),
    )


# Run a backward's two products in one launch only where predicted at most this fraction of
# their time in two launches; only pairs of at most ``PAIR_WAVES`` waves of tiles (beyond,
# a partial wave costs little). Set from the backwards of ten aligned shapes of no validation
# set (nine training shapes and 1280^3; H200, bf16, NOTES 53): the five predicted 1.09-1.23x
# faster in one launch measured 1.05-1.17x; the five predicted 0.99-1.01x measured 0.99-1.04x
# with the best of five pair configs.
PAIR_GAIN = 0.95
# Outside a CUDA graph each launch also costs host time, which a host-bound caller waits
# for: one launch fewer saved a backward 33 us of host time in the median of 20 held-out
# shapes on an H200 machine (NOTES 62), so there a pair may be predicted up to
# EAGER_LAUNCH_MS slower on the GPU and still pay; but only for backwards predicted under
# EAGER_HOST_MS on the GPU, about the host time of a whole backward there (0.11-0.39 ms),
# which a longer one hides.
EAGER_LAUNCH_MS = 0.03
EAGER_HOST_MS = 0.3
PAIR_WAVES = 16
# Products of fp16 or bf16 doing fewer FLOPs than this per byte they read and write are bound
# by memory bandwidth on an H200 (790 TFLOP/s of bf16 products against 4.3 TB/s of copies,
# both measured on the device machine). One launch of two such products moves the same bytes
# through the same memory as two: it fills idle SMs that would not help. The wave model, which
# sees rounds and steps, not bytes, predicted 80x4096x4096's backward 7% faster in one launch;
# it ran 1.18x slower (47.4 us against 40.2; call 274, NOTES 121).
RIDGE_FLOPS_PER_BYTE = 184


def busiest_sm(tiles: Sequence[tuple[int, float]], sms: int, pid_type: str) -> float:
    """The busiest SM's time for ``(count, time)`` tiles of each product, run in that order:
    flat programs start on whichever SM frees first; persistent ones (interleaved) take
    every ``sms``-th tile."""
    if pid_type == "flat":
        finish = [0.0] * sms
        for count, time in tiles:
            for _ in range(count):
                heapq.heapreplace(finish, finish[0] + time)
        return max(finish)
    busiest = 0.0
    for sm in range(sms):
        load, start = 0.0, 0
        for count, time in tiles:
            # Tiles start..start+count-1 of the sequence, those with index % sms == sm.
            load += time * ((start + count - 1 - sm) // sms - (start - 1 - sm) // sms)
            start += count
        busiest = max(busiest, load)
    return busiest


def k_block(k: int, split: int) -> int:
    """The K block of the last-wave split's tail (``_matmul_last_wave``) for a ``split_k`` of
    ``split``, computed as it computes it: a power of two (``split_k_block`` for the split-K
    kernel's)."""
    return helion.next_power_of_2(helion.cdiv(k, split))


def split_k_block(k: int, split: int) -> int:
    """The K block of the split-K kernel (``_matmul_split_k``) for a ``split_k`` of ``split``,
    computed as it computes it: K over ``split`` rounded up to whole K steps of 64, so at most
    ``split`` pieces, the last no longer than the others."""
    return helion.cdiv(helion.cdiv(k, split), 64) * 64


def power_of_two_pieces(k: int, split: int) -> int:
    """How many pieces the split-K kernel cut K in for a ``split_k`` of ``split`` when its K
    blocks were powers of two (``k_block``): ``long_k.thin_split`` costs such blocks, as it
    was measured, and asks for this count, now of equal pieces; tables written before
    (``table.entries_of``) count such blocks."""
    return math.ceil(k / k_block(k, split))


def split_of(k: int, block: int) -> int:
    """The ``split_k`` whose K block (``k_block``) is ``block``, a power of two: the same
    rounding, K over the block instead of over the split."""
    return k_block(k, block)


def tail_split(tiles: int, k: int, sms: int) -> tuple[int, int]:
    """(K block, pieces) for ``tiles`` output tiles: the smallest power-of-two K block (the
    split-K loop's) whose pieces of every tile still fit on the SMs in one round."""
    block = k_block(k, 1)
    while block > 64 and tiles * math.ceil(k / (block // 2)) <= sms:
        block //= 2
    return block, math.ceil(k / block)


# The line whose start makes an operand's rows cheapest to load (an L2 cache line).
LINE_BYTES = 128


def dense_off_lines(m: int, n: int, k: int, layout: str, itemsize: int) -> tuple[bool, bool]:
    """Whether the rows (columns, where column-major) of a dense product's ``a`` and ``b``
    start off ``LINE_BYTES`` lines: their leading dimension times the element size is not a
    multiple of it."""
    a_rows = k if layout[0] == "r" else m
    b_rows = n if layout[1] == "r" else k
    return a_rows * itemsize % LINE_BYTES != 0, b_rows * itemsize % LINE_BYTES != 0


def dense_row_bytes(m: int, n: int, k: int, layout: str, itemsize: int) -> int:
    """The widest vector, in bytes (at most 16), that the rows (columns, where column-major)
    of a dense product's ``a`` and ``b`` all start on: the largest power of two dividing
    each one's leading dimension times the element size."""
    a_rows = k if layout[0] == "r" else m
    b_rows = n if layout[1] == "r" else k
    return min(vector_bytes(rows * itemsize) for rows in (a_rows, b_rows))


def vector_bytes(offset: int) -> int:
    """The largest power of two, at most 16, that divides ``offset`` (bytes)."""
    return min(16, offset & -offset) if offset else 16


def pair_of(candidate: helion.Config) -> helion.Config:
    """A model candidate as ``pair_kernel``'s config: its tiles for each product, its warps,
    stages, programs and indexing (no flattening: the pair's programs branch between two
    K loops)."""
    c = candidate.config
    return helion.Config(
        block_sizes=c["block_sizes"] * 2,
        num_warps=c["num_warps"],
        num_stages=c["num_stages"],
        pid_type=c["pid_type"],
        indexing=c["indexing"],
        l2_groupings=c["l2_groupings"] * 2,
        range_unroll_factors=[0] * 4,
        range_num_stages=[0] * 4,
    )


def layout_class(layout: str) -> str:
    """The layout whose fit a product uses: its own for 'rr', 'rc' and 'cr'; 'rr' otherwise."""
    return layout if layout in ("rr", "rc", "cr") else "rr"


# Candidates predicted within this factor of the fastest are near ties, which the fewest
# output tiles, then K steps, break (``Model.choose``). The fit sees waves, not bytes: on
# products of a short K, many bytes a flop, it predicts tile shapes within 1% that measure
# 4-7% apart, the larger tile ahead (H200, bf16, call 170, NOTES 93: 196608x256x256
# 128x128x128 tiles 66.4 us against 128x128x64's 69.3, 4096x32000x512 128x256 247 against
# 259). On the training records, left out one shape at a time, the choice holds as well as
# without the rule.
PREDICTED_TIE = 1.01

NO_LINES = (False, False)

# Unaligned operands' factors vary with K as (K / UNALIGNED_K) ** exponent, fit where a
# candidate has UNALIGNED_TREND_POINTS timings or more of a row_bytes (``fit``), K clamped to
# the Ks fit (900-7001 on the H200's records: no trend is known beyond).
UNALIGNED_K = 2048
UNALIGNED_TREND_POINTS = 4


class Product(NamedTuple):
    """A product as the model sees it: ``m x n x k``, its operands' ``layout`` (e.g. 'rc'),
    whether they are 16-byte ``aligned`` (``loads.tma_aligned``), the GPU's SM count, and
    whether ``a``'s and ``b``'s rows start off 128-byte lines (``dense_off_lines``,
    ``loads.rows_off_lines``; read only where aligned), and the widest vector in bytes (2,
    4 or 8) that every operand's rows start on (``dense_row_bytes``, ``loads.row_bytes``;
    read only where not aligned)."""

    m: int
    n: int
    k: int
    layout: str
    aligned: bool
    sms: int
    off_lines: tuple[bool, bool] = NO_LINES
    row_bytes: int = 2


class Model:
    """Fitted (a, b, c) per candidate and layout, and each candidate's factors for unaligned
    operands and for operands off lines; ``choose`` picks a config for a ``Product``."""

    def __init__(
        self,
        candidates: Sequence[helion.Config],
        params: Sequence[dict],
        unaligned: Sequence[dict | None],
        off_line: Sequence[Sequence[float]] | None = None,
    ) -> None:
        self.candidates = list(candidates)
        self.params = list(params)  # per candidate: {layout: [a, b, c]}
        # Per candidate: {row_bytes: (factor at UNALIGNED_K, exponent of K / UNALIGNED_K, and
        # the least and greatest K fit, to which K is clamped)}, or None (never measured).
        self.unaligned = [
            None if u is None else {int(rb): tuple(f) for rb, f in u.items()} for u in unaligned
        ]
        # Per candidate: the factors for a's and b's rows off lines (1.0: never measured).
        self.off_line = [list(f) for f in off_line or [(1.0, 1.0)] * len(self.candidates)]

    def predict(self, index: int, product: Product) -> float | None:
        """Predicted milliseconds of candidate ``index``, or None where it has no fit."""
        coefficients = self.params[index].get(layout_class(product.layout))
        factor = self.factor(index, product)
        if coefficients is None or factor is None:
            return None
        m, n, k, sms = product.m, product.n, product.k, product.sms
        x = features(self.candidates[index], m, n, k, sms)
        return factor * sum(c * f for c, f in zip(coefficients, x, strict=True))

    def factor(self, index: int, product: Product) -> float | None:
        """Candidate ``index``'s factor for the operands' alignment, or None (no fit). Rows
        of a vector width never measured take the factor of the widest narrower one."""
        if not product.aligned:
            fits = self.unaligned[index] or {}
            measured = [rb for rb in fits if rb <= product.row_bytes]
            if not measured:
                return None
            factor, exponent, k_min, k_max = fits[max(measured)]
            return factor * (min(max(product.k, k_min), k_max) / UNALIGNED_K) ** exponent
        offsets = zip(self.off_line[index], product.off_lines, strict=True)
        return math.prod(f for f, off in offsets if off)

    def choose(
        self, product: Product, tma_only: bool = False, break_ties: bool = True
    ) -> helion.Config | None:
        """The candidate of least predicted time, or None where none has a fit. Among near
        ties (within ``PREDICTED_TIE``), where ``break_ties``, the one with the fewest output
        tiles, then K steps: fewer tiles read each operand fewer times, which the model does
        not see. (Not for addmm's bias epilogue, where the larger tiles lose their flattened
        loop: ``pipelines.fit_for_bias``.)"""
        times = self._times(product, tma_only)
        if not times:
            return None
        if not break_ties:
            return self.candidates[min(times)[1]]
        near = [(t, i) for t, i in times if t <= PREDICTED_TIE * min(times)[0]]
        return self.candidates[min(near, key=lambda ti: (self._traffic(ti[1], product), ti))[1]]

    def best_plain(
        self, product: Product, tma_only: bool = False
    ) -> tuple[float, helion.Config] | None:
        """(predicted ms, candidate) of the fastest candidate, or None where none has a fit.

        ``tma_only``: among the candidates with tensor descriptors only, where some size
        would not vectorize pointer loads (``loads.masks_vectorize``): the fit, made on
        sizes of whole 16 bytes, does not hold for pointer loads there."""
        times = self._times(product, tma_only)
        return (min(times)[0], self.candidates[min(times)[1]]) if times else None

    def _times(self, product: Product, tma_only: bool) -> list[tuple[float, int]]:
        """(predicted ms, index) of every candidate with a fit (``best_plain``'s
        ``tma_only``)."""
        return [
            (t, i)
            for i, candidate in enumerate(self.candidates)
            if not (tma_only and candidate.config.get("indexing") != "tensor_descriptor")
            and (t := self.predict(i, product)) is not None
        ]

    def _traffic(self, index: int, product: Product) -> tuple[int, int]:
        """Candidate ``index``'s output tiles and K steps on ``product``."""
        candidate = self.candidates[index]
        return output_tiles(candidate, product.m, product.n), k_steps(candidate, product.k)

    def best_split(self, product: Product) -> tuple[float, helion.Config, int] | None:
        """(predicted ms, candidate, rows in whole waves) of the fastest candidate with its
        last wave split over K (``last_wave``), or None where no candidate has one."""
        m, n, k, layout, sms = product.m, product.n, product.k, product.layout, product.sms
        best = None
        for i, candidate in enumerate(self.candidates):
            coefficients = self.params[i].get(layout_class(layout))
            factor = self.factor(i, product)
            waves = last_wave(candidate, m, n, k, sms)
            if coefficients is None or factor is None or waves is None:
                continue
            a, b, c = coefficients
            rows, rounds, steps = waves
            time = factor * (a * steps + b * rounds + c) + LAST_WAVE_MS
            if best is None or time < best[0]:
                best = (time, candidate, rows)
        return best

    def plan(self, product: Product, plain_factor: float = 1.0) -> tuple[helion.Config, int] | None:
        """How to run a product: a candidate, and the rows it runs in whole waves with the
        last wave split over K, or ``m`` (the plain kernel). None where no candidate has a
        fit. (``planned`` with its predicted time.)"""
        planned = self.planned(product, plain_factor)
        return None if planned is None else planned[1:]

    def planned(
        self, product: Product, plain_factor: float = 1.0
    ) -> tuple[float, helion.Config, int] | None:
        """(predicted ms, candidate, rows in whole waves) of how to run a product: its last
        wave split over K where predicted ``LAST_WAVE_GAIN`` (``LAST_WAVE_GAIN_FLATTENED``
        for a flattened candidate) times the plain path's time or less, else the best plain
        candidate with rows ``m``. The plain path's time is that candidate's times
        ``plain_factor``: ``TRANSPOSED_PLAIN`` where it runs the transposed kernel
        (``configs.transposed_pays``), which the coefficients do not describe. None where no
        candidate has a fit."""
        plain = self.best_plain(product)
        if plain is None:
            return None
        split = self.best_split(product)
        if split is not None:
            gain = LAST_WAVE_GAIN_FLATTENED if flattened(split[1]) else LAST_WAVE_GAIN
            if split[0] <= gain * plain_factor * plain[0]:
                return split
        return (*plain, product.m)

    def predict_pair(self, index: int, first: Product, second: Product) -> float | None:
        """Predicted milliseconds of candidate ``index`` running both products in one launch
        (``first``'s tiles first), or None where it has no fit for one of them."""
        candidate, tiles, launch = self.candidates[index], [], 0.0
        bk = candidate.config["block_sizes"][2]
        for product in (first, second):
            coefficients = self.params[index].get(layout_class(product.layout))
            factor = self.factor(index, product)
            if coefficients is None or factor is None:
                return None
            a, b, c = coefficients
            count = output_tiles(candidate, product.m, product.n)
            tiles.append((count, factor * (a * math.ceil(product.k / bk) + b)))
            launch = max(launch, factor * c)
        return busiest_sm(tiles, first.sms, candidate.config.get("pid_type", "flat")) + launch

    def pair(
        self, first: Product, second: Product, tma_only: bool = False, eager: bool = False
    ) -> helion.Config | None:
        """The candidate to run both products in one launch with, where predicted
        ``PAIR_GAIN`` times their time in two launches (``planned``) or less, plus, for
        ``eager`` calls (outside CUDA graphs) of less than ``EAGER_HOST_MS``,
        ``EAGER_LAUNCH_MS``; else None. Two ``bandwidth_bound`` products are predicted no
        faster in one launch than in two (only the host time an eager call saves can pay for
        it). ``tma_only`` as in ``best_plain``."""
        two = [self.planned(p) for p in (first, second)]
        if None in two or not first.aligned or not second.aligned:
            return None
        best = None
        for i, candidate in enumerate(self.candidates):
            tiles = sum(output_tiles(candidate, p.m, p.n) for p in (first, second))
            if tiles > PAIR_WAVES * first.sms or (
                tma_only and candidate.config.get("indexing") != "tensor_descriptor"
            ):
                continue
            time = self.predict_pair(i, first, second)
            if time is not None and (best is None or time < best[0]):
                best = (time, candidate)
        two_ms = sum(planned[0] for planned in two)
        if best is not None and bandwidth_bound(*first[:3]) and bandwidth_bound(*second[:3]):
            best = (max(best[0], two_ms), best[1])
        saved_ms = EAGER_LAUNCH_MS if eager and two_ms < EAGER_HOST_MS else 0.0
        if best is None or best[0] > PAIR_GAIN * two_ms + saved_ms:
            return None
        return best[1]

    def to_json(self, **info: object) -> dict:
        return {
            **info,
            "form": "ms = a * rounds * steps + b * rounds + c, times unaligned[row_bytes][0] "
            f"* (K / {UNALIGNED_K}) ** unaligned[row_bytes][1] (K clamped to "
            "unaligned[row_bytes][2:4]) where unaligned, else times "
            "off_lines[0] where a's rows are off lines and off_lines[1] where b's are",
            "candidates": [
                {
                    "config": dict(c),
                    "params": p,
                    "unaligned": None if u is None else {str(rb): list(v) for rb, v in u.items()},
                    "off_lines": f,
                }
                for c, p, u, f in zip(
                    self.candidates, self.params, self.unaligned, self.off_line, strict=True
                )
            ],
        }

    @classmethod
    def from_json(cls, data: dict) -> Model:
        entries = data["candidates"]
        return cls(
            [helion.Config(**e["config"]) for e in entries],
            [e["params"] for e in entries],
            [e["unaligned"] for e in entries],
            [e.get("off_lines", (1.0, 1.0)) for e in entries],
        )


def bandwidth_bound(m: int, n: int, k: int) -> bool:
    """Whether an ``m x n x k`` product of 2-byte elements does fewer than
    ``RIDGE_FLOPS_PER_BYTE`` FLOPs per byte of its operands and output."""
    return m * n * k < RIDGE_FLOPS_PER_BYTE * (m * k + k * n + m * n)


def batch_product(product: Product) -> bool:
    """Whether ``shipped_batch_model`` chooses for a product: a serving batch's forward, of
    ``BATCH_MODEL_ROWS`` rows, operands row-major and 16-byte aligned, as its training shapes,
    or 'rc' (a linear layer's ``x @ w.T``) of at most ``RC_BATCH_ROWS`` rows, chosen as the
    same product row-major (``batch_choice``)."""
    if not product.aligned or product.m not in BATCH_MODEL_ROWS:
        return False
    return product.layout == "rr" or (product.layout == "rc" and product.m <= RC_BATCH_ROWS)


def batch_choice(product: Product) -> Product:
    """The product whose choice the batch model gives ``product`` (``batch_product``): its
    rows and operands row-major, as the model's records."""
    return product._replace(layout="rr")


@functools.cache
def shipped_model(arch: str) -> Model | None:
    """The model fit for a GPU architecture such as 'sm90', or None where none ships."""
    return _shipped(f"{arch}_model.json")


@functools.cache
def shipped_batch_model(arch: str) -> Model | None:
    """The model fit to a serving batch's forwards (``batch_product``) on a GPU architecture,
    or None where none ships."""
    return _shipped(f"{arch}_batch_model.json")


def _shipped(name: str) -> Model | None:
    path = resources.files("helion_ops") / "tuned" / name
    if not path.is_file():
        return None
    return Model.from_json(json.loads(path.read_text()))


def fit(records: Iterable[dict], candidates: Sequence[helion.Config] = MODEL_CANDIDATES) -> Model:
    """Fit the model to timings.

    Args:
        records: one per timing: m, n, k, layout, aligned, sms, config (a dict) and ms.
        candidates: the configs to fit; records of other configs are ignored.
    """
    import numpy as np
    from scipy.optimize import nnls

    keys = [config_id(c) for c in candidates]
    mine = [(keys.index(k), r) for r in records if (k := config_id(r["config"])) in keys]
    lines = [record_off_lines(r) for _, r in mine]
    rows: dict[tuple[int, str], list[tuple[tuple[int, int, int], float]]] = {}
    for (index, r), off in zip(mine, lines, strict=True):
        if r["aligned"] and not any(off):
            x = features(candidates[index], r["m"], r["n"], r["k"], r["sms"])
            rows.setdefault((index, r["layout"]), []).append((x, r["ms"]))
    params: list[dict] = [{} for _ in candidates]
    for (index, layout), points in rows.items():
        x = np.array([p[0] for p in points], dtype=float)
        t = np.array([p[1] for p in points], dtype=float)
        # Relative error: each row divided by its time, so small shapes count as much as large.
        coefficients, _ = nnls(x / t[:, None], np.ones_like(t))
        params[index][layout] = [float(c) for c in coefficients]
    aligned_model = Model(candidates, params, [None] * len(candidates))
    # Per candidate and row_bytes: (K, log(measured / predicted)).
    logs: list[dict[int, list[tuple[int, float]]]] = [{} for _ in candidates]
    lined: list[list[tuple[tuple[bool, bool], float]]] = [[] for _ in candidates]
    for (index, r), off in zip(mine, lines, strict=True):
        product = Product(r["m"], r["n"], r["k"], r["layout"], True, r["sms"])
        predicted = aligned_model.predict(index, product)
        if not predicted:
            continue
        if not r["aligned"]:
            row_bytes = record_row_bytes(r)
            point = (r["k"], math.log(r["ms"] / predicted))
            logs[index].setdefault(row_bytes, []).append(point)
        elif any(off):
            lined[index].append((off, math.log(r["ms"] / predicted)))
    unaligned = [{rb: _k_trend(v) for rb, v in sorted(c.items())} or None for c in logs]
    off_line = [(1.0, 1.0)] * len(candidates)
    for index, points in enumerate(lined):
        if points:
            # log(measured / predicted) = log(factor of a) * [a off] + log(factor of b) *
            # [b off]; non-negative: a row off its line is never faster.
            x = np.array([p[0] for p in points], dtype=float)
            logs_of_ratio, _ = nnls(x, np.array([p[1] for p in points]))
            off_line[index] = tuple(float(math.exp(v)) for v in logs_of_ratio)
    return Model(candidates, params, unaligned, off_line)


def _k_trend(points: list[tuple[int, float]]) -> tuple[float, float, int, int]:
    """(factor at UNALIGNED_K, exponent of K / UNALIGNED_K, least K, greatest K) of (K,
    log(measured / predicted)) points: the least-squares line through (log(K /
    UNALIGNED_K), log(measured / predicted)) where ``UNALIGNED_TREND_POINTS`` points of two
    Ks or more allow one, else their geometric mean and no trend."""
    import numpy as np

    k, y = np.array(points, dtype=float).T
    bounds = (int(k.min()), int(k.max()))
    if len(points) < UNALIGNED_TREND_POINTS or bounds[0] == bounds[1]:
        return float(math.exp(y.mean())), 0.0, *bounds
    exponent, intercept = np.polyfit(np.log(k / UNALIGNED_K), y, 1)
    return float(math.exp(intercept)), float(exponent), *bounds


def second_of_pair(m: int, n: int, k: int, layout: str) -> tuple[int, int, int]:
    """The second product's (M, N, K) of a backward's pair whose first is ``m x n x k``:
    layout 'rccr' is ``grad_out @ b.T`` then ``a.T @ grad_out`` (N x K x M); 'crrc' is
    ``a.T @ grad_out`` then ``grad_out @ b.T`` (K x M x N)."""
    return (n, k, m) if layout == "rccr" else (k, m, n)


def pair_products(record: dict) -> tuple[Product, Product]:
    """The two products of a pair's timing record, as ``tune`` times them."""
    m, n, k, layout = record["m"], record["n"], record["k"], record["layout"]
    second = second_of_pair(m, n, k, layout)
    itemsize = getattr(torch, record["dtype"]).itemsize
    return tuple(
        Product(*mnk, part, record["aligned"], record["sms"], dense_off_lines(*mnk, part, itemsize))
        for mnk, part in (((m, n, k), layout[:2]), (second, layout[2:]))
    )


def record_row_bytes(record: dict) -> int:
    """``dense_row_bytes`` of a timing record's product."""
    itemsize = getattr(torch, record["dtype"]).itemsize
    return dense_row_bytes(record["m"], record["n"], record["k"], record["layout"], itemsize)


def record_off_lines(record: dict) -> tuple[bool, bool]:
    """``dense_off_lines`` of a timing record's product."""
    itemsize = getattr(torch, record["dtype"]).itemsize
    return dense_off_lines(record["m"], record["n"], record["k"], record["layout"], itemsize)


def config_id(config: helion.Config | dict) -> str:
    """A config (or a record's) as a string that compares equal where the config does."""
    return json.dumps(dict(config), sort_keys=True)
