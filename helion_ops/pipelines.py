"""Pipeline depth: how many stages of a config's operand tiles fit in an SM's shared memory
beside its output (and bias) tiles, and the configs that run deeper than their candidate
where that was measured to pay (``deepened``: short K loops of a flattened persistent loop;
``streaming``: flat programs of a product bound by memory bandwidth), or must run unflattened
to fit a bias at all (``fit_for_bias``).
"""

from __future__ import annotations

import helion

from helion_ops.candidates import flattened
from helion_ops.model import bandwidth_bound, k_steps, split_k_block

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
    tiles already fill shared memory in 3 stages. ``configs.choose_config`` does not deepen the
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
