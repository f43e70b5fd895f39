"""The command line, parsed once: our flags, the tritonbench flags the plan reads, the rest.

Every flag the plan depends on becomes a typed field of ``Options`` here, and every check that
needs no tritonbench runs here too, so a bad command line fails in a second, before tritonbench
is imported. Flags we do not know go to tritonbench as given (``Options.passthrough``).
"""

from __future__ import annotations

import argparse
import datetime
from dataclasses import dataclass
from pathlib import Path

from benchmarks.tritonbench_runner import INSTALL_COMMAND

MODES = ("fwd", "bwd", "fwd_bwd", "fwd_no_grad")
# The ops with a helion backend: any other tritonbench op would only run tritonbench's own.
OPS = ("gemm", "addmm")

# tritonbench flags that would break an in-process run of one op and mode, or that this
# command sets itself.
REJECTED_FLAGS = {
    "--isolate": "it runs ops in subprocesses, which lose the helion registration",
    "--output-json": "the JSON goes to --output-dir",
    "--op-collection": "give the ops with --op",
}

# tritonbench flags that replace the op's shapes with a whole set of them: fine on a GPU, hours
# in the CPU interpreter.
SHAPE_SET_FLAGS = ("--input", "--llama", "--splitk", "--non-square", "--large-k-shapes")

# The largest size the CPU interpreter runs in seconds: a 512^3 fp16 forward and backward took
# 4.7 s on 2 cores (2026-11-30), and its time grows with M*N*K.
INTERPRETER_MAX_SIZE = 512


class UsageError(ValueError):
    """A command line that cannot run as given; the message names the flag."""


@dataclass(frozen=True)
class Options:
    """What to run: None in a field means "the suite's default" (or tritonbench's)."""

    ops: tuple[str, ...] | None
    modes: tuple[str, ...] | None
    metrics: str | None
    only: str | None
    input_id: int | None
    num_inputs: int | None
    output_dir: Path
    output: Path | None
    ci: bool
    shard: tuple[int, int] | None
    full: bool
    compare: Path | None
    gpus: str | None
    sizes: tuple[int, int, int] | None
    precision: str | None
    layout: str | None
    device: str | None
    bias_1d: str | None
    rtol: str | None
    atol: str | None
    input_csv: str | None
    shape_set: tuple[str, ...]
    passthrough: tuple[str, ...]

    def interpreter(self, gpu: bool) -> bool:
        """Whether the kernels run in Triton's CPU interpreter (no GPU, or --device cpu)."""
        return not gpu or self.device == "cpu"


def parse_shard(text: str) -> tuple[int, int]:
    """Parse ``i/n`` (shard i of n, counted from 0).

    Args:
        text: the --shard value, e.g. "0/2".

    Returns:
        (i, n) with 0 <= i < n.
    """
    index, sep, count = text.partition("/")
    if not (sep and index.isdigit() and count.isdigit()):
        raise argparse.ArgumentTypeError(f"--shard must look like i/n (e.g. 0/2), got {text!r}")
    shard = int(index), int(count)
    if shard[0] >= shard[1]:
        raise argparse.ArgumentTypeError(f"--shard i/n needs 0 <= i < n, got {text!r}")
    return shard


def _comma_list(text: str) -> tuple[str, ...]:
    items = tuple(item for item in text.split(",") if item)
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list, got nothing")
    return items


