"""Per-call host cost of helion_ops against torch at a small shape, without CUDA graphs.

At 256^3 the GPU finishes a matmul in a few microseconds, so a loop of calls with one
synchronize at the end runs at the speed of the host: its time per call is the host cost
(argument checks, autograd bookkeeping, the launch). Prints the median time per call of each
row and the ratios that issue 16 targets (each at most 1.0), and writes JSON. Run from the
repository root, so that this checkout's helion_ops is the one imported:

    python -m benchmarks.host_overhead [--size 256] [--dtype bfloat16] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import helion_ops
from helion_ops.kernel import launch_mm


def per_call_us(fn, calls: int = 2000, repeats: int = 7) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def fwd_bwd(fn, grad_out: torch.Tensor, *inputs: torch.Tensor):
    """One forward and backward of ``fn`` on leaf ``inputs``, their grads reset each call."""

    def run():
        for t in inputs:
            t.grad = None
        fn(*inputs).backward(grad_out)

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--json")
    args = parser.parse_args()
    dtype, s = getattr(torch, args.dtype), args.size
    a, b, bias, g = (
        torch.randn(shape, device="cuda", dtype=dtype) for shape in ((s, s), (s, s), (s,), (s, s))
    )
    la, lb, lbias = (t.clone().requires_grad_() for t in (a, b, bias))
    rows = {
        "torch.mm": per_call_us(lambda: torch.mm(a, b)),
        "helion_ops.matmul": per_call_us(lambda: helion_ops.matmul(a, b)),
        "torch.addmm": per_call_us(lambda: torch.addmm(bias, a, b)),
        "helion_ops.addmm": per_call_us(lambda: helion_ops.addmm(bias, a, b)),
        "launch_mm (no checks, no autograd)": per_call_us(lambda: launch_mm(a, b)),
        "torch.mm fwd+bwd": per_call_us(fwd_bwd(torch.mm, g, la, lb), calls=500),
        "helion_ops.matmul fwd+bwd": per_call_us(fwd_bwd(helion_ops.matmul, g, la, lb), 500),
        "torch.addmm fwd+bwd": per_call_us(fwd_bwd(torch.addmm, g, lbias, la, lb), calls=500),
        "helion_ops.addmm fwd+bwd": per_call_us(fwd_bwd(helion_ops.addmm, g, lbias, la, lb), 500),
    }
    ratios = {
        "matmul / torch.mm": rows["helion_ops.matmul"] / rows["torch.mm"],
        "addmm / torch.addmm": rows["helion_ops.addmm"] / rows["torch.addmm"],
        "matmul fwd+bwd / torch's": rows["helion_ops.matmul fwd+bwd"] / rows["torch.mm fwd+bwd"],
        "addmm fwd+bwd / torch's": rows["helion_ops.addmm fwd+bwd"] / rows["torch.addmm fwd+bwd"],
    }
    print(f"host time per call, us ({args.dtype}, {s}^3, median of 7)")
    for name, value in rows.items():
        print(f"  {name:36s} {value:8.2f}")
    print("ratio (target <= 1.00)")
    for name, value in ratios.items():
        print(f"  {name:36s} {value:8.2f}  {'met' if value <= 1.0 else 'NOT met'}")
    if args.json:
        meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "size": s}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "us_per_call": rows, "ratios": ratios}, f, indent=1)


if __name__ == "__main__":
    main()
