"""The configs ``python -m helion_ops.tune`` times for a table entry.

Every candidate is a complete Helion config for one of the kernels of ``helion_ops.kernel``:
``matmul_kernel`` (``CANDIDATES`` and the smaller ones), its bias epilogue
(``BIAS_CANDIDATES``), ``split_k_kernel`` (``SPLIT_CANDIDATES``) and ``pair_kernel``
(``PAIR_CANDIDATES``). ``helion_ops.model`` chooses among a compact set of the winners.
"""

from __future__ import annotations

import helion


def config(
    bm: int,
    bn: int,
    bk: int,
    warps: int,
    stages: int,
    pid: str,
    indexing: str | list[str] = "tensor_descriptor",
    *,
    flatten: bool = False,
    sm_multiplier: int = 1,
) -> helion.Config:
    """One candidate. ``indexing``: of every memory op, or a list with one per op (x, y,
    then the bias where the epilogue loads one, then the output). ``flatten``: Triton
    flattens a persistent kernel's tile loop and K loop into one software pipeline, so the
    next tile's loads overlap this tile's epilogue. ``sm_multiplier``: persistent programs
    per SM (2 where two fit in shared memory)."""
    operand_indexing = indexing if isinstance(indexing, str) else indexing[0]
    extra = {}
    if flatten:
        extra["range_flattens"] = [True, None]
    if sm_multiplier != 1:
        extra["num_sm_multiplier"] = sm_multiplier
    return helion.Config(
        block_sizes=[bm, bn, bk],
        num_warps=warps,
        num_stages=stages,
        pid_type=pid,
        l2_groupings=[8 if operand_indexing == "tensor_descriptor" else 1],
        indexing=indexing,
        range_unroll_factors=[0, 0],
        range_num_stages=[0, 0],
        **extra,
    )


def flattened(candidate: helion.Config) -> bool:
    """Whether a config flattens a persistent loop (``config``'s ``flatten``)."""
    return any(candidate.config.get("range_flattens") or [])


# Large outputs: the tile shapes of cuBLAS's and Triton's Hopper matmuls, tensor descriptors.
CANDIDATES = [
    config(128, 256, 64, 8, 3, "persistent_interleaved"),
    config(128, 256, 64, 8, 3, "persistent_blocked"),
    config(128, 256, 64, 8, 4, "flat"),
    config(128, 256, 64, 8, 3, "flat"),
    config(256, 128, 64, 8, 3, "persistent_interleaved"),
    config(256, 128, 64, 8, 4, "flat"),
    config(128, 128, 64, 4, 4, "persistent_interleaved"),
    config(128, 128, 64, 8, 4, "flat"),
    config(128, 128, 128, 8, 3, "persistent_interleaved"),
    config(64, 256, 64, 4, 4, "persistent_interleaved"),
    config(64, 256, 64, 8, 4, "flat"),
    config(64, 128, 64, 4, 4, "flat"),
    config(128, 256, 64, 8, 4, "flat", "pointer"),
    config(128, 128, 64, 4, 5, "flat", "pointer"),
    config(64, 128, 64, 4, 4, "flat", "pointer"),
    # Flattened persistent loops (Triton's own Hopper persistent matmul): for short K loops,
    # such as the tall products with K of 256 to 1536, where every tile's store would
    # otherwise stall the next tile's loads.
    config(128, 256, 64, 8, 3, "persistent_interleaved", flatten=True),
    config(128, 256, 64, 8, 3, "persistent_blocked", flatten=True),
    config(256, 128, 64, 8, 3, "persistent_interleaved", flatten=True),
    config(128, 128, 64, 4, 4, "persistent_interleaved", flatten=True),
    # As deep as shared memory holds beside the output tile (``pipelines.deepened``, NOTES 95).
    config(128, 128, 64, 4, 6, "persistent_interleaved", flatten=True),
    config(128, 128, 64, 8, 4, "persistent_interleaved", flatten=True),
    config(128, 128, 128, 8, 3, "persistent_interleaved", flatten=True),
    # Two programs per SM (2 stages: 64 KiB of operands and a 32 KiB output tile each).
    config(128, 128, 64, 4, 2, "persistent_interleaved", sm_multiplier=2),
    config(128, 128, 64, 8, 2, "persistent_interleaved", flatten=True, sm_multiplier=2),
]