def positive(text: str) -> int:
    """A count of at least 1 (an argparse type)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive count, got {text!r}")
    return int(text)


def _gpus(text: str) -> str:
    if text != "all" and not (text.isdigit() and int(text) > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number or 'all', got {text!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    """The parser of our flags and of the tritonbench flags the plan depends on."""
    parser = argparse.ArgumentParser(
        prog="helion-ops-bench",
        allow_abbrev=False,
        # Raw, so that the install command in the epilog is printed unbroken.
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Benchmark helion_ops under tritonbench, one in-process tritonbench call per op,\n"
            "mode and input. With no --op, runs the standard suite (gemm and addmm, fwd and\n"
            "bwd) on a few representative shapes; --full runs every default shape of tritonbench\n"
            "with torch.compile too. Unknown flags go to tritonbench as given (without\n"
            "tritonbench, the built-in harness refuses those it does not know)."
        ),
        epilog=f"tritonbench (a pinned clone, which run_bench then uses):\n  {INSTALL_COMMAND}",
    )
    ours = parser.add_argument_group("helion-ops-bench")
    ours.add_argument(
        "--output-dir",
        type=Path,
        help="where the CSV, JSON, PNG and log files go (default: bench_results/<UTC timestamp>)",
    )
    ours.add_argument(
        "--ci",
        action="store_true",
        help="exit 1 unless every helion accuracy cell is 1 (and, with --compare, no regression)",
    )
    ours.add_argument(
        "--shard",
        type=parse_shard,
        help="i/n: run the i-th of n contiguous blocks of each op's inputs (of those "
        "--input-id and --num-inputs choose)",
    )
    ours.add_argument(
        "--suite", action="store_true", help="the standard suite (implied without --op)"
    )
    ours.add_argument(
        "--full",
        action="store_true",
        help="every default input of tritonbench and torch.compile too (prints its estimated time)",
    )
    ours.add_argument(
        "--compare",
        type=Path,
        metavar="DIR",
        help="an earlier run's output directory: print each latency's ratio to it",
    )
    ours.add_argument(
        "--gpus",
        type=_gpus,
        metavar="N|all",
        help="run the jobs on N local GPUs in parallel, one process per GPU",
    )
    tb = parser.add_argument_group("tritonbench (read by the plan, then passed on)")
    tb.add_argument("--op", type=_comma_list, help=f"operators, comma-separated: {', '.join(OPS)}")
    tb.add_argument("--mode", type=_comma_list, help=f"modes, comma-separated: {', '.join(MODES)}")
    tb.add_argument("--bwd", action="store_true", help="same as --mode bwd")
    tb.add_argument("--fwd-bwd", action="store_true", help="same as --mode fwd_bwd")
    tb.add_argument("--fwd-no-grad", action="store_true", help="same as --mode fwd_no_grad")
    tb.add_argument(
        "--metrics",
        help="default: accuracy,latency,tflops,speedup (accuracy,latency without a GPU)",
    )
    tb.add_argument("--only", help="backends (default: the suite's for each op and mode)")
    tb.add_argument("--input-id", type=int)
    tb.add_argument("--num-inputs", type=int)
    tb.add_argument("--output", type=Path, metavar="PATH", help="tritonbench's CSV, here too")
    for size in ("--m", "--n", "--k"):
        tb.add_argument(size, type=int, help="one shape: give --m, --n and --k together")
    tb.add_argument(
        "--precision",
        type=precision_name,
        help="fp16 (default), bf16, fp32 or tf32 (fp32 dots in TF32)",
    )
    tb.add_argument("--layout")
    tb.add_argument("--device", "-d")
    tb.add_argument("--bias-1D-y", dest="bias_1d")
    tb.add_argument("--rtol")
    tb.add_argument("--atol")
    tb.add_argument("--input", help="gemm: a CSV of shapes")
    # Always passed (a failing backend then leaves an error cell); parsed so it is not doubled.
    tb.add_argument("--keep-going", action="store_true", help=argparse.SUPPRESS)
    for flag in SHAPE_SET_FLAGS[1:]:
        tb.add_argument(flag, action="store_true")
    return parser


def parse_args(argv: list[str]) -> Options:
    """Split a command line into our options and tritonbench's remaining flags.

    Args:
        argv: the arguments, without the program name.

    Returns:
        The options; exits with status 2 and a message naming the flag on a bad command line.
    """
    parser = build_parser()
    args, passthrough = parser.parse_known_args(argv)
    for flag in passthrough:
        name = flag.split("=", 1)[0]
        if name in REJECTED_FLAGS:
            parser.error(f"{name} is not supported here: {REJECTED_FLAGS[name]}")
    try:
        _check(args)
    except UsageError as err:
        parser.error(str(err))
    modes = _modes(parser, args)
    output_dir = args.output_dir or Path("bench_results") / datetime.datetime.now(
        datetime.timezone.utc
    ).strftime("%Y%m%dT%H%M%SZ")
    sizes = (args.m, args.n, args.k) if args.m is not None else None
    shape_set = tuple(flag for flag in SHAPE_SET_FLAGS if getattr(args, flag[2:].replace("-", "_")))
    return Options(
        ops=args.op,
        modes=modes,
        metrics=args.metrics,
        only=args.only,
        input_id=args.input_id,
        num_inputs=args.num_inputs,
        output_dir=output_dir,
        output=args.output,
        ci=args.ci,
        shard=args.shard,
        full=args.full,
        compare=args.compare,
        gpus=args.gpus,
        sizes=sizes,
        precision=args.precision,
        layout=args.layout,
        device=args.device,
        bias_1d=args.bias_1d,
        rtol=args.rtol,
        atol=args.atol,
        input_csv=args.input,
        shape_set=shape_set,
        passthrough=tuple(passthrough),
    )


# What --precision may name: the dtypes helion_ops runs (the built-in harness's too), in
# tritonbench's spelling (tf32: fp32 with torch's TF32 switch on); torch's is taken too.
# (helion_ops.dtype_names has the same map, but importing helion_ops here would import Triton
# before the interpreter is chosen.)
PRECISIONS = ("fp16", "bf16", "fp32", "tf32")
_TORCH_SPELLING = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


def precision_name(text: str) -> str:
    """``bfloat16`` -> ``bf16``; any other text as it is (checked in ``_check``)."""
    return _TORCH_SPELLING.get(text, text)


def _check(args: argparse.Namespace) -> None:
    """The checks that need nothing but the command line."""
    unknown = [op for op in args.op or () if op not in OPS]
    if unknown:
        raise UsageError(
            f"--op: unknown {', '.join(unknown)}; choose from {', '.join(OPS)} "
            "(the ops with a helion backend)"
        )
    if args.suite and args.op:
        raise UsageError("--suite runs gemm and addmm: drop --op or --suite")
    given = [f"--{size}" for size in "mnk" if getattr(args, size) is not None]
    for flag in given:
        value = getattr(args, flag[2:])
        if value <= 0:
            raise UsageError(f"{flag} must be a positive size, got {value}")
    if given and len(given) < 3:
        missing = [f"--{size}" for size in "mnk" if f"--{size}" not in given]
        raise UsageError(
            f"{' '.join(given)} without {' and '.join(missing)}: tritonbench takes a shape only "
            "from all three together and would run its default shapes instead"
        )
    if args.num_inputs is not None and args.num_inputs <= 0:
        raise UsageError(f"--num-inputs must be positive, got {args.num_inputs}")
    if args.input_id is not None and args.input_id < 0:
        raise UsageError(f"--input-id must be 0 or more, got {args.input_id}")
    if args.gpus and args.shard:
        raise UsageError("--gpus gives each GPU a --shard itself: give one or the other")
    if args.gpus and args.output:
        raise UsageError("--output with --gpus: the CSVs are in --output-dir, one per GPU")
    if args.full and (given or args.input):
        raise UsageError("--full runs tritonbench's default shapes: drop --full or the shapes")
    if args.output is not None and args.output.suffix != ".csv":
        raise UsageError(f"--output must name a .csv file, got {str(args.output)!r}")
    if args.input is not None and not Path(args.input).is_file():
        raise UsageError(f"--input {args.input}: no such file")
    if args.precision is not None and args.precision not in PRECISIONS:
        raise UsageError(
            f"--precision: unknown {args.precision}; choose from {', '.join(PRECISIONS)} "
            "(the dtypes helion_ops runs)"
        )
    if args.layout is not None and (len(args.layout) != 2 or set(args.layout) - {"t", "n"}):
        raise UsageError(f"--layout: two letters of t and n (such as tn), got {args.layout!r}")
    for flag in ("rtol", "atol"):
        value = getattr(args, flag)
        try:
            float(value if value is not None else 0)
        except ValueError:
            raise UsageError(f"--{flag} must be a number, got {value!r}") from None


def interpreter_bf16(where: str) -> str:
    """Why --precision bf16 is refused where the kernels run in Triton's CPU interpreter."""
    return (
        f"--precision bf16: {where} the kernels run in Triton's CPU interpreter, whose bf16 "
        "dot is wrong (helion's accuracy would read 0): give fp16 or fp32"
    )


