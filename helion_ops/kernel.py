"""The Helion matmul kernel, its split-K variant, and the launchers that reuse them (with the
tiled copy that lays fp32 operands out as their dots read fast: ``tiled_padded_copy``).

``matmul_kernel`` multiplies ``x[m, k] @ y[k, n]`` with an fp32 accumulator and hands every
output tile to an ``epilogue(acc, (tile_m, tile_n))`` before the store. addmm's
``alpha * acc + beta * bias`` and the backward's ``alpha * acc`` are epilogues, so the scaling
and the bias cost no extra pass over the output. Scalars and tensors an epilogue captures
are lifted to kernel arguments: one compiled kernel serves every alpha and beta but 1, whose
epilogues leave their multiplies out (``scaled``): a specialization, and a fast-path key, of
their own. Products with few output tiles and a long K, serving batches' of few tiles and a
long K (``long_k.long_k_batch``), and thin ones (``narrow_tiles.thin``) whose K loads element by
element, go to ``split_k_kernel`` instead (``wants_split_k``, where
its config cuts K: ``configs.splits_k``), whose fp32 partial sums need one pass to scale, add
the bias and cast (under ``torch.use_deterministic_algorithms(True)``,
``split_k_pieces_kernel``: each piece's sums stored apart, then summed by torch.sum);
other products of a few rows run narrow tiles (``narrow_tiles.few_rows``).
The backward's two products, where both are small (``wants_pair``) or the wave model predicts
it faster (``configs.model_pair``), run in one launch of ``pair_kernel``: the same tile loop
twice, each over its own range of programs. fp16/bf16 products whose b rows lie on 16 bytes
but not 32 run ``transposed_kernel`` where ``configs.transposed_pays``: the same product as
``(y.T @ x.T).T``, the same epilogues and outputs.

Configs come from ``helion_ops.configs`` through Helion's ``autotuner_fn`` hook: the first call
of a new (shape, strides, dtype) compiles one config and never searches unless asked. Each such
compile is logged at INFO on the ``helion_ops`` logger: the kernel (which says the route:
plain, transposed, split-K, split-K in pieces, pair or last-wave split), its tensors, and the
config it runs.

Host time: Helion's own fast dispatch does not cover callable arguments, so every call with an
epilogue would re-derive its specialization key (``bind``, about 100 microseconds). The
launchers key each specialization by what Helion and Triton specialize on (the kernel, the
epilogue's code, and each tensor's dtype, device, sizes, strides and 16-byte alignment) and
keep a launch plan for it (``helion_ops.plans``), or, where a plan cannot describe the host
function, the host function itself. For plain and pair launches, each launcher also keeps its
own look-up from its operands to that plan (the fast path: one key per call, which for fp32
holds torch's TF32 switch). Split-K products keep the split-K kernel's plan the same way
(``_fast_split``), and the launcher casts its sums. ``helion_ops.native`` records the plans a
call launches and hands them to its C++ path.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import warnings
from typing import TYPE_CHECKING, Any

import helion
import helion.language as hl
import torch
from helion.autotuner import IntegerFragment, PowerOfTwoFragment
from helion.runtime import set_triton_allocator
from helion.runtime.settings import RefMode
from triton import set_allocator
from triton.runtime import _allocation
from triton.runtime.errors import OutOfResources

from helion_ops import configs, native, staging
from helion_ops.candidates import SMALL_OUTPUT
from helion_ops.configs import (
    last_wave_split,
    model_pair,
    operands_key,
    select_config,
    sm_count,
    splits_k,
    tiles_of_128,
    transposed_pays,
    tuned_pair,
)
from helion_ops.loads import k_masks_vectorize
from helion_ops.long_k import FAST_DTYPES, long_k_product
from helion_ops.narrow_tiles import (
    narrow,
    narrow_tiles_pay,
    thin,
)
from helion_ops.plans import DirectLauncher, LaunchPlan, plan_for, record_result
from helion_ops.staging import (
    fp32_copies,
    lined_columns,
    lined_copies,
    relaid,
    splits_over_k_as_it_is,
    staged,
)
from helion_ops.table import product_mnk

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from helion.runtime.kernel import BoundKernel

    Epilogue = Callable[[torch.Tensor, tuple[torch.Tensor, ...]], torch.Tensor]


def _matmul(
    x: torch.Tensor,
    y: torch.Tensor,
    epilogue: Epilogue = lambda acc, tile: acc,
) -> torch.Tensor:
    m, k = x.size()
    _, n = y.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = epilogue(acc, (tile_m, tile_n))
    return out


def _matmul_transposed(
    x: torch.Tensor,
    y: torch.Tensor,
    epilogue: Epilogue = lambda acc, tile: acc,
) -> torch.Tensor:
    # _matmul's product computed as out.T = y.T @ x.T: y's tiles are the dot's first operand,
    # and each program's tile of out.T is transposed back before the epilogue and the store
    # (see configs.transposed_pays for where this pays).
    m, k = x.size()
    _, n = y.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_n, tile_m in hl.tile([n, m]):
        acc = hl.zeros([tile_n, tile_m], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, y[tile_k, tile_n].T, x[tile_m, tile_k].T)
        out[tile_m, tile_n] = epilogue(acc.T, (tile_m, tile_n))
    return out


# choose_config reads this: the transposed kernel's config is that of y.T @ x.T.
_matmul_transposed.transposed = True


def _matmul_split_k(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.size()
    _, n = y.size()
    out = torch.zeros([m, n], dtype=torch.float32, device=x.device)
    # K in at most split_k pieces of whole K steps of 64 (``model.split_k_block``), the last
    # no longer than the others, whatever K is.
    split_k = hl.register_tunable("split_k", IntegerFragment(1, 256, 16))
    k_block = helion.cdiv(helion.cdiv(k, split_k), 64) * 64
    for tile_m, tile_n, outer_k in hl.tile([m, n, k], block_size=[None, None, k_block]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for inner_k in hl.tile(outer_k.begin, outer_k.end):
            acc = torch.addmm(acc, x[tile_m, inner_k], y[inner_k, tile_n])
        hl.atomic_add(out, [tile_m, tile_n], acc)
    return out


def _matmul_split_k_pieces(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # _matmul_split_k's pieces, each stored apart in fp32 (no atomics): the caller sums them
    # in a fixed order, for the same bits every run.
    m, k = x.size()
    _, n = y.size()
    split_k = hl.register_tunable("split_k", IntegerFragment(1, 256, 16))
    k_block = helion.cdiv(helion.cdiv(k, split_k), 64) * 64
    sums = torch.empty([helion.cdiv(k, k_block), m, n], dtype=torch.float32, device=x.device)
    for tile_m, tile_n, outer_k in hl.tile([m, n, k], block_size=[None, None, k_block]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for inner_k in hl.tile(outer_k.begin, outer_k.end):
            acc = torch.addmm(acc, x[tile_m, inner_k], y[inner_k, tile_n])
        sums[outer_k.id, tile_m, tile_n] = acc
    return sums


def _matmul_pair(
    x1: torch.Tensor,
    y1: torch.Tensor,
    x2: torch.Tensor,
    y2: torch.Tensor,
    epilogue1: Epilogue,
    epilogue2: Epilogue,
) -> tuple[torch.Tensor, torch.Tensor]:
    # _matmul's loop for each product (Helion inlines no helper that holds a tile loop): one
    # launch, whose first programs take the tiles of x1 @ y1 and the rest those of x2 @ y2.
    # The second product loads y before x. Triton (3.6 to 3.9) lets the two loops' pipeline
    # buffers share shared memory only where the loops' loads, in order, differ in tile
    # shape; with every operand column-major (the backward of tritonbench's 'nn') they did
    # not, and the pair asked for both products' buffers at once (NOTES 111).
    m1, k1 = x1.size()
    _, n1 = y1.size()
    m2, k2 = x2.size()
    _, n2 = y2.size()
    out1 = torch.empty([m1, n1], dtype=x1.dtype, device=x1.device)
    out2 = torch.empty([m2, n2], dtype=x2.dtype, device=x2.device)
    for tile_m, tile_n in hl.tile([m1, n1]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k1):
            acc = torch.addmm(acc, x1[tile_m, tile_k], y1[tile_k, tile_n])
        out1[tile_m, tile_n] = epilogue1(acc, (tile_m, tile_n))
    for tile_m, tile_n in hl.tile([m2, n2]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k2):
            y2_tile = y2[tile_k, tile_n]
            acc = torch.addmm(acc, x2[tile_m, tile_k], y2_tile)
        out2[tile_m, tile_n] = epilogue2(acc, (tile_m, tile_n))
    return out1, out2


def _matmul_last_wave(
    x_full: torch.Tensor,
    x_tail: torch.Tensor,
    y: torch.Tensor,
    out_full: torch.Tensor,
    partial: torch.Tensor,
    epilogue: Epilogue,
) -> None:
    # The rows of x whose tiles fill whole waves of the SMs (x_full) run _matmul's loop into
    # out_full; the tiles of the other rows (x_tail, less than a wave) are cut in K, as in
    # _matmul_split_k, so that they fill the SMs in one more round, and their fp32 partial
    # sums are added into partial. One launch: the tail's programs follow the full waves'.
    # The tail's K loop runs hl.dot, not torch.addmm: Helion masks torch.addmm's operands at
    # the loop's end (outer_k.end), and masked loads fall back from tensor descriptors to
    # pointers. Its pieces end on whole K blocks (``configs.last_wave_config``), so no load
    # needs that mask; the descriptors' bounds zero what lies past the tensors' ends.
    m_full, k = x_full.size()
    _, n = y.size()
    m_tail = x_tail.size(0)
    split_k = hl.register_tunable("split_k", PowerOfTwoFragment(1, 256, 4))
    k_block = helion.next_power_of_2(helion.cdiv(k, split_k))
    for tile_m, tile_n in hl.tile([m_full, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x_full[tile_m, tile_k], y[tile_k, tile_n])
        out_full[tile_m, tile_n] = epilogue(acc, (tile_m, tile_n))
    for tile_m, tile_n, outer_k in hl.tile([m_tail, n, k], block_size=[None, None, k_block]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for inner_k in hl.tile(outer_k.begin, outer_k.end):
            acc = hl.dot(x_tail[tile_m, inner_k], y[inner_k, tile_n], acc=acc)
        hl.atomic_add(partial, [tile_m, tile_n], acc)


def _padded_copy(src: torch.Tensor) -> torch.Tensor:
    """``staging.padded_copy`` in tiles: each read along ``src``'s fast dimension and written
    along the copy's rows (Triton stages a transposed tile through shared memory)."""
    rows, cols = src.size()
    out = torch.empty(
        [rows, lined_columns(cols, src.element_size())], dtype=src.dtype, device=src.device
    )
    for tile_r, tile_c in hl.tile([rows, cols]):
        out[tile_r, tile_c] = src[tile_r, tile_c]
    return out


