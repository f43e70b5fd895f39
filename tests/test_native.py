"""The C++ fast path (``helion_ops.native``): what it replays equals what the Python path computes.

Each GPU test runs a key four times: the first call compiles its kernels on the Python path,
the second (which compiles nothing) teaches the extension its forward, the third takes the C++
forward and the Python backward (which records its launches), the fourth replays both in C++;
every result against float64 and torch's own. (The outputs the extension allocates are
NaN-poisoned too: conftest's determinism switch fills at::empty's memory.)"""

from __future__ import annotations

import functools
import shutil
import sysconfig
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import HAS_CUDA, capture
from reference import assert_matches
from test_ops import make
from triton.tools.tensor_descriptor import TensorDescriptor

import helion_ops
from helion_ops import autograd, kernel, long_k, narrow_tiles, native, plans

needs_cuda = pytest.mark.cuda


@pytest.fixture
def extension(monkeypatch):
    """The built extension, its keys forgotten before and after, and a count of the Python
    backwards it falls back to. (Without a GPU, loaded for this test only.)"""
    if HAS_CUDA:
        assert native.ready(torch.empty(1, device="cuda")), "the extension did not build"
    else:
        monkeypatch.setattr(native, "module", native.module)
        native._build()
    module = native.module
    assert module is not None
    calls = []

    def counted(*args):
        calls.append(args)
        return native.backward(*args)

    module.reset()
    module.set_backward(counted)
    yield module, calls
    module.set_backward(native.backward)
    module.reset()


def test_bits_of_constants():
    assert native._bits("i32", -1) == 0xFFFFFFFF
    assert native._bits("i64", -1) == -1
    assert native._bits("i1", True) == 1
    assert native._bits("fp32", 1.0) == 0x3F800000
    assert native._bits("fp64", -2.0) == -(1 << 62)  # 0xC000000000000000 as a signed int64
    assert native._bits("nvTmaDesc", 1) is None


CAN_BUILD = (
    shutil.which("c++") is not None
    and (Path(sysconfig.get_paths()["include"]) / "Python.h").exists()
)


@pytest.mark.skipif(
    not HAS_CUDA and not CAN_BUILD, reason="no C++ compiler or Python headers to build it with"
)
def test_builds_and_leaves_cpu_tensors_to_python(extension):
    module, _ = extension
    a = torch.randn(4, 4)
    assert module.matmul(a, a) is False
    assert module.addmm(a, a, a, 1.0, 1.0) is False
    assert module.matmul(a, "not a tensor") is False
    assert module.entries() == 0


class FakeModule:
    """Stands in for the extension: its constructors return what they were given."""

    @staticmethod
    def Launch(*args):
        return ("Launch", *args)

    @staticmethod
    def Recipe(launches, grads):
        return ("Recipe", launches, grads)


def fake_plan(operands=2, sources=(0, 1, 3, 4, 5, 6), signature=None, constants=(64, 300)):
    """A LaunchPlan as launch_of reads it: x @ y with an epilogue capturing alpha, launch
    values laid out as (x, y, epilogue, alpha, out, BLOCK, n)."""
    signature = signature or {
        "x": "*bf16", "y": "*bf16", "alpha": "fp32", "out": "*bf16", "BLOCK": "constexpr",
        "n": "i32",
    }  # fmt: skip
    compiled = SimpleNamespace(
        packed_metadata=(4, 1, 1024),
        src=SimpleNamespace(signature=signature),
        function=77,
        metadata=SimpleNamespace(tensordesc_meta=None),
    )
    return SimpleNamespace(
        compiled=compiled,
        direct=SimpleNamespace(flags=(False, False), align=128, scratch=512),
        like_first=True,
        zeroed=False,
        operands=operands,
        epilogues=(operands,),
        sources=sources,
        constants=constants,
        shapes=((6, 5),),
        grid=(3, 1, 1),
        descriptors=(),
    )


@pytest.fixture
def fake_extension(monkeypatch):
    monkeypatch.setattr(native, "module", FakeModule)
    monkeypatch.setattr(native, "_KNOWN_LAYOUT", True)


def scaled(alpha):
    return lambda acc, tile: alpha * acc


def test_launch_of_lays_out_each_parameter(fake_extension):
    launch = native.launch_of(fake_plan(), (2, 0), (scaled(2.0),))
    tensor, output, scalar, constant = native._TENSOR, native._OUTPUT, native._SCALAR, 3
    assert launch == (
        "Launch", 77, (3, 1, 1), 128, 1024, 512,
        [(tensor, 0, 2), (tensor, 0, 0), (scalar, native._FLOAT32, 0), (output, 0, 0),
         (constant, 0, 300)],
        [],
        ((6, 5),),
        False,
    )  # fmt: skip


