"""Tune configs on a GPU: ``python -m helion_ops.tune [--shape MxNxK ...]``.

For the shapes asked for (``--shape``, any size; by default the standard target sets) it times
(with the split-K kernel where the launchers use it), for the three matmuls of a forward and
backward (``a @ b``, ``grad_out @ b.T``, ``a.T @ grad_out``), a list of candidate configs sized
to the output plus Helion's own heuristic default and the config the key runs without an entry
(``candidates_of_key``) against ``torch.mm`` on the same operands, and keeps the fastest.
addmm's forward gets keys of its own, timed with its bias epilogue (an [M, N] bias,
tritonbench's) against ``torch.addmm``. The backward's two products, where both
outputs are at most 4096x1024, are also timed as one launch of the pair kernel (layout 'rccr'
or 'crrc', the longer K first) against two ``torch.mm`` and against our own two launches; the
pair gets an entry only where it beats the latter (a pair without one is timed again on every
run, a few seconds). Likewise a product the launchers run on the transposed kernel while it has
no entry (``configs.transposed_pays``) gets one only where its best candidate beats that
kernel. Times are GPU times under CUDA graphs (``triton.testing.do_bench_cudagraph``, L2 not
flushed), the measure of tritonbench's ``--cudagraph`` that the targets use; candidates within
``NEAR_TIE`` of the fastest are also timed with the L2 flushed before each call, as tritonbench
times without ``--cudagraph``, and the fastest of them there wins. The candidates of
a key are first compiled in parallel worker processes (``--jobs``), which fill Triton's on-disk
cache, so the timing process loads rather than compiles them. With ``--autotune`` it also runs
Helion's autotuner (effort from ``HELION_AUTOTUNE_EFFORT``) and adds its winner to the
candidates. ``--gpus`` spreads the keys over several GPUs, one process each. The table is
written when the run ends (``--budget-s`` ends it in time), with the GPU, versions and date;
keys already in it are skipped, so a run cut short resumes where it stopped (``--force``
re-measures them). By default it is the user's own table, which the runtime reads over the
shipped one: tune the shapes of your own model once. ``--training RECORDS`` instead times the wave
model's candidates on its training grid, or on the ``--shape`` shapes (``helion_ops.fit``),
and each of them in the pair kernel on the backwards the model may run in one launch;
``--training RECORDS --batch`` the batch model's candidates on its grid's forwards.
``--pairs`` keeps only the keys of backwards' pairs.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import importlib.metadata
import json
import multiprocessing
import os
import re
import sys
import time
from concurrent.futures import Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import helion
import torch
import triton

from helion_ops import configs, loads, narrow_tiles, table
from helion_ops.candidates import (
    BIAS_CANDIDATES,
    CANDIDATES,
    MEDIUM_OUTPUT,
    MEDIUM_PAIR_CANDIDATES,
    PAIR_CANDIDATES,
    SMALL_CANDIDATES,
    SMALL_OUTPUT,
    SPLIT_CANDIDATES,
    flattened,
)
from helion_ops.dtype_names import torch_name
from helion_ops.kernel import (
    _kernel_for,
    _run,
    launch_mm,
    modelled,
    scaled,
    scaled_plus_bias,
    transposed_kernel,
    wants_pair,
    wants_split_k,
)
from helion_ops.model import (
    BATCH_CANDIDATES,
    MODEL_CANDIDATES,
    PAIR_WAVES,
    Product,
    batch_product,
    output_tiles,
    pair_of,
    second_of_pair,
)
from helion_ops.shapes import ADDMM_SHAPES, BATCH_TRAINING_SHAPES, GEMM_SHAPES, TRAINING_SHAPES


def candidates_for(
    m: int, n: int, k: int, dtype: torch.dtype, epilogue: str = "plain"
) -> list[helion.Config]:
    """The configs timed for one key (Helion's default comes on top of them): a narrow
    product's tiles (``narrow_tiles.narrow``, ``narrow_tiles.few_rows_config``) among the small
    candidates."""
    if wants_split_k(m, n, k, dtype):
        return SPLIT_CANDIDATES
    if not modelled(m, n, k, dtype):
        return [narrow_tiles.few_rows_config(m, n, tma=True), *SMALL_CANDIDATES]
    if m * n <= SMALL_OUTPUT:
        return SMALL_CANDIDATES
    large = CANDIDATES + BIAS_CANDIDATES if epilogue == "bias" else CANDIDATES
    if m * n <= MEDIUM_OUTPUT:  # 2048^2, 4096x1024: either kind may win
        return SMALL_CANDIDATES + large
    return large


def matmuls_of(
    m: int, n: int, k: int, dtype: torch.dtype
) -> list[tuple[str, tuple[int, int, int], str]]:
    """The (name, (M, N, K), layout) of the matmuls in a forward and backward: three, and
    the backward's two as one pair (M, N, K of its first) where one launch may pay."""
    matmuls = [
        ("a@b", (m, n, k), "rr"),
        ("g@b.T", (m, k, n), "rc"),
        ("a.T@g", (k, n, m), "cr"),
    ]
    first, layout = backward_pair(m, n, k)
    pair = ("a.T@g, g@b.T" if layout == "crrc" else "g@b.T, a.T@g", first, layout)
    if all(
        mm * nn <= MEDIUM_OUTPUT and modelled(mm, nn, kk, dtype)
        for mm, nn, kk in ((m, k, n), (k, n, m))
    ):
        matmuls.append(pair)
    return matmuls


def keys_of(
    only: str | None, shapes: list | None, dtype: str, epilogue: str | None
) -> list[tuple[int, int, int, str, str, str]]:
    """The table keys to tune, in order and once each: the three matmuls of every gemm and
    addmm shape and addmm's forward with its bias epilogue. ``shapes``: these shapes, of any
    size, in place of the standard sets (as gemms, and as addmms too unless ``only`` is
    'gemm'); ``only``: one set; ``epilogue``: the keys of that epilogue only."""
    sets = [("gemm", GEMM_SHAPES), ("addmm", ADDMM_SHAPES)]
    if shapes:
        sets = [("gemm", shapes), ("addmm", shapes)]
    keys = []
    for name, chosen in sets:
        if only not in (None, name):
            continue
        for shape in chosen:
            matmuls = matmuls_of(*shape, getattr(torch, dtype))
            shape_keys = [(*mnk, dtype, layout, "plain") for _, mnk, layout in matmuls]
            if name == "addmm":
                shape_keys.append((*shape, dtype, "rr", "bias"))
            keys += [key for key in shape_keys if key not in keys and epilogue in (None, key[5])]
    return keys


def backward_pair(m: int, n: int, k: int) -> tuple[tuple[int, int, int], str]:
    """The (M, N, K) of the first product and the layout of a backward's pair, the product
    with the longer K first (as ``ops`` launches it)."""
    return ((k, n, m), "crrc") if m > n else ((m, k, n), "rccr")


def training_keys(
    dtype: str, shapes: list[tuple[int, int, int]] | None = None
) -> list[tuple[int, int, int, str, str, str]]:
    """The model's training keys: the three single products of every training shape (or of
    ``shapes``) that the model chooses for (``kernel.modelled``: not split over K, not
    narrow), and the backward's pair where the model may run it in one launch
    (``configs.model_pair``: aligned sizes, an output larger than ``SMALL_OUTPUT``, both
    products modelled)."""
    keys = []
    torch_dtype = getattr(torch, dtype)
    elements = 16 // torch_dtype.itemsize
    for shape in shapes or TRAINING_SHAPES:
        for _, (m, n, k), layout in matmuls_of(*shape, torch_dtype)[:3]:
            key = (m, n, k, dtype, layout, "plain")
            if modelled(m, n, k, torch_dtype) and key not in keys:
                keys.append(key)
        m, n, k = shape
        both = ((m, k, n), (k, n, m))
        if (
            all(size % elements == 0 for size in shape)
            and max(mm * nn for mm, nn, _ in both) > SMALL_OUTPUT
            and all(modelled(*mnk, torch_dtype) for mnk in both)
        ):
            (mm, nn, kk), layout = backward_pair(m, n, k)
            keys.append((mm, nn, kk, dtype, layout, "plain"))
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


# Candidates this close to the fastest under CUDA graphs are near ties, broken by their time
# with the L2 flushed before each call (``bench_flushed``): tritonbench's default timing, and
# what the main job (``python run_bench.py``) shows. There a few-stage tile can lose what a
# near tie does not: at 1024^3 'rc' (fp16, H200, NOTES 78) 64x128x64 with 8 warps and 3 stages
# took 6.02 us warm and 13.18 flushed, 128x64x64 with 4 warps and 5 stages 6.21 and 10.69
# (aten 5.22 and 9.41). Bounded, so a choice gives up at most 5% under CUDA graphs.
NEAR_TIE = 1.05


def bench_flushed(fn) -> float:
    """Milliseconds per call on the GPU, the L2 flushed before each (``do_bench``, median)."""
    return triton.testing.do_bench(fn, rep=20, return_mode="median")


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
    split_k = wants_split_k(m, n, k, dtype)
    if epilogue == "bias":
        bias = fill(m, n, device="cuda", dtype=dtype)
        args, aten = (a, b, scaled_plus_bias(1.0, 1.0, bias)), lambda: torch.addmm(bias, a, b)
    else:
        args, aten = ((a, b) if split_k else (a, b, scaled(1.0))), lambda: torch.mm(a, b)
    return _kernel_for(dtype, split_k).bind(args), args, aten


def _compile_into_cache(job: tuple) -> None:
    """In a worker: compile and launch each config once (on uninitialized operands), so that
    Triton's on-disk cache holds it; the timing process reports configs that fail. No
    configs (None): a pair's two launches as the runtime makes them, which ``tune_key``
    times too."""
    m, n, k, layout, epilogue, dtype_name, config_dicts = job
    bound, args, _ = _bound(m, n, k, layout, epilogue, getattr(torch, dtype_name), torch.empty)
    if config_dicts is None:
        launch_mm(*args[:2])
        launch_mm(*args[2:4])
        config_dicts = []
    tensors = configs.tensors_in(args)
    for config in config_dicts:
        try:
            bound.compile_config(configs.as_launched(helion.Config(**config), *tensors))(*args)
        except Exception:
            pass
    torch.cuda.synchronize()


def candidates_of_key(key: tuple, dtype: torch.dtype) -> list:
    """What the key gets without an entry (Helion's default; a pair's ``model_pair`` or
    ``pair_rule``), then ``candidates_for`` (a pair's ``PAIR_CANDIDATES``). On the GPU a
    single product's key also times the config the runtime gives it without an entry
    (``configs.choose_config`` without the table: the model's or a rule's, as deep as it runs
    it), right after Helion's default: an entry is never slower than what it replaces."""
    m, n, k, _, layout, epilogue = key
    if len(layout) == 4:
        second = second_of_pair(m, n, k, layout)
        pair = wants_pair((m, n, k), second, dtype)
        more = PAIR_CANDIDATES if pair else MEDIUM_PAIR_CANDIDATES
        first = configs.pair_rule((m, n, k), second, dtype)
        if torch.cuda.is_available():  # the model's choice needs the GPU's operands
            _, args, _ = _bound(m, n, k, layout, epilogue, dtype, fill=torch.empty)
            first = configs.model_pair(*args[:4], eager=True) or first
        return [first, *more]
    bound, args, _ = _bound(m, n, k, layout, epilogue, dtype, fill=torch.empty)
    default, more = bound.config_spec.default_config(), candidates_for(m, n, k, dtype, epilogue)
    if torch.cuda.is_available():
        tensors = configs.tensors_in(args)
        rule = configs.choose_config(bound, *tensors, table=False)
        if rule != default:
            more = [rule, *(c for c in more if c != rule)]
    return [default, *more]


def training_candidates(key: tuple, dtype: torch.dtype, sms: int) -> list[helion.Config]:
    """What ``--training`` times on a key: Helion's default and the model's candidates (a
    serving batch's forward: the batch model's, ``model.batch_product``); for a backward's
    pair, each candidate in the pair kernel (``model.pair_of``) where both
    products' tiles make at most ``PAIR_WAVES`` waves (``Model.pair``'s own limit)."""
    m, n, k, _, layout, _ = key
    if len(layout) == 4:
        second = second_of_pair(m, n, k, layout)
        return [
            pair_of(c)
            for c in MODEL_CANDIDATES
            if output_tiles(c, m, n) + output_tiles(c, *second[:2]) <= PAIR_WAVES * sms
        ]
    product = Product(m, n, k, layout, True, sms)  # (only its rows and layout are read)
    chosen_from = BATCH_CANDIDATES if batch_product(product) else MODEL_CANDIDATES
    return [candidates_of_key(key, dtype)[0], *chosen_from]


def compile_jobs(key: tuple, dtype: torch.dtype, candidates: list):
    """Work for ``_compile_into_cache``: a key's candidates, two per job, and a pair's two
    launches."""
    m, n, k, _, layout, epilogue = key
    dtype_name = str(dtype).removeprefix("torch.")
    dicts = [dict(c) for c in candidates]
    jobs = [
        (m, n, k, layout, epilogue, dtype_name, dicts[i : i + 2]) for i in range(0, len(dicts), 2)
    ]
    if len(layout) == 4:
        jobs.append((m, n, k, layout, epilogue, dtype_name, None))
    return jobs


def describe(config: helion.Config) -> str:
    """A config in one line, e.g. '[128, 256, 64] w8 s3 persistent_interleaved flattened'."""
    c = dict(config)
    words = [str(c["block_sizes"]), f"w{c['num_warps']}", f"s{c['num_stages']}"]
    words.append(c.get("pid_type", "flat"))
    if flattened(config):
        words.append("flattened")
    if c.get("num_sm_multiplier", 1) > 1:
        words.append(f"{c['num_sm_multiplier']} per SM")
    if "split_k" in c:
        words.append(f"split_k {c['split_k']}")
    if "indexing" in c:
        words.append(str(c["indexing"]))
    return " ".join(words)


def tune_key(
    key: tuple,
    dtype: torch.dtype,
    candidates: list,
    autotune: bool,
    record=None,
    break_ties: bool = True,
) -> dict | None:
    """Time every candidate on one key; return the table entry of the fastest, or None for
    a pair that two launches (with their own entries) beat, or for a product that the
    transposed kernel, which it runs without an entry, beats. ``record(config, ms, aten_ms)``,
    if given, is called with every timing. ``break_ties``: near ties (``NEAR_TIE``) timed
    flushed decide (not for ``--training``, whose records are the times under graphs)."""
    m, n, k, _, layout, epilogue = key
    bound, args, aten = _bound(m, n, k, layout, epilogue, dtype)
    started = time.monotonic()
    if autotune:
        candidates = [*candidates, bound.autotune(args, force=True)]
    aten_ms = bench(aten)
    pair = len(layout) == 4
    if pair:
        two_ms = bench(lambda: (launch_mm(*args[:2]), launch_mm(*args[2:4])))
    # A product the launchers run transposed while it has no entry (an entry runs it plain).
    transposed = not pair and len(args) == 3 and configs.transposed_pays(*args[:2], epilogue)
    if transposed:
        cells = args[2].__closure__ or ()  # the epilogue's: addmm's bias is part of the key
        bias = tuple(c.cell_contents for c in cells if isinstance(c.cell_contents, torch.Tensor))
        transposed_ms = bench(lambda: _run(transposed_kernel, args, bias))
    timings = []
    tensors = configs.tensors_in(args)
    for config in candidates:
        try:  # as the runtime launches it; the entry keeps the config as chosen
            run = bound.compile_config(configs.as_launched(config, *tensors))
            run(*args)
            timings.append((bench(lambda run=run: run(*args)), config, run))
            if record is not None:
                record(
                    config, timings[-1][0], aten_ms, **({"two_launches_ms": two_ms} if pair else {})
                )
        except Exception as error:  # a config the shape cannot take: skip it, say so
            print(f"    skipped {describe(config)}: {type(error).__name__}: {error}"[:300])
    print(f"    {len(timings)}/{len(candidates)} configs ran in {time.monotonic() - started:.0f} s")
    ranked = sorted(timings, key=lambda t: t[0])
    near = [t for t in ranked if t[0] <= NEAR_TIE * ranked[0][0]]
    flushed = {}
    if break_ties and len(near) > 1:
        flushed = {id(c): bench_flushed(functools.partial(run, *args)) for _, c, run in near}
    for ms, config, _ in ranked[:3]:
        cold = f", {flushed[id(config)]:.5f} flushed" if id(config) in flushed else ""
        print(f"    {ms:.5f} ms ({aten_ms / ms:.3f}x{cold}) {describe(config)}")
    best_ms, best, _ = min(near, key=lambda t: flushed.get(id(t[1]), t[0]))
    if best is not ranked[0][1]:
        print(f"    fastest flushed of {len(near)} near ties: {describe(best)}")
    if pair and best_ms >= two_ms:
        print(f"    two launches take {two_ms:.5f} ms: no entry")
        return None
    if transposed and best_ms >= transposed_ms:
        print(f"    the transposed kernel takes {transposed_ms:.5f} ms: no entry")
        return None
    return {
        "m": m,
        "n": n,
        "k": k,
        "dtype": str(dtype).removeprefix("torch."),
        "layout": layout,
        "epilogue": epilogue,
        "config": table.portable(dict(best)) if epilogue == "plain" else dict(best),
        "ms": round(best_ms, 5),
        "aten_ms": round(aten_ms, 5),
        "speedup_vs_aten": round(aten_ms / best_ms, 3),
        "timing": TIMING,
        **({"flushed_ms": round(flushed[id(best)], 5)} if flushed else {}),
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
    if 0 in (m, n, k):
        raise argparse.ArgumentTypeError(f"--shape: every size must be positive, got {text!r}")
    return m, n, k


def write_table(output: Path, entries: dict, arch: str, command: str) -> None:
    written = {
        "device": torch.cuda.get_device_name(),
        "arch": arch,
        "versions": {
            "torch": torch.__version__,
            "triton": triton.__version__,
            "helion": importlib.metadata.version("helion"),
        },
        "measured": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "split_k": table.SPLIT_K_FORMAT,
        "entries": sorted(
            entries.values(),
            key=lambda e: (e["m"], e["n"], e["k"], e["layout"], e["epilogue"], e["dtype"]),
        ),
    }
    # Written beside and then renamed over, so that an interrupted write never leaves a
    # table that every later call would fail to read.
    partial = output.with_name(output.name + ".partial")
    partial.write_text(json.dumps(written, indent=1) + "\n")
    partial.replace(output)


def _check_writable(path: Path) -> None:
    """Fail before any timing where the results could not be written at the end: ``path``
    must be a file, or not yet exist, in a folder that exists or can be made and is writable.
    """
    if path.is_dir():
        raise OSError(f"{path} is a directory: name a file")
    path.parent.mkdir(parents=True, exist_ok=True)
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise OSError(f"{path} is not writable")


def parse_gpus(text: str) -> int:
    """``--gpus``: a positive count or 'all' (0 stands for all)."""
    if text == "all":
        return 0
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--gpus takes a positive number or 'all', got {text!r}")
    return int(text)


def parse_layouts(text: str) -> list[str]:
    """``--layout``: layouts such as 'rc' or 'rccr', comma-separated."""
    layouts = text.split(",")
    if not all(re.fullmatch("[rc]{2}|[rc]{4}", layout) for layout in layouts):
        raise argparse.ArgumentTypeError(f"--layout takes layouts such as rr,rc,rccr, got {text!r}")
    return layouts


def selected_keys(args: argparse.Namespace) -> list[tuple]:
    """The keys the flags select: the training grid's (``--training``; with ``--batch``, the
    batch model's: its shapes' forwards) or the table's, of the ``--shape`` shapes or the
    standard sets, narrowed by ``--pairs`` and ``--layout``."""
    if args.training:
        grid = args.shape or (BATCH_TRAINING_SHAPES if args.batch else None)
        selected = training_keys(args.dtype, grid)
        if args.batch:
            selected = [key for key in selected if key[4] == "rr"]
    else:
        selected = keys_of(args.only, args.shape, args.dtype, args.epilogue)
    if args.pairs:
        selected = [key for key in selected if len(key[4]) == 4]
    if args.layout:
        selected = [key for key in selected if key[4] in args.layout]
    return selected


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m helion_ops.tune", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--dtype", default="bfloat16", type=torch_name, choices=["bfloat16", "float16"]
    )
    parser.add_argument(
        "--output",
        type=Path,
        help="table to write (default: this user's own, which the runtime reads over the "
        "shipped one: $HELION_OPS_TABLE or ~/.cache/helion_ops/<arch>.json)",
    )
    parser.add_argument("--only", choices=["gemm", "addmm"], help="one shape set only")
    parser.add_argument(
        "--epilogue", choices=["plain", "bias"], help="only keys of this epilogue (bias: addmm's)"
    )
    parser.add_argument(
        "--shape",
        type=parse_shape,
        action="append",
        help="MxNxK of any gemm/addmm to tune (repeatable), in place of the standard sets",
    )
    parser.add_argument(
        "--training",
        type=Path,
        metavar="RECORDS",
        help="time the model's candidates on its training grid (or on the --shape shapes) "
        "into RECORDS (JSON lines; fit with python -m helion_ops.fit RECORDS); writes no table",
    )
    parser.add_argument(
        "--batch",
        action="store_true",
        help="with --training: the batch model's grid, its shapes' forwards (fit with python "
        "-m helion_ops.fit RECORDS --batch)",
    )
    parser.add_argument(
        "--pairs",
        action="store_true",
        help="only the keys of backwards' pairs (both products in one launch)",
    )
    parser.add_argument(
        "--layout",
        type=parse_layouts,
        help="only keys of these operand layouts, comma-separated: rr, rc, cr (a product's "
        "operands row- or column-major), rccr, crrc (a backward's pair)",
    )
    parser.add_argument("--autotune", action="store_true", help="also run Helion's autotuner")
    parser.add_argument("--force", action="store_true", help="re-measure keys in the table")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=540,
        help="stop after this many seconds (default 540); run again to resume",
    )
    parser.add_argument(
        "--gpus",
        type=parse_gpus,
        default=1,
        help="GPUs to spread the keys over, one process each: a number or 'all' (default 1)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=max(1, min(16, (os.cpu_count() or 1) - 2)),
        help="worker processes that compile candidates ahead of timing, over all GPUs "
        "(1: compile while timing)",
    )
    args = parser.parse_args(argv)
    if args.batch and not args.training:
        parser.error("--batch selects the batch model's training grid: give --training too")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    selected = selected_keys(args)
    if not selected:
        print(
            "helion_ops.tune: error: the flags select no key to tune (--only "
            f"{args.only}, --epilogue {args.epilogue}, --pairs {args.pairs}, --layout "
            f"{args.layout}, --shape {args.shape})",
            file=sys.stderr,
        )
        return 2
    if not torch.cuda.is_available():
        print("helion_ops.tune needs a CUDA GPU", file=sys.stderr)
        return 2
    arch = table.gpu_arch(torch.device("cuda"))
    output = args.output or table.user_table_path(arch)
    try:
        _check_writable(args.training or output)
        written = table.table_document(output) if output.exists() else {"entries": []}
    except (ValueError, OSError) as error:
        print(f"helion_ops.tune: error: {error}", file=sys.stderr)
        return 2
    entries = {table.entry_key(e): e for e in table.entries_of(written)}
    keys = [k for k in selected if args.training or args.force or k not in entries]
    if not keys:
        print(f"All {len(selected)} selected keys are in {output} already (--force re-measures)")
        return 0

    gpus = args.gpus or torch.cuda.device_count()
    gpus = min(gpus, torch.cuda.device_count(), len(keys))
    # The command as run, with the output path (a machine's own) cut down to its file name.
    given = list(sys.argv[1:] if argv is None else argv)
    if "--output" in given:
        given[given.index("--output") + 1] = output.name
    command = " ".join(["python -m helion_ops.tune", *given])
    print(f"{len(keys)} keys on {gpus} GPU(s); table {output}", flush=True)
    shares = [keys[i::gpus] for i in range(gpus)]
    if gpus == 1:
        results = [tune_keys(0, shares[0], args)]
    else:
        # One process per GPU, each timing its share of the keys (and compiling them with
        # its share of the workers); results come back to be merged here.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(gpus, mp_context=context) as pool:
            futures = [pool.submit(tune_keys, i, share, args) for i, share in enumerate(shares)]
            interrupted = False
            try:
                wait(futures)
            except KeyboardInterrupt:
                interrupted = True
                wait(futures)  # the workers, interrupted as well, return what they measured
            results = [worker_result(i, future, interrupted) for i, future in enumerate(futures)]
    found = {k: v for part, _, _ in results for k, v in part.items()}
    records = [r for _, part, _ in results for r in part]
    # Ctrl-C keeps what was measured (a later run resumes after it) and exits as interrupted.
    status = 130 if any(interrupted for _, _, interrupted in results) else 0
    if args.training:
        args.training.write_text("".join(json.dumps(r) + "\n" for r in records))
        print(f"{len(records)} timings in {args.training}")
        return status
    for key, entry in found.items():
        if entry is None:
            entries.pop(key, None)
        else:
            entries[key] = entry
    write_table(output, entries, arch, command)
    print(f"{output}: {len(entries)} entries, {len(found)} of its keys measured in this run")
    return status