def _make_kernel(
    body: Callable[..., torch.Tensor], dot_precision: str, **settings: Any
) -> helion.Kernel:
    return helion.kernel(
        body,
        static_shapes=True,
        dot_precision=dot_precision,
        autotuner_fn=select_config,
        **settings,
    )


# fp32 inputs follow torch's TF32 switch (torch.backends.cuda.matmul.allow_tf32), like
# torch.mm does; fp16 and bf16 are unaffected by it.
matmul_kernel = _make_kernel(_matmul, "ieee")
matmul_kernel_tf32 = _make_kernel(_matmul, "tf32")
# fp16 and bf16 products whose b rows lie on 16 but not 32 bytes (configs.transposed_pays).
transposed_kernel = _make_kernel(_matmul_transposed, "ieee")
# A product with few output tiles and a long K (the backward's a.T @ grad_out when M is
# large) leaves most SMs idle in one pass over K: this variant splits K across programs and
# adds the partial tiles into an fp32 output with atomics (summation order, hence the last
# bits, vary from run to run).
split_k_kernel = _make_kernel(_matmul_split_k, "ieee")
split_k_kernel_tf32 = _make_kernel(_matmul_split_k, "tf32")
# The same split where the bits must not vary (torch.use_deterministic_algorithms(True)): each
# piece's fp32 sums stored apart, then summed by torch.sum (a fixed order), no atomics.
split_k_pieces_kernel = _make_kernel(_matmul_split_k_pieces, "ieee")
split_k_pieces_kernel_tf32 = _make_kernel(_matmul_split_k_pieces, "tf32")
# Two small products in one launch (the backward's grad_out @ b.T and a.T @ grad_out): each
# alone fills half the SMs or less, so together they take about the time of one.
pair_kernel = _make_kernel(_matmul_pair, "ieee")
pair_kernel_tf32 = _make_kernel(_matmul_pair, "tf32")
# A product whose last wave of tiles would leave SMs idle (fp16 and bf16, where the wave model
# predicts a gain: ``configs.last_wave_split``): that wave split over K in the same launch.
last_wave_kernel = _make_kernel(_matmul_last_wave, "ieee")
# fp32 operands relaid for their dots (``staging.fp32_copies``): torch's copy moved 0.97 TB/s
# transposing 4096x4096 fp32 on an H100, this kernel 2.8 TB/s (call 354). One config for
# every shape: a copy has no reduction to tune.
padded_copy_kernel = helion.kernel(
    _padded_copy, static_shapes=True, config=helion.Config(block_sizes=[64, 64], num_warps=4)
)
# Helion indexes with 32-bit offsets unless an argument has 2**31 elements or more; an output
# the kernel allocates is not among its arguments, and Helion refuses offsets past 2**31 into
# it (an LM head's logits: 32768 tokens x 128256). Each kernel's twin with 64-bit offsets
# takes such specializations (``_compile_and_run``).
WIDE = {
    k: _make_kernel(k.fn, k.settings.dot_precision, index_dtype=torch.int64)
    for k in (
        matmul_kernel,
        matmul_kernel_tf32,
        transposed_kernel,
        split_k_kernel,
        split_k_kernel_tf32,
        split_k_pieces_kernel,
        split_k_pieces_kernel_tf32,
        pair_kernel,
        pair_kernel_tf32,
        last_wave_kernel,
    )
}
WIDE[padded_copy_kernel] = helion.kernel(
    _padded_copy,
    static_shapes=True,
    config=padded_copy_kernel.configs[0],
    index_dtype=torch.int64,
)
KERNELS = (*WIDE, *WIDE.values())
# Kernels whose host function zeroes its output (the split-K kernel adds into it): a launch
# plan allocates theirs with torch.zeros.
ZEROED_OUTPUTS = frozenset(k for k in KERNELS if k.fn is _matmul_split_k)


