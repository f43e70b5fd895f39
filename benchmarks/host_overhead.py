"""Per-call host cost of helion_ops against torch at a small shape, without CUDA graphs.

At 256^3 the GPU finishes a matmul in a few microseconds, so a loop of calls with one
synchronize at the end runs at the speed of the host: its time per call is the host cost
(launch overhead, argument checks, autograd bookkeeping). Prints one table and writes JSON.

    python benchmarks/host_overhead.py [--size 256] [--dtype bfloat16] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import helion_ops
from helion_ops import kernel, ops
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--json")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    s = args.size
    a = torch.randn(s, s, device="cuda", dtype=dtype, requires_grad=True)
    b = torch.randn(s, s, device="cuda", dtype=dtype, requires_grad=True)
    g = torch.randn(s, s, device="cuda", dtype=dtype)
    ad, bd = a.detach(), b.detach()

    def fwd_bwd(mm):
        def run():
            a.grad = b.grad = None
            mm(a, b).backward(g)

        return run

    launch_mm(ad, bd)
    (host_fn,) = kernel._compiled.values()  # Helion's generated host function, launcher bound
    epilogue = kernel.scaled(1.0)
    rows = {
        "torch.mm": per_call_us(lambda: torch.mm(ad, bd)),
        "host function, DirectLauncher": per_call_us(lambda: host_fn(ad, bd, epilogue)),
        "host function, Triton's JIT launch": per_call_us(lambda: host_fn.func(ad, bd, epilogue)),
        "helion_ops.matmul": per_call_us(lambda: helion_ops.matmul(ad, bd)),
        "torch.mm, inputs require grad": per_call_us(lambda: torch.mm(a, b)),
        "helion_ops.matmul, inputs require grad": per_call_us(lambda: helion_ops.matmul(a, b)),
        "launch_mm (no checks, no autograd)": per_call_us(lambda: launch_mm(ad, bd)),
        "ops.mm_op (custom-op dispatch)": per_call_us(lambda: ops.mm_op(ad, bd, 1.0)),
        "torch fwd+bwd": per_call_us(fwd_bwd(torch.mm), calls=500),
        "helion_ops fwd+bwd": per_call_us(fwd_bwd(helion_ops.matmul), calls=500),
    }
    rows["ratio matmul / torch.mm"] = rows["helion_ops.matmul"] / rows["torch.mm"]
    rows["ratio fwd+bwd helion / torch"] = rows["helion_ops fwd+bwd"] / rows["torch fwd+bwd"]
    rows["custom-op layer adds (us)"] = (
        rows["ops.mm_op (custom-op dispatch)"] - rows["launch_mm (no checks, no autograd)"]
    )
    for name, value in rows.items():
        print(f"{name:40s} {value:9.2f}")
    if args.json:
        meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "size": s}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "us_per_call": rows}, f, indent=1)


if __name__ == "__main__":
    main()