def check_runnable(options: Options, gpu: bool) -> None:
    """Refuse what would run the CPU interpreter on full-size shapes (hours at full CPU).

    Args:
        options: the parsed command line.
        gpu: whether a CUDA GPU is present.

    Raises:
        UsageError: naming the flag that would do it.
    """
    if (options.device or "").startswith("cuda") and not gpu:
        raise UsageError("--device cuda: this machine has no CUDA GPU (drop --device)")
    if not options.interpreter(gpu):
        return
    where = "without a GPU" if not gpu else "with --device cpu"
    if options.precision == "bf16":
        raise UsageError(interpreter_bf16(where))
    for flag, value in (("--input-id", options.input_id), ("--num-inputs", options.num_inputs)):
        if value is not None and options.sizes is None:
            raise UsageError(
                f"{flag}: {where} the run takes one tiny shape, not the op's inputs: "
                "give small --m/--n/--k instead"
            )
    if options.input_csv:
        raise UsageError(
            f"--input: {where} the kernels run in Triton's CPU interpreter on one tiny shape, "
            "not a CSV's: give small --m/--n/--k instead"
        )
    if options.shape_set:
        raise UsageError(
            f"{options.shape_set[0]}: a set of full-size shapes; {where} the kernels run in "
            "Triton's CPU interpreter: give small --m/--n/--k instead"
        )
    if options.full:
        raise UsageError(f"--full: tritonbench's default shapes take hours {where}")
    for flag, value in zip(("--m", "--n", "--k"), options.sizes or (), strict=False):
        if value > INTERPRETER_MAX_SIZE:
            raise UsageError(
                f"{flag} {value}: {where} the kernels run in Triton's CPU interpreter; give "
                f"sizes up to {INTERPRETER_MAX_SIZE}"
            )


def _modes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, ...] | None:
    modes = list(args.mode or ())
    for mode in ("bwd", "fwd_bwd", "fwd_no_grad"):  # --bwd, --fwd-bwd, --fwd-no-grad
        if getattr(args, mode) and mode not in modes:
            modes.append(mode)
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown:
        parser.error(f"--mode: unknown {unknown}; choose from {', '.join(MODES)}")
    return tuple(modes) or None
