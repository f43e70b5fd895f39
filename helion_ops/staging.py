"""Aligned copies of operands whose rows do not start on 16-byte boundaries.

Tensor descriptors and vectorized loads need every row (or column, for a transposed view) of
an operand to start 16-byte aligned. An operand of odd width (an LM head's vocabulary of
50257) or at an odd offset is loaded element by element instead, rows of 4 or 8 bytes in
vectors that wide: the wave model's factors for such operands are 2.2-8.2x the aligned time
for rows of 2 bytes, 1.3-2.8x for rows of 8 (``helion_ops.model``). Where a product runs long
enough, one copy into a buffer of padded rows pays for itself: on the H200
(bf16) the GPT-2 head's ``a.T @ grad_out`` (768x50257x4096) took 1.30 ms unstaged and 0.56
staged, plus 0.46 ms to copy ``grad_out`` (which both backward products read, so it is copied
once). The copies' rows are padded to whole 128-byte lines, which the kernels load fastest
(``helion_ops.model``). The output stays a contiguous tensor; only its store keeps pointer
indexing.

fp32 products stage for another reason: their dots read some layouts several times slower
than others (H100, call 347). Hopper's TF32 tensor-core MMA reads both operands contiguous
along K only: 2048^3 ran in 57.8 us with b column-major, 195.8 with b row-major and 271.8
with a column-major too (aten 50.9-75.9). IEEE dots (FMAs) want b row-major: 64x64x32 tiles
ran 1.9x slower from b column-major (0.48 of aten). Such products run from copies in the
layout their dots read fastest (``fp32_copies``, ``relaid``), copied by the launchers' tiled
kernel (``kernel.tiled_padded_copy``).

fp16 and bf16 operands whose rows are 16-byte aligned but start off 32-byte sectors are
copied onto 128-byte lines by the same kernel, where the wave model predicts the copies save
more than they cost (``lined_copies``, ``cheapest_lines``).
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

import torch

from helion_ops.configs import model_product, model_without_entry, operands_key, splits_k
from helion_ops.loads import (
    k_masks_vectorize,
    masks_vectorize,
    row_bytes,
    rows_off_lines,
    rows_off_sectors,
    tma_aligned,
    unmasked_sizes,
)
from helion_ops.long_k import long_k_product
from helion_ops.model import LINE_BYTES, bandwidth_bound
from helion_ops.narrow_tiles import few_rows, narrow_columns
from helion_ops.table import operand_layout, product_mnk

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from helion_ops.model import Model, Product

# What staging one byte of an unaligned operand costs: torch's copy into a padded buffer
# read the unaligned rows at about 0.9 GB per ms (H200, bf16, 4096x50257: 0.46 ms), plus a
# launch.
COPY_MS_PER_BYTE = 0.46 / (4096 * 50257 * 2)
COPY_MS = 0.003
# Stage unless the unstaged product is predicted this much faster: the unaligned factors
# spread about their fit, and a copy's time is less in doubt. Set on five training shapes of
# 4- and 8-byte rows, each left out of the factors' fit in turn (H200, bf16, call 297): over
# their 15 products, staged where predicted within 1.0x, 1.1x, 1.2x of unstaged, 0.991x,
# 1.029x and 1.037x as fast as always staging, the worst 0.81x, 0.90x and 1.00x. On 27
# products of no set (call 300, NOTES 129): the 18 it left unstaged 1.13-1.41x as fast as
# staged.
UNSTAGED_GAIN = 1.2
# What copying one byte of an operand whose rows lie on 16 bytes onto 128-byte lines costs, by
# the tiled copy kernel (``kernel.tiled_padded_copy``), plus a launch (``COPY_MS``): the byte
# read and written at about 2.7 TB/s (H100, bf16, call 425: 22-32 MB in 16-26 us; tensors
# small enough to stay in L2 copied faster, 13.5 MB in 6.1 us).
LINED_COPY_MS_PER_BYTE = 2 / 2.7e9

_decisions: dict[tuple, bool] = {}


def lined_columns(columns: int, element_size: int) -> int:
    """``columns`` elements of ``element_size`` bytes padded to whole 128-byte lines."""
    per_line = LINE_BYTES // element_size
    return -(-columns // per_line) * per_line


def padded_copy(view: torch.Tensor) -> torch.Tensor:
    """``view``'s values in a new row-major buffer, its rows padded to whole 128-byte lines
    (``lined_columns``; the padding left unwritten), by torch's copy: 0.97 TB/s transposing
    fp32 on an H100 (4096x4096 in 139 us, call 354)."""
    rows, cols = view.shape
    buffer = view.new_empty((rows, lined_columns(cols, view.element_size())))
    buffer[:, :cols].copy_(view)
    return buffer


def aligned_copy(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in a new buffer whose rows (columns for a column-major ``t``) start on
    128-byte lines: the same layout, its leading dimension padded."""
    return contiguous_copy(t, 0 if operand_layout(t) == "c" else 1)


