"""The eager fast path in C++ (``csrc/native.cpp``): built on first use, taught by the Python path.

A Python autograd Function costs host time torch's mm does not, and most of it in the
backward, which autograd runs on its device thread (NOTES 72). ``csrc/native.cpp`` replays a
specialization the Python path has already run: a C++ autograd Function whose forward and
backward launch the compiled Triton kernels through the CUDA driver, with the arguments that
the Python path's launch plans (``helion_ops.plans.LaunchPlan``) laid out.

- The extension is built with ``torch.utils.cpp_extension`` when the first CUDA call arrives
  (or before, at ``begin``: the tritonbench plugin's registration), in a process of its own
  that a background thread starts (25-40 s, once: torch caches the build); calls take the
  Python path until it is loaded. ``ready(t)`` starts it and blocks until then (benchmarks
  call it before timing). ``HELION_OPS_NATIVE=0`` turns it off; a failed build warns once and
  leaves it off.
- After the Python path has run a new key (operands' sizes, strides, dtype, device and 16-byte
  alignment; for fp32, torch's TF32 switch) in a call that compiled nothing,
  ``learned_matmul``/``learned_addmm`` hand the extension that key's forward: the launches the
  call made, as a backward's are recorded (the product; a split-K product's sums, which the
  extension casts; the tiled kernel's copies of its operands, fp32's laid out for their dots
  or fp16/bf16's onto 128-byte lines, then the product on them), or nothing where they are not
  all plans on the call's tensors or on earlier launches' outputs (a last-wave split, addmm's
  split-K, torch's copy of unaligned operands), which keeps the key on the Python path.
- The first backward of each layout of grad_out runs the Python backward (``backward``) with
  its launches recorded; where each gradient is the output of a recorded plan whose operands
  are grad_out, the saved operands or an earlier launch's outputs (the copies; for a
  split-K product, the cast of its fp32 sums), those launches become the key's recipe, which
  later backwards replay (one with split-K not under torch's determinism switch, as the
  Python path).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import triton

from helion_ops import plans

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

module: Any = None  # the loaded extension, once built
started = False
_built = threading.Event()

# Where a kernel parameter comes from and how it is stored (``Source``/``Storage`` in C++).
_TENSOR, _OUTPUT, _SCALAR, _CONSTANT, _DESCRIPTOR = range(5)
_BITS, _FLOAT32, _FLOAT64 = range(3)
_INT_BITS = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64}
_INT_BITS.update({"u1": 1, "u8": 8, "u16": 16, "u32": 32, "u64": 64})
# The kernel parameters csrc/native.cpp passes are laid out as Triton 3.6's launcher lays them
# out (the non-constexpr arguments, then the global and the profile scratch pointers); other
# versions keep their own launcher (the Python path).
_KNOWN_LAYOUT = triton.__version__.startswith("3.6.")


def start(t: object) -> None:
    """Build and load the extension in the background, once, for a call on a CUDA tensor."""
    if started or not (isinstance(t, torch.Tensor) and t.is_cuda):
        return
    begin()


def begin() -> None:
    """``start`` before any call: for tools that will time calls on a GPU (the tritonbench
    plugin's ``register``), so that the build runs while they import, make inputs and
    compile the first kernels."""
    global started
    if started:
        return
    started = True
    if os.environ.get("HELION_OPS_NATIVE", "1") == "0":
        _built.set()
        return
    threading.Thread(target=_build, name="helion_ops native build", daemon=True).start()


def ready(t: object, timeout: float | None = 600) -> bool:
    """``start`` for a call on ``t``, then wait for the build; whether the extension is
    loaded."""
    start(t)
    if started and not _built.wait(timeout):
        warnings.warn("helion_ops: the C++ fast path is still building", stacklevel=2)
    return module is not None


def warm_up_passes(t: object, graphs: bool) -> Iterator[None]:
    """The passes a tool runs before it times calls on ``t`` (the tritonbench plugin, the
    built-in harness): a first that compiles the kernels while the extension may still be
    building, then, with it loaded, one that teaches it the key and one the backward's
    launches, so that what is timed is what a training loop runs. Under CUDA graphs, whose
    captures take the Python path (the extension refuses them), nothing waits for the build."""
    for done in range(3):
        if done == 1 and not graphs:
            ready(t)
        yield


def _build() -> None:
    global module
    try:
        # The compile runs in a process of its own session: a program that ends or is
        # interrupted mid-build must not leave torch's build lock behind (every later build
        # would wait for it forever). Loading the finished build here takes a second.
        subprocess.run(
            [
                sys.executable,
                "-c",
                f"import torch.utils.cpp_extension as e; e.load(**{_EXTENSION!r})",
            ],
            start_new_session=True,
            check=True,
            capture_output=True,
            text=True,
        )
        built = _load()
        built.set_backward(backward)
        module = built
    except Exception as error:  # no compiler, no headers: the Python path serves every call
        detail = getattr(error, "stderr", None) or error
        warnings.warn(f"helion_ops: the C++ fast path did not build ({detail})", stacklevel=1)
    finally:
        _built.set()


# torch.utils.cpp_extension.load's arguments: a build where torch's cache has none of this
# source, then the import.
_EXTENSION = {
    "name": "helion_ops_native",
    "sources": [str(Path(__file__).parent / "csrc" / "native.cpp")],
    "extra_cflags": ["-O2"],
}


def _load() -> Any:
    from torch.utils.cpp_extension import load

    return load(**_EXTENSION)


def reset() -> None:
    """Forget every key (``helion_ops.kernel.reset``)."""
    if module is not None:
        module.reset()


def learned_matmul(
    mat1: torch.Tensor, mat2: torch.Tensor, run: Callable[..., torch.Tensor]
) -> torch.Tensor:
    """``run(mat1, mat2)``, the Python path's product for a key new to the extension, which
    then learns the key from the launches the call made (``_recorded``: a product, a split-K
    product's sums and their cast, or copies of its operands then the product on them),
    where it compiled nothing; a call that compiled leaves the key for the next call to teach."""
    out, launches = _recorded(run, mat1, mat2)
    if launches is not None:
        module.learn_matmul(mat1, mat2, _recipe(launches, (mat1, mat2, None), (out, None)))
    return out


def learned_addmm(
    bias: torch.Tensor,
    mat1: torch.Tensor,
    mat2: torch.Tensor,
    alpha: float,
    beta: float,
    run: Callable[..., torch.Tensor],
) -> torch.Tensor:
    """``learned_matmul`` for addmm (``run(bias, mat1, mat2, alpha, beta)``). The extension
    takes alpha and beta per call; its key holds which of them are 1, as their kernels differ
    (``kernel.scaled_plus_bias``)."""
    out, launches = _recorded(run, bias, mat1, mat2, alpha, beta)
    if launches is not None:
        forward = _recipe(launches, (mat1, mat2, bias), (out, None))
        module.learn_addmm(bias, mat1, mat2, alpha, beta, forward)
    return out


def _recorded(run: Callable[..., Any], *args: Any) -> tuple[Any, list | None]:
    """``run(*args)`` and the launches it made (``plans.recorded``); None for them where it
    compiled a kernel (whose first launch is not a plan's: the next call records again) or
    ran under torch's determinism switch (split-K products then sum their pieces outside a
    kernel, which the extension cannot replay)."""
    from helion_ops import kernel

    if kernel.deterministic_algorithms():
        return run(*args), None
    compiled = len(kernel._compiled)
    with plans.recorded() as launches:
        result = run(*args)
    return result, (launches if len(kernel._compiled) == compiled else None)


# The values an epilogue captures (``kernel.scaled``, ``kernel.scaled_plus_bias``), by name:
# the call's scalar (alpha 0, beta 1) or tensor (the forward's bias, its third).
_CAPTURED = {"alpha": (_SCALAR, 0), "beta": (_SCALAR, 1), "bias_mn": (_TENSOR, 2)}


def launch_of(plan: plans.LaunchPlan, operands: tuple[int, ...], epilogues: tuple) -> Any:
    """The extension's ``Launch`` of ``plan``, or None where it cannot make one.

    ``operands``: for each of the plan's operand tensors, its index among the tensors a
    recipe's launch reads: the call's three (the forward's a, b, bias; the backward's
    grad_out, mat1, mat2), then the outputs of the launches before it (``_recipe``);
    ``epilogues``: the epilogue functions of the plan's call, whose captured values' names
    say where each comes from (``_CAPTURED``)."""
    compiled = plan.compiled or plan._find_compiled()
    direct = plan.direct
    # Outputs of the first operand's kind (plain and pair kernels), or the split-K kernel's
    # zeroed fp32 sums, which the extension then scales and casts as ``_finish_split_k`` does.
    if not _KNOWN_LAYOUT or compiled is None or direct is None:
        return None
    if not (plan.like_first or plan.zeroed):
        return None
    if any(direct.flags):  # a cooperative grid or programmatic dependent launch
        return None
    num_warps, num_ctas, shared = compiled.packed_metadata
    signature = list(compiled.src.signature.values())
    if num_ctas != 1 or direct.align > 256 or len(signature) != len(plan.sources):
        return None
    captured = [name for f in epilogues for name in f.__code__.co_freevars]
    n_args = plan.operands + len(plan.epilogues)
    n_outputs = len(plan.shapes)
    first_descriptor = n_args + len(captured) + n_outputs + len(plan.constants)
    metas = iter(getattr(compiled.metadata, "tensordesc_meta", None) or ())
    params, descriptors = [], []
    for ty, source in zip(signature, plan.sources, strict=True):
        if ty == "constexpr":
            continue
        if ty.startswith("tensordesc"):
            meta = next(metas, None)
            if source < first_descriptor or meta is None:
                return None
            base, first = plan.descriptors[source - first_descriptor]
            descriptor = _descriptor(base, first, meta, operands, n_args + len(captured))
            if descriptor is None:
                return None
            # As Triton's launcher expands it: the map, then its sizes and strides.
            params.append((_DESCRIPTOR, _BITS, len(descriptors)))
            params += [(_CONSTANT, _BITS, size) for size in first.shape]
            params += [(_CONSTANT, _BITS, stride) for stride in first.strides]
            descriptors.append(descriptor)
            continue
        pointer = ty.startswith("*")
        if source < plan.operands:
            param = (_TENSOR, _BITS, operands[source]) if pointer else None
        elif source < n_args:
            param = None  # an epilogue itself
        elif source < n_args + len(captured):
            kind, index = _CAPTURED.get(captured[source - n_args], (None, 0))
            if kind == _TENSOR and pointer:
                param = (_TENSOR, _BITS, index)
            elif kind == _SCALAR and ty in ("fp32", "fp64"):
                param = (_SCALAR, _FLOAT32 if ty == "fp32" else _FLOAT64, index)
            else:
                param = None
        elif source < n_args + len(captured) + n_outputs:
            param = (_OUTPUT, _BITS, source - n_args - len(captured)) if pointer else None
        elif source < first_descriptor:
            bits = _bits(ty, plan.constants[source - n_args - len(captured) - n_outputs])
            param = None if bits is None else (_CONSTANT, _BITS, bits)
        else:
            param = None  # a descriptor where the kernel takes no tensordesc
        if param is None:
            return None
        params.append(param)
    return module.Launch(
        compiled.function,
        plan.grid,
        32 * num_warps,
        shared,
        direct.scratch,
        params,
        descriptors,
        plan.shapes,
        plan.zeroed,
    )


def _descriptor(
    base: int, first: Any, meta: dict, operands: tuple[int, ...], first_output: int
) -> tuple | None:
    """The extension's ``Descriptor`` fields for a plan's tensor descriptor ``first`` whose
    base is the plan's value ``base`` (an operand or an output), encoded as Triton 3.6's
    ``make_tensordesc_arg`` encodes it with the compiled kernel's ``meta``; None where it is
    not one of those."""
    from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST

    if base < len(operands):
        source, index = _TENSOR, operands[base]
    elif first_output <= base:
        source, index = _OUTPUT, base - first_output
    else:
        return None
    if meta.get("fp4_padded") or first.strides[-1] != 1:
        return None
    size = meta["elem_size"]
    return (
        source,
        index,
        TMA_DTYPE_DEVICE_TO_HOST[meta["elem_type"]],
        [int(d) for d in reversed(first.shape)],
        [size * int(s) for s in reversed(first.strides[:-1])],
        [int(b) for b in reversed(meta["block_size"])],
        meta["swizzle"],
        1 if first.padding == "nan" else 0,
    )


def _bits(ty: str, value: object) -> int | None:
    """A constant parameter as the bits of a signed 64-bit integer, or None where its type is
    not an integer or float scalar."""
    if ty in _INT_BITS and isinstance(value, (bool, int)):
        bits = int(value) & ((1 << _INT_BITS[ty]) - 1)
    elif ty == "fp32" and isinstance(value, (int, float)):
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
    elif ty == "fp64" and isinstance(value, (int, float)):
        bits = struct.unpack("<Q", struct.pack("<d", value))[0]
    else:
        return None
    return bits - (1 << 64) if bits >= 1 << 63 else bits


def backward(
    grad_out: torch.Tensor,
    mat1: torch.Tensor | None,
    mat2: torch.Tensor | None,
    need1: bool,
    need2: bool,
    alpha: float,
    column1: bool,
    column2: bool,
    record: bool,
) -> tuple[torch.Tensor | None, torch.Tensor | None, Any]:
    """The gradients of mat1 and mat2 (those needed) through the Python backward, and, where
    ``record``, the recipe that replays its launches: None where they cannot be replayed,
    False where the next backward records again (this one compiled a kernel or ran under
    torch's determinism switch: ``_recorded``)."""
    from helion_ops import autograd, ops

    mm, mm_pair = autograd._backward_products()
    if record and _one_address(mat1, mat2):
        # ``a @ a.T``: the backward's launches read views of both operands (``mat2.T`` is
        # a's geometry too), which no address tells apart. Recorded on a copy of mat2 (its
        # strides kept, and on 16 bytes as mat2 is, as the key holds), each operand has an
        # address of its own, and the replays read each saved tensor where this call's
        # launches read it. (The forward's recording cannot copy: autograd must save the
        # caller's tensors. It tells them apart by identity instead, ``_recipe``.)
        mat2 = mat2.clone()  # (preserve_format: a dense tensor keeps its strides)
    args = (mat1, mat2, (need1, need2), grad_out, alpha, mm, mm_pair, (column1, column2))
    if not record:
        return (*ops._operand_grads(*args), None)
    grads, launches = _recorded(ops._operand_grads, *args)
    if launches is None:
        return (*grads, False)
    return (*grads, _recipe(launches, (grad_out, mat1, mat2), grads))


def _one_address(mat1: torch.Tensor | None, mat2: torch.Tensor | None) -> bool:
    """Whether both operands are saved and start at one address on 16 bytes, mat2 row- or
    column-major (an address off 16 bytes keeps the Python backward: a copy would be on 16
    bytes, another key's kernels)."""
    if mat1 is None or mat2 is None or not (mat2.is_contiguous() or mat2.T.is_contiguous()):
        return False
    return mat1.data_ptr() == mat2.data_ptr() and mat1.data_ptr() % 16 == 0


def _recipe(
    launches: list[tuple[plans.LaunchPlan, tuple, list]],
    tensors: tuple[torch.Tensor | None, ...],
    grads: tuple[torch.Tensor | None, ...],
) -> Any:
    """The recorded launches as the extension's ``Recipe``, or None where they are not all
    plans on views of ``tensors`` (the call's three) or of earlier launches' outputs whose
    outputs are the ``grads`` (a backward's two, or a forward's product and None)."""
    # Where each readable tensor is in the extension's list: the call's, then each launch's
    # outputs in order, found by address. (The recording holds every output: none is freed
    # and its memory reused while it is made.) Call tensors that share an address (``a @
    # a.T``) are found only as themselves, each a distinct object: the next calls of the key
    # may pass distinct memory, which the recipe must read where this call's launches did.
    addresses = [t.data_ptr() if t is not None else None for t in tensors]
    index, itself = {}, {}
    for i, (t, address) in enumerate(zip(tensors, addresses, strict=True)):
        if address is not None and addresses.count(address) == 1:
            index[address] = i
        elif address is not None and sum(u is t for u in tensors) == 1:
            itself[id(t)] = i
    made, outputs, readable = [], {}, len(tensors)
    for plan, args, outs in launches:
        operands = []
        for t in args[: plan.operands]:
            found = itself.get(id(t), index.get(t.data_ptr()))
            if found is None:
                return None  # a copy by torch (staged fp16/bf16 operands) or another tensor
            operands.append(found)
        epilogues = tuple(args[i] for i in plan.epilogues)
        launch = launch_of(plan, tuple(operands), epilogues)
        if launch is None:
            return None
        for j, out in enumerate(outs):
            outputs[out.data_ptr()] = (len(made), j, out)
            index[out.data_ptr()] = readable + j
        readable += len(outs)
        made.append(launch)
    specs = []
    for grad in grads:
        if grad is None:
            specs.append((-1, 0, False))
            continue
        found = outputs.get(grad.data_ptr())
        if found is None:
            return None
        launch, j, out = found
        if grad.shape == out.shape and grad.stride() == out.stride():
            specs.append((launch, j, False))
        elif grad.shape == out.T.shape and grad.stride() == out.T.stride():
            specs.append((launch, j, True))
        else:
            return None
    return module.Recipe(made, specs)
