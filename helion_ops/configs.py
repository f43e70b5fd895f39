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
   where the bias would not fit in shared memory beside its pipeline
   (``pipelines.fit_for_bias``).
   The pair kernel (two products in one launch) has entries of its own, whose layout names
   four operands. Entries are overrides: every shape gets a config without one.
3. On a GPU, for fp16 and bf16: the wave model (``helion_ops.model``) picks among the tile
   shapes that won the table (a serving batch's forward: the batch model,
   ``model.batch_product``); the split-K kernel gets ``long_k.split_rule``, and the pair
   kernel the model's choice where it predicts one launch faster than two (``model_pair``),
   else ``pair_rule``; a product of a few rows (``narrow_tiles.few_rows``: thin, of at most 32
   rows and a long K, or its weight off 16 bytes) narrow tiles of its own
   (``narrow_tiles.few_rows_config``), and so does a product of a few columns, transposed
   (``narrow_tiles.few_columns``; where those do not pay, or under 4096 rows with a K of
   2048 or more, it splits over K on tiles of 16 columns, ``long_k.few_columns_split``, at 4
   stages); a tall product of 9 to 64 columns
   that loads by tensor descriptors alone runs tiles of 64 columns at 4 stages
   (``narrow_tiles.narrow_columns``); a flattened candidate with a K loop of 8 to 16 steps
   runs as many pipeline stages as shared memory holds, beside a bias tile too
   (``pipelines.deepened``), and so does a flat one of a product bound by memory bandwidth,
   split-K's too (``pipelines.streaming``); a product of 65 to 128 rows and a long K takes
   the tile and split over K that give it the most programs of one wave
   (``long_k.one_wave_stream``). fp32 with IEEE dots takes 64x64x32 tiles
   (``FP32_IEEE_TILE``) unless b is column-major, and split-K's rule with a K block of 128
   bytes (``fp32_split``); TF32, fp32 with b column-major and GPUs without a model get
   Helion's built-in heuristic default.
   The transposed kernel (``transposed_pays``: b's rows on 16 bytes but not 32, or a few
   columns) computes
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

from helion_ops.candidates import SMALL_OUTPUT
from helion_ops.candidates import config as plain_config
from helion_ops.loads import (
    host_descriptors_pay,
    k_masks_vectorize,
    masks_vectorize,
    model_tiles_on_host_descriptors,
    pointer_tiles_on_host_descriptors,
    pointer_tiles_unmasked,
    row_bytes,
    rows_off_lines,
    tensor_descriptors_only,
    tma_aligned,
)
from helion_ops.long_k import one_wave_stream, split_rule
from helion_ops.model import (
    LINE_BYTES,
    TRANSPOSED_PLAIN,
    Product,
    batch_choice,
    batch_product,
    pair_of,
    shipped_batch_model,
    shipped_model,
    split_of,
    tail_split,
)
from helion_ops.narrow_tiles import (
    NARROW_COLUMNS_TILE,
    few_columns,
    few_columns_long_k,
    few_rows,
    few_rows_config,
    narrow_columns,
)
from helion_ops.pipelines import deepened, fit_for_bias, streaming
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
    tiles = sum(tiles_of_128(m, n) for m, n, _ in (mnk1, mnk2))
    tile = 128 if tiles >= 64 else 64
    block_k = 128 // dtype.itemsize
    return helion.Config(
        block_sizes=[tile, tile, block_k] * 2,
        num_warps=4,
        num_stages=4,
        pid_type="flat",
        indexing="pointer",
    )


# fp32 products with IEEE dots (torch's default: TF32 off) whose b is not column-major: 64x64x32
# tiles in 3 stages, loads by pointer. On an H100 (call 347, NOTES 147) the fastest of 13
# tile shapes on five such products, 1.16-2.16x as fast as Helion's default config (0.87-1.01
# of aten at 512x4096x1024 to 4096^3). With b column-major the default was within 2% of
# the best tile (128x128x32) and 64x64x32 1.7x slower; with TF32 no tile beat the default by
# 5% on five of six products (the tensor cores want both operands K-major: only the 'rc'
# product reached 0.88 of aten, the others 0.26-0.38).
FP32_IEEE_TILE = plain_config(64, 64, 32, 4, 3, "flat", "pointer")