def worker_result(gpu: int, future: Future, interrupted: bool) -> tuple[dict, list, bool]:
    """What GPU ``gpu``'s worker process measured; nothing, as interrupted, where Ctrl-C
    reached it outside its timing loop. Before its first key its call returns the interrupt,
    and the other GPUs' keys still reach the table; between calls its process ends, the pool
    ends the others too, and the run exits as interrupted rather than with a traceback.
    ``interrupted``: whether Ctrl-C reached this process too (a pool broken without it is a
    worker's crash, raised as it is)."""
    try:
        return future.result()
    except KeyboardInterrupt:
        pass
    except BrokenProcessPool:
        if not interrupted:
            raise
    print(f"[gpu {gpu}] interrupted before it returned what it measured", flush=True)
    return {}, [], True


def _add_record(
    records: list[dict],
    key: tuple,
    aligned: bool,
    sms: int,
    config,
    ms: float,
    aten_ms: float,
    **more: float,
) -> None:
    """One timing of ``--training``, as ``helion_ops.model.fit`` reads it (a pair's with
    ``two_launches_ms``)."""
    m, n, k, dtype, layout, _ = key
    records.append(
        {
            "m": m,
            "n": n,
            "k": k,
            "dtype": dtype,
            "layout": layout,
            "aligned": aligned,
            "config": dict(config),
            "ms": round(ms, 6),
            "aten_ms": round(aten_ms, 6),
            "sms": sms,
            "device": torch.cuda.get_device_name(),
            "timing": TIMING,
            **{name: round(value, 6) for name, value in more.items()},
        }
    )


