"""Calling tritonbench in-process, through whichever entry point the installed version has.

In-process, so the helion backends registered by ``helion_ops.tritonbench_plugin.register``
are there: a tritonbench subprocess would not have them.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
import io
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.get_tritonbench import default_dest

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

INSTALL_COMMAND = "python -m benchmarks.get_tritonbench"


def tritonbench_import_error() -> str | None:
    """None when tritonbench imports (from the environment, else from the clone of
    ``benchmarks.get_tritonbench``, which this puts on ``sys.path``), else a message saying
    how to get it."""
    try:
        import tritonbench
    except ImportError as err:
        clone = default_dest()
        if not (clone / "tritonbench").is_dir():
            return f"tritonbench is not importable ({err}). Get it with:\n  {INSTALL_COMMAND}"
        sys.path.insert(0, str(clone))
        try:
            import tritonbench  # noqa: F401
        except ImportError as err_in_clone:
            return f"tritonbench at {clone} does not import ({err_in_clone})"
    return None


@functools.cache
def entry_point() -> Callable[[list[str]], object]:
    """tritonbench's run-a-command-line function, found by what this install offers.

    Returns:
        NEW's ``tritonbench.utils.run_utils.tritonbench_run`` when it takes an argv list,
        else OLD's ``run`` from ``run.py`` at the root of the tritonbench clone.
    """
    try:
        from tritonbench.utils.run_utils import tritonbench_run
    except ImportError:
        tritonbench_run = None
    if tritonbench_run is not None and _takes_argv_list(tritonbench_run):
        return tritonbench_run

    import tritonbench

    run_py = Path(tritonbench.__file__).resolve().parent.parent / "run.py"
    if not run_py.is_file():
        raise RuntimeError(
            f"tritonbench at {run_py.parent} has neither run_utils.tritonbench_run(argv) "
            f"nor {run_py.name}"
        )
    spec = importlib.util.spec_from_file_location("_tritonbench_run_py", run_py)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.run


def _takes_argv_list(fn: Callable[..., object]) -> bool:
    # Some versions have tritonbench_run(args: Namespace, extra_args) instead.
    try:
        inspect.signature(fn).bind(["--op", "gemm"])
    except TypeError:
        return False
    return True


@contextlib.contextmanager
def _as_sys_argv(argv: Sequence[str]) -> Iterator[None]:
    # tritonbench re-parses sys.argv while building its parser; ours (--ci, --shard) would
    # be taken for its own flags there and abort the run.
    saved = sys.argv
    sys.argv = ["tritonbench", *argv]
    try:
        yield
    finally:
        sys.argv = saved


def run_tritonbench(argv: Sequence[str]) -> None:
    """Run one tritonbench command line in this process.

    Args:
        argv: tritonbench arguments for one op, e.g. ["--op", "gemm", "--output", "x.csv"].
    """
    run = entry_point()
    with _as_sys_argv(argv):
        run(list(argv))


@functools.cache
def has_tolerance_flags() -> bool:
    """Whether tritonbench's own parser takes --rtol and --atol (NEW does, OLD does not)."""
    from tritonbench.utils.parser import get_parser

    argv = ["--op", "gemm", "--rtol", "0.1", "--atol", "0.01"]
    with _as_sys_argv(argv):
        _, unknown = get_parser().parse_known_args(argv)
    return not unknown


@functools.cache
def addmm_sizes_need_bias_1d() -> bool:
    """Whether tritonbench's addmm takes ``--m/--k/--n`` only with ``--bias-1D-y``.

    NEW tritonbench's addmm (2026) runs its 42 default shapes, ignoring the sizes, unless
    ``--bias-1D-y`` is also given (which makes the bias [N]); OLD's has no such flag and always
    takes the sizes. Detected by the flag in the operator's own parser; False where addmm does
    not import (it does not run either).
    """
    try:
        from tritonbench.operators.addmm.data_io import parse_args
    except Exception:
        return False
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            parse_args(["--bias-1D-y", "1"])
        except SystemExit:
            return False
    return True


def count_inputs(argv: Sequence[str]) -> int:
    """How many inputs tritonbench would run for a command line (its shapes flags included).

    Args:
        argv: tritonbench arguments for one op.

    Returns:
        The number of example inputs the operator yields.
    """
    from tritonbench.operators import load_opbench_by_name
    from tritonbench.utils.parser import get_parser

    with _as_sys_argv(argv):
        args, extra_args = get_parser().parse_known_args(list(argv))
        operator = load_opbench_by_name(args.op)(tb_args=args, extra_args=extra_args)
    return sum(1 for _ in operator.get_input_iter())


def unknown_names(op: str, only: str | None, metrics: str | None) -> str | None:
    """What of ``--only`` and ``--metrics``, as the user gave them, tritonbench's operator
    does not know.

    tritonbench drops an unknown metric as an empty column and fails an unknown backend only
    mid-run; this names them before anything runs. Read from tritonbench's registries, filled
    when ``helion_ops.tritonbench_plugin.register`` imported the operator; no check where a
    version lacks them. (The suite's own defaults are not checked: a backend a later
    tritonbench renames gets an error cell, as before, and the rest still runs.)

    Args:
        op: the operator.
        only: the user's ``--only`` (None: not given, or given as prefixes with
            ``--only-match-mode``).
        metrics: the user's ``--metrics``, or None.

    Returns:
        A message naming the flag, the unknown names and the known ones; None if all are known.
    """
    try:
        from tritonbench.utils import triton_op
    except ImportError:
        return None
    checks = [("--only", only, "backend", getattr(triton_op, "REGISTERED_BENCHMARKS", {}).get(op))]
    builtin = getattr(triton_op, "BUILTIN_METRICS", None)
    if builtin is not None:
        custom = getattr(triton_op, "REGISTERED_METRICS", {}).get(op, ())
        checks.append(("--metrics", metrics, "metric", {*builtin, *custom}))
    for flag, given, kind, names in checks:
        if given is None or names is None:
            continue
        unknown = [name for name in given.split(",") if name.strip() not in names]
        if unknown:
            return (
                f"{flag} {','.join(unknown)}: tritonbench's {op} has no such {kind}; "
                f"it has {', '.join(sorted(names))}"
            )
    return None