# Small outputs (up to 1024^2): tiles small enough to give every SM work, pointer indexing
# (a tensor descriptor is built on the device per program, which costs more than it saves
# when each program runs a few K steps).
SMALL_CANDIDATES = [
    config(bm, bn, bk, warps, stages, "flat", "pointer")
    for bm, bn, bk in (
        (16, 32, 64),
        (32, 32, 64),
        (32, 32, 128),
        (32, 64, 64),
        (32, 64, 128),
        (64, 32, 128),
        (64, 64, 64),
        (64, 64, 128),
        (32, 128, 64),
        (64, 128, 64),
        (128, 64, 64),
        (128, 128, 64),
    )
    for warps in ((2, 4) if bm * bn <= 64 * 64 else (4, 8))
    for stages in (3, 5)
] + [
    config(64, 64, 64, 4, 4, "flat"),
    config(64, 128, 64, 4, 4, "flat"),
    config(128, 64, 64, 4, 4, "flat"),
    config(128, 128, 64, 4, 4, "persistent_interleaved"),
]

# addmm's forward (bias epilogue): candidates that load the bias by pointer (into registers)
# rather than by tensor descriptor (into shared memory, which a flattened loop keeps full of
# pipeline buffers). On the H200 the flattened 128x128x64 tiles ran either way (and won the
# tall shapes); the flattened 128x256x64, 256x128x64 and 128x128x128 tiles ran with neither.
BIAS_POINTER = ["tensor_descriptor", "tensor_descriptor", "pointer", "tensor_descriptor"]
BIAS_CANDIDATES = [
    config(128, 128, 64, 4, 4, "persistent_interleaved", BIAS_POINTER, flatten=True),
    config(128, 128, 64, 8, 4, "persistent_interleaved", BIAS_POINTER, flatten=True),
    config(128, 256, 64, 8, 3, "persistent_interleaved", BIAS_POINTER),
    config(128, 256, 64, 8, 4, "flat", BIAS_POINTER),
]


def pair_config(
    first: tuple[int, int, int], second: tuple[int, int, int], warps: int, stages: int
) -> helion.Config:
    """A candidate for the pair kernel: a tile shape for each product."""
    return helion.Config(
        block_sizes=[*first, *second],
        num_warps=warps,
        num_stages=stages,
        pid_type="flat",
        indexing="pointer",
        l2_groupings=[1, 1],
        range_unroll_factors=[0] * 4,
        range_num_stages=[0] * 4,
    )


# The backward's two products in one launch, outputs up to 1024^2 each: the tiles that won
# a first sweep of 18 on the H200 (bf16, 256^3 to 1024^3; tensor descriptors and persistent
# programs never came within 5%).
PAIR_CANDIDATES = [
    *(
        pair_config((bm, bn, 64), (bm, bn, 64), warps, stages)
        for bm, bn in ((64, 64), (64, 128), (128, 64), (128, 128))
        for warps, stages in ((4, 3), (4, 4), (8, 4))
    ),
    pair_config((64, 64, 128), (64, 64, 128), 4, 3),
]

# Larger outputs (up to 4096x1024 each, e.g. the backward of 1024x4096x1024: a 1024^2 output
# with K = 4096 and a 1024x4096 one with K = 1024): the long-K product first on 128x128 tiles,
# the other on tiles up to 128x256, so that its programs fill the SMs the first leaves idle.
MEDIUM_PAIR_CANDIDATES = [
    *(
        pair_config((128, 128, 64), second, 8, stages)
        for second in ((128, 256, 64), (256, 128, 64), (128, 128, 64))
        for stages in (3, 4)
    ),
    pair_config((128, 128, 64), (128, 128, 64), 4, 3),
    pair_config((128, 128, 64), (128, 128, 64), 4, 4),
    pair_config((128, 64, 64), (128, 256, 64), 8, 4),
    pair_config((64, 128, 64), (128, 256, 64), 8, 4),
    pair_config((128, 256, 64), (128, 256, 64), 8, 3),
    pair_config((128, 256, 64), (128, 256, 64), 8, 4),
    # K blocks of 128 for the long-K product: won 4096x1024x1024's pair on the H200, 2% ahead
    # (tensor descriptors and 4-warp 128x64 tiles, tried beside it, lost).
    pair_config((128, 128, 128), (128, 256, 64), 8, 3),
]

SMALL_OUTPUT = 1024 * 1024
MEDIUM_OUTPUT = 4096 * 1024


def split_config(
    bm: int, bn: int, bk: int, split_k: int, stages: int, warps: int = 4
) -> helion.Config:
    return helion.Config(
        block_sizes=[bm, bn, bk],
        num_warps=warps,
        num_stages=stages,
        split_k=split_k,
        range_unroll_factors=[0, 0],
        range_num_stages=[0, 0],
    )


# For the split-K kernel (shapes where ``wants_split_k``): K cut in 8 to 64, tiles up to
# 128x256 (the largest output of these keys, 256x768, is 6 such tiles).
SPLIT_CANDIDATES = [
    *(
        split_config(bm, bn, 64, split_k, 4)
        for bm, bn in ((64, 64), (128, 64), (128, 128))
        for split_k in (8, 16, 32, 64)
    ),
    *(split_config(128, 256, 64, split_k, 3, warps=8) for split_k in (8, 16, 32, 64)),
]