def descriptor_plan():
    """``fake_plan`` with x and the output loaded by host-built tensor descriptors (Helion's
    ``host_tensor_descriptors``): launch values (x, y, epilogue, alpha, out, BLOCK, n, x's
    descriptor, out's)."""
    signature = {
        "x_desc": "tensordesc<bf16[64, 32]>", "y": "*bf16", "alpha": "fp32",
        "out_desc": "tensordesc<bf16[64, 16]>", "BLOCK": "constexpr", "n": "i32",
    }  # fmt: skip
    plan = fake_plan(sources=(7, 1, 3, 8, 5, 6), signature=signature)
    x, out = torch.empty(6, 40, dtype=torch.bfloat16), torch.empty(6, 5, dtype=torch.bfloat16)
    plan.descriptors = (
        (0, TensorDescriptor(x, [6, 40], [40, 1], [64, 32])),
        (4, TensorDescriptor(out, [6, 5], [8, 1], [64, 16], padding="nan")),
    )
    meta = {"swizzle": 3, "elem_size": 2, "elem_type": 10, "fp4_padded": False}
    plan.compiled.metadata.tensordesc_meta = [
        {**meta, "block_size": [64, 32]},
        {**meta, "swizzle": 1, "block_size": [64, 16]},
    ]
    return plan


def test_launch_of_encodes_descriptors_as_triton_does(fake_extension):
    """A descriptor parameter is the map the extension encodes on this call's tensor, then
    the descriptor's sizes and strides, as Triton 3.6's launcher expands it; the map's
    fields are in the driver's order (innermost dimension first, strides in bytes) and its
    element type the driver's (device bf16 10 -> host 9)."""
    launch = native.launch_of(descriptor_plan(), (2, 0), (scaled(2.0),))
    tensor, output, scalar, constant = native._TENSOR, native._OUTPUT, native._SCALAR, 3
    descriptor = native._DESCRIPTOR
    assert launch[6] == [
        (descriptor, 0, 0), (constant, 0, 6), (constant, 0, 40), (constant, 0, 40),
        (constant, 0, 1),
        (tensor, 0, 0),
        (scalar, native._FLOAT32, 0),
        (descriptor, 0, 1), (constant, 0, 6), (constant, 0, 5), (constant, 0, 8),
        (constant, 0, 1),
        (constant, 0, 300),
    ]  # fmt: skip
    assert launch[7] == [
        (tensor, 2, 9, [40, 6], [80], [32, 64], 3, 0),
        (output, 0, 9, [5, 6], [16], [16, 64], 1, 1),
    ]


@pytest.mark.parametrize("change", ["not lowered to TMA", "fp4", "base not the call's"])
def test_launch_of_refuses_descriptors_it_cannot_encode(fake_extension, change):
    plan = descriptor_plan()
    if change == "not lowered to TMA":  # Triton passes such a descriptor as a pointer
        plan.compiled.metadata.tensordesc_meta = None
    elif change == "fp4":
        plan.compiled.metadata.tensordesc_meta[0]["fp4_padded"] = True
    else:  # based on the epilogue's captured alpha (plan value 3): neither operand nor output
        plan.descriptors = ((3, plan.descriptors[0][1]), plan.descriptors[1])
    assert native.launch_of(plan, (2, 0), (scaled(2.0),)) is None


@pytest.mark.parametrize(
    "change",
    ["epilogue as a parameter", "unknown capture", "pointer constant", "layout", "flags"],
)
def test_launch_of_refuses_what_it_cannot_replay(fake_extension, monkeypatch, change):
    plan, epilogues = fake_plan(), (scaled(2.0),)
    if change == "epilogue as a parameter":
        plan.sources = (0, 2, 3, 4, 5, 6)
    elif change == "unknown capture":
        epilogues = ((lambda gamma: lambda acc, tile: gamma * acc)(2.0),)
    elif change == "pointer constant":
        plan.compiled.src.signature = dict(plan.compiled.src.signature, n="*i32")
    elif change == "layout":
        monkeypatch.setattr(native, "_KNOWN_LAYOUT", False)
    else:
        plan.direct.flags = (True, False)
    assert native.launch_of(plan, (0, 1), epilogues) is None


def test_recipe_maps_operands_and_gradients(fake_extension):
    grad_out, mat1, mat2 = (torch.randn(6, 5), torch.randn(6, 4), torch.randn(4, 5))
    out1, out2 = torch.randn(5, 4), torch.randn(4, 5)  # grad of mat1 transposed, of mat2
    pointer = "*bf16"
    signature = {"x1": pointer, "y1": pointer, "x2": pointer, "y2": pointer, "alpha1": "fp32",
                 "alpha2": "fp32", "out1": pointer, "out2": pointer, "BLOCK": "constexpr",
                 "n": "i32"}  # fmt: skip
    # Launch values: (x1, y1, x2, y2, epilogue1, epilogue2, alpha1, alpha2, out1, out2, BLOCK, n)
    pair = fake_plan(4, (0, 1, 2, 3, 6, 7, 8, 9, 10, 11), signature)
    pair.epilogues, pair.shapes = (4, 5), ((5, 4), (4, 5))
    args = (mat2, grad_out.T, mat1.T, grad_out, scaled(1.0), scaled(1.0))
    recipe = native._recipe([(pair, args, [out1, out2])], (grad_out, mat1, mat2), (out1.T, out2))
    launch = recipe[1][0]
    # mat2, grad_out (as grad_out.T), mat1 (as mat1.T), grad_out: by address.
    assert [p[2] for p in launch[6][:4]] == [2, 0, 1, 0]
    assert recipe[2] == [(0, 0, True), (0, 1, False)]
    # A copy of an operand (staged), shared memory, or a gradient no launch made: no recipe.
    staged = (mat2.clone(), *args[1:])
    assert native._recipe([(pair, staged, [out1, out2])], (grad_out, mat1, mat2), (out2,)) is None
    same = (grad_out, mat1, mat1)
    assert native._recipe([(pair, args, [out1, out2])], same, (out1.T, out2)) is None
    other = torch.randn(4, 5)
    assert native._recipe([(pair, args, [out1, out2])], (grad_out, mat1, mat2), (other,)) is None