def staged(
    products: Sequence[tuple[torch.Tensor, torch.Tensor]],
) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """The products with their unaligned operands replaced by aligned copies, where the wave
    model predicts each product staged, copies included, faster than unstaged; a tensor that
    several products read is copied once. None where nothing is to be staged. (The launchers
    first copy fp32 operands for another reason: ``fp32_copies``.)"""
    stage = [p for p in products if worth_staging(*p)]
    if not stage:
        return None
    copies: dict[int, torch.Tensor] = {}
    for t in {id(t): t for p in stage for t in p}.values():
        if not tma_aligned(t):
            copies[id(t)] = aligned_copy(t)
    return [tuple(copies.get(id(t), t) for t in p) for p in products]


# An fp32 product's operand is copied into the layout its dots read fastest where the
# product's other free dimension (b's columns for a, a's rows for b) is at least this long:
# each element then feeds that many multiply-adds. A compute-bound TF32 product that takes
# 3.4x as long from b row-major (call 347, 2048^3) outweighs the copy (8 bytes of traffic an
# element) from about 180 on, at the H100's 3.3 TB/s and 350 TFLOP/s of TF32 (aten's 4096^3);
# IEEE dots, 1.9x slower from the wrong layout at 52 TFLOP/s, from about 100.
LAYOUT_REUSE = 256


def contiguous_along(t: torch.Tensor, dim: int) -> bool:
    """Whether ``t`` (2-D) is contiguous along ``dim``: a unit stride there, at most one
    element along it, or no elements at all."""
    return t.stride(dim) == 1 or t.shape[dim] <= 1 or t.numel() == 0


def fp32_copies(
    products: Sequence[tuple[torch.Tensor, torch.Tensor]],
) -> tuple[int | None, ...] | None:
    """For each operand of the fp32 products, in order (a1, b1, a2, b2, ...), the dimension
    along which it is copied contiguous, as their dots read it fast (None: read as it is):
    where the product reads it at least ``LAYOUT_REUSE`` times over and it is not already so,
    with TF32 (``allow_tf32``) both operands along K (a row-major, b column-major), with IEEE
    dots b row-major. None where nothing is copied. It depends only on the TF32 switch and
    the operands' sizes and strides (``relaid`` makes the copies)."""
    fast_dims = (1, 0) if torch.backends.cuda.matmul.allow_tf32 else (None, 1)
    dims = []
    for a, b in products:
        for t, dim, reuse in zip((a, b), fast_dims, (b.shape[1], a.shape[0]), strict=True):
            slow = dim is not None and reuse >= LAYOUT_REUSE and not contiguous_along(t, dim)
            dims.append(dim if slow else None)
    return tuple(dims) if any(d is not None for d in dims) else None


def relaid(
    operands: Sequence[torch.Tensor],
    dims: Sequence[int | None],
    copy_rows: Callable[[torch.Tensor], torch.Tensor] = padded_copy,
) -> list[torch.Tensor]:
    """``operands``, each with a dimension in ``dims`` replaced by its ``contiguous_copy``
    along it (by ``copy_rows``); memory given twice along one dimension is copied once, a
    transposed view of it too (the backward's grad_out and grad_out.T)."""
    copies: dict[tuple, torch.Tensor] = {}  # by the copied view's ``memory_key``
    given: dict[tuple, torch.Tensor] = {}  # by the operand's, and its dimension
    out = []
    for t, dim in zip(operands, dims, strict=True):
        if dim is not None:
            view = t if dim == 1 else t.T  # contiguous along the view's columns
            key = memory_key(view)
            if key not in copies:
                copies[key] = contiguous_copy(view, 1, copy_rows)
            t = given.setdefault((memory_key(t), dim), copies[key] if dim == 1 else copies[key].T)
        out.append(t)
    return out


