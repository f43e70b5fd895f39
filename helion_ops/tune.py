"""Regenerate the tuned config table on a GPU: ``python -m helion_ops.tune``.

For every shape of the standard set it times (with the split-K kernel where the launchers use
it), for the three matmuls of a forward and backward (``a @ b``, ``grad_out @ b.T``,
``a.T @ grad_out``), a list of candidate configs sized to the output plus Helion's own
heuristic default against ``torch.mm`` on the same operands, and keeps the fastest. addmm's
forward gets keys of its own, timed with its bias epilogue (an [M, N] bias, tritonbench's)
against ``torch.addmm``. The backward's two products, where both outputs are at most
4096x1024, are also timed as one launch of the pair kernel (layout 'rccr' or 'crrc', the
longer K first) against two ``torch.mm`` and against our own two launches; the pair gets an
entry only where it beats the latter (a pair without one is timed again on every run, a few
seconds). Times are GPU times under CUDA graphs
(``triton.testing.do_bench_cudagraph``, L2 not flushed), the measure of tritonbench's
``--cudagraph`` that the targets use. The candidates of a key are first compiled in parallel
worker processes (``--jobs``), which fill Triton's on-disk cache, so the timing process loads
rather than compiles them. With ``--autotune`` it also runs Helion's autotuner (effort from
``HELION_AUTOTUNE_EFFORT``) and adds its winner to the candidates. Results are written after
every key, with the GPU, versions and date, so a run cut short resumes where it stopped
(``--force`` re-measures keys already in the table).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import Future, ProcessPoolExecutor, wait
from pathlib import Path

import helion
import torch
import triton

from helion_ops import configs
from helion_ops.kernel import (
    _kernel_for,
    launch_mm,
    scaled,
    scaled_plus_bias,
    wants_pair,
    wants_split_k,
)

# (M, N, K) of the gemm and addmm targets; addmm's are tritonbench's first 8 default shapes
# (its (M, K, N) reordered) and two squares.
GEMM_SHAPES = [
    *[(s, s, s) for s in (256, 512, 1024, 2048, 4096)],
    *[(8192, 8192, k) for k in (1024, 2048, 4096, 8192, 16384)],
    (4096, 1024, 1024),
    (12288, 2048, 2048),
    (1024, 4096, 1024),
    (2048, 12288, 2048),
    (1000000, 512, 512),
    (1000000, 768, 256),
]
ADDMM_SHAPES = [
    (m, 512, 1536) for m in (20120, 34579, 34839, 35561, 35916, 19735, 34533, 35791)
] + [(1024, 1024, 1024), (8192, 8192, 8192)]


def _config(
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


# Large outputs: the tile shapes of cuBLAS's and Triton's Hopper matmuls, tensor descriptors.
CANDIDATES = [
    _config(128, 256, 64, 8, 3, "persistent_interleaved"),
    _config(128, 256, 64, 8, 3, "persistent_blocked"),
    _config(128, 256, 64, 8, 4, "flat"),
    _config(128, 256, 64, 8, 3, "flat"),
    _config(256, 128, 64, 8, 3, "persistent_interleaved"),
    _config(256, 128, 64, 8, 4, "flat"),
    _config(128, 128, 64, 4, 4, "persistent_interleaved"),
    _config(128, 128, 64, 8, 4, "flat"),
    _config(128, 128, 128, 8, 3, "persistent_interleaved"),
    _config(64, 256, 64, 4, 4, "persistent_interleaved"),
    _config(64, 256, 64, 8, 4, "flat"),
    _config(64, 128, 64, 4, 4, "flat"),
    _config(128, 256, 64, 8, 4, "flat", "pointer"),
    _config(128, 128, 64, 4, 5, "flat", "pointer"),
    _config(64, 128, 64, 4, 4, "flat", "pointer"),
    # Flattened persistent loops (Triton's own Hopper persistent matmul): for short K loops,
    # such as the tall products with K of 256 to 1536, where every tile's store would
    # otherwise stall the next tile's loads.
    _config(128, 256, 64, 8, 3, "persistent_interleaved", flatten=True),
    _config(128, 256, 64, 8, 3, "persistent_blocked", flatten=True),
    _config(256, 128, 64, 8, 3, "persistent_interleaved", flatten=True),
    _config(128, 128, 64, 4, 4, "persistent_interleaved", flatten=True),
    _config(128, 128, 64, 8, 4, "persistent_interleaved", flatten=True),
    _config(128, 128, 128, 8, 3, "persistent_interleaved", flatten=True),
    # Two programs per SM (2 stages: 64 KiB of operands and a 32 KiB output tile each).
    _config(128, 128, 64, 4, 2, "persistent_interleaved", sm_multiplier=2),
    _config(128, 128, 64, 8, 2, "persistent_interleaved", flatten=True, sm_multiplier=2),
]

# Small outputs (up to 1024^2): tiles small enough to give every SM work, pointer indexing
# (a tensor descriptor is built on the device per program, which costs more than it saves
# when each program runs a few K steps).
SMALL_CANDIDATES = [
    _config(bm, bn, bk, warps, stages, "flat", "pointer")
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
    _config(64, 64, 64, 4, 4, "flat"),
    _config(64, 128, 64, 4, 4, "flat"),
    _config(128, 64, 64, 4, 4, "flat"),
    _config(128, 128, 64, 4, 4, "persistent_interleaved"),
]

# addmm's forward (bias epilogue): candidates that load the bias by pointer (into registers)
# rather than by tensor descriptor (into shared memory, which a flattened loop keeps full of
# pipeline buffers). On the H200 the flattened 128x128x64 tiles ran either way (and won the
# tall shapes); the flattened 128x256x64, 256x128x64 and 128x128x128 tiles ran with neither.
BIAS_POINTER = ["tensor_descriptor", "tensor_descriptor", "pointer", "tensor_descriptor"]
BIAS_CANDIDATES = [
    _config(128, 128, 64, 4, 4, "persistent_interleaved", BIAS_POINTER, flatten=True),
    _config(128, 128, 64, 8, 4, "persistent_interleaved", BIAS_POINTER, flatten=True),
    _config(128, 256, 64, 8, 3, "persistent_interleaved", BIAS_POINTER),
    _config(128, 256, 64, 8, 4, "flat", BIAS_POINTER),
]


def _pair_config(
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
        _pair_config((bm, bn, 64), (bm, bn, 64), warps, stages)
        for bm, bn in ((64, 64), (64, 128), (128, 64), (128, 128))
        for warps, stages in ((4, 3), (4, 4), (8, 4))
    ),
    _pair_config((64, 64, 128), (64, 64, 128), 4, 3),
]

# Larger outputs (up to 4096x1024 each, e.g. the backward of 1024x4096x1024: a 1024^2 output
# with K = 4096 and a 1024x4096 one with K = 1024): the long-K product first on 128x128 tiles,
# the other on tiles up to 128x256, so that its programs fill the SMs the first leaves idle.
MEDIUM_PAIR_CANDIDATES = [
    *(
        _pair_config((128, 128, 64), second, 8, stages)
        for second in ((128, 256, 64), (256, 128, 64), (128, 128, 64))
        for stages in (3, 4)
    ),
    _pair_config((128, 128, 64), (128, 128, 64), 4, 3),
    _pair_config((128, 128, 64), (128, 128, 64), 4, 4),
    _pair_config((128, 64, 64), (128, 256, 64), 8, 4),
    _pair_config((64, 128, 64), (128, 256, 64), 8, 4),
    _pair_config((128, 256, 64), (128, 256, 64), 8, 3),
    _pair_config((128, 256, 64), (128, 256, 64), 8, 4),
    # K blocks of 128 for the long-K product: won 4096x1024x1024's pair on the H200, 2% ahead
    # (tensor descriptors and 4-warp 128x64 tiles, tried beside it, lost).
    _pair_config((128, 128, 128), (128, 256, 64), 8, 3),
]

SMALL_OUTPUT = 1024 * 1024
MEDIUM_OUTPUT = 4096 * 1024


def _split_config(
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
        _split_config(bm, bn, 64, split_k, 4)
        for bm, bn in ((64, 64), (128, 64), (128, 128))
        for split_k in (8, 16, 32, 64)
    ),
    *(_split_config(128, 256, 64, split_k, 3, warps=8) for split_k in (8, 16, 32, 64)),
]


def candidates_for(m: int, n: int, k: int, epilogue: str = "plain") -> list[helion.Config]:
    """The configs timed for one key (Helion's default comes on top of them)."""
    if wants_split_k(m, n, k):
        return SPLIT_CANDIDATES
    if m * n <= SMALL_OUTPUT:
        return SMALL_CANDIDATES
    large = CANDIDATES + BIAS_CANDIDATES if epilogue == "bias" else CANDIDATES
    if m * n <= MEDIUM_OUTPUT:  # 2048^2, 4096x1024: either kind may win
        return SMALL_CANDIDATES + large
    return large


def matmuls_of(m: int, n: int, k: int) -> list[tuple[str, tuple[int, int, int], str]]:
    """The (name, (M, N, K), layout) of the matmuls in a forward and backward: three, and
    the backward's two as one pair (M, N, K of its first) where one launch may pay."""
    matmuls = [
        ("a@b", (m, n, k), "rr"),
        ("g@b.T", (m, k, n), "rc"),
        ("a.T@g", (k, n, m), "cr"),
    ]
    # The backward's pair, the product with the longer K first (as ``ops`` launches it).
    if m > n:
        pair = ("a.T@g, g@b.T", (k, n, m), "crrc")
    else:
        pair = ("g@b.T, a.T@g", (m, k, n), "rccr")
    if all(
        mm * nn <= MEDIUM_OUTPUT and not wants_split_k(mm, nn, kk)
        for mm, nn, kk in ((m, k, n), (k, n, m))
    ):
        matmuls.append(pair)
    return matmuls


def keys_of(
    only: str | None, shapes: list | None, dtype: str, epilogue: str | None
) -> list[tuple[int, int, int, str, str, str]]:
    """The table keys to tune, in order and once each: the three matmuls of every gemm and
    addmm shape (``only`` one set, ``shapes`` only these), and addmm's forward with its bias
    epilogue; ``epilogue`` keeps the keys of that epilogue only."""
    keys = []
    for name, standard in (("gemm", GEMM_SHAPES), ("addmm", ADDMM_SHAPES)):
        for shape in standard:
            if only not in (None, name) or (shapes and shape not in shapes):
                continue
            shape_keys = [(*mnk, dtype, layout, "plain") for _, mnk, layout in matmuls_of(*shape)]
            if name == "addmm":
                shape_keys.append((*shape, dtype, "rr", "bias"))
            keys += [key for key in shape_keys if key not in keys and epilogue in (None, key[5])]
    return keys


def operands(m: int, n: int, k: int, layout: str, dtype: torch.dtype, fill=torch.randn):
    def make(rows: int, cols: int, col_major: bool) -> torch.Tensor:
        if col_major:
            return fill(cols, rows, device="cuda", dtype=dtype).T
        return fill(rows, cols, device="cuda", dtype=dtype)

    return make(m, k, layout[0] == "c"), make(k, n, layout[1] == "c")


# How ``bench`` times, recorded in each entry (entries before 2026-11-30 say "do_bench,
# L2 flushed": one launch per timing, the cache emptied before each).
TIMING = "do_bench_cudagraph, L2 warm"


def bench(fn) -> float:
    """Milliseconds per call on the GPU, replayed from a CUDA graph (median)."""
    return triton.testing.do_bench_cudagraph(fn, rep=20, return_mode="median")


def _bound(
    m: int, n: int, k: int, layout: str, epilogue: str, dtype: torch.dtype, fill=torch.randn
):
    """The bound kernel of a key, its arguments, and torch's own call on the same operands."""
    if len(layout) == 4:  # a backward's pair, as ``matmuls_of`` names it
        first, shared = operands(m, n, k, layout[:2], dtype, fill)
        if layout == "rccr":  # grad_out @ b.T, a.T @ grad_out
            at = fill(m, n, device="cuda", dtype=dtype).T
            x = (first, shared, at, first)
        else:  # "crrc": a.T @ grad_out, grad_out @ b.T
            bt = fill(m, n, device="cuda", dtype=dtype).T
            x = (first, shared, shared, bt)
        args = (*x, scaled(1.0), scaled(1.0))
        aten = lambda: (torch.mm(x[0], x[1]), torch.mm(x[2], x[3]))  # noqa: E731
        return _kernel_for(dtype, pair=True).bind(args), args, aten
    a, b = operands(m, n, k, layout, dtype, fill)
    split_k = wants_split_k(m, n, k)
    if epilogue == "bias":
        bias = fill(m, n, device="cuda", dtype=dtype)
        args, aten = (a, b, scaled_plus_bias(1.0, 1.0, bias)), lambda: torch.addmm(bias, a, b)
    else:
        args, aten = ((a, b) if split_k else (a, b, scaled(1.0))), lambda: torch.mm(a, b)
    return _kernel_for(dtype, split_k).bind(args), args, aten


def _compile_into_cache(job: tuple) -> None:
    """In a worker: compile and launch each config once (on uninitialized operands), so that
    Triton's on-disk cache holds it; the timing process reports configs that fail."""
    m, n, k, layout, epilogue, dtype_name, config_dicts = job
    bound, args, _ = _bound(m, n, k, layout, epilogue, getattr(torch, dtype_name), torch.empty)
    for config in config_dicts:
        try:
            bound.compile_config(helion.Config(**config))(*args)
        except Exception:
            pass
    torch.cuda.synchronize()


def candidates_of_key(key: tuple, dtype: torch.dtype) -> list:
    """What the key gets without an entry (Helion's default; a pair's ``pair_rule``), then
    ``candidates_for`` (a pair's ``PAIR_CANDIDATES``)."""
    m, n, k, _, layout, epilogue = key
    if len(layout) == 4:
        second = (n, k, m) if layout == "rccr" else (k, m, n)
        more = PAIR_CANDIDATES if wants_pair((m, n, k), second) else MEDIUM_PAIR_CANDIDATES
        return [configs.pair_rule((m, n, k), second, dtype), *more]
    bound, _, _ = _bound(m, n, k, layout, epilogue, dtype, fill=torch.empty)
    return [bound.config_spec.default_config(), *candidates_for(m, n, k, epilogue)]


def compile_jobs(key: tuple, dtype: torch.dtype, candidates: list):
    """Work for ``_compile_into_cache``: a key's candidates, two per job."""
    m, n, k, _, layout, epilogue = key
    dtype_name = str(dtype).removeprefix("torch.")
    dicts = [dict(c) for c in candidates]
    return [
        (m, n, k, layout, epilogue, dtype_name, dicts[i : i + 2]) for i in range(0, len(dicts), 2)
    ]


def describe(config: helion.Config) -> str:
    """A config in one line, e.g. '[128, 256, 64] w8 s3 persistent_interleaved flattened'."""
    c = dict(config)
    words = [str(c["block_sizes"]), f"w{c['num_warps']}", f"s{c['num_stages']}"]
    words.append(c.get("pid_type", "flat"))
    if any(c.get("range_flattens") or []):
        words.append("flattened")
    if c.get("num_sm_multiplier", 1) > 1:
        words.append(f"{c['num_sm_multiplier']} per SM")
    if "split_k" in c:
        words.append(f"split_k {c['split_k']}")
    if "indexing" in c:
        words.append(str(c["indexing"]))
    return " ".join(words)


def tune_key(key: tuple, dtype: torch.dtype, candidates: list, autotune: bool) -> dict | None:
    """Time every candidate on one key; return the table entry of the fastest, or None for
    a pair that two launches (with their own entries) beat."""
    m, n, k, _, layout, epilogue = key
    bound, args, aten = _bound(m, n, k, layout, epilogue, dtype)
    started = time.monotonic()
    if autotune:
        candidates = [*candidates, bound.autotune(args, force=True)]
    aten_ms = bench(aten)
    pair = len(layout) == 4
    if pair:
        two_ms = bench(lambda: (launch_mm(*args[:2]), launch_mm(*args[2:4])))
    timings = []
    for config in candidates:
        try:
            run = bound.compile_config(config)
            run(*args)
            timings.append((bench(lambda run=run: run(*args)), config))
        except Exception as error:  # a config the shape cannot take: skip it, say so
            print(f"    skipped {describe(config)}: {type(error).__name__}: {error}"[:300])
    print(f"    {len(timings)}/{len(candidates)} configs ran in {time.monotonic() - started:.0f} s")
    ranked = sorted(timings, key=lambda t: t[0])
    for ms, config in ranked[:3]:
        print(f"    {ms:.5f} ms ({aten_ms / ms:.3f}x) {describe(config)}")
    best_ms, best = ranked[0]
    if pair and best_ms >= two_ms:
        print(f"    two launches take {two_ms:.5f} ms: no entry")
        return None
    return {
        "m": m,
        "n": n,
        "k": k,
        "dtype": str(dtype).removeprefix("torch."),
        "layout": layout,
        "epilogue": epilogue,
        "config": configs.portable(dict(best)) if epilogue == "plain" else dict(best),
        "ms": round(best_ms, 5),
        "aten_ms": round(aten_ms, 5),
        "speedup_vs_aten": round(aten_ms / best_ms, 3),
        "timing": TIMING,
        # What the key runs without its entry: Helion's default, or a pair's ``pair_rule``.
        "default_ms": round(timings[0][0], 5) if timings[0][1] is candidates[0] else None,
        **({"two_launches_ms": round(two_ms, 5)} if pair else {}),
        "measured_on": torch.cuda.get_device_name(),
        "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def parse_shape(text: str) -> tuple[int, int, int]:
    """``MxNxK`` as three ints."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"--shape must look like 1024x1024x1024, got {text!r}")
    m, n, k = map(int, parts)
    return m, n, k


def write_table(output: Path, entries: dict, arch: str, command: str) -> None:
    table = {
        "device": torch.cuda.get_device_name(),
        "arch": arch,
        "versions": {
            "torch": torch.__version__,
            "triton": triton.__version__,
            "helion": importlib.metadata.version("helion"),
        },
        "measured": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "entries": sorted(
            entries.values(),
            key=lambda e: (e["m"], e["n"], e["k"], e["layout"], e["epilogue"], e["dtype"]),
        ),
    }
    output.write_text(json.dumps(table, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--output", type=Path, help="table to write (default: the shipped one)")
    parser.add_argument("--only", choices=["gemm", "addmm"], help="one shape set only")
    parser.add_argument(
        "--epilogue", choices=["plain", "bias"], help="only keys of this epilogue (bias: addmm's)"
    )
    parser.add_argument(
        "--shape",
        type=parse_shape,
        action="append",
        help="MxNxK of a gemm/addmm (repeatable): only its three matmuls",
    )
    parser.add_argument("--autotune", action="store_true", help="also run Helion's autotuner")
    parser.add_argument("--force", action="store_true", help="re-measure keys in the table")
    parser.add_argument("--budget-s", type=float, default=540, help="stop after this long")
    parser.add_argument(
        "--jobs",
        type=int,
        default=max(1, min(16, (os.cpu_count() or 1) - 2)),
        help="worker processes that compile candidates ahead of timing (1: compile while timing)",
    )
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("helion_ops.tune needs a CUDA GPU", file=sys.stderr)
        return 2

    arch = configs.gpu_arch(torch.device("cuda"))
    output = args.output or Path(configs.__file__).parent / "tuned" / f"{arch}.json"
    table = json.loads(output.read_text()) if output.is_file() else {"entries": []}
    entries = {configs.entry_key(e): e for e in table["entries"]}
    dtype = getattr(torch, args.dtype)
    keys = [
        key
        for key in keys_of(args.only, args.shape, args.dtype, args.epilogue)
        if args.force or key not in entries
    ]

    # The command as run, with the output path (a machine's own) cut down to its file name.
    given = list(sys.argv[1:] if argv is None else argv)
    if "--output" in given:
        given[given.index("--output") + 1] = output.name
    command = " ".join(["python -m helion_ops.tune", *given])
    start = time.monotonic()
    candidates = {key: candidates_of_key(key, dtype) for key in keys}
    pool = None
    compiling: dict[tuple, list[Future]] = {key: [] for key in keys}
    if args.jobs > 1:
        # Workers compile every key's candidates in order while this process times the
        # earlier keys (CUDA-graph replay times are GPU times, unaffected by host load).
        pool = ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn"))
        for key in keys:
            jobs = compile_jobs(key, dtype, candidates[key])
            compiling[key] = [pool.submit(_compile_into_cache, job) for job in jobs]
    try:
        for i, key in enumerate(keys, 1):
            if time.monotonic() - start > args.budget_s:
                print(f"budget spent: {len(keys) - i + 1} keys left; run again to resume")
                break
            m, n, k, _, layout, epilogue = key
            print(f"[{i}/{len(keys)}] {m}x{n}x{k} {args.dtype} {layout} {epilogue}", flush=True)
            wait(compiling[key])
            entry = tune_key(key, dtype, candidates[key], args.autotune)
            if entry is None:
                entries.pop(key, None)
            else:
                entries[key] = entry
                print(
                    f"    best {entry['ms']:.4f} ms, aten {entry['aten_ms']:.4f} ms, "
                    f"speedup {entry['speedup_vs_aten']}",
                    flush=True,
                )
            write_table(output, entries, arch, command)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