def test_recipe_finds_call_tensors_that_share_memory_as_themselves(fake_extension):
    """``a @ a.T``: the two operands share an address, so the recipe maps each by identity
    (the next calls of the key may pass distinct tensors); another view of that memory, or
    one tensor passed twice (``a @ a``), gives no recipe."""
    a, out = torch.randn(6, 6), torch.empty(6, 6)
    a_t, product = a.T, fake_plan()
    gram = native._recipe([(product, (a, a_t, scaled(1.0)), [out])], (a, a_t, None), (out, None))
    assert [p[:2] for p in gram[1][0][6][:2]] == [(native._TENSOR, 0), (native._TENSOR, 0)]
    assert [p[2] for p in gram[1][0][6][:2]] == [0, 1]
    view = native._recipe([(product, (a, a.T, scaled(1.0)), [out])], (a, a_t, None), (out,))
    assert view is None
    assert native._recipe([(product, (a, a, scaled(1.0)), [out])], (a, a, None), (out,)) is None


def test_a_gram_products_backward_is_recorded_on_a_copy(fake_extension, monkeypatch):
    """``a @ a.T``'s backward reads ``mat2.T``, a's geometry at a's address, which no recipe
    can tell from mat1: recorded on a copy of mat2 (its strides kept), each launch reads the
    operand it was made from; ``a @ a`` likewise. Operands off 16 bytes are not copied (no
    recipe then)."""
    from helion_ops import ops

    product, seen = fake_plan(), []

    def operand_grads(mat1, mat2, needs, grad_out, alpha, mm, mm_pair, columns):
        seen.append(mat2)
        grads = torch.empty(mat1.shape), torch.empty(mat2.shape)
        recording = plans.recordings[threading.get_ident()]
        recording.append((product, (grad_out, mat2.T, scaled(1.0)), [grads[0]]))
        recording.append((product, (mat1.T, grad_out, scaled(1.0)), [grads[1]]))
        return grads

    monkeypatch.setattr(ops, "_operand_grads", operand_grads)
    monkeypatch.setattr(kernel, "_compiled", {})
    monkeypatch.setattr(kernel, "deterministic_algorithms", lambda: False)
    square = torch.randn(6, 6)
    cases = [(a, a.T) for a in (torch.randn(6, 4), torch.randn(25)[1:].view(6, 4))]
    for a, b in [*cases, (square, square)]:  # a @ a.T, off 16 bytes, and a @ a
        grad_out = torch.randn(6, 6)
        *_, recipe = native.backward(grad_out, a, b, True, True, 1.0, False, b is not a, True)
        copied = seen[-1].data_ptr() != a.data_ptr()
        assert copied == (a.data_ptr() % 16 == 0)
        if not copied:
            assert recipe is None
            continue
        assert torch.equal(seen[-1], b) and seen[-1].stride() == b.stride()
        (first, second), specs = recipe[1:]
        assert [p[2] for p in first[6][:2]] == [0, 2]  # grad_out @ mat2.T
        assert [p[2] for p in second[6][:2]] == [1, 0]  # mat1.T @ grad_out
        assert specs == [(0, 0, False), (1, 0, False)]


def test_recipe_reads_earlier_launches_outputs(fake_extension):
    """fp32's copies: a launch whose operand is (a view of) an earlier launch's output reads
    it after the call's three tensors, at its place among the outputs made; a forward's
    recipe gives its product and no second result."""
    mat1, mat2 = torch.randn(6, 4), torch.randn(4, 5)
    signature = {"x": "*fp32", "out": "*fp32", "BLOCK": "constexpr", "n": "i32"}
    copy = fake_plan(1, (0, 1, 2, 3), signature)
    copy.epilogues = ()
    # Each copy into rows padded to 8: mat1 row-major, mat2 column-major (mat2.T's rows).
    lined1, lined2 = torch.empty(6, 8), torch.empty(5, 8)
    product, out = fake_plan(), torch.empty(6, 5)
    launches = [
        (copy, (mat1,), [lined1]),
        (copy, (mat2.T,), [lined2]),
        (product, (lined1[:, :4], lined2[:, :4].T, scaled(1.0)), [out]),
    ]
    recipe = native._recipe(launches, (mat1, mat2, None), (out, None))
    assert [launch[6][0] for launch in recipe[1]] == [
        (native._TENSOR, 0, 0), (native._TENSOR, 0, 1), (native._TENSOR, 0, 3),
    ]  # fmt: skip
    assert recipe[1][2][6][1] == (native._TENSOR, 0, 4)
    assert recipe[2] == [(2, 0, False), (-1, 0, False)]
    # An operand at an offset into an output (not its address), or a copy no launch made: none.
    offset = (lined1[1:, :4], *launches[2][1][1:])
    assert (
        native._recipe([*launches[:2], (product, offset, [out])], (mat1, mat2, None), (out,))
        is None
    )
    by_torch = (lined1[:, :4].clone(), *launches[2][1][1:])
    assert (
        native._recipe([*launches[:2], (product, by_torch, [out])], (mat1, mat2, None), (out,))
        is None
    )