def fp32_split(m: int, n: int, k: int, sms: int) -> helion.Config:
    """The split-K kernel's config for IEEE fp32: ``long_k.split_rule``'s (tiles and pieces as
    for bf16), its K block halved, so that a stage holds as many bytes as bf16's. On an H100
    (call 347) 1.09x as fast as Helion's default on 512x512x65536; with TF32 0.93x, so TF32
    keeps the default."""
    config = split_rule(m, n, k, sms)
    bm, bn, bk = config.config["block_sizes"]
    return helion.Config(**{**config.config, "block_sizes": [bm, bn, bk // 2]})


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
    if model is None:
        return bound_kernel.config_spec.default_config()
    split_k = "split_k" in bound_kernel.config_spec.user_defined_tunables
    if dtype == torch.float32:
        ieee = bound_kernel.kernel.settings.dot_precision == "ieee"
        if ieee and split_k:
            return fp32_split(*mnks[0], sm_count(device))
        if ieee and operand_layout(operands[1]) != "c":
            return FP32_IEEE_TILE
        return bound_kernel.config_spec.default_config()
    if split_k:
        split = split_rule(*mnks[0], sm_count(device))
        if few_columns_long_k(*mnks[0], dtype.itemsize):
            return split  # (its stages keep two programs an SM, as measured)
        return streaming(split, dtype.itemsize, *mnks[0])
    a, b = operands
    # (A few rows' product never runs transposed; a few columns' runs transposed as one.)
    if few_columns(b.T, a.T) if transposed else few_rows(a, b):
        return few_rows_config(a.shape[0], b.shape[1], tma_aligned(a, b))
    product, tma_only = model_product(a, b), tensor_descriptors_only(a, b)
    # Its pointer tiles move onto host-built descriptors below (``on_host_descriptors``), or,
    # with a bias epilogue, at launch (``as_launched``).
    unmasked = not transposed and pointer_tiles_unmasked(a, b)
    break_ties = epilogue != "bias"
    stream = None
    if masks_vectorize(a, b) and not transposed:
        stream = one_wave_stream(*mnks[0], sm_count(device), splits=False)
    if stream is not None:
        # Two stages: ``streaming`` deepens it to what shared memory holds.
        config = plain_config(stream.rows, stream.columns, stream.block_k, 4, 2, "flat", "pointer")
    elif tma_only and narrow_columns(product.m, product.n):
        return plain_config(*NARROW_COLUMNS_TILE, "flat")  # (at the depth measured)
    else:
        batch_model = shipped_batch_model(gpu_arch(device)) if batch_product(product) else None
        among = tma_only and not unmasked
        config = batch_model and batch_model.choose(batch_choice(product), among, break_ties)
        config = config or model.choose(product, among, break_ties)
        if config is not None and epilogue != "bias" and not transposed:
            config = on_host_descriptors(config, a, b)
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


def on_host_descriptors(config: helion.Config, a: torch.Tensor, b: torch.Tensor) -> helion.Config:
    """The model's choice for ``a @ b``, its pointer tiles on descriptors built on the host
    where ``loads.model_tiles_on_host_descriptors``."""
    if not model_tiles_on_host_descriptors(config.config, a, b):
        return config
    moved = {"indexing": "tensor_descriptor", "host_tensor_descriptors": True}
    return helion.Config(**{**config.config, **moved})


def model_product(a: torch.Tensor, b: torch.Tensor) -> Product:
    """``a @ b`` as the wave model sees it. ``aligned``: whether it loads its operands with
    tensor descriptors (an output of unaligned rows, as from operands staged by
    ``helion_ops.staging``, only stores by pointer: one store per tile, against every K
    step's loads)."""
    layout = operand_layout(a) + operand_layout(b)
    aligned, sms = tma_aligned(a, b), sm_count(a.device)
    mnk = product_mnk(a, b)
    return Product(*mnk, layout, aligned, sms, rows_off_lines(a, b), row_bytes(a, b))


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
        masked = not (masks_vectorize(a1, b1) and masks_vectorize(a2, b2))
        # (``as_launched`` moves pointer tiles onto host-built descriptors.)
        tma_only = masked and not pointer_tiles_unmasked(a1, b1, a2, b2)
        first, second = model_product(a1, b1), model_product(a2, b2)
        candidate = model.pair(first, second, tma_only, eager)
        config = None if candidate is None else pair_of(candidate)
    _model_pairs[key] = config
    return config


def forget_decisions() -> None:
    """Drop the decisions cached per operands' keys (``model_pair``'s, ``last_wave_split``'s)."""
    _model_pairs.clear()
    _last_wave_splits.clear()


def operands_key(a: torch.Tensor, b: torch.Tensor) -> tuple:
    """What a decision about ``a @ b`` may depend on: each operand's sizes, strides and
    16-byte alignment, the dtype and the device."""
    alignment = (a.data_ptr() % 16, b.data_ptr() % 16)
    return a.shape, a.stride(), b.shape, b.stride(), a.dtype, a.device, alignment


def model_without_entry(a: torch.Tensor, b: torch.Tensor) -> Model | None:
    """The wave model of ``a``'s GPU where its table has no plain entry for ``a @ b`` (an
    entry overrides the model), else None."""
    model = shipped_model(gpu_arch(a.device))
    if model is None or has_entry(a, b, "plain"):
        return None
    return model


def has_entry(a: torch.Tensor, b: torch.Tensor, epilogue: str) -> bool:
    """Whether the table of ``a``'s GPU has an entry for ``a @ b`` and ``epilogue``."""
    return table_config(tuned_table(gpu_arch(a.device)), config_key(a, b), epilogue) is not None


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


def tiles_of_128(m: int, n: int) -> int:
    """How many 128x128 tiles an m x n output takes: the unit the wave rules count in."""
    return math.ceil(m / 128) * math.ceil(n / 128)


@functools.cache
def sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


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
    entry, and a long K or few output tiles (``TRANSPOSED_MIN_K``, ``TRANSPOSED_MAX_WAVES``);
    or, whatever the layouts, a product of a few columns (``narrow_tiles.few_columns``), with
    no exact table entry. An entry for the product and its ``epilogue`` ("plain" or "bias")
    runs it plain: ``python -m helion_ops.tune`` writes one only where that beats the
    transposed kernel.
    On the H200 (bf16, NOTES 59) such rows cost the plain kernel 10-40% as b's and little as the
    first operand's: 992x1000x992 took 7.1 us transposed against 9.7 (aten 6.9), 768x3000x768 11.5
    against 14.4, 4096x3000x4096 161 against 172; aligned rows ran the same either way. With ``a``
    contiguous along M, a's columns become the second operand's rows: off lines (4000 or 2000 bytes)
    they took back the gain (NOTES 61)."""
    if a.dtype not in (torch.float16, torch.bfloat16):
        return False
    if few_columns(a, b):
        return not a.is_cuda or not has_entry(a, b, epilogue)
    if b.stride(1) != 1 or b.stride(0) * b.element_size() % 32 != 16:
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
    if k < TRANSPOSED_MIN_K and tiles_of_128(m, n) > TRANSPOSED_MAX_WAVES * sm_count(a.device):
        return False
    return not has_entry(a, b, epilogue)


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
    operands = tensors_in(args)
    return _Chosen(as_launched(choose_config(bound_kernel, *operands), *operands))


def tensors_in(args: Sequence[object]) -> list[torch.Tensor]:
    """A kernel's tensor arguments (operands and outputs), in order: what ``choose_config``
    and ``as_launched`` take; its epilogue and scalars left out."""
    return [a for a in args if isinstance(a, torch.Tensor)]


def as_launched(config: helion.Config, *operands: torch.Tensor) -> helion.Config:
    """``config`` as the runtime launches it on ``operands``: where rows start off 128-byte
    lines, its loads by tensor descriptors built on the host (``loads.host_descriptors_pay``),
    a plain product's pointer tiles among them (``loads.pointer_tiles_on_host_descriptors``).
    The tuner times each candidate so."""
    if pointer_tiles_on_host_descriptors(config.config, *operands):
        moved = {"indexing": "tensor_descriptor", "host_tensor_descriptors": True}
        return helion.Config(**{**config.config, **moved})
    if host_descriptors_pay(config.config, *operands):
        config = helion.Config(**{**config.config, "host_tensor_descriptors": True})
    return config
