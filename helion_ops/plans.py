"""Launch plans: a specialization's launch laid out in advance, so that a call costs little
more host time than the launch itself.

Helion's generated host function re-derives on every call what is fixed for a specialization
(the grid, the SM count, block sizes) and launches through Triton's JIT entry point, which binds
every argument again. ``plan_for`` runs the host function once with a recording launcher and
keeps where each launch argument comes from: an operand, a value an epilogue captures, an
output, a constant, or a tensor descriptor of an operand or output (Helion's
``host_tensor_descriptors``). A ``LaunchPlan`` then allocates the outputs and launches the
compiled kernel with this call's values, through Triton's C launch function where
``direct_launch`` finds it. ``DirectLauncher`` makes the first launch (which compiles) and
remembers the compiled kernel. The kernels, their specialization keys and the fast path
that reaches a plan are ``helion_ops.kernel``'s.
"""

from __future__ import annotations

import contextlib
import copy
import operator
import threading
import types
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from helion.runtime import default_launcher
from triton import knobs
from triton.compiler import CompiledKernel
from triton.knobs import HookChain
from triton.runtime import _allocation, driver
from triton.tools.tensor_descriptor import TensorDescriptor

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

# While helion_ops.native watches a Python backward (``recorded``): per thread id, a list to
# which each plan call in that thread appends (plan, args, outputs). Autograd runs a backward
# that spans several GPUs on one thread per GPU, so several threads may record at once.
recordings: dict[int, list[tuple[Any, ...]]] = {}


@contextlib.contextmanager
def recorded() -> Iterator[list[tuple[Any, ...]]]:
    """Within: every plan call of this thread appends (plan, args, outputs) to the list
    yielded; other threads' calls go to their own recordings, or to none. A recording
    nested in another (of the same thread) takes its calls until it ends."""
    thread, launches = threading.get_ident(), []
    outer = recordings.get(thread)
    recordings[thread] = launches
    try:
        yield launches
    finally:
        if outer is None:
            del recordings[thread]
        else:
            recordings[thread] = outer


class DirectLauncher:
    """A launcher for Helion's generated host code that skips Triton's per-call binding.

    The first launch of each Triton kernel goes through Helion's default launcher (Triton's
    JIT entry point), which compiles and returns the compiled kernel; later launches call that
    compiled kernel directly. One instance serves one specialization (``kernel._run``), whose
    argument types, alignments and constants never change, so Triton would pick the same
    compiled kernel every time. Where Triton returns none (the CPU interpreter), every
    launch keeps going through the default launcher.
    """

    def __init__(self) -> None:
        self.compiled: dict[Any, CompiledKernel] = {}

    def __call__(self, triton_kernel: Any, grid: tuple[int, ...], *args: Any, **options: Any):
        compiled = self.compiled.get(triton_kernel)
        if compiled is not None:
            # The compiled kernel's runner reads exactly three grid dimensions.
            return compiled[(*grid, 1, 1)](*args)
        result = default_launcher(triton_kernel, grid, *args, **options)
        if isinstance(result, CompiledKernel):
            self.compiled[triton_kernel] = result
        return result


