"""Config selection: one Helion config per (shape, dtype, operand layout), no search at run time.

Helion calls ``select_config`` (its ``autotuner_fn`` hook) the first time it meets a new
specialization of the matmul kernel; exact sizes and strides are part of that key, so a
transposed operand gets its own entry. The answer, in order:

1. ``HELION_OPS_AUTOTUNE=1``: Helion's own autotuner (effort from ``HELION_AUTOTUNE_EFFORT``,
   e.g. ``quick``), cached on disk by Helion.
2. On a GPU, an exact table entry for (M, N, K, dtype, layout) and the kernel's epilogue:
   "plain" (``alpha * acc``) or "bias" (addmm's, which loads a bias tile), from
   ``helion_ops.table`` (the user's own table, written by ``python -m helion_ops.tune --shape
   ...``, read over the shipped ``tuned/sm90.json``). fp16 falls back to the bf16 entry of the
   same key; a bias epilogue without an entry of its own gets the plain entry, unflattened
   where the bias would not fit in shared memory beside its pipeline (``fit_for_bias``).
   The pair kernel (two products in one launch) has entries of its own, whose layout names
   four operands. Entries are overrides: every shape gets a config without one.
3. On a GPU, for fp16 and bf16: the wave model (``helion_ops.model``) picks among the tile
   shapes that won the table (a serving batch's forward: the batch model,
   ``model.batch_product``); the split-K kernel gets ``split_rule``, and the pair kernel
   the model's choice where it predicts one launch faster than two (``model_pair``), else
   ``pair_rule``; a product of a few rows (``few_rows``: thin, of at most 32 rows and a long
   K, or its weight off 16 bytes) narrow tiles of its own (``few_rows_config``); a
   flattened candidate with a K loop of 8 to 16 steps runs as many pipeline stages as
   shared memory holds, beside a bias tile too (``deepened``), and so does a flat one of a
   product bound by memory bandwidth, split-K's too (``streaming``); a product of 65 to 128
   rows and a long K takes the tile and split over K that give it the most programs of one
   wave (``one_wave_stream``). fp32 (and GPUs without a model) get Helion's built-in
   heuristic default.
   The transposed kernel (``transposed_pays``: b's rows on 16 bytes but not 32) computes
   ``a @ b`` as ``(b.T @ a.T).T`` and gets the config of ``b.T @ a.T`` by rules 2 and 3.
4. On the CPU (``TRITON_INTERPRET=1``), a flat grid of blocks of at most 64 (and K split in 4
   for the split-K kernel): the interpreter is slow with small blocks and cannot run
   persistent kernels.
"""

from __future__ import annotations

import functools
import math
import os
from typing import TYPE_CHECKING, NamedTuple

import helion
import torch
from helion.autotuner.base_search import BaseAutotuner
from helion.runtime.settings import default_autotuner_fn