def test_a_split_k_product_is_recorded_as_its_cast(fake_extension):
    """mat1.T @ grad_out through the split-K kernel: its launch's fp32 sums are replaced by
    their cast, the gradient, which the recipe then finds (the extension casts likewise)."""
    grad_out, mat1 = torch.randn(64, 5), torch.randn(64, 4)
    signature = {"x": "*bf16", "y": "*bf16", "out": "*fp32", "BLOCK": "constexpr", "n": "i32"}
    split = fake_plan(2, (0, 1, 2, 3, 4), signature)
    split.epilogues, split.like_first, split.zeroed, split.shapes = (), False, True, ((4, 5),)
    sums, grad, unrelated = torch.zeros(4, 5), torch.randn(4, 5), torch.zeros(4, 5)
    with plans.recorded() as launches:
        launches.append((split, (mat1.T, grad_out), [sums]))
        plans.record_result(unrelated, grad)  # not the last launch's output: no change
        assert launches[0][2][0] is sums
        plans.record_result(sums, grad)
    assert launches[0][2][0] is grad
    recipe = native._recipe(launches, (grad_out, mat1, None), (None, grad))
    assert recipe[1][0][-1] is True  # the launch casts
    assert recipe[2] == [(-1, 0, False), (0, 0, False)]
    # Without the cast recorded (a bias's split-K product), the sums are no gradient.
    launches = [(split, (mat1.T, grad_out), [sums])]
    assert native._recipe(launches, (grad_out, mat1, None), (None, grad)) is None


def test_a_split_k_forward_is_learned_from_its_recorded_launch(fake_extension, monkeypatch):
    """A matmul key that the Python path splits over K (a thin product, K off 16 bytes)
    teaches the extension the split-K kernel's launch it recorded, flagged to cast its fp32
    sums, whose cast is the product; a call that compiled a kernel teaches nothing (the next
    call records again), and one whose product is no recorded launch's output teaches None."""
    a, b = (torch.randn(s, dtype=torch.bfloat16) for s in [(3, 64), (64, 5)])
    signature = {"x": "*bf16", "y": "*bf16", "out": "*fp32", "BLOCK": "constexpr", "n": "i32"}
    split = fake_plan(2, (0, 1, 2, 3, 4), signature)
    split.epilogues, split.like_first, split.zeroed = (), False, True
    learned = []
    monkeypatch.setattr(FakeModule, "learn_matmul", lambda *args: learned.append(args), False)
    monkeypatch.setattr(kernel, "_compiled", {})
    sums, product = torch.zeros(3, 5), torch.randn(3, 5)

    def split_k_call(x, y, compiles=False, cast=True):
        if compiles:
            kernel._compiled[object()] = None
        plans.recordings[threading.get_ident()].append((split, (x, y), [sums]))
        if cast:
            plans.record_result(sums, product)
        return product

    assert native.learned_matmul(a, b, functools.partial(split_k_call, compiles=True)) is product
    assert learned == []
    assert native.learned_matmul(a, b, split_k_call) is product
    native.learned_matmul(a, b, functools.partial(split_k_call, cast=False))
    (_, _, forward), (_, _, none) = learned
    (launch,), results = forward[1:]
    assert results == [(0, 0, False), (-1, 0, False)]
    assert launch[0] == "Launch" and launch[-1] is True  # the extension casts the sums
    assert [p[0] for p in launch[6]] == [native._TENSOR, native._TENSOR, native._OUTPUT, 3]
    assert none is None


def _check(name, ours, inputs, fn64, fn_torch, grad_out, needs):
    ref_inputs = [t.detach().double().requires_grad_(n) for t, n in zip(inputs, needs, strict=True)]
    torch_inputs = [
        t.detach().clone().requires_grad_(n) for t, n in zip(inputs, needs, strict=True)
    ]
    ref, theirs = fn64(*ref_inputs), fn_torch(*torch_inputs)
    assert_matches(f"{name} output", ours, theirs, ref)
    ref.backward(grad_out.double())
    theirs.backward(grad_out)
    ours.backward(grad_out)
    for i, (t, r, th) in enumerate(zip(inputs, ref_inputs, torch_inputs, strict=True)):
        if needs[i]:
            assert_matches(f"{name} grad of input {i}", t.grad, th.grad, r.grad)
            if t.dim() == 2 and min(t.shape) > 1:  # in its operand's layout, as torch's
                assert t.grad.stride() == t.stride(), f"{name}: grad {i} copied"
            t.grad = None