class LaunchPlan:
    """One specialization's launch with its arguments laid out in advance.

    Built on the first call of a specialization from one dry run of Helion's host function
    (``plan_for``); afterwards a call allocates the outputs and launches the compiled Triton
    kernel directly, through its C launch function where ``direct_launch`` finds it: no host
    function, no grid arithmetic, no SM-count query, no binding in Triton. Each launch
    argument comes from a fixed place: an operand, a value an epilogue captures (alpha, beta,
    the bias: read from this call's epilogue, never the first call's), an output, a
    constant of the specialization (an SM count, a block size), or a tensor descriptor
    (Triton's ``TensorDescriptor``, as Helion's ``host_tensor_descriptors`` configs pass)
    of this call's operand or output: the first call's with this call's tensor as its base
    (the specialization fixes every size and stride, and the 16-byte alignment).
    """

    def __init__(
        self,
        launcher: DirectLauncher,
        triton_kernel: Any,
        grid: tuple[int, ...],
        options: dict[str, Any],
        operands: int,
        epilogues: tuple[int, ...],
        outputs: tuple[tuple[tuple[int, ...], torch.dtype, torch.device], ...],
        zeroed: bool,
        constants: tuple[Any, ...],
        sources: tuple[int, ...],
        returns_tuple: bool,
        first: torch.Tensor,
        descriptors: tuple[tuple[int, Any], ...] = (),
    ) -> None:
        self.launcher, self.triton_kernel = launcher, triton_kernel
        self.grid, self.options = grid, options
        self.epilogues, self.outputs, self.constants = epilogues, outputs, constants
        self.zeroed = zeroed
        self.allocate = torch.zeros if zeroed else torch.empty
        # Outputs of the first operand's dtype and device (every plain and pair product): the
        # operand's new_empty, which skips torch.empty's keyword parsing, with the sizes as
        # separate ints (every output here is 2-D; a tuple costs the argument parser about 1
        # microsecond more).
        self.like_first = not zeroed and all(
            out[1:] == (first.dtype, first.device) for out in outputs
        )
        self.shapes = tuple(shape for shape, _, _ in outputs)
        self.sources = sources  # where each launch argument comes from (helion_ops.native)
        # (where its base comes from, the first call's descriptor), one per descriptor source
        self.descriptors = descriptors
        self.pick = operator.itemgetter(*sources)
        self.returns_tuple = returns_tuple
        self.device = first.device.index
        self.operands = operands
        self.compiled: CompiledKernel | None = None
        self.direct: DirectLaunch | None = None

    def __call__(self, *args: Any) -> Any:
        compiled = self.compiled or self._find_compiled()
        if compiled is not None and self.current_device() != self.device:
            # Triton launches on the current device; torch runs an op on its tensors'.
            with torch.cuda.device(self.device):
                return self(*args)
        if self.like_first:
            first = args[0]
            outs = [first.new_empty(*shape) for shape in self.shapes]
        else:
            allocate = self.allocate
            outs = [
                allocate(shape, dtype=dtype, device=device) for shape, dtype, device in self.outputs
            ]
        captured = [c.cell_contents for i in self.epilogues for c in args[i].__closure__ or ()]
        descriptors = ()
        if self.descriptors:
            tensors = (*args, *captured, *outs)
            descriptors = [_described(first, tensors[i]) for i, first in self.descriptors]
        if compiled is None or not no_launch_hooks():
            # Triton's JIT entry point (the CPU interpreter, which compiles nothing) or its
            # own runner (launch hooks set, e.g. a profiler).
            launch_args = self.pick((*args, *captured, *outs, *self.constants, *descriptors))
            self.launcher(self.triton_kernel, self.grid, *launch_args, **self.options)
        elif (direct := self.direct) is not None:
            # Operands and outputs by address (a checked CUDA tensor's), which the C launcher
            # takes as is; a tensor costs it a method call and a driver query.
            n, address = self.operands, torch.Tensor.data_ptr
            values = (
                *map(address, args[:n]), *args[n:], *captured, *map(address, outs),
                *self.constants, *descriptors,
            )  # fmt: skip
            grid, stream = self.grid, self.current_stream(self.device)
            scratch = None
            if direct.scratch:  # as Triton's runner: a new allocation each launch
                scratch = _allocation._allocator.get()(direct.scratch, direct.align, stream)
            direct.launch(
                grid[0], grid[1], grid[2], stream, compiled.function, *direct.flags, scratch,
                *direct.tail, *self.pick(values),
            )  # fmt: skip
        else:
            # What Triton's runner (CompiledKernel.__getitem__) calls, the same in Triton 3.6
            # and 3.9, less its launch metadata, which only launch hooks read.
            grid, stream = self.grid, self.current_stream(self.device)
            compiled.run(
                grid[0], grid[1], grid[2], stream, compiled.function, compiled.packed_metadata,
                None, None, None,
                *self.pick((*args, *captured, *outs, *self.constants, *descriptors)),
            )  # fmt: skip
        if recordings:  # one check on the hot path when nothing records
            launches = recordings.get(threading.get_ident())
            if launches is not None:
                launches.append((self, args, outs))
        if self.returns_tuple:
            return tuple(outs)
        return outs[0] if outs else None

    def _find_compiled(self) -> CompiledKernel | None:
        """The kernel Triton compiled on the first launch; None in the interpreter."""
        compiled = self.launcher.compiled.get(self.triton_kernel)
        if compiled is not None:
            active = driver.active
            self.current_device = active.get_current_device
            self.current_stream = active.get_current_stream
            self.direct = direct_launch(compiled, self.grid)
            self.compiled = compiled
        return compiled