_compiled: dict[tuple[Any, ...], Callable[..., Any]] = {}

# Whether this context has had Triton's scratch allocator set (see ``_run``). The allocator is
# a ContextVar, so a flag of the same kind follows it exactly; Helion's setter re-imports
# Triton's module on every call (about 6 microseconds).
_allocator_set = contextvars.ContextVar("helion_ops_allocator_set", default=False)
_CURRENT_CUDA = torch.device("cuda")


def _cuda_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    """Triton's scratch allocator (global memory for the tensor descriptors a kernel builds,
    one allocation per launch) for launches on the current CUDA device, as every launch here
    is. Helion's asks Triton for the active target on every launch, which queries the current
    device and its properties."""
    return torch.empty(size, dtype=torch.int8, device=_CURRENT_CUDA)


def _set_scratch_allocator() -> None:
    """This context's scratch allocator: ``_cuda_scratch`` on a GPU, Helion's otherwise (the
    CPU interpreter); one set by the user stays, as Helion's setter leaves it."""
    if not torch.cuda.is_available():
        set_triton_allocator()
        return
    current = _allocation._allocator
    if isinstance(current, contextvars.ContextVar):  # (a plain global before Triton 3.4)
        current = current.get()
    if isinstance(current, _allocation.NullAllocator):
        set_allocator(_cuda_scratch)


# The eager fast path: operands seen before go straight to their specialization's plan, one
# look-up keyed by what decides every branch of the launchers (sizes, strides, 16-byte
# alignment, dtype, device, whether the scales are 1: ``scaled``, whether fp32 runs TF32 dots:
# ``tf32_dots``), where the product runs the plain or pair kernel (split-K and last-wave
# products do more than one launch). Filled by ``_run``; one dict per
# launcher, as their keys differ. A key also holds everything the public argument checks read
# of the tensors (``helion_ops.checks``: dimensions, dtypes, devices, sizes), and entries are
# made only for valid operands, so a hit skips those checks.
_fast_mm: dict[tuple[Any, ...], LaunchPlan] = {}
_fast_addmm: dict[tuple[Any, ...], LaunchPlan] = {}
_fast_pair: dict[tuple[Any, ...], LaunchPlan | None] = {}  # None: two launches
# Eager calls of pairs whose _fast_pair entry is None: their own decision, which counts the
# host time that one launch fewer saves (``configs.model_pair(..., eager=True)``).
_fast_pair_eager: dict[tuple[Any, ...], LaunchPlan | None] = {}
# Plain launches of products that split their last wave under a CUDA graph capture only
# (``configs.LastWaveSplit.eager`` False), read after a miss in _fast_mm or _fast_addmm when
# no capture is under way (launch_mm's and launch_addmm's keys differ in length).
_fast_eager: dict[tuple[Any, ...], LaunchPlan] = {}
_UNSEEN = object()
# Split-K products that split in every call: the split-K kernel's plan, read
# after a miss in _fast_mm or _fast_addmm (by their keys) when torch's determinism switch is
# off; the launcher then finishes the fp32 sums (``_split_k_result``).
_fast_split: dict[tuple[Any, ...], LaunchPlan] = {}
# Products that split only under a CUDA graph capture whose split an eager call has compiled.
_splits_compiled: set[tuple[Any, ...]] = set()
# Keys (of any launcher: their lengths differ) whose operands run from copies (``_relaid``:
# fp32 ones laid out as their dots read fast, fp16/bf16 ones onto 128-byte lines; the key
# decides): the dimension each operand is copied along, or () where none is. The copies' own
# keys then take the fast path.
_fast_relaid: dict[tuple[Any, ...], tuple[int | None, ...]] = {}
# The copies' plans, by the copied view's sizes, strides, dtype, device and 16-byte alignment.
_fast_copy: dict[tuple[Any, ...], LaunchPlan] = {}


def reset() -> None:
    """Forget every compiled specialization (after changing a kernel's settings) and the
    decisions cached per operands' key (``configs.forget_decisions``,
    ``staging.forget_decisions``), which ``benchmarks.rule_ab`` retakes with a rule off."""
    _compiled.clear()
    _fast_mm.clear()
    _fast_addmm.clear()
    _fast_pair.clear()
    _fast_pair_eager.clear()
    _fast_eager.clear()
    _fast_split.clear()
    _splits_compiled.clear()
    _fast_relaid.clear()
    _fast_copy.clear()
    native.reset()
    configs.forget_decisions()
    staging.forget_decisions()
    for kernel in KERNELS:
        kernel.reset()


def specialization_key(
    kernel: helion.Kernel, args: tuple[Any, ...], captured: tuple[torch.Tensor, ...] = ()
) -> tuple[Any, ...]:
    """What Helion and Triton specialize a call on: the kernel, each epilogue's code, and
    each tensor's dtype, device, sizes, strides and 16-byte alignment."""
    return (
        kernel,
        *[
            (t.dtype, t.device, t.shape, t.stride(), t.data_ptr() % 16)
            if isinstance(t, torch.Tensor)
            else t.__code__
            for t in (*args, *captured)
        ],
    )