def tune_keys(
    gpu: int, keys: list[tuple], args: argparse.Namespace
) -> tuple[dict[tuple, dict | None], list[dict], bool]:
    """Time ``keys`` on GPU ``gpu``: the entries found (None where ``tune_key`` keeps
    none), with ``--training`` every timing as a record, and whether Ctrl-C cut it short
    (what it measured until then is returned all the same, for the table)."""
    torch.cuda.set_device(gpu)
    dtype = getattr(torch, args.dtype)
    start = time.monotonic()
    sms = configs.sm_count(torch.device("cuda", gpu))
    if args.training:
        candidates = {k: training_candidates(k, dtype, sms) for k in keys}
        # A pair of more tiles than the model would run in one launch has none.
        keys = [k for k in keys if candidates[k]]
    else:
        candidates = {key: candidates_of_key(key, dtype) for key in keys}
    jobs = max(1, args.jobs // (args.gpus or torch.cuda.device_count()))
    pool = None
    compiling: dict[tuple, list[Future]] = {key: [] for key in keys}
    if jobs > 1:
        # Workers compile every key's candidates in order while this process times the
        # earlier keys (CUDA-graph replay times are GPU times, unaffected by host load).
        pool = ProcessPoolExecutor(
            jobs,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=torch.cuda.set_device,
            initargs=(gpu,),
        )
        for key in keys:
            work = compile_jobs(key, dtype, candidates[key])
            compiling[key] = [pool.submit(_compile_into_cache, job) for job in work]
    found: dict[tuple, dict | None] = {}
    records: list[dict] = []
    interrupted = False
    try:
        for i, key in enumerate(keys, 1):
            if time.monotonic() - start > args.budget_s:
                print(f"budget spent: {len(keys) - i + 1} keys left; run again to resume")
                break
            m, n, k, _, layout, epilogue = key
            print(f"[gpu {gpu}: {i}/{len(keys)}] {m}x{n}x{k} {args.dtype} {layout} {epilogue}")
            wait(compiling[key])
            a, b = operands(m, n, k, layout, dtype, torch.empty)
            aligned = loads.tma_aligned(a, b)
            record = functools.partial(_add_record, records, key, aligned, sms)
            entry = tune_key(key, dtype, candidates[key], args.autotune, record, not args.training)
            found[key] = entry
            if entry is not None:
                print(
                    f"    best {entry['ms']:.4f} ms, aten {entry['aten_ms']:.4f} ms, "
                    f"speedup {entry['speedup_vs_aten']}",
                    flush=True,
                )
    except KeyboardInterrupt:
        interrupted = True
        print(f"[gpu {gpu}] interrupted: {len(found)} of {len(keys)} keys measured", flush=True)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return found, records, interrupted


if __name__ == "__main__":
    sys.exit(main())