def _described(first: Any, tensor: torch.Tensor) -> Any:
    """The descriptor ``first`` (a plan's first call's) with ``tensor`` as its base: a copy
    of its fields, without the checks its constructor repeats (the specialization holds
    them)."""
    descriptor = object.__new__(type(first))
    descriptor.__dict__.update(first.__dict__, base=tensor)
    return descriptor


def record_result(sums: torch.Tensor, result: torch.Tensor) -> None:
    """Where this thread's launches are recorded and the last one made ``sums`` (the split-K
    kernel's fp32 partial sums), record ``result``, their scaled cast, as its output instead:
    the product the caller receives."""
    launches = recordings.get(threading.get_ident())
    if not launches:
        return
    plan, args, outs = launches[-1]
    if len(outs) == 1 and outs[0] is sums:
        launches[-1] = (plan, args, [result])


class DirectLaunch(NamedTuple):
    """Triton's C launch function behind a compiled kernel's runner, and what its runner
    passes it besides the grid, the stream, the function and the kernel's arguments."""

    launch: Callable[..., None]
    flags: tuple[bool, bool]  # cooperative grid, programmatic dependent launch
    scratch: int  # bytes of global scratch memory, from Triton's allocator, each launch
    align: int
    tail: tuple[Any, ...]  # no profile scratch; the packed metadata; no hooks' arguments


_MARK = object()


def direct_launch(compiled: CompiledKernel, grid: tuple[int, ...]) -> DirectLaunch | None:
    """The C launch function behind ``compiled.run``, Triton's ``CudaLauncher``, whose Python
    ``__call__`` computes the scratch memory's size and forwards the call (2-3 microseconds of
    Python a launch on an H200's host). Only where a recorded call shows the layout that
    ``LaunchPlan`` passes (Triton 3.6's) and no profile scratch; other runners keep being
    called as they are."""
    run = compiled.run
    launch = getattr(run, "launch", None)
    if launch is None or getattr(run, "profile_scratch_size", 1):
        return None
    tail = (None, compiled.packed_metadata, None, None, None)
    calls: list[tuple[Any, ...]] = []
    try:  # a runner of another layout may lack any of these or refuse the call
        flags = (run.launch_cooperative_grid, run.launch_pdl)
        scratch = grid[0] * grid[1] * grid[2] * run.num_ctas * run.global_scratch_size
        align = run.global_scratch_align
        recorder = copy.copy(run)  # the runner itself stays as it is for other threads
        recorder.launch = lambda *args: calls.append(args)
        recorder(*grid, 0, compiled.function, compiled.packed_metadata, None, None, None, _MARK)
    except Exception:
        return None
    if len(calls) != 1:
        return None
    (call,) = calls
    if call[:7] != (*grid, 0, compiled.function, *flags) or call[8:] != (*tail, _MARK):
        return None
    if (call[7] is None) != (scratch == 0):  # the scratch memory Triton allocated, or none
        return None
    return DirectLaunch(launch, flags, scratch, align, tail)


class _Slot:
    """Stands in for a value an epilogue captures during a plan's dry run."""

    def __init__(self, index: int) -> None:
        self.index = index