def _run(
    kernel: helion.Kernel,
    args: tuple[Any, ...],
    captured: tuple[torch.Tensor, ...] = (),
    fast: tuple[dict[tuple[Any, ...], LaunchPlan], tuple[Any, ...]] | None = None,
) -> Any:
    """``kernel(*args)`` through the launch plan (or compiled function) of its specialization.

    ``args``: the operands and epilogues; ``captured``: the tensors the epilogues capture;
    ``fast``: a fast-path dict and the caller's key in it, given the specialization's plan.
    """
    if kernel.settings.ref_mode is not RefMode.OFF:
        return kernel(*args)
    first = args[0]  # every kernel's first argument is an operand
    if first.is_cuda and first.get_device() != torch.cuda.current_device():
        # Helion's host function and Triton launch on the current device (as the plans do).
        with torch.cuda.device(first.device):
            return _run(kernel, args, captured, fast)
    key = specialization_key(kernel, args, captured)
    # Kernels with tensor descriptors need Triton's scratch allocator, a thread-local setting
    # that Helion's generated module sets once, in the thread that first compiled it: a
    # kernel compiled in autograd's backward thread would fail in the caller's thread. (The
    # fast paths run only where this thread has it.)
    if not _allocator_set.get():
        _set_scratch_allocator()
        _allocator_set.set(True)
    compiled = _compiled.get(key)
    if compiled is None:
        out = _compile_and_run(kernel, args, key, captured)
    else:
        out = compiled(*args)
    if fast is not None and isinstance(_compiled[key], LaunchPlan):
        plans, fast_key = fast
        plans[fast_key] = _compiled[key]
    return out


def _compile_and_run(
    kernel: helion.Kernel,
    args: tuple[Any, ...],
    key: tuple[Any, ...],
    captured: tuple[torch.Tensor, ...] = (),
) -> torch.Tensor:
    """Compile the chosen config for a new specialization, run it once and keep its plan
    (``captured``: the tensors its epilogue captures, which the log names).

    A config must never make a call fail: where the chosen one does not compile, or Triton
    finds on the first launch that it needs more shared memory than the GPU has (an epilogue
    or operand layouts it was not measured with), the next of ``_fallbacks`` that runs is
    used, with a warning.
    """
    bound = kernel.bind(args)
    chosen = None
    try:
        chosen = ran = bound.autotune(args, force=False)  # which compiles it, too
        host_function, launcher, out = _first_run(bound, chosen, args)
    except helion.exc.IndexOffsetOutOfRangeForInt32:
        return _compile_and_run(WIDE[kernel], args, key, captured)
    except (helion.exc.BaseError, OutOfResources) as error:
        for ran in _fallbacks(bound, chosen):
            try:
                host_function, launcher, out = _first_run(bound, ran, args)
            except (helion.exc.BaseError, OutOfResources):
                continue
            break
        else:
            raise
        warnings.warn(
            f"helion_ops: the config chosen for {kernel.name} on {_tensors_of(args)} "
            f"does not run ({error}); running {dict(ran.config)}",
            stacklevel=4,
        )
    bias = f", bias {_tensors_of(captured)}" if captured else ""
    logger.info("%s on %s%s: %s", kernel.name, _tensors_of(args), bias, dict(ran.config))
    zeroed = kernel in ZEROED_OUTPUTS
    _compiled[key] = plan_for(host_function, launcher, args, zeroed) or functools.partial(
        host_function, _launcher=launcher
    )
    return out


def _tensors_of(args: tuple[Any, ...]) -> str:
    """A kernel's tensor arguments as the log names them: dtype, sizes and strides."""
    return ", ".join(
        f"{str(a.dtype).removeprefix('torch.')}{list(a.shape)} strides {list(a.stride())}"
        for a in args
        if isinstance(a, torch.Tensor)
    )


def _first_run(
    bound: BoundKernel, config: helion.Config, args: tuple[Any, ...]
) -> tuple[Callable[..., Any], DirectLauncher, Any]:
    host_function = bound.compile_config(config)
    launcher = DirectLauncher()
    return host_function, launcher, host_function(*args, _launcher=launcher)


def _fallbacks(bound: BoundKernel, chosen: helion.Config | None) -> Iterator[helion.Config]:
    """Where ``chosen`` does not run: its tiles in fewer pipeline stages (most of the shared
    memory it asks for), down to 2; then its tiles halved along their longer side, from its
    depth down to 2; then Helion's conservative reference config, which always fits (at once
    where the chosen config did not even compile: None). Not Helion's default: on a GPU that
    can be a heuristic's seed as large as the chosen config (NOTES 109). Where a pair once
    asked for both products' pipelines at once (360568 bytes of 232448 in 3 stages, more than
    fits in 2), the 16x16 reference tiles ran 7.7-19x slower than the halved ones (H200,
    2026-12-03: NOTES 110)."""
    if chosen is not None:
        depth = chosen.config.get("num_stages", 1)
        yield from _at_depths(chosen, range(depth - 1, 1, -1))
        halved = _halved_tiles(chosen)
        if halved is not None:
            yield from _at_depths(halved, range(depth, 1, -1))
    yield bound.config_spec.autotune_reference_config()


def _at_depths(config: helion.Config, depths: range) -> Iterator[helion.Config]:
    """``config`` in each of ``depths`` pipeline stages."""
    for stages in depths:
        yield helion.Config(**{**config.config, "num_stages": stages})


def _halved_tiles(config: helion.Config) -> helion.Config | None:
    """``config`` with each product's output tile (the first two of its three block sizes)
    halved along its longer side; None where a tile's longer side is 16 already, or where the
    block sizes are not whole triples."""
    sizes = list(config.config.get("block_sizes", ()))
    if not sizes or len(sizes) % 3:
        return None
    for first in range(0, len(sizes), 3):
        longer = first + int(sizes[first + 1] > sizes[first])
        if sizes[longer] <= 16:
            return None
        sizes[longer] //= 2
    return helion.Config(**{**config.config, "block_sizes": sizes})


def _kernel_for(
    dtype: torch.dtype, split_k: bool = False, pair: bool = False, pieces: bool = False
) -> helion.Kernel:
    tf32 = tf32_dots(dtype)
    if split_k and pieces:
        return split_k_pieces_kernel_tf32 if tf32 else split_k_pieces_kernel
    if split_k:
        return split_k_kernel_tf32 if tf32 else split_k_kernel
    if pair:
        return pair_kernel_tf32 if tf32 else pair_kernel
    return matmul_kernel_tf32 if tf32 else matmul_kernel


