"""GPU time of products with a runtime rule on and off, in one process: ``python -m
benchmarks.rule_ab --off narrow_tiles.narrow_columns --shape 16384x60x2048 ...``.

``--off`` names a predicate of ``helion_ops`` (``module.function``, e.g.
``narrow_tiles.few_columns_long_k``); while the rule is off, every module of the package that
holds it holds instead a function that answers False, so its products take the route they
would take without it. For each round, the rule on and off in turn (the order alternating from
round to round), every compiled specialization and cached decision is dropped
(``kernel.reset``, the package's ``functools`` caches), then each product's forward
(``helion_ops.matmul``) and ``torch.mm`` are timed under CUDA graphs (the measure of
tritonbench's ``--cudagraph``), with the errors of ``matmul`` and ``addmm`` (a bias of N)
against float64 over the largest reference value, aten's beside them. ``--op addmm`` times
``helion_ops.addmm`` and ``torch.addmm`` with an [M, N] bias instead (tritonbench's addmm;
its errors those of that bias): its bias epilogue chooses and launches its own config.
``--mode bwd`` times the backward instead (``helion_ops.matmul``'s and ``torch.matmul``'s,
or the addmms', as the built-in harness and tritonbench's plugin capture it: ``grad_out @
b.T`` and ``a.T @ grad_out``, and addmm's bias gradient), with the largest error of the
gradients. Each row is printed
(and ``--json`` rewritten) as it is measured, so that a run cut short keeps what it timed;
at the end it prints each product's best time on and off and their geomean ratio.
Use shapes that are not in ``benchmarks/shapes/validation.csv``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import statistics
import sys
from collections.abc import Callable, Iterator

import torch
import triton

import helion_ops
from benchmarks import harness
from benchmarks.cli import positive
from benchmarks.suite import BACKENDS
from helion_ops import kernel
from helion_ops.dtype_names import torch_name
from helion_ops.tune import operands, parse_shape

LAYOUTS = ("rr", "rc", "cr", "cc")


def bench(fn: Callable[[], object]) -> float:
    """Microseconds per call, replayed from a CUDA graph (median)."""
    return triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median") * 1e3


def package_modules() -> list:
    """The modules of ``helion_ops`` imported so far (the only ones that can hold a rule)."""
    return [
        module
        for name, module in list(sys.modules.items())
        if name == "helion_ops" or name.startswith("helion_ops.")
    ]


def predicate(name: str) -> Callable[..., bool]:
    """The function ``name`` ("module.function") of ``helion_ops``; ValueError where there
    is none."""
    module_name, _, attr = name.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"--off {name!r}: give module.function, such as narrow_tiles.few_columns")
    try:
        module = importlib.import_module(f"helion_ops.{module_name}")
    except ImportError:
        raise ValueError(f"--off {name!r}: helion_ops has no module {module_name!r}") from None
    function = getattr(module, attr, None)
    if not callable(function):
        raise ValueError(f"--off {name!r}: helion_ops.{module_name} has no function {attr!r}")
    if inspect.signature(function).return_annotation not in (bool, "bool"):
        raise ValueError(f"--off {name!r}: not a rule (a function annotated to return bool)")
    return function


@contextlib.contextmanager
def turned_off(functions: list[Callable[..., bool]]) -> Iterator[None]:
    """Every reference of the package's modules to ``functions`` answering False."""
    saved = []
    for module in package_modules():
        for attr, value in vars(module).items():
            if any(value is f for f in functions):
                saved.append((module, attr, value))
    try:
        for module, attr, _ in saved:
            setattr(module, attr, lambda *args, **kwargs: False)
        yield
    finally:
        for module, attr, value in saved:
            setattr(module, attr, value)


def forget_decisions() -> None:
    """Drop compiled specializations, fast paths and the package's cached decisions."""
    kernel.reset()
    for module in package_modules():
        for value in vars(module).values():
            if callable(getattr(value, "cache_clear", None)):
                value.cache_clear()


def parse_product(text: str) -> tuple[int, int, int, str]:
    """``MxNxK`` or ``MxNxK:layout`` (a's and b's: r row-major, c column-major; default rr)."""
    shape, _, layout = text.partition(":")
    layout = layout or "rr"
    if layout not in LAYOUTS:
        raise argparse.ArgumentTypeError(f"--shape layout must be one of {LAYOUTS}, got {text!r}")
    return (*parse_shape(shape), layout)


def relative_error(out: torch.Tensor, reference: torch.Tensor) -> float:
    return ((out.double() - reference).abs().max() / reference.abs().max()).item()