def assert_taught(out, call):
    """The call's forward ran in C++ from the third call of a key on: the first compiles
    its kernels, the second (which compiles nothing) teaches the extension; the second
    already where an earlier test compiled them."""
    in_cpp = "ProductFunction" in out.grad_fn.name()
    assert in_cpp == (call > 1) or call == 1, (call, out.grad_fn.name())


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("columns", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("needs", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("m,n,k", [(384, 320, 256), (1000, 520, 264)], ids=str)
def test_matmul_replayed(extension, dtype, columns, needs, m, n, k):
    _, calls = extension
    a, b = (make(s, dtype, transposed=c) for s, c in zip([(m, k), (k, n)], columns, strict=True))
    for t, need in zip((a, b), needs, strict=True):
        t.requires_grad_(need)
    grad_out = torch.randn(m, n, device="cuda", dtype=dtype)
    for call in range(4):
        out = helion_ops.matmul(a, b)
        assert_taught(out, call)
        _check(f"call {call}", out, [a, b], torch.mm, torch.mm, grad_out, needs)
    assert len(calls) == 1, "the fourth backward did not replay the third's launches"
    with torch.no_grad():
        assert_matches("no grad", helion_ops.matmul(a, b), a @ b, a.double() @ b.double())


@needs_cuda
@pytest.mark.parametrize("needs", [(True, False), (False, True)])
def test_only_the_operand_a_requested_gradient_needs_is_saved(extension, needs):
    """As the Python Function's (test_ops): a's gradient needs b and b's needs a, so the
    other operand is not kept alive until the backward, in either path."""
    _, calls = extension
    a, b = (make(s, torch.bfloat16) for s in [(384, 256), (256, 320)])
    for t, need in zip((a, b), needs, strict=True):
        t.requires_grad_(need)
    grad_out = torch.randn(384, 320, device="cuda", dtype=torch.bfloat16)
    saved = []
    for call in range(4):
        saved.clear()
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            out = helion_ops.matmul(a, b)
        assert_taught(out, call)
        assert [t.data_ptr() for t in saved] == [(b if needs[0] else a).data_ptr()], call
        _check(f"call {call}", out, [a, b], torch.mm, torch.mm, grad_out, needs)
    assert len(calls) == 1, "the fourth backward did not replay the third's launches"


@needs_cuda
@pytest.mark.parametrize("tf32", [False, True], ids=["ieee", "tf32"])
@pytest.mark.parametrize("columns", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("op", ["matmul", "addmm"])
def test_fp32_replays_its_copies(extension, restore_tf32, tf32, columns, op):
    """fp32 keys replay in C++ too, with the copies that lay their operands out for their
    dots (``staging.fp32_copies``: TF32 both along K, IEEE b row-major): the first call
    compiles, the second (which compiles nothing) teaches the extension, the third runs the
    C++ forward and records its backward, the fourth replays both (from the third, C++
    launches alone); every result against float64 and torch's at the same TF32 switch."""
    _, calls = extension
    torch.backends.cuda.matmul.allow_tf32 = tf32
    m, n, k, dtype = 384, 320, 264, torch.float32
    a, b = (make(s, dtype, transposed=c) for s, c in zip([(m, k), (k, n)], columns, strict=True))
    bias = torch.randn(n, device="cuda", dtype=dtype).requires_grad_()
    grad_out = torch.randn(m, n, device="cuda", dtype=dtype)
    if op == "matmul":
        inputs, ours, theirs = [a, b], helion_ops.matmul, torch.mm
    else:
        inputs, ours, theirs = [bias, a, b], helion_ops.addmm, torch.addmm
    for call in range(4):
        out = ours(*inputs)
        assert_taught(out, call)
        _check(f"call {call}", out, inputs, theirs, theirs, grad_out, (True,) * len(inputs))
    assert len(calls) == 1, "the fourth backward did not replay the third's launches"


@needs_cuda
def test_a_gram_product_replays_its_forward(extension, monkeypatch):
    """``a @ a.T``, whose operands share memory, replays its forward in C++ as other keys do
    (from the third call), and a later call of its key on distinct tensors reads each of
    them where it should."""
    python_runs, run = [], autograd._python_matmul
    monkeypatch.setattr(
        autograd, "_python_matmul", lambda *args: python_runs.append(1) or run(*args)
    )
    a, b = (torch.randn(384, 264, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for call in range(4):
        ours = helion_ops.matmul(a, a.T)
        assert_matches(f"call {call}", ours, a @ a.T, a.double() @ a.double().T)
    assert len(python_runs) <= 2, "the key was not replayed"
    assert_matches("distinct", helion_ops.matmul(a, b.T), a @ b.T, a.double() @ b.double().T)
    assert len(python_runs) <= 2


@needs_cuda
def test_a_gram_products_backward_replays(extension):
    """``a @ a.T`` with a requiring grad: its backward is recorded (on a copy of mat2) by the
    third call and replayed in C++ after, a's gradient (the sum of both products') against
    float64 and torch's on every call."""
    _, calls = extension
    a = torch.randn(384, 264, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    grad_out = torch.randn(384, 384, device="cuda", dtype=torch.bfloat16)
    for call in range(5):
        ours = helion_ops.matmul(a, a.T)
        assert_taught(ours, call)
        ref_a, torch_a = a.detach().double().requires_grad_(), a.detach().clone().requires_grad_()
        ref, theirs = ref_a @ ref_a.T, torch_a @ torch_a.T
        assert_matches(f"call {call} output", ours, theirs, ref)
        for out, g in ((ours, grad_out), (theirs, grad_out), (ref, grad_out.double())):
            out.backward(g)
        assert_matches(f"call {call} grad", a.grad, torch_a.grad, ref_a.grad)
        a.grad = None
    assert len(calls) == 1, "the later backwards did not replay the third's launches"


@needs_cuda
def test_fp32_keys_hold_the_tf32_switch(extension, restore_tf32):
    """A key learned with TF32 dots is not replayed with the switch off: the call runs the
    Python path's IEEE kernels (and teaches the extension a second key), as accurate as
    torch's IEEE product."""
    module, _ = extension
    a, b = (torch.randn(s, device="cuda") for s in [(384, 264), (264, 320)])
    torch.backends.cuda.matmul.allow_tf32 = True
    for _ in range(3):  # compiles, teaches, replays
        helion_ops.matmul(a, b)
    assert module.entries() == 1
    torch.backends.cuda.matmul.allow_tf32 = False
    for call in range(3):
        assert_matches(f"IEEE call {call}", helion_ops.matmul(a, b), a @ b, a.double() @ b.double())
    assert module.entries() == 2


@needs_cuda
@pytest.mark.parametrize("size", [1000, 1400])
@pytest.mark.parametrize("columns", [(False, False), (False, True), (True, False)])
def test_host_descriptors_are_encoded_on_each_calls_tensors(extension, columns, size):
    """Rows of 1000 or 1400 bf16 elements start off 128-byte lines, where the runtime builds
    the TMA descriptors on the host (``loads.pointer_tiles_on_host_descriptors``,
    ``loads.host_descriptors_pay``; at 1400^3 the backward's pair too): the extension
    encodes them on each call's own tensors (four pairs of operands and gradients of one
    key, all alive at once, so that no call can read another's memory)."""
    _, calls = extension
    m = n = k = size
    shapes = [(m, k), (k, n)]
    inputs = [
        [make(s, torch.bfloat16, transposed=c) for s, c in zip(shapes, columns, strict=True)]
        for _ in range(4)
    ]
    grads = [torch.randn(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    for call, ((a, b), grad_out) in enumerate(zip(inputs, grads, strict=True)):
        out = helion_ops.matmul(a, b)
        assert_taught(out, call)
        _check(f"call {call}", out, [a, b], torch.mm, torch.mm, grad_out, (True, True))
    assert len(calls) == 1, "the fourth backward did not replay the third's launches"
    planned = [p for p in kernel._compiled.values() if isinstance(p, plans.LaunchPlan)]
    assert any(p.descriptors for p in planned), "no plan with host-built descriptors"


def test_no_backward_is_recorded_under_the_determinism_switch(monkeypatch):
    """Under torch.use_deterministic_algorithms(True) a split-K product sums its pieces with
    torch.sum, which no recipe replays: the Python backward records nothing and asks to
    record again (False), not to stay on Python for good (None)."""
    monkeypatch.setattr(kernel, "deterministic_algorithms", lambda: True)
    kernel.reset()
    grad_out = make((24, 16), torch.float16)
    mat1, mat2 = make((24, 600), torch.float16), make((600, 16), torch.float16)
    recordings, recorded = [], plans.recorded
    monkeypatch.setattr(plans, "recorded", lambda: recordings.append(1) or recorded())
    args = (grad_out.detach(), mat1.detach(), mat2.detach(), True, True, 1.0, False, False)
    grad1, grad2, recipe = native.backward(*args, True)
    assert recipe is False and not recordings
    assert native.backward(*args, False)[2] is None
    want = (grad_out.double() @ mat2.double().T, mat1.double().T @ grad_out.double())
    assert_matches("grad of mat1", grad1, grad_out @ mat2.T, want[0])
    assert_matches("grad of mat2", grad2, mat1.T @ grad_out, want[1])


@needs_cuda
def test_a_backward_that_compiles_is_recorded_again(extension):
    """A key learned without grad: its first backward compiles the backward's kernels (a
    launch no plan makes), so the next one records, and the third replays."""
    _, calls = extension
    kernel.reset()
    a, b = make((384, 256), torch.bfloat16), make((256, 320), torch.bfloat16)
    grad_out = torch.randn(384, 320, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        for _ in range(2):
            helion_ops.matmul(a, b)
    for call in range(3):
        out = helion_ops.matmul(a, b)
        assert "ProductFunction" in out.grad_fn.name()
        _check(f"call {call}", out, [a, b], torch.mm, torch.mm, grad_out, (True, True))
    assert len(calls) == 2


BIASES = {"mn": lambda m, n: (m, n), "n": lambda m, n: (n,), "1n": lambda m, n: (1, n),
          "m1": lambda m, n: (m, 1), "1": lambda m, n: (1,), "scalar": lambda m, n: ()}  # fmt: skip


@needs_cuda
@pytest.mark.parametrize("bias", list(BIASES))
@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (1.5, 0.5), (-2, 3)])
def test_addmm_replayed(extension, bias, alpha, beta):
    _, calls = extension
    m, n, k, dtype = 520, 384, 264, torch.bfloat16
    bias_t = torch.randn(BIASES[bias](m, n), device="cuda", dtype=dtype).requires_grad_()
    a, b = make((m, k), dtype), make((k, n), dtype, transposed=True)
    grad_out = torch.randn(m, n, device="cuda", dtype=dtype)

    def theirs(c, x, y):
        return torch.addmm(c, x, y, alpha=alpha, beta=beta)

    for call in range(4):
        out = helion_ops.addmm(bias_t, a, b, alpha=alpha, beta=beta)
        assert_taught(out, call)
        _check(f"call {call}", out, [bias_t, a, b], theirs, theirs, grad_out, (True,) * 3)
    assert len(calls) == 1


@needs_cuda
@pytest.mark.parametrize("bias", ["mn", "n", "m1"])
def test_addmm_host_descriptors_are_encoded_on_each_calls_tensors(extension, bias):
    """addmm at 1000^3, whose rows start off 128-byte lines so that its descriptors are built
    on the host: four sets of bias, operands and gradients of one key, all alive at once,
    each call checked on its own tensors, the fourth replayed in C++."""
    _, calls = extension
    m = n = k = 1000
    dtype = torch.bfloat16
    sets = [
        (
            torch.randn(BIASES[bias](m, n), device="cuda", dtype=dtype).requires_grad_(),
            make((m, k), dtype),
            make((k, n), dtype),
            torch.randn(m, n, device="cuda", dtype=dtype),
        )
        for _ in range(4)
    ]

    def theirs(c, x, y):
        return torch.addmm(c, x, y, alpha=1.5, beta=0.5)

    for call, (bias_t, a, b, grad_out) in enumerate(sets):
        out = helion_ops.addmm(bias_t, a, b, alpha=1.5, beta=0.5)
        assert_taught(out, call)
        _check(f"call {call}", out, [bias_t, a, b], theirs, theirs, grad_out, (True,) * 3)
    assert len(calls) == 1, "the fourth backward did not replay the third's launches"
    planned = [p for p in kernel._compiled.values() if isinstance(p, plans.LaunchPlan)]
    assert any(p.descriptors for p in planned), "no plan with host-built descriptors"


@needs_cuda
def test_the_replayed_bias_gradient_is_scaled_before_it_is_summed(extension):
    """As the Python path's (test_torch_semantics): 256 rows of about 3000 sum past fp16's
    range; scaled by 1/64 first, as torch's, they do not."""
    m, n, k, dtype, beta = 256, 128, 64, torch.float16, 1 / 64
    bias = torch.randn(n, device="cuda", dtype=dtype).requires_grad_()
    a, b = make((m, k), dtype), make((k, n), dtype)
    grad_out = (2900 + 200 * torch.rand(m, n, device="cuda")).to(dtype)
    theirs = torch.autograd.grad(torch.addmm(bias, a, b, beta=beta), [bias], grad_out)[0]
    assert theirs.isfinite().all()
    for call in range(4):
        out = helion_ops.addmm(bias, a, b, beta=beta)
        assert_taught(out, call)
        torch.testing.assert_close(torch.autograd.grad(out, [bias], grad_out)[0], theirs)


@needs_cuda
def test_scales_of_1_and_others_on_one_key_each_replay_their_own(extension):
    """addmm's kernels leave out the multiplies of scales of 1 (``kernel.scaled_plus_bias``):
    the extension's key holds which scales are 1, so no call replays the forward or backward
    of other scales."""
    _, calls = extension
    m, n, k, dtype = 520, 384, 264, torch.bfloat16
    bias_t = torch.randn(n, device="cuda", dtype=dtype).requires_grad_()
    a, b = make((m, k), dtype), make((k, n), dtype, transposed=True)
    grad_out = torch.randn(m, n, device="cuda", dtype=dtype)
    scales = [(1.0, 1.0), (1.5, 1.0), (1.0, 0.5), (-2.0, 3.0)]
    for call in range(4):
        for alpha, beta in scales:

            def theirs(c, x, y, alpha=alpha, beta=beta):
                return torch.addmm(c, x, y, alpha=alpha, beta=beta)

            out = helion_ops.addmm(bias_t, a, b, alpha=alpha, beta=beta)
            assert_taught(out, call)
            name = f"call {call}, alpha {alpha}, beta {beta}"
            _check(name, out, [bias_t, a, b], theirs, theirs, grad_out, (True,) * 3)
    assert len(calls) == len(scales)


@needs_cuda
@pytest.mark.parametrize("op", ["matmul", "addmm"])
def test_a_split_k_backward_replayed(extension, monkeypatch, op):
    """A tall product, whose mat1.T @ grad_out splits K: the recipe zeroes the fp32 sums,
    launches the split-K kernel, scales the sums by alpha and casts them. Under torch's
    determinism switch the backward takes the Python path instead (the plain kernel)."""
    _, calls = extension
    torch.use_deterministic_algorithms(False)  # (the poisoning fixture turns it back on)
    m, n, k, dtype = 4096, 320, 256, torch.float16
    assert kernel.wants_split_k(k, n, m, dtype)
    a, b = make((m, k), dtype), make((k, n), dtype)
    grad_out = torch.randn(m, n, device="cuda", dtype=dtype)
    if op == "matmul":
        inputs, ours, theirs = [a, b], helion_ops.matmul, torch.mm
    else:
        inputs = [make((n,), dtype), a, b]

        def ours(c, x, y):
            return helion_ops.addmm(c, x, y, alpha=1.5)

        def theirs(c, x, y):
            return torch.addmm(c, x, y, alpha=1.5)

    needs = (True,) * len(inputs)
    for call in range(4):
        _check(f"call {call}", ours(*inputs), inputs, theirs, theirs, grad_out, needs)
    assert len(calls) == 1, "the fourth backward did not replay the third's launches"
    assert kernel.split_k_kernel in {key[0] for key in kernel._compiled}
    monkeypatch.setattr(
        kernel, "deterministic_algorithms", torch.are_deterministic_algorithms_enabled
    )
    torch.use_deterministic_algorithms(True, warn_only=True)
    _check("deterministic", ours(*inputs), inputs, theirs, theirs, grad_out, needs)
    assert len(calls) == 2


@needs_cuda
def test_a_split_k_forward_replayed(extension, monkeypatch):
    """A thin product whose K loads element by element (K off 16 bytes), whose forward
    splits K in every call: from the third call the extension zeroes the fp32 sums,
    launches the split-K kernel and casts them. Under torch's determinism switch the forward
    takes the Python path instead (the plain kernel)."""
    torch.use_deterministic_algorithms(False)  # (the poisoning fixture turns it back on)
    m, n, k, dtype = 16, 2048, 8195, torch.bfloat16
    assert narrow_tiles.thin(m, n, k) and kernel.wants_split_k(m, n, k, dtype)
    assert not long_k.few_tiles_long_k(m, n, k)
    a, b = make((m, k), dtype), make((k, n), dtype)
    grad_out = torch.randn(m, n, device="cuda", dtype=dtype)
    for call in range(4):
        out = helion_ops.matmul(a, b)
        assert_taught(out, call)
        _check(f"call {call}", out, [a, b], torch.mm, torch.mm, grad_out, (True, True))
    assert kernel.split_k_kernel in {key[0] for key in kernel._compiled}
    monkeypatch.setattr(
        kernel, "deterministic_algorithms", torch.are_deterministic_algorithms_enabled
    )
    torch.use_deterministic_algorithms(True, warn_only=True)
    out = helion_ops.matmul(a, b)
    assert "ProductFunction" not in out.grad_fn.name()
    _check("deterministic", out, [a, b], torch.mm, torch.mm, grad_out, (True, True))


@needs_cuda
def test_addmm_beta_zero_and_alpha_zero_stay_with_torch_semantics(extension):
    m, n, k, dtype = 256, 256, 128, torch.bfloat16
    a, b = (torch.randn(s, device="cuda", dtype=dtype) for s in ((m, k), (k, n)))
    bias = torch.randn(m, n, device="cuda", dtype=dtype)
    for _ in range(2):
        helion_ops.addmm(bias, a, b)
    nan_bias = torch.full_like(bias, float("nan"))
    torch.testing.assert_close(helion_ops.addmm(nan_bias, a, b, beta=0), a @ b)
    a_inf = a.clone()
    a_inf[0, 0] = float("inf")
    out = helion_ops.addmm(bias, a_inf, b, alpha=0)
    assert torch.equal(out, bias)


@needs_cuda
def test_a_changed_key_is_not_replayed(extension):
    """Operands that differ from a learned key in layout, alignment, size or dtype."""
    module, _ = extension
    a = torch.randn(512, 264, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(264, 384, device="cuda", dtype=torch.bfloat16)
    for _ in range(2):
        helion_ops.matmul(a, b)
    learned = module.entries()
    storage = torch.randn(513 * 264 + 8, device="cuda", dtype=torch.bfloat16)
    others = [
        (a.T.contiguous().T, b),
        (storage[1 : 1 + 512 * 264].view(512, 264), b),  # 2 bytes off 16
        (a[:500], b),
        (a.half(), b.half()),
    ]
    for x, y in others:
        for _ in range(2):
            ref = x.double() @ y.double()
            assert_matches("changed key", helion_ops.matmul(x, y), x @ y, ref)
    assert module.entries() == learned + len(others)


@needs_cuda
def test_double_backward_and_capture_take_the_python_path(extension):
    _, calls = extension
    a, b = make((256, 128), torch.float16), make((128, 192), torch.float16)
    for _ in range(3):  # compiles, teaches, records the backward
        helion_ops.matmul(a, b).sum().backward()
    a.grad = b.grad = None
    out = helion_ops.matmul(a, b)
    assert "ProductFunction" in out.grad_fn.name()
    (ga,) = torch.autograd.grad(out.square().sum(), a, create_graph=True)
    ga.sum().backward()  # a gradient penalty's second backward, through Python's path
    grads = {}
    for name, dtype in (("torch", a.dtype), ("ref", torch.float64)):
        a2, b2 = (t.detach().to(dtype).requires_grad_() for t in (a, b))
        (g,) = torch.autograd.grad((a2 @ b2).square().sum(), a2, create_graph=True)
        g.sum().backward()
        grads[name] = b2.grad
    assert_matches("grad of mat2 through a double backward", b.grad, grads["torch"], grads["ref"])
    # The recording backward; the double backward's first pass (create_graph); its second,
    # which reaches the forward's node again with a grad_out of another layout (recorded).
    assert len(calls) == 3

    x, y = a.detach(), b.detach()
    graph, captured = capture(lambda: helion_ops.matmul(x, y))
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    assert_matches("captured", captured, x @ y, x.double() @ y.double())