def tf32_dots(dtype: torch.dtype) -> bool:
    """Whether products of ``dtype`` run TF32 dots: fp32 under torch's TF32 switch
    (``torch.backends.cuda.matmul.allow_tf32``), as torch.mm does. Their kernels and
    operand layouts differ (``staging.fp32_copies``), so the fast-path keys hold it."""
    return dtype is torch.float32 and torch.backends.cuda.matmul.allow_tf32


def wants_split_k(m: int, n: int, k: int, dtype: torch.dtype) -> bool:
    """Whether an ``m x n x k`` product of ``dtype`` is one for the split-K kernel: a long-K
    product (``long_k_product``), or, in fp16 and bf16, a thin one (``narrow_tiles.thin``; fp32's
    split-K config, ``configs.fp32_split``, was never measured on those) whose K is not a whole
    number of 16 bytes or whose narrow tiles do not pay (``narrow_tiles.narrow_tiles_pay``).
    ``launch_addmm`` reads the operands: it splits a long-K product where K's masks load in
    vectors (``k_masks_vectorize``), a thin one where they do not (as here wherever an
    operand is contiguous along K: every layout the tuner times but ``cr``) or its narrow
    tiles fall short, and either only where K is cut at all (``configs.splits_k``)."""
    return long_k_product(m, n, k, dtype) or (
        dtype in FAST_DTYPES
        and thin(m, n, k)
        and (k * dtype.itemsize % 16 != 0 or not narrow_tiles_pay(m, n, k, dtype.itemsize))
    )


def modelled(m: int, n: int, k: int, dtype: torch.dtype) -> bool:
    """Whether the wave model chooses the config of an ``m x n x k`` product of ``dtype``
    and may pair it: not a long-K product (``long_k_product``), nor, in fp16 and bf16,
    ``narrow`` (narrow tiles of its own: ``narrow_tiles.few_rows_config``)."""
    return not long_k_product(m, n, k, dtype) and not (dtype in FAST_DTYPES and narrow(m, n, k))


# At most this many output elements per product for ``wants_pair``: 64 tiles of 128x128, so
# two such products fill at most one wave of an H100/H200's 132 SMs.
PAIR_OUTPUT = SMALL_OUTPUT


def wants_pair(mnk1: tuple[int, int, int], mnk2: tuple[int, int, int], dtype: torch.dtype) -> bool:
    """Whether two products (M, N, K) of ``dtype`` run as one launch of ``pair_kernel``.

    Both outputs small (at most ``PAIR_OUTPUT`` elements, more than 1x1, none empty) and
    both ``modelled``. Two launches would each leave SMs idle; one launch of
    both takes about the time of the longer (H200, bf16: the backward at 1024^3 8.2 us
    against 11.7 in two launches).
    """
    return all(
        1 < m * n <= PAIR_OUTPUT and k > 0 and modelled(m, n, k, dtype) for m, n, k in (mnk1, mnk2)
    )


def _fast_plan(
    plans: dict[tuple[Any, ...], LaunchPlan], key: tuple[Any, ...] | None, a: torch.Tensor
) -> LaunchPlan | None:
    """The fast path's plan for ``key``: from ``plans``, else, outside a capture, from
    ``_fast_eager``; None on a miss."""
    plan = plans.get(key)
    if plan is None and key in _fast_eager and not capturing(a):
        plan = _fast_eager[key]
    return plan


def _mm_key(a: Any, b: Any, unit: bool) -> tuple[Any, ...] | None:
    """``launch_mm``'s fast-path key; None where a or b is not a tensor, or has torch's
    negative bit (a plan would read its memory; ``resolved``). ``unit``: alpha is 1
    (``scaled``'s epilogue without the multiply)."""
    try:
        if a.is_neg() or b.is_neg():
            return None
        return (
            a.shape, b.shape, a.stride(), b.stride(), a.dtype, b.dtype, a.device, b.device,
            a.data_ptr() % 16, b.data_ptr() % 16, unit, tf32_dots(a.dtype),
        )  # fmt: skip
    except (AttributeError, RuntimeError):  # not tensors, or not strided: the check names it
        return None


def _addmm_key(bias: torch.Tensor, a: Any, b: Any, unit: bool) -> tuple[Any, ...] | None:
    """``launch_addmm``'s fast-path key for a tensor bias; None where a or b is not a tensor,
    or one of the three has a negative bit (as ``_mm_key``). ``unit``: alpha and beta are 1
    (``scaled_plus_bias``'s epilogue without multiplies)."""
    try:
        if a.is_neg() or b.is_neg() or bias.is_neg():
            return None
        return (
            a.shape, b.shape, bias.shape, a.stride(), b.stride(), bias.stride(), a.dtype,
            b.dtype, bias.dtype, a.device, b.device, bias.device, a.data_ptr() % 16,
            b.data_ptr() % 16, bias.data_ptr() % 16, unit, tf32_dots(a.dtype),
        )  # fmt: skip
    except (AttributeError, RuntimeError):
        return None