from helion_ops.candidates import SMALL_OUTPUT, flattened, split_config
from helion_ops.candidates import config as plain_config
from helion_ops.model import (
    BATCH_MODEL_ROWS,
    LINE_BYTES,
    TRANSPOSED_PLAIN,
    Product,
    bandwidth_bound,
    batch_choice,
    batch_product,
    k_block,
    k_steps,
    pair_of,
    power_of_two_pieces,
    shipped_batch_model,
    shipped_model,
    split_k_block,
    split_of,
    tail_split,
    vector_bytes,
)
from helion_ops.table import (
    TableKey,
    config_key,
    gpu_arch,
    operand_layout,
    product_mnk,
    tuned_table,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from helion.runtime.kernel import BoundKernel

    from helion_ops.model import Model

AUTOTUNE_ENV = "HELION_OPS_AUTOTUNE"


def interpreter_config(*mnks: tuple[int, int, int]) -> helion.Config:
    """A config the Triton CPU interpreter runs quickly: power-of-two blocks of 16 to 64, for
    one product's (M, N, K) or for each of a pair's."""

    def block(size: int) -> int:
        return min(64, max(16, 1 << max(size - 1, 0).bit_length()))

    blocks = [block(size) for mnk in mnks for size in mnk]
    return helion.Config(block_sizes=blocks, num_warps=4, num_stages=1)


def pair_rule(
    mnk1: tuple[int, int, int], mnk2: tuple[int, int, int], dtype: torch.dtype
) -> helion.Config:
    """A pair's config where the table has none: 128x128 tiles where the two products give
    at least 64 of them (half the SMs), else 64x64; pointer indexing (a few K steps per
    tile), K blocks of 128 bytes. On the H200 (bf16) these were the best or within 5% of the
    best of 18 candidates at 256^3, 512^3 and 1024^3."""
    tiles = sum(-(-m // 128) * -(-n // 128) for m, n, _ in (mnk1, mnk2))
    tile = 128 if tiles >= 64 else 64
    block_k = 128 // dtype.itemsize
    return helion.Config(
        block_sizes=[tile, tile, block_k] * 2,
        num_warps=4,
        num_stages=4,
        pid_type="flat",
        indexing="pointer",
    )


def choose_config(
    bound_kernel: BoundKernel, *operands: torch.Tensor, table: bool = True
) -> helion.Config:
    """The config for ``a @ b``, or for a pair's ``a1, b1, a2, b2``, without any search (rules
    2 to 4 above; ``table=False``: rules 3 and 4, what the product gets without an entry)."""
    if len(operands) == 5:  # last_wave_kernel's x_full, x_tail, y, out_full, partial
        return last_wave_config(bound_kernel, *operands)
    transposed = getattr(bound_kernel.kernel.fn, "transposed", False)
    if transposed:
        operands = (operands[1].T, operands[0].T)
    key = config_key(*operands)
    pairs = zip(operands[::2], operands[1::2], strict=True)
    mnks = [product_mnk(a, b) for a, b in pairs]
    if operands[0].device.type != "cuda":
        config = interpreter_config(*mnks)
        if "split_k" in bound_kernel.config_spec.user_defined_tunables:
            config.config["split_k"] = 4
        return config
    device, dtype = operands[0].device, operands[0].dtype
    epilogue = epilogue_of(bound_kernel, len(mnks))
    config = table_config(tuned_table(gpu_arch(device)), key, epilogue) if table else None
    if config is not None:
        return config
    if len(mnks) == 2:
        # The pair kernel runs where some rule admitted one launch (``kernel.launch_mm_pair``);
        # the eager rule admits the most, with the same config.
        return model_pair(*operands, eager=True) or pair_rule(*mnks, dtype)
    model = shipped_model(gpu_arch(device))
    if dtype == torch.float32 or model is None:
        return bound_kernel.config_spec.default_config()
    if "split_k" in bound_kernel.config_spec.user_defined_tunables:
        return streaming(split_rule(*mnks[0], sm_count(device)), dtype.itemsize, *mnks[0])
    a, b = operands
    if few_rows(a, b) and not transposed:  # (a few rows' product never runs transposed)
        return few_rows_config(a.shape[0], b.shape[1], tma_aligned(a, b))
    product, tma_only = model_product(a, b), tensor_descriptors_only(a, b)
    break_ties = epilogue != "bias"
    stream = None
    if masks_vectorize(a, b) and not transposed:
        stream = one_wave_stream(*mnks[0], sm_count(device), splits=False)
    if stream is not None:
        # Two stages: ``streaming`` deepens it to what shared memory holds.
        config = plain_config(stream.rows, stream.columns, stream.block_k, 4, 2, "flat", "pointer")
    else:
        batch_model = shipped_batch_model(gpu_arch(device)) if batch_product(product) else None
        config = batch_model and batch_model.choose(batch_choice(product), tma_only, break_ties)
        config = config or model.choose(product, tma_only, break_ties)
    if config is None:
        return bound_kernel.config_spec.default_config()
    itemsize, mnk = dtype.itemsize, mnks[0]
    if epilogue == "bias":
        config = deepened(fit_for_bias(config, itemsize), itemsize, product.k, tiles=2)
        return streaming(config, itemsize, *mnk, tiles=2)
    # The transposed kernel's store transposes its tile, which may take shared memory of its
    # own: it keeps the candidate's depth.
    if transposed:
        return config
    return streaming(deepened(config, itemsize, product.k), itemsize, *mnk)


def model_product(a: torch.Tensor, b: torch.Tensor) -> Product:
    """``a @ b`` as the wave model sees it. ``aligned``: whether it loads its operands with
    tensor descriptors (an output of unaligned rows, as from operands staged by
    ``helion_ops.staging``, only stores by pointer: one store per tile, against every K
    step's loads)."""
    layout = operand_layout(a) + operand_layout(b)
    aligned, sms = tma_aligned(a, b), sm_count(a.device)
    mnk = product_mnk(a, b)
    return Product(*mnk, layout, aligned, sms, rows_off_lines(a, b), row_bytes(a, b))


def row_bytes(*tensors: torch.Tensor) -> int:
    """The model's ``row_bytes``: the widest vector (in bytes, at most 16) that every row
    (column, where column-major) of these 2-D tensors starts on, as the kernel sees them:
    Helion bakes the strides into its code, Triton knows a base address 16-byte aligned or
    not at all, and a tensor without a unit stride loads element by element."""
    widths = []
    for t in tensors:
        size = t.element_size()
        if 1 not in t.stride() or t.data_ptr() % 16:
            widths.append(size)
        else:
            widths += [vector_bytes(s * size) for s in t.stride() if s != 1]
    return min(widths, default=16)


def rows_off_lines(a: torch.Tensor, b: torch.Tensor) -> tuple[bool, bool]:
    """The model's ``off_lines`` of ``a @ b``: whether ``a``'s and ``b``'s rows (columns,
    where column-major) start off 128-byte lines, their leading stride in bytes not a
    multiple of ``model.LINE_BYTES``."""
    return tuple(max(t.stride()) * t.element_size() % LINE_BYTES != 0 for t in (a, b))


class LastWaveSplit(NamedTuple):
    """Where ``a @ b`` runs ``last_wave_kernel``: ``rows`` in whole waves of tiles, the rest
    split over K; ``eager``: also without a CUDA graph capture (see ``EAGER_SPLIT_MS``)."""

    rows: int
    eager: bool


# The split's two extra launches (zeroing the fp32 tail, finishing it) and their tensors cost
# 75-135 us of host time per product on the H200 machine, against 24 us for a plain launch
# (NOTES 40): more than the split saves on the GPU, unless a CUDA graph replays the launches
# (no host time) or the product's own kernel time hides them. So outside a capture only
# products predicted to run this long or longer split.
EAGER_SPLIT_MS = 0.2

_last_wave_splits: dict[tuple, LastWaveSplit | None] = {}
# Output elements of one wave of the model's smallest tiles (64x32) on an H100/H200's 132 SMs.
SMALLEST_WAVE = 132 * 64 * 32


def last_wave_split(a: torch.Tensor, b: torch.Tensor) -> LastWaveSplit | None:
    """Whether ``a @ b`` splits its last wave, or None (the plain kernel). Only fp16 and bf16
    products without a table entry, on a GPU with a model, whose K masks vectorize
    (``k_masks_vectorize``), where the model predicts the split faster (``Model.plan``) than
    the plain path: the transposed kernel's where ``transposed_pays``; decided once per
    ``operands_key``."""
    if not a.is_cuda or a.dtype == torch.float32 or a.shape[0] * b.shape[1] < SMALLEST_WAVE:
        # fp32 and the CPU never split; below one wave of the smallest tiles nothing to keep.
        return None
    key = operands_key(a, b)
    if key in _last_wave_splits:
        return _last_wave_splits[key]
    split = None
    model = model_without_entry(a, b)
    # (A few rows' product runs narrow tiles of its own, whose waves the model does not know.)
    if model is not None and k_masks_vectorize(a, b) and not few_rows(a, b):
        product = model_product(a, b)
        plan = model.plan(product, TRANSPOSED_PLAIN if transposed_pays(a, b) else 1.0)
        if plan is not None and plan[1] < product.m:
            plain = model.best_plain(product)
            split = LastWaveSplit(plan[1], plain is not None and plain[0] >= EAGER_SPLIT_MS)
    _last_wave_splits[key] = split
    return split


_model_pairs: dict[tuple, helion.Config | None] = {}


def model_pair(
    a1: torch.Tensor, b1: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor, eager: bool = False
) -> helion.Config | None:
    """The config of ``a1 @ b1`` and ``a2 @ b2`` in one launch of ``pair_kernel`` where the
    wave model predicts that faster than two launches (``Model.pair``; ``eager``: for calls
    outside a CUDA graph capture, where one launch fewer also saves host time), else None;
    the same config either way where both admit the pair. Only fp16 and bf16 on a GPU with a
    model, 16-byte aligned operands, neither product in the table, and an output larger than
    ``SMALL_OUTPUT`` (smaller pairs take ``pair_rule``); decided once per operands' keys."""
    if (
        not a1.is_cuda
        or a1.dtype == torch.float32
        or max(a1.shape[0] * b1.shape[1], a2.shape[0] * b2.shape[1]) <= SMALL_OUTPUT
    ):
        return None
    key = (operands_key(a1, b1), operands_key(a2, b2), eager)
    if key in _model_pairs:
        return _model_pairs[key]
    config = None
    model = model_without_entry(a1, b1)
    if (
        model is not None
        and model_without_entry(a2, b2) is not None
        and tma_aligned(a1, b1, a2, b2)
    ):
        tma_only = not (masks_vectorize(a1, b1) and masks_vectorize(a2, b2))
        first, second = model_product(a1, b1), model_product(a2, b2)
        candidate = model.pair(first, second, tma_only, eager)
        config = None if candidate is None else pair_of(candidate)
    _model_pairs[key] = config
    return config


def operands_key(a: torch.Tensor, b: torch.Tensor) -> tuple:
    """What a decision about ``a @ b`` may depend on: each operand's sizes, strides and
    16-byte alignment, the dtype and the device."""
    alignment = (a.data_ptr() % 16, b.data_ptr() % 16)
    return a.shape, a.stride(), b.shape, b.stride(), a.dtype, a.device, alignment


def model_without_entry(a: torch.Tensor, b: torch.Tensor) -> Model | None:
    """The wave model of ``a``'s GPU where its table has no plain entry for ``a @ b`` (an
    entry overrides the model), else None."""
    arch = gpu_arch(a.device)
    model = shipped_model(arch)
    if model is None or table_config(tuned_table(arch), config_key(a, b), "plain") is not None:
        return None
    return model


def last_wave_config(
    bound_kernel: BoundKernel,
    x_full: torch.Tensor,
    x_tail: torch.Tensor,
    y: torch.Tensor,
    out_full: torch.Tensor,
    partial: torch.Tensor,
) -> helion.Config:
    """``last_wave_kernel``'s config: the tile shape and programs (flat or persistent) of
    ``Model.best_split``'s candidate, as the model's coefficients assume, and the tail's K
    cut in ``tail_split``'s pieces (``split_of`` that block), each a whole number of the
    tail's K blocks. Its loads carry no mask at a piece's end, and must not need one: Helion
    1.5 drops that mask from tensor-descriptor loads (wrong sums, NOTES 82)."""
    rows, k = x_full.shape
    m, n = rows + x_tail.shape[0], y.shape[1]
    if not x_full.is_cuda:
        config = interpreter_config((rows, n, k), (m - rows, n, k))
        config.config["split_k"] = 4
        return config
    product = model_product(x_full, y)._replace(m=m)
    model = shipped_model(gpu_arch(x_full.device))
    best = model.best_split(product) or model.best_plain(product)
    chosen = best[1].config
    bm, bn, bk = chosen["block_sizes"]
    tail_tiles = math.ceil((m - rows) / bm) * math.ceil(n / bn)
    block, _ = tail_split(tail_tiles, k, product.sms)
    indexing = chosen.get("indexing", "pointer")
    return helion.Config(
        block_sizes=[bm, bn, bk, bm, bn, min(bk, block)],  # powers of two: min divides block
        num_warps=chosen["num_warps"],
        num_stages=chosen["num_stages"],
        pid_type=chosen["pid_type"],
        indexing=indexing if isinstance(indexing, str) else "pointer",
        l2_groupings=[8 if indexing == "tensor_descriptor" else 1, 1],
        range_unroll_factors=[0] * 4,
        range_num_stages=[0] * 4,
        split_k=split_of(k, block),
    )


@functools.cache
def sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def k_masks_vectorize(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the K loops of the split kernels (split-K, the last wave's tail) load ``a``
    and ``b`` in vectors. Their loop ends where a piece of K does, so Helion masks every
    load by K and loads by pointer; where K is not a multiple of 16 bytes and an operand is
    contiguous along K, the mask differs from element to element and each is loaded alone
    (no vector loads, no asynchronous copies). On the H200 (bf16) the GPT-2 head's
    ``grad_out @ mat2.T`` (4096x768, K = 50257, staged) took 2.4-3.7 ms split-K and 1.5-2.0
    with its last wave split, against 0.61 ms on the plain kernel with tensor descriptors."""
    size = a.element_size()
    return all(length * size % 16 == 0 for dim, length in _contiguous_sizes(a, b) if dim == "k")


def masks_vectorize(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the plain kernel's pointer loads of ``a`` and ``b`` vectorize: along each
    operand's contiguous dimension the size is a whole number of 16 bytes. Else the bounds
    mask of the last tile along it differs from element to element, and every load is of one
    element: the model's fit (on sizes of whole 16 bytes) does not hold for pointer candidates
    there, so for aligned operands it chooses among tensor descriptors
    (``Model.best_plain``'s ``tma_only``), which need no mask. (Unaligned operands' factors
    were measured on every candidate as it runs on them, masks included.) On the H200 (bf16)
    the GPT-2 head's forward, staged (N = 50257 along b's rows), took 2.15 ms on a pointer
    candidate and 0.68 on tensor descriptors."""
    size = a.element_size()
    return all(length * size % 16 == 0 for _, length in _contiguous_sizes(a, b))


def tensor_descriptors_only(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the model chooses for ``a @ b`` among tensor-descriptor candidates only: where
    pointer loads' masks do not vectorize (``masks_vectorize``), but for operands whose rows
    start on 4 or 8 bytes, not 16 (``row_bytes``). Their factors were measured on each
    candidate as it runs on them, pointers and masks included, and rows of 8 bytes favour
    pointer tiles (H200, bf16, call 299: 1100^3 on 128x128x64 pointer tiles 13-16 us, on
    128x256x64 tensor-descriptor ones, loading by pointer there, 20-21; call 300, NOTES
    129). Rows of 2 bytes keep the rule: their choice was not measured without it."""
    return not masks_vectorize(a, b) and row_bytes(a, b) in (a.element_size(), 16)


def _contiguous_sizes(a: torch.Tensor, b: torch.Tensor) -> list[tuple[str, int]]:
    """(name, size) of each dimension ("m", "k" or "n") along which an operand of ``a @ b``
    is contiguous (unit stride), once per such operand: where a pointer load's bounds mask
    runs element by element unless the size is a whole number of 16 bytes."""
    m, k = a.shape
    n = b.shape[1]
    dims = ((a, (("m", m), ("k", k))), (b, (("k", k), ("n", n))))
    return [
        dim
        for t, sizes in dims
        for dim, stride in zip(sizes, t.stride(), strict=True)
        if stride == 1
    ]


# Where the transposed kernel pays (H200, bf16 and fp16, NOTES 59): K of at least this many
# elements, or at most this many waves of 128x128 output tiles. Over more tiles of a shorter
# K, the transposed store of each tile costs more than its loads save (32768x1000x512, 2048
# tiles: 0.91 of the plain kernel's speed; 2560x3000x640, 480 tiles: 1.06).
TRANSPOSED_MIN_K = 2000
TRANSPOSED_MAX_WAVES = 4


def transposed_pays(a: torch.Tensor, b: torch.Tensor, epilogue: str = "plain") -> bool:
    """Whether ``a @ b`` runs on ``kernel.transposed_kernel`` (out.T = b.T @ a.T, b's tiles
    the dot's first operand): fp16 or bf16, ``b`` contiguous along N with rows on 16 bytes but
    not on 32 (N of 1000, 3000, 5000), ``a`` contiguous along K, or along M with columns on
    128-byte lines (the backward's ``mat1.T @ grad_out``), not ``few_rows``, no exact table
    entry, and a long K or few output tiles (``TRANSPOSED_MIN_K``, ``TRANSPOSED_MAX_WAVES``).
    An entry for the product and its ``epilogue`` ("plain" or "bias") runs it plain:
    ``python -m helion_ops.tune`` writes one only where that beats the transposed kernel.
    On the H200 (bf16, NOTES 59) such rows cost the plain kernel 10-40% as b's and little as the
    first operand's: 992x1000x992 took 7.1 us transposed against 9.7 (aten 6.9), 768x3000x768 11.5
    against 14.4, 4096x3000x4096 161 against 172; aligned rows ran the same either way. With ``a``
    contiguous along M, a's columns become the second operand's rows: off lines (4000 or 2000 bytes)
    they took back the gain (NOTES 61)."""
    if a.dtype not in (torch.float16, torch.bfloat16) or b.stride(1) != 1:
        return False
    if b.stride(0) * b.element_size() % 32 != 16:
        return False
    along_k = a.stride(1) == 1
    along_m_on_lines = a.stride(0) == 1 and a.stride(1) * a.element_size() % LINE_BYTES == 0
    if not (along_k or along_m_on_lines):
        return False
    if not a.is_cuda:
        return True
    if few_rows(a, b):
        return False
    (m, k), n = a.shape, b.shape[1]
    tiles = math.ceil(m / 128) * math.ceil(n / 128)
    if k < TRANSPOSED_MIN_K and tiles > TRANSPOSED_MAX_WAVES * sm_count(a.device):
        return False
    table = tuned_table(gpu_arch(a.device))
    return table_config(table, config_key(a, b), epilogue) is None


def tma_aligned(*tensors: torch.Tensor) -> bool:
    """Whether tensor descriptors can load these 2-D tensors: one unit stride, the other
    stride and the base 16-byte aligned (else Helion falls back to pointer indexing): rows
    (columns, where column-major) that start on 16 bytes (``row_bytes``)."""
    return row_bytes(*tensors) == 16


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
# deep pipeline (``streaming``), at most one an SM. What sets its time is how many SMs stream
# in one wave: a second wave, even of a few programs, costs about as much as the first.
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
    launchers' slow path asks on every call (through ``kernel.long_k_product``), and costing
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
    columns = few_rows_config(m, n, tma=True).config["block_sizes"][1]
    long_k = m <= NARROW_ROWS and columns == 32 and k >= 2 * n
    return narrow_in_flight(m, n, itemsize) and not long_k


def thin_split(m: int, n: int, k: int, sms: int) -> helion.Config:
    """A thin product's split-K config: ``THIN_TILE``, K cut so that the programs (tiles
    times pieces) come nearest, by ratio, to two per SM: the pieces of power-of-two blocks
    that it was measured with (``power_of_two_pieces``), now of equal length."""
    bm, bn, stages, warps = THIN_TILE
    tiles = math.ceil(m / bm) * math.ceil(n / bn)

    def distance(split: int) -> float:
        return abs(math.log(tiles * math.ceil(k / k_block(k, split)) / (2 * sms)))

    split = min((1 << e for e in range(9)), key=distance)
    return split_config(bm, bn, 64, power_of_two_pieces(k, split), stages, warps=warps)


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


def splits_k(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the split-K kernel's config for ``a @ b`` cuts K at all: False where it would
    be ``split_rule``'s with one piece (no table entry; fp16 and bf16 on a GPU with a model),
    whose zeroed fp32 sums, atomic adds and cast the plain kernel does without (e.g. 2048x2048
    outputs of a K of 16384: 128 tiles of 128x256 already fill the SMs). Decided once per
    table key and device: split-K launches take the launcher's full path on every call."""
    if not a.is_cuda or a.dtype == torch.float32:
        return True
    return _key_splits_k(config_key(a, b), a.device)


@functools.cache
def _key_splits_k(key: tuple, device: torch.device) -> bool:
    arch = gpu_arch(device)
    if shipped_model(arch) is None or table_config(tuned_table(arch), key, "plain") is not None:
        return True
    return split_rule(*key[:3], sm_count(device)).config["split_k"] > 1


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


def tuned_pair(*operands: torch.Tensor) -> bool:
    """Whether this GPU's table has an entry for the pair ``a1 @ b1, a2 @ b2`` (written only
    where one launch was measured faster than two)."""
    device = operands[0].device
    if device.type != "cuda":
        return False
    return table_config(tuned_table(gpu_arch(device)), config_key(*operands), "plain") is not None


def table_config(
    table: dict[TableKey, helion.Config], key: tuple[int, int, int, str, str], epilogue: str
) -> helion.Config | None:
    """The table's config for a key and epilogue, or None.

    fp16 takes the bf16 entry where it has none of its own (fp16 and bf16 share tile shapes,
    shared-memory needs and speeds). A bias epilogue without an entry takes the plain one
    through ``fit_for_bias``.
    """
    dtypes = [key[3], "bfloat16"] if key[3] == "float16" else [key[3]]
    for dtype in dtypes:
        config = table.get((*key[:3], dtype, key[4], epilogue))
        if config is not None:
            return config
    if epilogue == "bias":
        plain = table_config(table, key, "plain")
        return None if plain is None else fit_for_bias(plain, getattr(torch, key[3]).itemsize)
    return None


# The memory operations of one product with the plain ``alpha * acc`` epilogue: the loads of
# x and y and the store of the output. addmm's bias epilogue adds the load of the bias.
PLAIN_MEMORY_OPS = 3


def epilogue_of(bound_kernel: BoundKernel, products: int = 1) -> str:
    """'plain' for the ``alpha * acc`` epilogue (of each product, for a pair: ``products``
    2), 'bias' for one that also loads a tile."""
    memory_ops = bound_kernel.config_spec.indexing.length
    return "plain" if memory_ops <= PLAIN_MEMORY_OPS * products else "bias"


# Shared memory a block may use on sm90 (H100, H200).
SHARED_MEMORY_BYTES = 227 * 1024


def fit_for_bias(config: helion.Config, itemsize: int) -> helion.Config:
    """A plain config made to fit a bias epilogue.

    A flattened persistent loop keeps the operands' pipeline buffers live through the
    epilogue (to prefetch the next tile), so the bias tile and the output tile come on top of
    them. Where that exceeds an SM's shared memory (128x256x64 tiles in 3 stages of bf16: 144
    KiB of operands and 64 KiB each for the bias and the output, against 227), the tile runs
    unflattened, which fits; smaller ones (128x128x64 in 4 stages: 128 + 32 + 32 KiB) keep
    the flattened loop, which on short K loops is most of their speed.
    """
    if not flattened(config) or stages_that_fit(config, itemsize, 2) >= config.config["num_stages"]:
        return config
    return helion.Config(**{k: v for k, v in config.config.items() if k != "range_flattens"})


def stages_that_fit(config: helion.Config, itemsize: int, tiles: int) -> int:
    """How many pipeline stages of ``config``'s operand tiles fit in an SM's shared memory
    beside ``tiles`` tiles of its output's size (the output's, and a bias's), for each of the
    persistent programs that share the SM."""
    bm, bn, bk = config.config["block_sizes"][:3]
    programs = config.config.get("num_sm_multiplier", 1)
    room = SHARED_MEMORY_BYTES // (programs * itemsize) - tiles * bm * bn  # elements
    return room // (bm * bk + bk * bn)


# The deepest pipeline measured (NOTES 95): 128x128x64 tiles in 6 stages.
DEEPEST_PIPELINE = 6
# The K loops a deeper pipeline pays on (NOTES 95, 96): 8 to 16 steps.
DEEPENED_K_STEPS = range(8, 17)


def deepened(config: helion.Config, itemsize: int, k: int, tiles: int = 1) -> helion.Config:
    """A flattened persistent config with as many pipeline stages as shared memory holds
    beside ``tiles`` tiles of its output's size (1, or 2 with a bias), up to
    ``DEEPEST_PIPELINE``, where its K loop has ``DEEPENED_K_STEPS`` steps; other configs, and
    other loops, as they are.

    A flattened loop runs one pipeline through all of a program's tiles, so the next tile's
    loads overlap this tile's epilogue; the shorter the K loop, the more of its time that
    overlap is. On the H200 (bf16, tritonbench under CUDA graphs) 128x128x64 tiles in 6
    stages rather than 4 ran the forwards of K = 768 (12 steps) 1.7-2.9% faster in all 6
    pairs of runs, 3 shapes in 2 rounds (8192x2304x768 51.2 -> 49.7-50.1 us, 12608x768x768
    29.2 -> 28.7), and with K of 3072 to 8192 -2% to +1% (NOTES 95); the memory-bound tall
    products of K = 256 (4 steps) 0.1-3.1% slower (98304x128x256 24.2 -> 24.9 us, NOTES 96).
    Beside a bias tile, 5 stages rather than 4 ran four of five addmm forwards of K = 512 and
    768 0.8-1.1% faster, the fifth 0.2% slower (NOTES 96). The model's fit was timed at the
    candidate's own depth, so it predicts the deeper tile a little slow. The larger flattened
    tiles already fill shared memory in 3 stages. ``choose_config`` does not deepen the
    transposed kernel.
    """
    if not flattened(config) or k_steps(config, k) not in DEEPENED_K_STEPS:
        return config
    return _as_deep_as_fits(config, itemsize, tiles, DEEPEST_PIPELINE)


def _as_deep_as_fits(
    config: helion.Config, itemsize: int, tiles: int, deepest: int, steps: int | None = None
) -> helion.Config:
    """``config`` with as many pipeline stages as ``stages_that_fit`` beside ``tiles`` output
    tiles, at most ``deepest``; ``config`` itself where that is no deeper than it runs or,
    where ``steps`` (a program's K loop) is given, longer than the loop."""
    stages = min(deepest, stages_that_fit(config, itemsize, tiles))
    if stages <= config.config["num_stages"] or (steps is not None and steps < stages):
        return config
    return helion.Config(**{**config.config, "num_stages": stages})


# The deepest pipeline of a product bound by memory bandwidth (``streaming``): 64x128x64 tiles
# in 9 stages ran as fast as in 7 (H200, call 280, NOTES 124).
DEEPEST_STREAM = 8


def streaming(
    config: helion.Config, itemsize: int, m: int, n: int, k: int, tiles: int = 1
) -> helion.Config:
    """A flat (not persistent) config of an ``m x n x k`` product bound by memory bandwidth
    (``model.bandwidth_bound``: a serving batch's or a linear layer's forward of a few row
    tiles, a split-K product) with as many pipeline stages as shared memory holds beside
    ``tiles`` tiles of its output's size, up to ``DEEPEST_STREAM``; other configs as they are.

    Such a product streams its weight once: its speed is the bytes each SM keeps in flight,
    one operand stage a K step. On the H200 (bf16, under CUDA graphs, call 280), four
    products of 72-120 rows of no set in both layouts ran 64x128x64 tiles in 7 stages rather
    than the candidate's 5 1.07-1.12x faster (96x6656x5120 'rc' 26.7 -> 23.7 us, aten 20.8),
    128x128x64 in 6 rather than 4 1.08-1.16x (120x8704x3072 23.0 -> 19.9, aten 17.3), and
    the split-K kernel's 128x128x64 in 6 stages (3 pieces) 17.9 us against the rule's 4
    stages' 19.5 on 80x4864x4864 (aten 12.3). A program's K loop shorter than the pipeline
    (a weight gradient of a few rows' K) keeps the candidate's depth. On the 38 products of
    our sets whose depth it moves (call 281, ``launch_mm``, two interleaved rounds) it ran
    1.021x faster: 20 faster by 1-27% (80x11008x2048 'rc' 18.8 -> 14.9 us), 8 slower by 2-4%
    (256x512x16384 'cr' 12.6 -> 13.1, 6x8192x2048 'rc' 7.1 -> 7.5; five of them on 64x64x128
    tiles), 10 within 1% (NOTES 124)."""
    if config.config.get("pid_type", "flat") != "flat" or not bandwidth_bound(m, n, k):
        return config
    piece = split_k_block(k, config.config.get("split_k", 1))  # a program's K
    return _as_deep_as_fits(config, itemsize, tiles, DEEPEST_STREAM, k_steps(config, piece))


class _Chosen(BaseAutotuner):
    """Hands Helion a config decided up front, in place of a search."""

    def __init__(self, config: helion.Config) -> None:
        self.config = config

    def autotune(self, *, skip_cache: bool = False) -> helion.Config:
        return self.config


def select_config(
    bound_kernel: BoundKernel, args: Sequence[object], **kwargs: object
) -> BaseAutotuner:
    """Helion ``autotuner_fn``: the table or rule, or Helion's autotuner when opted in."""
    if os.environ.get(AUTOTUNE_ENV, "") not in ("", "0"):
        return default_autotuner_fn(bound_kernel, args, **kwargs)
    operands = [a for a in args if isinstance(a, torch.Tensor)]
    return _Chosen(choose_config(bound_kernel, *operands))