def measure(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, op: str = "gemm") -> dict:
    """One product's times and errors, as the runtime routes it now: ``op`` "gemm" times
    ``matmul``, "addmm" times ``addmm`` with ``bias``."""
    reference = a.double() @ b.double()
    with_bias = reference + bias.double()
    # The eager calls first: they compile what the timed captures replay.
    errors = {
        "rel_err": relative_error(helion_ops.matmul(a, b), reference),
        "aten_rel_err": relative_error(torch.mm(a, b), reference),
        "addmm_rel_err": relative_error(helion_ops.addmm(bias, a, b), with_bias),
        "aten_addmm_rel_err": relative_error(torch.addmm(bias, a, b), with_bias),
    }
    if op == "gemm":
        times = {
            "us": bench(lambda: helion_ops.matmul(a, b)),
            "aten_us": bench(lambda: torch.mm(a, b)),
        }
    else:
        times = {
            "us": bench(lambda: helion_ops.addmm(bias, a, b)),
            "aten_us": bench(lambda: torch.addmm(bias, a, b)),
        }
    return {**times, **errors}


def measure_backward(
    a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, cudagraph: bool = True
) -> dict:
    """One product's backward times and gradients' errors, as the runtime routes it now (on
    the CPU without graphs, by a wall clock: not meaningful): ``matmul``'s, or with ``bias``
    ``addmm``'s. The gradients are compared after both are timed (drawn and compared between
    the two timings, as first written, the float64 references and the seeded draw left a
    capture failing on an H100)."""
    inputs = [t.detach().requires_grad_() for t in ([a, b] if bias is None else [bias, a, b])]
    a, b = inputs[-2:]
    op = "gemm" if bias is None else "addmm"
    backends, names = harness.functions(op), BACKENDS[op]
    row, grads = {}, {}
    for prefix, name in (("", names.helion), ("aten_", names.baseline)):
        grads[prefix], step = harness.results_and_step(backends[name], inputs, "bwd", cudagraph)
        row[f"{prefix}us"] = harness.latency_ms(step, a.is_cuda, cudagraph) * 1e3
        del step
    grad_out = harness.grad_out_of(a.new_empty(a.shape[0], b.shape[1])).double()
    references = (grad_out @ b.double().T, a.double().T @ grad_out)
    if bias is not None:
        references = (grad_out, *references)
    for prefix, computed in grads.items():
        errors = [relative_error(computed[f"grad {i}"], r) for i, r in enumerate(references)]
        row[f"{prefix}rel_err"] = max(errors)
    return row


def main(argv: list[str] | None = None) -> int:
    description = " ".join(__doc__.split("\n\n")[0].split())
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rule_ab", description=description)
    parser.add_argument("--off", action="append", required=True, help="module.function")
    parser.add_argument("--shape", type=parse_product, action="append", required=True)
    parser.add_argument(
        "--dtype", default="bfloat16", type=torch_name, choices=["bfloat16", "float16"]
    )
    parser.add_argument("--rounds", type=positive, default=2, help="at least 1 (default 2)")
    parser.add_argument(
        "--mode", choices=["fwd", "bwd"], default="fwd", help="the pass to time (default fwd)"
    )
    parser.add_argument(
        "--op", choices=["gemm", "addmm"], default="gemm", help="addmm: with an [M, N] bias"
    )
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    try:
        functions = [predicate(name) for name in args.off]
    except ValueError as error:
        parser.error(str(error))
    if not torch.cuda.is_available():
        print("benchmarks.rule_ab needs a CUDA GPU", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.dtype)
    products = []
    for m, n, k, layout in args.shape:
        a, b = operands(m, n, k, layout, dtype)
        bias = torch.randn((n,) if args.op == "gemm" else (m, n), device="cuda", dtype=dtype)
        products.append(((m, n, k, layout), a, b, bias))
    meta = {
        "device": torch.cuda.get_device_name(),
        "dtype": args.dtype,
        "off": args.off,
        "mode": args.mode,
        "op": args.op,
    }
    rows = []
    for round_ in range(args.rounds):
        for rule in ("on", "off") if round_ % 2 == 0 else ("off", "on"):
            with turned_off(functions) if rule == "off" else contextlib.nullcontext():
                forget_decisions()
                for (m, n, k, layout), a, b, bias in products:
                    row = {"shape": f"{m}x{n}x{k}", "layout": layout, "rule": rule}
                    if args.mode == "fwd":
                        times = measure(a, b, bias, args.op)
                    else:
                        times = measure_backward(a, b, bias if args.op == "addmm" else None)
                    rows.append({**row, "round": round_, **times})
                    print(json.dumps(rows[-1]), flush=True)
                    if args.json:
                        with open(args.json, "w") as f:
                            json.dump({**meta, "rows": rows}, f, indent=1)
    forget_decisions()
    print(f"rule {' '.join(args.off)}, {args.op} {args.mode}: best us on | off | aten, off / on")
    gains = []
    for (m, n, k, layout), *_ in products:
        mine = [r for r in rows if r["shape"] == f"{m}x{n}x{k}" and r["layout"] == layout]
        on, off = (min(r["us"] for r in mine if r["rule"] == rule) for rule in ("on", "off"))
        aten = min(r["aten_us"] for r in mine)
        gains.append(off / on)
        print(f"{m}x{n}x{k} {layout}: {on:.1f} | {off:.1f} | {aten:.1f}  {off / on:.3f}")
    geomean = statistics.geometric_mean(gains)
    print(f"geomean off / on {geomean:.3f}, the rule faster on {sum(g > 1 for g in gains)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
