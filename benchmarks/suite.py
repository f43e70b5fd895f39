"""What to run: a job per (op, mode), a tritonbench call per input, the suite's defaults filled in.

Without --op (the plain ``python run_bench.py``) each op runs a few representative shapes, so
that the suite finishes in minutes on one GPU; ``--full`` (or any choice of inputs) runs
tritonbench's own inputs instead. Each input is a call of its own, so that progress can be shown
per input and the calls can be spread over shards and GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks.cli import Options

Shape = tuple[int, int, int]

SUITE_OPS = ("gemm", "addmm")
SUITE_MODES = ("fwd", "bwd")
BWD_MODES = ("bwd", "fwd_bwd")
GPU_METRICS = "accuracy,latency,tflops,speedup"
CPU_METRICS = "accuracy,latency"
CPU_LATENCY_NOTE = "not meaningful (CPU interpreter)"

# (M, N, K) of the standard suite on a GPU: a square the backward's pair kernel takes, a large
# square, and a tall product (gemm: the 1e6-row shapes of NEW tritonbench's default; addmm:
# tritonbench's first default input). 3 shapes x 2 modes x 2 ops = 12 calls.
SUITE_SHAPES: dict[str, tuple[Shape, ...]] = {
    "gemm": ((1024, 1024, 1024), (4096, 4096, 4096), (1000000, 768, 256)),
    "addmm": ((1024, 1024, 1024), (8192, 8192, 8192), (20120, 512, 1536)),
}
# The Triton interpreter runs these in seconds.
CPU_SHAPE: Shape = (64, 48, 32)

# Seconds one call (one input, fwd or bwd) costs each backend on the H200, for the estimate
# --full prints and the remaining time of the progress line (which rescales them by the time
# measured so far). torch.compile's max-autotune: about 40 s per shape and mode (issue 15,
# OLD tritonbench's gemm fwd); the others are rough: a compile (helion), an autotune over a few
# configs (Triton), nothing (aten).
SECONDS_PER_CALL = {"baseline": 1.0, "helion": 5.0, "triton": 8.0, "compiled": 40.0}


# NEW tritonbench checks addmm with torch's default tolerances. Their atol (1e-5) is below the
# fp32 accumulation differences of two correct fp16/bf16 kernels (about 1e-4 on addmm's
# unnormalized inputs), which decide wherever an output cancels to near zero (measured with
# OLD's same check on the H200, 2026-11-29). The suite keeps torch's rtol and gives atol the
# 1e-2 that NEW's gemm uses for these dtypes, where tritonbench has the flags (NEW only).
ADDMM_TOLERANCES = {"fp16": ("1e-3", "1e-2"), "bf16": ("1.6e-2", "1e-2")}


def tolerance_flags(precision: str | None) -> tuple[str, ...]:
    """``--rtol``/``--atol`` for addmm at the run's precision (tritonbench's default fp16)."""
    tolerances = ADDMM_TOLERANCES.get(precision or "fp16")
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

    def kind(self, backend: str) -> str:
        """ "baseline", "helion", "triton" or "compiled": the key of SECONDS_PER_CALL."""
        for kind in ("baseline", "helion", "triton", "compiled"):
            if getattr(self, kind) == backend:
                return kind
        return "triton"  # another backend: tritonbench's own kernels, autotuned


# The helion names are those of helion_ops.tritonbench_plugin's functions; they are spelled out
# so that planning imports no Helion before main() has set TRITON_INTERPRET.
BACKENDS = {
    "gemm": OpBackends("aten_matmul", "helion_matmul_tritonbench", "triton_tutorial_matmul", False),
    "addmm": OpBackends("aten_addmm", "helion_addmm_tritonbench", "triton_addmm", True),
}


@dataclass(frozen=True)
class Call:
    """One tritonbench call: one input of a job."""

    label: str
    argv: tuple[str, ...]


@dataclass(frozen=True)
class Job:
    """An op in a mode: its command line (without input or output flags) and its inputs.

    ``shapes`` are the (M, N, K) to run, one call each; None means tritonbench's own inputs
    (``input_ids``, counted when the run starts).
    """

    op: str
    mode: str
    argv: tuple[str, ...]
    shapes: tuple[Shape, ...] | None = None

    @property
    def name(self) -> str:
        return f"{self.op}_{self.mode}"

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(self.argv[self.argv.index("--only") + 1].split(","))

    def calls(self, input_ids: range | None = None) -> list[Call]:
        """The tritonbench calls of this job.

        Args:
            input_ids: tritonbench's inputs to run, when the job has no shapes of its own.

        Returns:
            One call per shape or input id.
        """
        if self.shapes is not None:
            return [
                Call(f"{m}x{n}x{k}", ("--m", str(m), "--n", str(n), "--k", str(k)))
                for m, n, k in self.shapes
            ]
        assert input_ids is not None
        return [Call(f"input {i}", ("--input-id", str(i), "--num-inputs", "1")) for i in input_ids]

    def seconds_per_call(self) -> float:
        """The estimated seconds of one call, from its backends (SECONDS_PER_CALL)."""
        backends = BACKENDS[self.op]
        return sum(SECONDS_PER_CALL[backends.kind(name)] for name in self.backends)


def default_backends(op: str, mode: str, gpu: bool, full: bool = False) -> list[str]:
    """The suite's backends for an op and mode, baseline first.

    OLD tritonbench's --only is exact, so the baseline is listed too. A backward mode takes
    only backends with a backward: a backend without one aborts the input for all of them.
    torch.compile (max-autotune, about 40 s a shape) only with --full.

    Args:
        op: "gemm" or "addmm".
        mode: a tritonbench mode.
        gpu: False on the CPU, where only aten and helion run (in the interpreter).
        full: whether torch.compile is included.

    Returns:
        Backend names for tritonbench's --only.
    """
    b = BACKENDS[op]
    names = [b.baseline, b.helion]
    if not gpu:
        return names
    if mode not in BWD_MODES or b.triton_has_backward:
        names.append(b.triton)
    return [*names, b.compiled] if full else names


# NEW tritonbench's addmm takes --m/--k/--n only with --bias-1D-y (an [N] bias) and otherwise
# runs its 42 large default shapes: hours in the CPU interpreter, and not what was asked.
BIAS_1D_FLAGS = ("--bias-1D-y", "1")


def job_shapes(options: Options, op: str, gpu: bool) -> tuple[Shape, ...] | None:
    """The shapes a job runs itself, or None for tritonbench's own inputs.

    The command line's --m/--n/--k; else, in the interpreter, one tiny shape; else the suite's
    representative shapes when the command line chose no op and no inputs.
    """
    if options.sizes:
        return (options.sizes,)
    if options.interpreter(gpu):
        return (CPU_SHAPE,)
    chose_inputs = (
        options.full
        or options.shape_set
        or options.input_id is not None
        or options.num_inputs is not None
    )
    if options.ops is None and not chose_inputs:
        return SUITE_SHAPES[op]
    return None


def plan_jobs(
    options: Options,
    gpu: bool,
    has_tolerance_flags: bool = False,
    addmm_sizes_need_bias_1d: bool = False,
    builtin: bool = False,
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
    metrics = options.metrics or (GPU_METRICS if gpu else CPU_METRICS)
    if options.ci and "accuracy" not in metrics.split(","):
        metrics += ",accuracy"
    common = [*_given_flags(options), "--keep-going", *options.passthrough]
    if options.interpreter(gpu) and options.device is None:
        common[:0] = ["--device", "cpu"]
    jobs = []
    for op in options.ops or SUITE_OPS:
        shapes = job_shapes(options, op, gpu)
        for mode in options.modes or SUITE_MODES:
            backends = default_backends(op, mode, gpu and not builtin, options.full)
            only = options.only or ",".join(backends)
            argv = ["--op", op, "--mode", mode, "--metrics", metrics, "--only", only]
            if op == "addmm" and addmm_sizes_need_bias_1d and options.bias_1d is None:
                if options.sizes:
                    raise ValueError(
                        "--m/--k/--n: this tritonbench's addmm ignores them (and runs its 42 "
                        "default shapes) unless --bias-1D-y is also given, which makes the bias "
                        "[N]: add --bias-1D-y 1, or drop the sizes"
                    )
                if shapes is not None:
                    argv += BIAS_1D_FLAGS  # for the sizes chosen here
            # NEW tritonbench's default layout (tn) makes b a non-leaf view, and its backward
            # accuracy check then fails every backend, aten included.
            if op == "gemm" and mode in BWD_MODES and options.layout is None:
                argv += ["--layout", "tt"]
            if op == "addmm" and has_tolerance_flags and options.rtol is options.atol is None:
                argv += tolerance_flags(options.precision)
            jobs.append(Job(op, mode, (*argv, *common), shapes))
    return jobs


def _given_flags(options: Options) -> list[str]:
    """The tritonbench flags the command line gave and the plan read, passed on as given."""
    flags = []
    for flag, value in (
        ("--precision", options.precision),
        ("--layout", options.layout),
        ("--device", options.device),
        ("--bias-1D-y", options.bias_1d),
        ("--rtol", options.rtol),
        ("--atol", options.atol),
        ("--input", options.input_csv),
    ):
        if value is not None:
            flags += [flag, value]
    return flags + [flag for flag in options.shape_set if flag != "--input"]


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
