"""The command line: our own flags, the tritonbench flags we plan with, and the rest passed on."""

from __future__ import annotations

import argparse
import datetime
from dataclasses import dataclass
from pathlib import Path

from benchmarks.tritonbench_runner import INSTALL_COMMAND

MODES = ("fwd", "bwd", "fwd_bwd", "fwd_no_grad")

# tritonbench flags that would break an in-process run of one op and mode, or that this
# command sets itself.
REJECTED_FLAGS = {
    "--isolate": "it runs ops in subprocesses, which lose the helion registration",
    "--output": "the CSV goes to --output-dir",
    "--output-json": "the JSON goes to --output-dir",
    "--op-collection": "give the ops with --op",
}


@dataclass(frozen=True)
class Options:
    """What to run: None in a field means "the suite's default"."""

    ops: tuple[str, ...] | None
    modes: tuple[str, ...] | None
    metrics: str | None
    only: str | None
    input_id: int | None
    num_inputs: int | None
    output_dir: Path
    ci: bool
    shard: tuple[int, int] | None
    passthrough: tuple[str, ...]


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


def build_parser() -> argparse.ArgumentParser:
    """The parser of our flags and of the tritonbench flags the plan depends on."""
    parser = argparse.ArgumentParser(
        prog="helion-ops-bench",
        allow_abbrev=False,
        # Raw, so that the install command in the epilog is printed unbroken.
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Benchmark helion_ops under tritonbench, one in-process tritonbench call per op and\n"
            "mode. With no --op, runs the standard suite (gemm and addmm, fwd and bwd).\n"
            "Unknown flags (--precision, --m/--n/--k, --layout, ...) go to tritonbench as given."
        ),
        epilog=f"tritonbench is installed from git:\n  {INSTALL_COMMAND}",
    )
    ours = parser.add_argument_group("helion-ops-bench")
    ours.add_argument(
        "--output-dir",
        type=Path,
        help="where the CSV, JSON and PNG files go (default: bench_results/<UTC timestamp>)",
    )
    ours.add_argument(
        "--ci", action="store_true", help="exit 1 unless every helion accuracy cell is 1"
    )
    ours.add_argument(
        "--shard",
        type=parse_shard,
        help="i/n: run the i-th of n contiguous blocks of each op's inputs",
    )
    ours.add_argument(
        "--suite", action="store_true", help="the standard suite (implied without --op)"
    )
    tb = parser.add_argument_group("tritonbench")
    tb.add_argument("--op", type=_comma_list, help="operators, comma-separated")
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
    return parser


def parse_args(argv: list[str]) -> Options:
    """Split a command line into our options and tritonbench's remaining flags.

    Args:
        argv: the arguments, without the program name.

    Returns:
        The options; exits with status 2 and a message on a bad command line.
    """
    parser = build_parser()
    args, passthrough = parser.parse_known_args(argv)
    for flag in passthrough:
        name = flag.split("=", 1)[0]
        if name in REJECTED_FLAGS:
            parser.error(f"{name} is not supported here: {REJECTED_FLAGS[name]}")
    if args.suite and args.op:
        parser.error("--suite runs gemm and addmm: drop --op or --suite")
    if args.shard and (args.input_id is not None or args.num_inputs is not None):
        parser.error("--shard chooses --input-id and --num-inputs itself: give one or the other")
    modes = _modes(parser, args)
    output_dir = args.output_dir or Path("bench_results") / datetime.datetime.now(
        datetime.timezone.utc
    ).strftime("%Y%m%dT%H%M%SZ")
    return Options(
        ops=args.op,
        modes=modes,
        metrics=args.metrics,
        only=args.only,
        input_id=args.input_id,
        num_inputs=args.num_inputs,
        output_dir=output_dir,
        ci=args.ci,
        shard=args.shard,
        passthrough=tuple(passthrough),
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


def has_flag(argv: tuple[str, ...] | list[str], *names: str) -> bool:
    """Whether argv holds any of the flags, as ``--flag value`` or ``--flag=value``.

    Args:
        argv: command-line arguments.
        names: flag names such as "--m".

    Returns:
        True if one of them is present.
    """
    return any(arg.split("=", 1)[0] in names for arg in argv)


def flag_value(argv: tuple[str, ...] | list[str], name: str, default: str) -> str:
    """The value of a flag given as ``--flag value`` or ``--flag=value`` (the last one wins).

    Args:
        argv: command-line arguments.
        name: the flag, such as "--precision".
        default: the value when the flag is absent.

    Returns:
        The flag's value.
    """
    value = default
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value