class _Recorder:
    """A launcher that records the launches of Helion's host function and runs none."""

    def __init__(self) -> None:
        self.launches: list[tuple[Any, tuple[int, ...], tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, triton_kernel: Any, grid: tuple[int, ...], *args: Any, **options: Any):
        self.launches.append((triton_kernel, tuple(grid), args, options))


def plan_for(
    host_function: Callable[..., Any],
    launcher: DirectLauncher,
    args: tuple[Any, ...],
    zeroed: bool = False,
) -> LaunchPlan | None:
    """The launch plan of ``host_function`` on ``args``, or None where it does more than one
    launch, or passes the launch a tensor besides the operands, the tensors epilogues capture
    and the outputs it returns, or an object holding one other than a tensor descriptor of
    one of those (then every call runs the host function). ``zeroed``: the host function
    zeroes its outputs (a kernel that adds into them), so the plan's allocations do too."""
    epilogues = tuple(i for i, a in enumerate(args) if not isinstance(a, torch.Tensor))
    slots, dry_args = [], list(args)
    for i in epilogues:
        cells = args[i].__closure__ or ()
        stand_ins = [_Slot(len(args) + len(slots) + j) for j in range(len(cells))]
        slots += stand_ins
        dry_args[i] = types.FunctionType(
            args[i].__code__,
            args[i].__globals__,
            closure=tuple(types.CellType(s) for s in stand_ins),
        )
    recorder = _Recorder()
    try:
        result = host_function(*dry_args, _launcher=recorder)
    except Exception:  # a host function that reads a captured value itself
        return None
    # A tuple of outputs, one output, or none (a kernel that writes into its arguments).
    outs = list(result) if isinstance(result, tuple) else [] if result is None else [result]
    if len(recorder.launches) != 1 or not all(
        isinstance(o, torch.Tensor) and o.is_contiguous() for o in outs
    ):
        return None
    triton_kernel, grid, launch_args, options = recorder.launches[0]
    if len(grid) > 3:
        return None
    places = {id(t): i for i, t in enumerate(args)}
    places.update({id(o): len(args) + len(slots) + i for i, o in enumerate(outs)})
    constants: list[Any] = []
    descriptors: list[tuple[int, Any]] = []
    sources: list[int | None] = []
    for arg in launch_args:
        if isinstance(arg, _Slot):
            sources.append(arg.index)
        elif id(arg) in places:
            sources.append(places[id(arg)])
        elif _is_descriptor(arg) and id(arg.base) in places:
            sources.append(None)  # numbered below, after the constants
            descriptors.append((places[id(arg.base)], arg))
        elif _holds_a_tensor(arg):
            # A tensor the host function made besides its outputs, or an object built on one
            # that is not a descriptor of an operand or output: as a constant, later calls
            # would read the first call's memory.
            return None
        else:
            sources.append(len(args) + len(slots) + len(outs) + len(constants))
            constants.append(arg)
    if len(sources) < 2:  # itemgetter of one index returns the item, not a tuple
        return None
    first_descriptor = len(args) + len(slots) + len(outs) + len(constants)
    numbered = iter(range(first_descriptor, first_descriptor + len(descriptors)))
    sources = [next(numbered) if i is None else i for i in sources]
    return LaunchPlan(
        launcher,
        triton_kernel,
        (*grid, 1, 1)[:3],
        options,
        # Every kernel's tensors come first in its arguments, its epilogues after them.
        epilogues[0] if epilogues else len(args),
        epilogues,
        tuple((tuple(o.shape), o.dtype, o.device) for o in outs),
        zeroed,
        tuple(constants),
        tuple(sources),
        isinstance(result, tuple),
        args[0],
        tuple(descriptors),
    )


def _is_descriptor(arg: Any) -> bool:
    """Whether a launch argument is Triton's ``TensorDescriptor``."""
    return type(arg) is TensorDescriptor


def _holds_a_tensor(arg: Any) -> bool:
    """Whether a launch argument is a tensor or an object with one in its fields (Triton's
    ``TensorDescriptor``, whose ``base`` is the tensor it describes)."""
    if isinstance(arg, torch.Tensor):
        return True
    fields = getattr(arg, "__dict__", None) or {}
    return any(isinstance(value, torch.Tensor) for value in fields.values())


def no_launch_hooks() -> bool:
    """Whether Triton has no launch hook to call (a profiler such as proton adds some)."""
    runtime = knobs.runtime
    return not _hooks(runtime.launch_enter_hook) and not _hooks(runtime.launch_exit_hook)


def _hooks(hook: Any) -> bool:
    return hook is not None and (not isinstance(hook, HookChain) or bool(hook.calls))
