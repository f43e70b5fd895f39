"""Per-call host cost of helion_ops against torch at a small shape, without CUDA graphs.

At 256^3 the GPU finishes a matmul in a few microseconds, so a loop of calls with one
synchronize at the end runs at the speed of the host: its time per call is the host cost
(argument checks, autograd bookkeeping, the launch). The rows run in turn, one batch each, 15
times over (a drift of the host's speed reaches all alike). Prints each row's median time per
call and the ratios that issue 16 targets (each at most 1.0: the median of the 15 ratios of
batches run moments apart), and writes JSON with every batch. Run from the
repository root, so that this checkout's helion_ops is the one imported:

    python -m benchmarks.host_overhead [--size 256] [--dtype bfloat16] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

import torch

import helion_ops
from helion_ops import native
from helion_ops.dtype_names import torch_name
from helion_ops.kernel import launch_mm


def per_call_us(
    rows: dict[str, tuple[Callable[[], object], int]],
    repeats: int = 15,
    synchronize: Callable[[], object] = torch.cuda.synchronize,
) -> dict:
    """Each row's time per call, us, per repeat: one batch of ``calls`` of each row in turn
    (interleaved, so that a drift of the host's speed reaches every row alike), each batch
    ended by ``synchronize``."""
    for fn, _ in rows.values():
        for _ in range(50):
            fn()
    synchronize()
    samples: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(repeats):
        for name, (fn, calls) in rows.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            synchronize()
            samples[name].append((time.perf_counter() - start) / calls * 1e6)
    return samples


def fwd_bwd(fn, grad_out: torch.Tensor, *inputs: torch.Tensor):
    """One forward and backward of ``fn`` on leaf ``inputs``, their grads reset each call."""

    def run():
        for t in inputs:
            t.grad = None
        fn(*inputs).backward(grad_out)

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.host_overhead")
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument(
        "--dtype", default="bfloat16", type=torch_name, choices=["bfloat16", "float16", "float32"]
    )
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(
            "benchmarks.host_overhead needs a CUDA GPU (without one: "
            "python -m benchmarks.host_overhead_cpu)",
            file=sys.stderr,
        )
        return 2
    dtype, s = getattr(torch, args.dtype), args.size
    a, b, bias, g = (
        torch.randn(shape, device="cuda", dtype=dtype) for shape in ((s, s), (s, s), (s,), (s, s))
    )
    la, lb, lbias = (t.clone().requires_grad_() for t in (a, b, bias))
    native.ready(a)  # helion_ops' C++ path, built on first use, in every row
    samples = per_call_us(
        {
            "torch.mm": (lambda: torch.mm(a, b), 1000),
            "helion_ops.matmul": (lambda: helion_ops.matmul(a, b), 1000),
            "torch.addmm": (lambda: torch.addmm(bias, a, b), 1000),
            "helion_ops.addmm": (lambda: helion_ops.addmm(bias, a, b), 1000),
            "launch_mm (no checks, no autograd)": (lambda: launch_mm(a, b), 1000),
            "torch.mm fwd+bwd": (fwd_bwd(torch.mm, g, la, lb), 250),
            "helion_ops.matmul fwd+bwd": (fwd_bwd(helion_ops.matmul, g, la, lb), 250),
            "torch.addmm fwd+bwd": (fwd_bwd(torch.addmm, g, lbias, la, lb), 250),
            "helion_ops.addmm fwd+bwd": (fwd_bwd(helion_ops.addmm, g, lbias, la, lb), 250),
        }
    )
    rows = {name: statistics.median(times) for name, times in samples.items()}
    pairs = {
        "matmul / torch.mm": ("helion_ops.matmul", "torch.mm"),
        "addmm / torch.addmm": ("helion_ops.addmm", "torch.addmm"),
        "matmul fwd+bwd / torch's": ("helion_ops.matmul fwd+bwd", "torch.mm fwd+bwd"),
        "addmm fwd+bwd / torch's": ("helion_ops.addmm fwd+bwd", "torch.addmm fwd+bwd"),
    }
    # The median of each repeat's ratio: a repeat's two batches ran moments apart.
    ratios = {
        name: statistics.median(o / t for o, t in zip(samples[ours], samples[theirs], strict=True))
        for name, (ours, theirs) in pairs.items()
    }
    print(f"host time per call, us ({args.dtype}, {s}^3, median of 15 interleaved batches)")
    for name, value in rows.items():
        print(f"  {name:36s} {value:8.2f}")
    print("ratio (target <= 1.00)")
    for name, value in ratios.items():
        print(f"  {name:36s} {value:8.2f}  {'met' if value <= 1.0 else 'NOT met'}")
    if args.json:
        meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "size": s}
        with open(args.json, "w") as f:
            result = {"meta": meta, "us_per_call": rows, "ratios": ratios, "samples": samples}
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
