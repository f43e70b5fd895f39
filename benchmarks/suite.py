"""What to run: one tritonbench command line per (op, mode), with the suite's defaults filled in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from benchmarks.cli import flag_value, has_flag

if TYPE_CHECKING:
    from benchmarks.cli import Options

SUITE_OPS = ("gemm", "addmm")
SUITE_MODES = ("fwd", "bwd")
BWD_MODES = ("bwd", "fwd_bwd")
GPU_METRICS = "accuracy,latency,tflops,speedup"
CPU_METRICS = "accuracy,latency"
CPU_LATENCY_NOTE = "not meaningful (CPU interpreter)"
# Shapes the Triton interpreter runs in seconds; each operator names its flags its own way.
CPU_SHAPES = {
    "gemm": ("--m", "64", "--n", "48", "--k", "32"),
    "addmm": ("--m", "64", "--k", "32", "--n", "48"),
}


# NEW tritonbench checks addmm with torch's default tolerances. Their atol (1e-5) is below the
# fp32 accumulation differences of two correct fp16/bf16 kernels (about 1e-4 on addmm's
# unnormalized inputs), which decide wherever an output cancels to near zero (measured with
# OLD's same check on the H200, 2026-11-29). The suite keeps torch's rtol and gives atol the
# 1e-2 that NEW's gemm uses for these dtypes, where tritonbench has the flags (NEW only).
ADDMM_TOLERANCES = {"fp16": ("1e-3", "1e-2"), "bf16": ("1.6e-2", "1e-2")}


def tolerance_flags(passthrough: tuple[str, ...]) -> tuple[str, ...]:
    """``--rtol``/``--atol`` for addmm at the run's precision (tritonbench's default fp16)."""
    tolerances = ADDMM_TOLERANCES.get(flag_value(passthrough, "--precision", "fp16"))
    if tolerances is None:
        return ()
    rtol, atol = tolerances
    return ("--rtol", rtol, "--atol", atol)


@dataclass(frozen=True)
class OpBackends:
    """The backends one tritonbench operator is benchmarked with."""

    baseline: str
    helion: str
    triton: str
    triton_has_backward: bool
    compiled: str = "pt2_triton_matmul"


# The helion names are those of helion_ops.tritonbench_plugin's functions; they are spelled out
# so that planning imports no Helion before main() has set TRITON_INTERPRET.
BACKENDS = {
    "gemm": OpBackends("aten_matmul", "helion_matmul_tritonbench", "triton_tutorial_matmul", False),
    "addmm": OpBackends("aten_addmm", "helion_addmm_tritonbench", "triton_addmm", True),
}


@dataclass(frozen=True)
class Job:
    """One tritonbench call: an op in a mode, and its command line (without --output)."""

    op: str
    mode: str
    argv: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.op}_{self.mode}"


def default_backends(op: str, mode: str, gpu: bool) -> list[str]:
    """The suite's backends for an op and mode, baseline first.

    OLD tritonbench's --only is exact, so the baseline is listed too. A backward mode takes
    only backends with a backward: a backend without one aborts the input for all of them.

    Args:
        op: "gemm" or "addmm".
        mode: a tritonbench mode.
        gpu: False on the CPU, where only aten and helion run (in the interpreter).

    Returns:
        Backend names for tritonbench's --only.
    """
    b = BACKENDS[op]
    names = [b.baseline, b.helion]
    if not gpu:
        return names
    if mode not in BWD_MODES or b.triton_has_backward:
        names.append(b.triton)
    return [*names, b.compiled]


# NEW tritonbench's addmm takes --m/--k/--n only with --bias-1D-y (an [N] bias) and otherwise
# runs its 42 large default shapes: hours in the CPU interpreter, and not what was asked.
BIAS_1D_FLAGS = ("--bias-1D-y", "1")


def plan_jobs(
    options: Options,
    gpu: bool,
    has_tolerance_flags: bool = False,
    addmm_sizes_need_bias_1d: bool = False,
) -> list[Job]:
    """One job per (op, mode), the suite's defaults filling what the command line leaves out.

    Args:
        options: the parsed command line.
        gpu: whether a CUDA GPU is present.
        has_tolerance_flags: whether tritonbench takes --rtol/--atol (NEW does, OLD does not).
        addmm_sizes_need_bias_1d: whether tritonbench's addmm ignores --m/--k/--n without
            --bias-1D-y (NEW does, OLD does not).

    Returns:
        The jobs in run order.

    Raises:
        ValueError: the command line gives addmm sizes that tritonbench would ignore.
    """
    passthrough = options.passthrough
    metrics = options.metrics or (GPU_METRICS if gpu else CPU_METRICS)
    if options.ci and "accuracy" not in metrics.split(","):
        metrics += ",accuracy"
    jobs = []
    for op in options.ops or SUITE_OPS:
        for mode in options.modes or SUITE_MODES:
            argv = ["--op", op, "--mode", mode, "--metrics", metrics]
            only = options.only or (
                ",".join(default_backends(op, mode, gpu)) if op in BACKENDS else None
            )
            if only:
                argv += ["--only", only]
            if options.input_id is not None:
                argv += ["--input-id", str(options.input_id)]
            if options.num_inputs is not None:
                argv += ["--num-inputs", str(options.num_inputs)]
            if not gpu and not has_flag(passthrough, "--device", "-d"):
                argv += ["--device", "cpu"]
            user_sizes = has_flag(passthrough, "--m", "--n", "--k")
            if not gpu and op in CPU_SHAPES and not user_sizes:
                argv += CPU_SHAPES[op]
            if (
                op == "addmm"
                and addmm_sizes_need_bias_1d
                and not has_flag(passthrough, "--bias-1D-y")
            ):
                if user_sizes:
                    raise ValueError(
                        "--m/--k/--n: this tritonbench's addmm ignores them (and runs its 42 "
                        "default shapes) unless --bias-1D-y is also given, which makes the bias "
                        "[N]: add --bias-1D-y 1, or drop the sizes"
                    )
                if not gpu:
                    argv += BIAS_1D_FLAGS  # for the CPU sizes above
            # NEW tritonbench's default layout (tn) makes b a non-leaf view, and its backward
            # accuracy check then fails every backend, aten included.
            if op == "gemm" and mode in BWD_MODES and not has_flag(passthrough, "--layout"):
                argv += ["--layout", "tt"]
            if (
                op == "addmm"
                and has_tolerance_flags
                and not has_flag(passthrough, "--rtol", "--atol")
            ):
                argv += tolerance_flags(passthrough)
            # A failing backend then leaves an error cell instead of ending the op.
            if not has_flag(passthrough, "--keep-going"):
                argv.append("--keep-going")
            jobs.append(Job(op, mode, (*argv, *passthrough)))
    return jobs


def shard_range(num_inputs: int, shard: tuple[int, int]) -> tuple[int, int]:
    """The contiguous block of inputs shard i of n runs.

    Args:
        num_inputs: how many inputs the op has.
        shard: (i, n).

    Returns:
        (first input id, number of inputs); the number is 0 when the shard gets none.
    """
    index, count = shard
    # Rounded up, so the remainder goes to the first shards: a single input runs in shard 0.
    start = (num_inputs * index + count - 1) // count
    end = (num_inputs * (index + 1) + count - 1) // count
    return start, end - start
