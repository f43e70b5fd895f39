"""Host cost of helion_ops' Python layers on a machine without a GPU (NOTES 31).

The kernels are compiled for Triton's interpreter, but every launch is stubbed: Triton's JIT
entry point returns a fake CompiledKernel whose launcher does nothing, and a fake driver
gives the device and stream, so what is timed is everything but the C launcher. The
argument checks take their CUDA path. bf16 256^3; the rows run in turn, one batch each (20000
calls, 2000 for forward+backward), 5 times over, as ``benchmarks.host_overhead`` runs them
(a drift of this host's speed reaches every row alike); each row's median. ``-p ROW...`` adds
a cProfile table per row.

    python -m benchmarks.host_overhead_cpu [--calls 20000] [--repeats 5] [-p launch_mm]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics

os.environ["TRITON_INTERPRET"] = "1"

import torch
from triton.compiler import CompiledKernel
from triton.runtime import driver

import helion_ops
from benchmarks.cli import positive
from benchmarks.host_overhead import fwd_bwd, per_call_us
from helion_ops import checks, kernel, plans


class FakeDriver:
    def get_current_device(self) -> None:
        return None  # the device of a plan for CPU operands: they are on the current one

    def get_current_stream(self, device: int | None = None) -> int:
        return 0


class FakeCompiled(CompiledKernel):
    def __init__(self) -> None:  # no binary behind it; its launcher does nothing
        self.module, self.function, self.packed_metadata = 1, 0, ()
        self._run = lambda *args: None
        self.src, self.name, self.metadata = None, "fake", None


def stub_launches() -> None:
    driver.set_active(FakeDriver())
    plans.default_launcher = lambda *args, **options: FakeCompiled()
    checks._fast_device = lambda t: True  # as on a GPU: no environment read


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.host_overhead_cpu")
    parser.add_argument(
        "--calls", type=positive, default=20000, help="a batch (a tenth for fwd+bwd)"
    )
    parser.add_argument("--repeats", type=positive, default=5)
    parser.add_argument(
        "-p",
        "--profile",
        nargs="*",
        default=[],
        metavar="ROW",
        help="rows to profile, by name as printed (quoted where it has spaces)",
    )
    args = parser.parse_args(argv)
    stub_launches()
    s, dtype = 256, torch.bfloat16
    a, b, g = (torch.randn(s, s, dtype=dtype) for _ in range(3))
    bias = torch.randn(s, dtype=dtype)
    la, lb, lbias = (t.clone().requires_grad_() for t in (a, b, bias))

    rows = {
        "launch_mm": lambda: kernel.launch_mm(a, b),
        "matmul (no grad)": lambda: helion_ops.matmul(a, b),
        "addmm (no grad)": lambda: helion_ops.addmm(bias, a, b),
        "matmul (grad)": lambda: helion_ops.matmul(la, lb),
        "addmm (grad)": lambda: helion_ops.addmm(lbias, la, lb),
        "matmul fwd+bwd": fwd_bwd(helion_ops.matmul, g, la, lb),
        "addmm fwd+bwd": fwd_bwd(helion_ops.addmm, g, lbias, la, lb),
    }
    unknown = [name for name in args.profile if name not in rows]
    if unknown:
        parser.error(
            f"-p {', '.join(map(repr, unknown))}: the rows are {', '.join(map(repr, rows))}"
        )
    batches = {
        name: (fn, max(1, args.calls // 10) if "bwd" in name else args.calls)
        for name, fn in rows.items()
    }
    samples = per_call_us(batches, args.repeats, synchronize=lambda: None)
    for name, times in samples.items():
        print(f"{name:22s} {statistics.median(times):8.2f} us")
    for name in args.profile:
        profile = cProfile.Profile()
        profile.runcall(lambda fn=rows[name]: [fn() for _ in range(5000)])
        pstats.Stats(profile).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