def launch_mm_pair(
    a1: torch.Tensor, b1: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor, alpha: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(alpha * (a1 @ b1), alpha * (a2 @ b2))``: one launch where ``wants_pair``, the
    tuned table has the pair (measured faster than two launches) or the wave model predicts
    it faster (``configs.model_pair``; outside a CUDA graph capture counting the host time
    of the launch it saves), else two.

    All four operands share a dtype and device; any may be a transposed view. The first
    product's tiles start first: put the one with the longer K there.
    """
    if alpha == 0:  # reads neither product: zeros from launch_mm
        return launch_mm(a1, b1, alpha), launch_mm(a2, b2, alpha)
    if a1.is_neg() or b1.is_neg() or a2.is_neg() or b2.is_neg():  # (``resolved``)
        return launch_mm_pair(*resolved(a1, b1, a2, b2), alpha)
    fast_key = (
        a1.shape, b1.shape, a2.shape, b2.shape, a1.stride(), b1.stride(), a2.stride(),
        b2.stride(), a1.dtype, a1.device, a1.data_ptr() % 16, b1.data_ptr() % 16,
        a2.data_ptr() % 16, b2.data_ptr() % 16, unit_scales(alpha), tf32_dots(a1.dtype),
    )  # fmt: skip
    plan = _fast_pair.get(fast_key, _UNSEEN)
    if plan is None and not capturing(a1):
        plan = _fast_pair_eager.get(fast_key, _UNSEEN)
    if plan is None:  # seen before: two launches
        return two_launches(a1, b1, a2, b2, alpha)
    if plan is not _UNSEEN and _allocator_set.get():
        return plan(a1, b1, a2, b2, scaled(alpha), scaled(alpha))
    # Operands copied once for both products (the backward's grad_out): fp32 ones laid out as
    # their dots read fast and fp16/bf16 ones onto 128-byte lines where that pays (which this
    # key then keeps: _fast_relaid), unaligned fp16/bf16 ones where that pays
    # (``staging.staged``); entries are made for the copies only.
    copies = _relaid(fast_key, a1, b1, a2, b2)
    if copies is not None:
        return launch_mm_pair(*copies, alpha)
    aligned = staged([(a1, b1), (a2, b2)])
    if aligned is not None:
        return launch_mm_pair(*aligned[0], *aligned[1], alpha)
    operands = (a1, b1, a2, b2)
    mnks = (product_mnk(a1, b1), product_mnk(a2, b2))
    eager = not capturing(a1)
    both_modelled = all(modelled(*mnk, a1.dtype) for mnk in mnks)
    everywhere = (
        wants_pair(*mnks, a1.dtype)
        or tuned_pair(*operands)
        or (both_modelled and model_pair(*operands))
    )
    # The eager rule trades GPU time for host time against the model's two plain launches;
    # where one of them would run transposed, two launches gain more (NOTES 61), and stay.
    one_launch = everywhere or (
        eager
        and both_modelled
        and not (transposed_pays(a1, b1) or transposed_pays(a2, b2))
        and model_pair(*operands, eager=True)
    )
    # The decisions depend on nothing the key does not hold. Where they differ, captures
    # read the one in _fast_pair (None), eager calls the one in _fast_pair_eager.
    if not everywhere:
        _fast_pair[fast_key] = None
    if eager and not one_launch:
        _fast_pair_eager[fast_key] = None
    if one_launch:
        if not everywhere:
            # The two launches a capture makes instead are compiled now (results unused), as
            # a capture should not compile.
            launch_mm(a1, b1, alpha)
            launch_mm(a2, b2, alpha)
        plans = _fast_pair if everywhere else _fast_pair_eager
        fast = (plans, fast_key)
        kernel = _kernel_for(a1.dtype, pair=True)
        return _run(kernel, (*operands, scaled(alpha), scaled(alpha)), fast=fast)
    return two_launches(a1, b1, a2, b2, alpha)


# The most waves of 128x128 output tiles the other product may have to run beside a long-K
# one (H100, bf16, NOTES 166): at 14-31 waves its tail and the split's zeroing and cast were
# 1.5-5% of the pair's time and running side by side gained about that; at 118-237 waves
# (1e6-row inputs) the two streams only contend for memory, 1-13% slower.
SIDE_BY_SIDE_MAX_WAVES = 64


def side_by_side(
    mnk1: tuple[int, int, int], mnk2: tuple[int, int, int], dtype: torch.dtype, sms: int
) -> bool:
    """Whether a backward's two launches run side by side, on two streams: where exactly one
    is a long-K product (``long_k_product``: a tall input's weight gradient, split over K),
    whose zeroed fp32 sums, cast and last programs leave SMs idle, and the other has at most
    ``SIDE_BY_SIDE_MAX_WAVES`` waves of tiles to fill them with."""
    long1, long2 = long_k_product(*mnk1, dtype), long_k_product(*mnk2, dtype)
    if long1 == long2:
        return False
    m, n, _ = mnk2 if long1 else mnk1
    return tiles_of_128(m, n) <= SIDE_BY_SIDE_MAX_WAVES * sms


@functools.cache
def side_stream(device: torch.device) -> torch.cuda.Stream:
    """The stream ``two_launches`` runs a second product on, one per device."""
    return torch.cuda.Stream(device)


def two_launches(
    a1: torch.Tensor, b1: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor, alpha: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``launch_mm_pair``'s two launches: the second on a stream of its own where
    ``side_by_side``, joined before they return (inside a CUDA graph capture too: the side
    stream forks from the capturing stream and joins it)."""
    mnks = (product_mnk(a1, b1), product_mnk(a2, b2))
    if not (a1.is_cuda and side_by_side(*mnks, a1.dtype, sm_count(a1.device))):
        return launch_mm(a1, b1, alpha), launch_mm(a2, b2, alpha)
    main, side = torch.cuda.current_stream(a1.device), side_stream(a1.device)
    side.wait_stream(main)
    with torch.cuda.stream(side):
        second = launch_mm(a2, b2, alpha)
    first = launch_mm(a1, b1, alpha)
    main.wait_stream(side)
    second.record_stream(main)  # made on the side stream, used and freed on the main one
    return first, second


def launch_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    alpha: float = 1.0,
    check: Callable[[Any, Any], None] | None = None,
) -> torch.Tensor:
    """``alpha * (a @ b)`` through the Helion kernel; operands may be transposed views.

    Args:
        a: [m, k] tensor.
        b: [k, n] tensor of a's dtype and device.
        alpha: scale applied to the fp32 accumulator before the store.
        check: the public argument check, ``check(a, b)``: run before anything else unless
            a and b match a fast-path entry (see ``_fast_mm``).

    Returns:
        A new [m, n] tensor of a's dtype.
    """
    fast_key = _mm_key(a, b, unit_scales(alpha))
    plan = _fast_plan(_fast_mm, fast_key, a)
    if plan is not None and alpha != 0 and _allocator_set.get():
        return plan(a, b, scaled(alpha))
    split = _fast_split.get(fast_key)
    if split is not None and alpha != 0 and _allocator_set.get() and not deterministic_algorithms():
        return _split_k_result(split(a, b), None, alpha, 1.0, a)
    dims = _fast_relaid.get(fast_key)
    if dims and alpha != 0:
        return launch_mm(*relaid((a, b), dims, tiled_padded_copy), alpha)
    if check is not None:
        check(a, b)
    return launch_addmm(None, a, b, alpha, 0.0, fast_key)


def launch_addmm(
    bias: torch.Tensor | None,
    a: torch.Tensor,
    b: torch.Tensor,
    alpha: float = 1.0,
    beta: float = 1.0,
    mm_key: tuple[Any, ...] | None = None,
    check: Callable[..., None] | None = None,
) -> torch.Tensor:
    """``beta * bias + alpha * (a @ b)`` with both scalings fused into the kernel's epilogue.

    Like BLAS and torch.addmm: ``beta == 0`` never reads the bias (NaN in it does not
    propagate) and ``alpha == 0`` never reads the product.

    Args:
        bias: None or a tensor broadcastable to [m, n].
        a: [m, k] tensor.
        b: [k, n] tensor.
        alpha: scale of the product (a real number: callers check scalars first).
        beta: scale of the bias (likewise).
        mm_key: ``launch_mm``'s fast-path key of a and b, where it calls without a bias.
        check: the public argument check, ``check(bias, a, b, alpha, beta)``: run before
            anything else unless the tensors match a fast-path entry (see ``_fast_mm``).

    Returns:
        A new [m, n] tensor of a's dtype.
    """
    fast_key = None
    if isinstance(bias, torch.Tensor) and beta != 0 and alpha != 0:
        fast_key = _addmm_key(bias, a, b, unit_scales(alpha, beta))
        plan = _fast_plan(_fast_addmm, fast_key, a)
        if plan is not None and _allocator_set.get():
            # The plan takes only the bias's address from the epilogue (the strides of its
            # [m, n] view are constants of the specialization), which the view shares with
            # the bias itself: no view to make.
            return plan(a, b, scaled_plus_bias(alpha, beta, bias))
        split = _fast_split.get(fast_key)
        if split is not None and _allocator_set.get() and not deterministic_algorithms():
            return _split_k_result(split(a, b), bias, alpha, beta, a)
        dims = _fast_relaid.get(fast_key)
        if dims:
            return launch_addmm(bias, *relaid((a, b), dims, tiled_padded_copy), alpha, beta)
    if check is not None:
        check(bias, a, b, alpha, beta)
    bias, a, b = resolved(bias, a, b)
    m, k = a.shape
    n = b.shape[1]
    if bias is None or beta == 0:
        bias = None
    if m == 0 or n == 0:
        return a.new_empty((m, n))
    if k == 0 or alpha == 0:
        if bias is None:
            return a.new_zeros((m, n))
        return a.new_empty((m, n)).copy_(beta * bias.float())

    if m == 1 and n == 1:
        # Helion cannot lay out a 1x1 dot tile (the generated reshape fails in Triton's
        # interpreter; the GPU was not tried without this): a stride-0 second row of a
        # costs nothing and keeps every other shape on the direct path. The first row is
        # copied out, as a view of the [2, 1] result could not be modified in place where
        # autograd records it (torch's rule for a custom Function's views).
        return launch_addmm(bias, a.expand(2, k), b, alpha, beta)[:1].clone()

    # fp32 operands laid out as their dots read fast, fp16/bf16 operands off 32-byte sectors,
    # and unaligned fp16/bf16 operands, of a product long enough to pay for copying them, run
    # from copies; the copies' own key then takes the fast path (a key keeps which operands
    # it copies onto lines or for the dots: _fast_relaid).
    key = mm_key if bias is None else fast_key
    copies = _relaid(key, a, b)
    aligned = [tuple(copies)] if copies is not None else staged([(a, b)])
    if aligned is not None:
        if bias is None:
            return launch_mm(*aligned[0], alpha)
        return launch_addmm(bias, *aligned[0], alpha, beta)

    # Split-K and the last-wave split add fp32 partial sums with atomics, in an order (hence
    # last bits) that varies from run to run: under torch.use_deterministic_algorithms(True)
    # split-K products run ``split_k_pieces_kernel`` (the pieces summed by torch.sum) and the
    # others the plain kernel. (Helion's ref mode, for tests, runs without a config, and
    # split_k is one.) A long-K product (``long_k_product``: few tiles, a
    # serving batch's, NOTES 116 and 118, or a streaming one, NOTES 125) splits where K loads
    # in vectors; a thin one where it does not (its plain kernel then loads element by
    # element and is slower still, NOTES 112) or where its narrow tiles do not pay (too little
    # of the weight in flight, or a long K: ``narrow_tiles.narrow_tiles_pay``), else, outside the
    # few-tiles class, it runs the plain kernel on those (``narrow_tiles.few_rows_config``, NOTES
    # 114-115).
    deterministic = deterministic_algorithms()
    # (k_masks_vectorize is read only for the split-K kernel's products: it costs microseconds.)
    split_k = split_k_kernel.settings.ref_mode is RefMode.OFF and (
        splits_over_k_as_it_is(a, b)  # the long-K rule, which staging asks too
        or (
            a.dtype in FAST_DTYPES
            and thin(m, n, k)
            and not (k_masks_vectorize(a, b) and narrow_tiles_pay(m, n, k, a.element_size()))
            and splits_k(a, b)
        )
    )
    if split_k and not deterministic:
        # The fast path keeps the split's plan: the calls after this one launch it and
        # finish its sums with no more Python than that (``_fast_split``).
        fast = (_fast_split, key) if key is not None else None
        partial = _run(_kernel_for(a.dtype, split_k=True), (a, b), fast=fast)
        return _split_k_result(partial, bias, alpha, beta, a)
    if split_k:
        pieces = _run(_kernel_for(a.dtype, split_k=True, pieces=True), (a, b))
        return _split_k_result(pieces.sum(0), bias, alpha, beta, a)
    split = last_wave_split(a, b)
    if split is not None and not deterministic:
        if split.eager or capturing(a):
            return launch_last_wave(bias, a, b, alpha, beta, split.rows)
        # Eager calls of a product that splits under a capture run the plain kernel; the
        # first also compiles the split (its result unused), which a capture should not do.
        _compile_once(bias, a, b, lambda: launch_last_wave(bias, a, b, alpha, beta, split.rows))
    transposed = transposed_pays(a, b, "plain" if bias is None else "bias")
    kernel = transposed_kernel if transposed else _kernel_for(a.dtype)
    # The fast path keeps this plain launch for the key: where the kernel depends only on it,
    # in _fast_mm/_fast_addmm; for a product whose last wave splits under a capture only, in
    # _fast_eager, which the launchers read outside captures. (Under torch's determinism
    # switch a split or split-K product takes neither: the switch is not in the key.)
    plans = None
    if not split_k:
        if split is None:
            plans = _fast_mm if bias is None else _fast_addmm
        elif not deterministic and not split.eager:
            plans = _fast_eager
    fast = (plans, key) if plans is not None and key is not None else None
    if bias is None:
        return _run(kernel, (a, b, scaled(alpha)), fast=fast)
    bias_mn = bias.expand(m, n)
    return _run(kernel, (a, b, scaled_plus_bias(alpha, beta, bias_mn)), (bias_mn,), fast)


def _relaid(key: tuple[Any, ...] | None, *operands: torch.Tensor) -> list | None:
    """``operands`` (a product's a, b, or a pair's four) with those the kernels read slowly
    copied as they read fast (``staging.relaid``), the decision kept for the launcher's
    ``key`` (``_fast_relaid``); None where none is copied. fp32 operands are laid out as
    their dots read fast (``staging.fp32_copies``); fp16 and bf16 ones whose rows start off
    32-byte sectors are copied onto 128-byte lines where the wave model predicts it pays
    (``staging.lined_copies``)."""
    dims = _fast_relaid.get(key)
    if dims is None:
        products = list(zip(operands[::2], operands[1::2], strict=True))
        decide = fp32_copies if operands[0].dtype is torch.float32 else lined_copies
        dims = decide(products) or ()
        if key is not None:
            _fast_relaid[key] = dims
    return relaid(operands, dims, tiled_padded_copy) if dims else None


def tiled_padded_copy(view: torch.Tensor) -> torch.Tensor:
    """``staging.padded_copy`` by ``padded_copy_kernel``, through its launch plan (from the
    second call of a key, ``_fast_copy``'s)."""
    key = (view.shape, view.stride(), view.dtype, view.device, view.data_ptr() % 16)
    plan = _fast_copy.get(key)
    if plan is not None and _allocator_set.get():
        return plan(view)
    return _run(padded_copy_kernel, (view,), fast=(_fast_copy, key))


def resolved(*tensors: Any) -> tuple[Any, ...]:
    """``tensors`` with torch's lazy negation applied. A real tensor may carry a negative bit
    (``t.is_neg()``: ``z.conj().imag`` of a complex ``z``, ``torch._neg_view``): its values
    are the negation of its memory, which the kernels read as it is; so the launchers copy
    it first, as torch does. Other arguments (which the checks name) pass as they are."""
    return tuple(
        t.resolve_neg() if isinstance(t, torch.Tensor) and t.is_neg() else t for t in tensors
    )


def _compile_once(
    bias: torch.Tensor | None, a: torch.Tensor, b: torch.Tensor, launch: Callable[[], object]
) -> None:
    """``launch`` (a split's launch, its result unused) the first time these operands and
    bias come by: it compiles the split for a later capture."""
    bias_key = bias is None or (bias.shape, bias.stride(), bias.data_ptr() % 16)
    key = (*operands_key(a, b), bias_key)
    if key not in _splits_compiled:
        _splits_compiled.add(key)
        launch()


def deterministic_algorithms() -> bool:
    """Whether torch.use_deterministic_algorithms(True) is in force (then no atomic sums)."""
    return torch.are_deterministic_algorithms_enabled()


def capturing(t: torch.Tensor) -> bool:
    """Whether launches on ``t``'s device go into a CUDA graph being captured."""
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


def launch_last_wave(
    bias: torch.Tensor | None,
    a: torch.Tensor,
    b: torch.Tensor,
    alpha: float,
    beta: float,
    rows: int,
) -> torch.Tensor:
    """``launch_addmm`` through ``last_wave_kernel``: rows ``[0, rows)`` in whole waves of
    tiles with the epilogue fused, the others split over K into fp32 and finished after."""
    m, n = a.shape[0], b.shape[1]
    out = a.new_empty((m, n))
    partial = torch.zeros((m - rows, n), dtype=torch.float32, device=a.device)
    operands = (a[:rows], a[rows:], b, out[:rows], partial)
    if bias is None:
        _run(last_wave_kernel, (*operands, scaled(alpha)))
        _finish_split_k(partial, None, alpha, beta, out[rows:])
        return out
    bias_mn = bias.expand(m, n)
    _run(last_wave_kernel, (*operands, scaled_plus_bias(alpha, beta, bias_mn)), (bias_mn,))
    _finish_split_k(partial, bias_mn[rows:], alpha, beta, out[rows:])
    return out


def _split_k_result(
    partial: torch.Tensor, bias: torch.Tensor | None, alpha: float, beta: float, a: torch.Tensor
) -> torch.Tensor:
    """The product from the split-K kernel's fp32 sums: ``_finish_split_k`` into a new output
    of a's dtype. Without a bias, it is recorded as the split-K launch's output where this
    thread's launches are recorded (a backward's product, which the C++ path replays)."""
    out = _finish_split_k(partial, bias, alpha, beta, a.new_empty(partial.shape))
    if bias is None:
        record_result(partial, out)
    return out


def _finish_split_k(
    partial: torch.Tensor,
    bias: torch.Tensor | None,
    alpha: float,
    beta: float,
    out: torch.Tensor,
) -> torch.Tensor:
    """``out = alpha * partial + beta * bias`` in fp32, rounded once to ``out``'s dtype.

    One pass over the fp32 partial sums (the cast is the store of the add or copy), two where
    ``alpha != 1``; torch promotes the bias to fp32 inside the add, so it is never copied.
    """
    if alpha != 1:
        partial.mul_(alpha)
    if bias is None:
        return out.copy_(partial)
    return torch.add(partial, bias, alpha=beta, out=out)


def unit_scales(alpha: float, beta: float = 1.0) -> bool:
    """Whether ``scaled``'s or ``scaled_plus_bias``'s epilogue for these scales leaves out its
    multiplies: a kernel of its own, so the fast-path keys hold this too."""
    return alpha == 1 and beta == 1


def _unscaled(acc: torch.Tensor, tile: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return acc


def scaled(alpha: float) -> Epilogue:
    """The epilogue ``alpha * acc``: for alpha 1 the accumulator as it is, a kernel of its own.

    The multiply, one per output element inside the persistent loop, cost up to 2% of short-K
    products on the H200 (NOTES 97). Other alphas are captured as a Python float whatever they
    came as: Triton would compile an int argument of 1 as a constant, and a launch plan would
    then ignore later values.
    """
    alpha = float(alpha)
    if unit_scales(alpha):
        return _unscaled
    return lambda acc, tile: alpha * acc


def scaled_plus_bias(alpha: float, beta: float, bias_mn: torch.Tensor) -> Epilogue:
    """The epilogue ``alpha * acc + beta * bias`` for a bias expanded to the output's shape;
    ``acc + bias`` where both are 1 (a kernel of its own, as ``scaled``'s).

    (A launch plan reads only the bias's address from it, so the fast path hands it the
    bias itself: see ``launch_addmm``.)"""
    alpha, beta = float(alpha), float(beta)
    if unit_scales(alpha, beta):
        return lambda acc, tile: acc + bias_mn[tile[0], tile[1]].to(torch.float32)
    return lambda acc, tile: alpha * acc + beta * bias_mn[tile[0], tile[1]].to(torch.float32)