def memory_key(t: torch.Tensor) -> tuple:
    """What tells a tensor's values apart from another's without reading them: its address,
    sizes and strides."""
    return t.data_ptr(), t.shape, t.stride()


def contiguous_copy(
    t: torch.Tensor, dim: int, copy_rows: Callable[[torch.Tensor], torch.Tensor] = padded_copy
) -> torch.Tensor:
    """``t``'s values in a new buffer contiguous along ``dim``, each run along it starting on
    a 128-byte line (``aligned_copy``'s padding). ``copy_rows``: how a view is copied into
    padded rows (``padded_copy``; the launchers pass ``kernel.tiled_padded_copy``, a Helion
    kernel that transposes 2.9x as fast)."""
    view = t if dim == 1 else t.T  # ``dim`` along the view's columns
    copy = copy_rows(view)[:, : view.shape[1]]
    return copy if dim == 1 else copy.T


def worth_staging(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a @ b`` has an unaligned operand and is predicted faster with every such
    operand copied into aligned rows, the copies' time included. fp16 and bf16 products
    without a table entry on a GPU with a model; decided once per ``operands_key``. A
    product of a few rows on narrow tiles of its own (``narrow_tiles.few_rows``: thin, narrow,
    or its weight off 16 bytes) copies only its few rows, and only where they are laid out
    column by column (``few_rows_worth_copying``): reading the weight is all its time, which
    a copy of the weight would double. Nor a product that splits over K as it is
    (``splits_over_k_as_it_is``), whose time the model's plain kernels do not predict."""
    if not a.is_cuda or a.dtype not in (torch.float16, torch.bfloat16) or tma_aligned(a, b):
        return False
    if few_rows(a, b):
        return few_rows_worth_copying(a, b)
    if splits_over_k_as_it_is(a, b):
        return False
    key = operands_key(a, b)
    decision = _decisions.get(key)
    if decision is None:
        decision = _decisions[key] = _predicted_faster(a, b)
    return decision


def forget_decisions() -> None:
    """Drop the staging decisions cached per operands' key (``worth_staging``'s)."""
    _decisions.clear()


def splits_over_k_as_it_is(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a @ b``, unstaged, runs the split-K kernel as a long-K product (``long_k``),
    K's masks loading in vectors and K cut (``kernel.launch_addmm`` asks this too). Its time
    is then the split-K kernel's, which the wave model's plain estimates (``staging_pays``)
    do not describe: they staged 32768x1024x479's weight gradient (479x1024x32768, x.T on columns
    of 958 bytes) from 2862f69 on, and its backward ran 1.2x slower (NOTES 161 (e))."""
    return (
        long_k_product(*product_mnk(a, b), a.dtype) and k_masks_vectorize(a, b) and splits_k(a, b)
    )


def few_rows_worth_copying(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether a few rows' ``a`` (``narrow_tiles.few_rows``), unaligned, is copied: laid out
    column by column (columns of under 16 bytes: the weight gradient ``a.T @ grad_out`` of a
    rank-4 LoRA B, 4x5120x8192) beside an aligned weight. Unstaged, its narrow tiles load
    both operands by pointer in one stage (``few_rows_config``), the weight too, and a thin
    product's split over K loads ``a`` a column of a few elements at a time; the copy, at
    most 64 x K, costs a launch beside reading the weight."""
    return a.stride(0) == 1 and tma_aligned(b)


def _predicted_faster(a: torch.Tensor, b: torch.Tensor) -> bool:
    model = model_without_entry(a, b)
    if model is None:
        return False
    copies = [t.numel() * t.element_size() for t in (a, b) if not tma_aligned(t)]
    # Copies start on lines; an operand not copied keeps its own rows.
    off_lines = tuple(
        off and tma_aligned(t) for off, t in zip(rows_off_lines(a, b), (a, b), strict=True)
    )
    product = model_product(a, b)._replace(off_lines=off_lines)
    tma_only = not masks_vectorize(a, b) and not staged_tiles_unmasked(a, b)
    return staging_pays(model, product, copies, tma_only)


def staged_tiles_unmasked(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a @ b``, staged, is priced among every candidate where its pointer loads'
    masks would not vectorize, as ``configs.choose_config`` chooses for its aligned copies,
    whose pointer tiles load unmasked by host-built descriptors
    (``loads.pointer_tiles_unmasked``; sizes: ``loads.unmasked_sizes``): where an unaligned
    operand's rows start on 2 bytes (``loads.row_bytes``), loading element by element
    unstaged, and the copies do not run ``narrow_tiles.NARROW_COLUMNS_TILE``
    (``narrow_columns``). Priced among tensor-descriptor tiles alone, 511x12345x511's input
    gradient (511x511x12345, ``w.T`` on columns of 2 bytes) stayed unstaged, predicted slower
    staged (99.7 us against 72.4); among every tile 31.0, 48.1 with the copy.

    On and off (H100, bf16, under CUDA graphs, NOTES 187): rows on 2 bytes (call 458) the
    forwards 511x999x2049 31.3 -> 18.1 us (aten 24.8) and 2049x127x2048 28.9 -> 13.1 (21.1),
    511x12345x511's backward 584.8 -> 112.0 (138.0); seven products of no set drawn after
    (call 460) 0.99-15x (4095x4097x255's backward 1258.6 -> 84.0, aten 151.1). Rows on 4 or
    8 bytes, which load in vectors of 2 or 4 elements unstaged, ran slower staged (call 458):
    1024x250x3072's forward 13.2 -> 15.5 (15.8), 1024x100x8192's backward 23.7 -> 31.0
    (37.3), and 6000x60x3072's forward 13.6 -> 23.5 (26.8), whose copies run the
    narrow-columns tile."""
    m, n = product_mnk(a, b)[:2]
    return unmasked_sizes(a, b) and row_bytes(a, b) == a.element_size() and not narrow_columns(m, n)


def staging_pays(
    model: Model, product: Product, copies: Sequence[int], tma_only: bool = False
) -> bool:
    """Whether the model predicts ``product`` faster from aligned operands, after copying
    the unaligned ones (``copies``: their sizes in bytes), or slower by less than
    ``UNSTAGED_GAIN``. ``product.off_lines``: the staged product's; ``tma_only``: the staged
    product chooses among tensor-descriptor candidates only (see ``Model.best_plain``)."""
    unstaged = model.best_plain(product._replace(aligned=False))
    aligned = model.best_plain(product._replace(aligned=True), tma_only)
    if unstaged is None or aligned is None:
        return False
    copy_ms = sum(COPY_MS + COPY_MS_PER_BYTE * size for size in copies)
    return aligned[0] + copy_ms < UNSTAGED_GAIN * unstaged[0]


def lined_copies(
    products: Sequence[tuple[torch.Tensor, torch.Tensor]],
) -> tuple[int | None, ...] | None:
    """For each operand of a launch's fp16/bf16 products, in order (a1, b1, a2, b2, ...), the
    dimension along which it is copied so that its rows (columns, where column-major) start
    on 128-byte lines (its own unit-stride one: the copy keeps its layout), None where it is
    read as it is; None where nothing is copied. Rows off lines cost the kernels' loads
    15-45% (NOTES 90, 176) where they also start off 32-byte sectors; on sectors, less than
    their copies (NOTES 178), so only operands off sectors are weighed
    (``loads.rows_off_sectors``, as the products' ``off_lines``). Copied inside the step, one
    operand of a forward ran 0.99-1.32x and a backward with grad_out copied once for both of
    its products 1.12-1.34x as fast (H100, bf16, six products of no set, NOTES 176). The
    copies are ``cheapest_lines``' (the wave model's choice, where ``stages_onto_lines``); a
    tensor that several products read (the backward's grad_out, or grad_out and its
    transposed view) counts once, as ``relaid`` copies it once."""
    if not stages_onto_lines(products):
        return None
    tensors = {_rows_key(t): t for p in products for t in p}
    index = {key: i for i, key in enumerate(tensors)}
    chosen = cheapest_lines(
        model_without_entry(*products[0]),
        [model_product(a, b)._replace(off_lines=rows_off_sectors(a, b)) for a, b in products],
        [(index[_rows_key(a)], index[_rows_key(b)]) for a, b in products],
        [t.numel() * t.element_size() for t in tensors.values()],
    )
    if not chosen:
        return None
    return tuple(
        t.stride().index(1) if index[_rows_key(t)] in chosen else None for p in products for t in p
    )


def _rows_key(t: torch.Tensor) -> tuple:
    """``memory_key`` of ``t`` laid out along its unit stride (``t.T`` where column-major):
    one for a tensor and its transposed view, which one copy serves (``relaid``)."""
    return memory_key(t if t.stride(-1) == 1 else t.T)


def stages_onto_lines(products: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> bool:
    """Whether ``lined_copies`` weighs copying the products' operands onto lines: some
    operand's rows start off 32-byte sectors (``loads.rows_off_sectors``), and every product
    is fp16 or bf16 on a GPU, and ``priced_by_model``."""
    return (
        all(a.is_cuda and a.dtype in (torch.float16, torch.bfloat16) for a, _ in products)
        and any(any(rows_off_sectors(a, b)) for a, b in products)
        and all(priced_by_model(a, b) for a, b in products)
    )


def priced_by_model(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the wave model's plain kernels price ``a @ b`` as it runs, a copy onto lines
    included: 16-byte aligned, no table entry, not a long-K split as it is (which
    ``worth_staging`` keeps as it is too), and not bound by memory bandwidth
    (``model.bandwidth_bound``). Such a product reads each operand once from memory, so a
    copy, which reads and writes it, costs more bytes than rows off sectors waste (at most
    a sector more per run of a row that a tile loads); the model, which sees waves and steps,
    not bytes, would price the copy by its factors for rows off lines all the same. That
    covers a few rows' and a few columns' narrow tiles (``narrow_tiles.few_rows``,
    ``few_columns``: at most 64 rows or 8 columns do fewer FLOPs per byte than that) and
    the input gradient of a router (``grad_out @ w.T``, K of 1-8), whose operands a copy
    would widen from 2-16 bytes a row to 128 (on d51aa69 the GPU test of a few columns'
    forward caught b copied first, H200, call 439, NOTES 180)."""
    return (
        tma_aligned(a, b)
        and not bandwidth_bound(*product_mnk(a, b))
        and not splits_over_k_as_it_is(a, b)
        and model_without_entry(a, b) is not None
    )


def cheapest_lines(
    model: Model,
    products: Sequence[Product],
    operands: Sequence[tuple[int, int]],
    sizes: Sequence[int],
) -> frozenset[int]:
    """Which operands to copy onto 128-byte lines: of every set of the operands off them
    (each product's ``off_lines``; ``lined_copies`` gives those off 32-byte sectors), the
    one of least predicted time, the products' (``Model.best_plain``, each operand of the
    set on lines) plus its copies' (``LINED_COPY_MS_PER_BYTE``); the empty set where copying
    none is as fast. ``operands``: each product's a and b as indices into ``sizes``
    (each operand's bytes), one index for a tensor several products read."""
    off = sorted(
        {
            i
            for p, pair in zip(products, operands, strict=True)
            for i, o in zip(pair, p.off_lines, strict=True)
            if o
        }
    )

    def predicted(lined: frozenset[int]) -> float:
        total = sum(COPY_MS + LINED_COPY_MS_PER_BYTE * sizes[i] for i in lined)
        for p, pair in zip(products, operands, strict=True):
            lines = tuple(o and i not in lined for i, o in zip(pair, p.off_lines, strict=True))
            best = model.best_plain(p._replace(off_lines=lines))
            if best is None:
                return math.inf
            total += best[0]
        return total

    sets = [frozenset(c) for r in range(len(off) + 1) for c in itertools.combinations(off, r)]
    return min(sets, key=predicted)  # (the empty set first: a tie copies nothing)
