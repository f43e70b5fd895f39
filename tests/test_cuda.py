"""The same checks at realistic sizes with the real GPU configs (skipped without a GPU)."""

from __future__ import annotations

import functools
import threading
import warnings

import helion
import pytest
import torch
import triton
from conftest import DTYPES, capture
from reference import assert_matches
from test_ops import check_addmm, check_matmul, make

import helion_ops
from helion_ops import (
    candidates,
    configs,
    kernel,
    loads,
    long_k,
    model,
    narrow_tiles,
    pipelines,
    plans,
    staging,
    table,
)
from helion_ops.candidates import flattened

pytestmark = pytest.mark.cuda


@pytest.fixture(autouse=True)
def release_gpu_memory():
    """Large float64 references: hand the memory back so parallel workers do not run out."""
    yield
    torch.cuda.empty_cache()


dtypes = pytest.mark.parametrize("dtype_mode", DTYPES, indirect=True, ids=str)

SHAPES = [
    (4096, 4096, 4096),
    (20120, 1536, 512),
    (1000, 777, 333),
    (8192, 1024, 2048),
    (1, 4096, 1),
    # (m, k, n) of a class no shape set holds: a LoRA of rank 16 at 16k tokens (its down and
    # up projections) and an MLP's single output.
    (16384, 4096, 16),
    (16384, 16, 4096),
    (16384, 256, 1),
]


@dtypes
@pytest.mark.parametrize("m,k,n", SHAPES, ids=str)
def test_matmul_fwd_bwd_at_size(dtype_mode, m, k, n):
    a, b = make((m, k), dtype_mode), make((k, n), dtype_mode)
    check_matmul(a, b)


@dtypes
@pytest.mark.parametrize("bias_shape", ["mn", "n"])
@pytest.mark.parametrize("m,k,n", SHAPES[:3], ids=str)
def test_addmm_fwd_bwd_at_size(dtype_mode, bias_shape, m, k, n):
    bias = make((m, n) if bias_shape == "mn" else (n,), dtype_mode)
    a, b = make((m, k), dtype_mode), make((k, n), dtype_mode, transposed=True)
    check_addmm(bias, a, b, alpha=1.5, beta=0.5)


@pytest.mark.parametrize("op", ["matmul", "addmm"])
@pytest.mark.parametrize("layout", ["tt", "tn", "nt", "nn"])
@pytest.mark.parametrize("m,n,k", [(1536, 1536, 1536), (3000, 5000, 2000)], ids=str)
def test_every_operand_layout_runs_at_size(m, n, k, layout, op):
    """tritonbench's layouts ("n": that operand column-major) each choose their own configs,
    forward and backward; each must run as chosen, not fall back with a warning (1536^3 with
    both operands column-major failed for shared memory before 2026-12-02's fallback, NOTES
    109, and fell back until the pair's load order, NOTES 111)."""
    a = make((m, k), torch.bfloat16, transposed=layout[0] == "n")
    b = make((k, n), torch.bfloat16, transposed=layout[1] == "n")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="helion_ops")
        if op == "matmul":
            check_matmul(a, b)
        else:
            check_addmm(make((m, n), torch.bfloat16), a, b)


def tuned_entries_and_biases():
    """Each table entry with every bias it serves: a plain entry also serves addmm's bias
    epilogue (``fit_for_bias``) where no bias entry exists; a bias entry serves [m, n] and [n]."""
    if not torch.cuda.is_available():
        return []
    entries = table.tuned_table(table.gpu_arch(torch.device("cuda")))
    cases = []
    for key in sorted(entries):
        pair = len(key[4]) == 4
        serves_bias = not pair and (key[5] == "bias" or (*key[:5], "bias") not in entries)
        biases = ["none"] * (key[5] == "plain") + ["mn", "n"] * serves_bias
        cases += [pytest.param(key, bias, id=f"{key}-{bias}") for bias in biases]
    return cases


@pytest.mark.parametrize("key,bias_shape", tuned_entries_and_biases())
def test_every_tuned_config_is_correct(key, bias_shape):
    """Each table entry, run on its own shape and layout, against the float64 reference; an
    entry that does not fit an epilogue (and falls back with a warning) fails."""
    m, n, k, dtype_name, layout, _ = key
    dtype = getattr(torch, dtype_name)
    a = make((m, k), dtype, transposed=layout[0] == "c").detach()
    b = make((k, n), dtype, transposed=layout[1] == "c").detach()
    from reference import assert_matches

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="helion_ops")
        if len(layout) == 4:  # a backward's pair: a @ b, then the product sharing grad_out
            other = make((n, m), dtype, transposed=True).detach()  # b.T or a.T
            pair = (a, b, other, a) if layout == "rccr" else (a, b, b, other)
            assert table.config_key(*pair) == key[:5] and configs.tuned_pair(*pair)
            first, second = kernel.launch_mm_pair(*pair)
            want = pair[2].double() @ pair[3].double()
            assert_matches(f"{key} second", second, torch.matmul(*pair[2:]), want)
            got, same_dtype, want = first, torch.matmul(a, b), 0.0
        elif bias_shape == "none":
            got, same_dtype, want = helion_ops.matmul(a, b), torch.matmul(a, b), 0.0
        else:
            bias = make((m, n) if bias_shape == "mn" else (n,), dtype).detach()
            got, same_dtype, want = helion_ops.addmm(bias, a, b), torch.addmm(bias, a, b), bias
    if len(layout) == 2:
        assert table.config_key(a, b) == key[:5]
    assert_matches(f"{key} bias {bias_shape}", got, same_dtype, want + a.double() @ b.double())


# An aligned and an unaligned shape, neither in the table: every candidate the model may
# choose must be right on both, with each epilogue it serves (as ``deepened`` and
# ``fit_for_bias`` make it).
MODEL_SHAPES = [(1000, 776, 520), (1001, 777, 517)]  # K loops of 9 steps: deepened


@pytest.mark.parametrize("layout", ["rr", "rc", "cr"])
@pytest.mark.parametrize("m,n,k", MODEL_SHAPES, ids=str)
@pytest.mark.parametrize("index", range(len(model.BATCH_CANDIDATES)))
def test_every_model_candidate_is_correct(index, m, n, k, layout):
    """The model's candidates and the batch model's own (``BATCH_CANDIDATES`` holds both)."""
    from reference import assert_matches

    candidate = model.BATCH_CANDIDATES[index]
    a = make((m, k), torch.bfloat16, transposed=layout[0] == "c").detach()
    b = make((k, n), torch.bfloat16, transposed=layout[1] == "c").detach()
    bias = make((m, n), torch.bfloat16).detach()
    want = a.double() @ b.double()
    plain = kernel.matmul_kernel.bind((a, b, kernel.scaled(1.0)))
    got = plain.compile_config(pipelines.deepened(candidate, 2, k))(a, b, kernel.scaled(1.0))
    assert_matches(f"candidate {index} {layout}", got, torch.matmul(a, b), want)
    epilogue = kernel.scaled_plus_bias(1.0, 1.0, bias)
    with_bias = kernel.matmul_kernel.bind((a, b, epilogue))
    fitted = pipelines.deepened(pipelines.fit_for_bias(candidate, 2), 2, k, tiles=2)
    got = with_bias.compile_config(fitted)(a, b, epilogue)
    assert_matches(f"candidate {index} {layout} bias", got, torch.addmm(bias, a, b), want + bias)


@pytest.mark.parametrize("m,n,k", [(3000, 5000, 2000), (1536, 1536, 1536), (1001, 777, 333)])
def test_shapes_without_an_entry_run_the_models_choice(m, n, k):
    a = make((m, k), torch.float16).detach()
    b = make((k, n), torch.float16).detach()
    bound = kernel.matmul_kernel.bind((a, b, kernel.scaled(1.0)))
    chosen = configs.choose_config(bound, a, b)
    candidates = [configs.on_host_descriptors(c, a, b) for c in model.MODEL_CANDIDATES]
    assert chosen in [pipelines.deepened(c, 2, k) for c in candidates]
    check_matmul(a.requires_grad_(), b.requires_grad_())


def test_near_ties_break_to_fewer_tiles_but_a_bias_keeps_its_flattened_tile(monkeypatch):
    """4096x32128x512 (no entry): the model's near tie goes to 128x256 tiles for the plain
    epilogue; with addmm's bias those would lose their flattened loop (``fit_for_bias``), so
    the fastest prediction, 128x128, stays."""
    monkeypatch.setattr(configs, "sm_count", lambda device: 132)
    monkeypatch.setattr(configs, "gpu_arch", lambda device: "sm90")
    a = make((4096, 512), torch.bfloat16).detach()
    b = make((512, 32128), torch.bfloat16).detach()
    plain = configs.choose_config(kernel.matmul_kernel.bind((a, b, kernel.scaled(1.0))), a, b)
    assert plain.config["block_sizes"][:2] == [128, 256]
    epilogue = kernel.scaled_plus_bias(1.0, 1.0, make((4096, 32128), torch.bfloat16).detach())
    with_bias = configs.choose_config(kernel.matmul_kernel.bind((a, b, epilogue)), a, b)
    assert with_bias.config["block_sizes"][:2] == [128, 128] and flattened(with_bias)


def test_a_flattened_choice_runs_as_deep_as_shared_memory_allows_but_not_transposed(
    monkeypatch,
):
    """8064x2304x768 (no entry, a K loop of 12 steps): the model's 128x128x64 flattened tile
    runs 6 stages in the plain kernel, 5 beside addmm's bias tile, and its own 4 in the
    transposed kernel (whose store transposes the tile)."""
    monkeypatch.setattr(configs, "sm_count", lambda device: 132)
    monkeypatch.setattr(configs, "gpu_arch", lambda device: "sm90")
    a = make((8064, 768), torch.bfloat16).detach()
    b = make((768, 2304), torch.bfloat16).detach()
    plain = configs.choose_config(kernel.matmul_kernel.bind((a, b, kernel.scaled(1.0))), a, b)
    assert plain.config["block_sizes"] == [128, 128, 64] and flattened(plain)
    assert plain.config["num_stages"] == 6
    epilogue = kernel.scaled_plus_bias(1.0, 1.0, make((8064, 2304), torch.bfloat16).detach())
    with_bias = configs.choose_config(kernel.matmul_kernel.bind((a, b, epilogue)), a, b)
    assert with_bias.config == {**plain.config, "num_stages": 5}
    x, y = b.T, a.T  # x @ y on the transposed kernel: y.T @ x.T, the same product a @ b
    bound = kernel.transposed_kernel.bind((x, y, kernel.scaled(1.0)))
    assert configs.choose_config(bound, x, y).config == {**plain.config, "num_stages": 4}


@pytest.mark.parametrize("layout", ["rr", "rc", "cr"])
def test_a_serving_batch_runs_the_batch_models_choice(monkeypatch, layout):
    """176x8192x8192 (no entry): the batch model chooses for operands row-major ('rr'), the
    shipped model for the others; the product matches float64 either way."""
    monkeypatch.setattr(configs, "sm_count", lambda device: 132)
    monkeypatch.setattr(configs, "gpu_arch", lambda device: "sm90")
    a = make((176, 8192), torch.bfloat16, transposed=layout[0] == "c").detach()
    b = make((8192, 8192), torch.bfloat16, transposed=layout[1] == "c").detach()
    chosen = configs.choose_config(kernel.matmul_kernel.bind((a, b, kernel.scaled(1.0))), a, b)
    product = configs.model_product(a, b)
    chooser = model.shipped_batch_model if layout == "rr" else model.shipped_model
    choice = configs.on_host_descriptors(chooser("sm90").choose(product), a, b)
    expected = pipelines.deepened(choice, 2, 8192)
    assert chosen == pipelines.streaming(expected, 2, 176, 8192, 8192)
    assert_matches(layout, helion_ops.matmul(a, b), torch.matmul(a, b), a.double() @ b.double())


@pytest.mark.parametrize(
    "m,n,k,rows,columns,pieces,block_k",
    [
        (120, 8704, 3072, 128, 128, 1, 64),
        (96, 6656, 5120, 64, 128, 1, 64),
        (80, 4864, 4864, 128, 128, 3, 64),
        (92, 4096, 2560, 64, 64, 1, 256),
    ],
)
def test_a_streaming_product_runs_the_one_wave_choice(
    monkeypatch, m, n, k, rows, columns, pieces, block_k
):
    """A linear layer's x @ w.T of 65-128 rows (no entry): the tile and K pieces of
    ``long_k.one_wave_stream``, as deep as shared memory holds; forward and backward match
    float64."""
    monkeypatch.setattr(configs, "sm_count", lambda device: 132)
    monkeypatch.setattr(configs, "gpu_arch", lambda device: "sm90")
    x = make((m, k), torch.bfloat16).detach()
    w_t = make((k, n), torch.bfloat16, transposed=True).detach()
    if pieces == 1:
        bound = kernel.matmul_kernel.bind((x, w_t, kernel.scaled(1.0)))
        expected = pipelines.streaming(
            candidates.config(rows, columns, block_k, 4, 2, "flat", "pointer"), 2, m, n, k
        )
    else:
        bound = kernel.split_k_kernel.bind((x, w_t))
        expected = pipelines.streaming(candidates.split_config(128, 128, 64, pieces, 4), 2, m, n, k)
    assert kernel.long_k_product(m, n, k, torch.bfloat16) is (pieces > 1)
    assert configs.choose_config(bound, x, w_t) == expected
    check_matmul(x.requires_grad_(), w_t.requires_grad_())


@pytest.fixture
def chosen_configs(monkeypatch):
    """The configs ``configs.choose_config`` returns for single products (two operands: the
    plain and split-K kernels), in the order of their first launches."""
    chosen = []
    choose_config = configs.choose_config

    def recorded(bound, *operands):
        config = choose_config(bound, *operands)
        if len(operands) == 2:
            chosen.append(config)
        return config

    monkeypatch.setattr(configs, "choose_config", recorded)
    return chosen


def test_an_odd_k_runs_staged_on_tensor_descriptors(chosen_configs):
    """K = 479 (rows of 958 bytes): the forward's mat1 staged, and the model's choice among
    tensor-descriptor candidates (a pointer one would load K element by element); forward
    and both grads against float64."""
    kernel.reset()
    a, b = make((32768, 479), torch.bfloat16), make((479, 1024), torch.bfloat16)
    check_matmul(a, b)
    assert chosen_configs[0].config["indexing"] == "tensor_descriptor"


@pytest.mark.parametrize("m,n,k", [(2960, 2960, 2960), (1408 + 100, 1536, 1536)], ids=str)
def test_a_product_with_a_partial_last_wave_splits_it(monkeypatch, m, n, k):
    """Shapes (in no table) whose last wave the model splits over K, under a CUDA graph
    capture (too short to split in eager calls): forward, both grads and addmm's bias
    through ``last_wave_kernel``."""
    a, b = make((m, k), torch.bfloat16), make((k, n), torch.bfloat16)
    split = configs.last_wave_split(a, b)
    assert split is not None and not split.eager
    monkeypatch.setattr(kernel, "capturing", lambda t: True)
    # The operands as given: copied onto 128-byte lines they would be other products, which
    # the model splits or not on their own (``staging.lined_copies``).
    monkeypatch.setattr(staging, "stages_onto_lines", lambda products: False)
    kernel.reset()
    check_matmul(a, b)
    assert any(key[0] is kernel.last_wave_kernel for key in kernel._compiled)
    bias = make((n,), torch.bfloat16)
    check_addmm(bias, a, b, alpha=1.5, beta=0.5)


@pytest.mark.parametrize("m,n,k", [(1792, 2816, 1280), (6200, 1800, 1200), (2304, 2304, 2304)])
def test_a_backward_the_model_pairs_runs_in_one_launch(m, n, k, monkeypatch):
    """Training shapes whose backward the wave model runs in one launch
    (``configs.model_pair``: flat programs with pointer loads, flat with tensor descriptors,
    persistent ones): forward and both grads of matmul and addmm against float64. The
    operands as given (6200x1800x1200's are off 128-byte lines; copied onto them they would
    be another pair, ``staging.lined_copies``)."""
    monkeypatch.setattr(staging, "stages_onto_lines", lambda products: False)
    a, b = make((m, k), torch.bfloat16), make((k, n), torch.bfloat16)
    g = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    at, bt = a.detach().T, b.detach().T
    assert configs.model_pair(*((g, bt, at, g) if m <= n else (at, g, g, bt))) is not None
    kernel.reset()
    check_matmul(a, b)
    assert any(key[0] is kernel.pair_kernel for key in kernel._compiled)
    check_addmm(make((n,), torch.bfloat16), a, b, alpha=1.5, beta=0.5)


def test_a_capture_splits_what_eager_calls_run_plain(monkeypatch):
    """2960^3 bf16 splits its last wave only under a CUDA graph capture: the eager call runs
    the plain kernel and compiles the split; the capture compiles nothing, and its replay
    matches the eager result within the split's rounding (one bf16 unit of the largest)."""
    a, b = make((2960, 2960), torch.bfloat16).detach(), make((2960, 2960), torch.bfloat16).detach()
    kernel.reset()
    eager = helion_ops.matmul(a, b)
    compiled = set(kernel._compiled)
    assert kernel.last_wave_kernel in {key[0] for key in compiled}
    runs = []
    launch_last_wave = kernel.launch_last_wave
    monkeypatch.setattr(
        kernel, "launch_last_wave", lambda *args: runs.append(1) or launch_last_wave(*args)
    )
    helion_ops.matmul(a, b)
    assert runs == []
    graph, captured = capture(lambda: helion_ops.matmul(a, b))
    graph.replay()
    torch.cuda.synchronize()
    assert set(kernel._compiled) == compiled and runs == [1]
    unit = eager.abs().max().item() * 2.0**-8
    torch.testing.assert_close(captured, eager, rtol=0, atol=unit)


def test_a_pair_for_eager_calls_only_is_two_launches_under_a_capture():
    """2000^3 bf16's backward (NOTES 62): eager calls run both products in one launch, as the
    host time of a launch counts there, and a CUDA graph captures the two launches the model
    predicts as fast, compiled by the eager call; eager and replayed grads against float64."""
    a, b, g = (make((2000, 2000), torch.bfloat16).detach() for _ in range(3))
    operands = (g, b.T, a.T, g)
    assert configs.model_pair(*operands) is None
    assert configs.model_pair(*operands, eager=True) is not None
    kernel.reset()
    eager = kernel.launch_mm_pair(*operands, 0.5)
    assert any(key[0] is kernel.pair_kernel for key in kernel._compiled)
    compiled = set(kernel._compiled)
    graph, captured = capture(lambda: kernel.launch_mm_pair(*operands, 0.5))
    graph.replay()
    torch.cuda.synchronize()
    assert set(kernel._compiled) == compiled  # the capture compiled nothing
    assert list(kernel._fast_pair.values()) == [None]  # captures: two launches
    assert isinstance(next(iter(kernel._fast_pair_eager.values())), plans.LaunchPlan)
    products = [("g @ b.T", g, b.T), ("a.T @ g", a.T, g)]
    for (name, x, y), ours, replayed in zip(products, eager, captured, strict=True):
        want = 0.5 * (x.double() @ y.double())
        assert_matches(f"eager {name}", ours, 0.5 * (x @ y), want)
        assert_matches(f"captured {name}", replayed, 0.5 * (x @ y), want)


def test_host_tensor_descriptors_are_made_for_every_call(monkeypatch):
    """A config with Helion's ``host_tensor_descriptors`` (the runtime's where rows start off
    128-byte lines, or ``HELION_OPS_AUTOTUNE=1``'s search) passes TMA descriptors built on
    the host: the launch plan makes each call's on its own tensors, so a second call of the
    same specialization reads its own operands."""
    chosen = configs.choose_config

    def with_host_descriptors(bound_kernel, *operands):
        config = chosen(bound_kernel, *operands).config
        if bound_kernel.kernel is not kernel.matmul_kernel:  # a split's, say: as chosen
            return helion.Config(**config)
        return helion.Config(
            **{**config, "indexing": "tensor_descriptor", "host_tensor_descriptors": True}
        )

    monkeypatch.setattr(configs, "choose_config", with_host_descriptors)
    kernel.reset()
    pairs = [
        (make((2048, 1024), torch.bfloat16).detach(), make((1024, 512), torch.bfloat16).detach())
        for _ in range(2)
    ]
    for a, b in pairs:
        out = kernel.launch_mm(a, b)
        assert_matches("a @ b", out, a @ b, a.double() @ b.double())
    planned = [p for p in kernel._compiled.values() if isinstance(p, plans.LaunchPlan)]
    assert any(p.descriptors for p in planned), "no plan with host-built descriptors"
    kernel.reset()


def test_deterministic_algorithms_give_the_same_bits_every_run(monkeypatch):
    """Under torch.use_deterministic_algorithms(True) (on here: the poisoning fixture), a
    split-K product (a.T @ g of a tall product) runs the split in pieces, and one whose last
    wave splits under a capture the plain kernel: the same bits call after call."""
    monkeypatch.setattr(
        kernel, "deterministic_algorithms", torch.are_deterministic_algorithms_enabled
    )
    monkeypatch.setattr(kernel, "capturing", lambda t: True)
    tall, g = make((30000, 700), torch.bfloat16).detach(), make((30000, 512), torch.bfloat16)
    square = make((2960, 2960), torch.bfloat16).detach()
    kernel.reset()
    for a, b in ((tall.T, g.detach()), (square, square)):
        first = kernel.launch_mm(a, b)
        assert all(torch.equal(first, kernel.launch_mm(a, b)) for _ in range(3))
    used = {key[0] for key in kernel._compiled}
    assert kernel.split_k_pieces_kernel in used
    assert not used & {kernel.split_k_kernel, kernel.last_wave_kernel}


@pytest.mark.parametrize("dtype_mode", [torch.float16, torch.bfloat16], indirect=True, ids=str)
@pytest.mark.parametrize("op", ["matmul", "addmm"])
def test_an_lm_head_of_odd_vocabulary_runs_staged(monkeypatch, chosen_configs, dtype_mode, op):
    """An LM head of 50257 (rows of 100514 bytes): the wave model stages the forward's
    mat2 and the backward's grad_out (once for both products) and mat2.T; every result
    against float64, every kernel on aligned operands, every product on tensor descriptors
    (each has 50257 along an operand's contiguous dimension, where pointer loads would be of
    one element: 2.15 ms against 0.68 for the forward on the H200)."""
    from test_ops import staged_copies

    copies = staged_copies(monkeypatch)
    kernel.reset()
    m, n, k = 2048, 50257, 768
    a, b = make((m, k), dtype_mode), make((k, n), dtype_mode)
    if op == "matmul":
        check_matmul(a, b)
    else:
        check_addmm(make((n,), dtype_mode), a, b, alpha=1.5, beta=0.5)
    assert copies.count((m, n)) == 1  # grad_out
    assert (k, n) in copies and (n, k) in copies  # mat2, mat2.T
    for key in kernel._compiled:
        operands = [t for t in key[1:] if isinstance(t, tuple)][:2]
        for *_, strides, alignment in operands:
            assert alignment == 0 and all(s == 1 or s * 2 % 16 == 0 for s in strides), key
    assert len(chosen_configs) == 3  # the forward, grad_out @ mat2.T and mat1.T @ grad_out
    assert all(c.config["indexing"] == "tensor_descriptor" for c in chosen_configs), chosen_configs


def test_split_k_without_an_entry_runs_the_split_rule():
    """A few output tiles and a long K, not in the table: ``long_k.split_rule``'s config."""
    a = make((700, 30000), torch.bfloat16, transposed=True)  # a.T @ g of a tall product
    b = make((30000, 300), torch.bfloat16)
    assert kernel.wants_split_k(700, 300, 30000, torch.bfloat16)
    bound = kernel.split_k_kernel.bind((a.detach(), b.detach()))
    sms = configs.sm_count(a.device)
    chosen = configs.choose_config(bound, a, b)
    assert chosen == long_k.split_rule(700, 300, 30000, sms) and chosen.config["split_k"] > 1
    check_matmul(a, b)


@pytest.mark.parametrize("transposed", [False, True], ids=["rr", "rc"])
@pytest.mark.parametrize(
    "m,k,n,tile", [(96, 11008, 4096, [128, 128]), (160, 5120, 5120, [64, 256])]
)
def test_a_long_k_batch_product_runs_the_split_rule(monkeypatch, transposed, m, k, n, tile):
    """An MLP's down projection at a decode batch of 96 and a projection at 160 tokens
    (``long_k.long_k_batch``): split-K on ``long_k.split_rule``'s config (the second on
    64x256 tiles) as deep as ``pipelines.streaming`` makes it, b row-major or a transposed
    view (nn.Linear's)."""
    from test_ops import launches

    kernel.reset()
    launched = launches(monkeypatch)
    a = make((m, k), torch.bfloat16)
    b = make((k, n), torch.bfloat16, transposed=transposed)
    bound = kernel.split_k_kernel.bind((a.detach(), b.detach()))
    sms = configs.sm_count(a.device)
    chosen = configs.choose_config(bound, a, b)
    expected = pipelines.streaming(long_k.split_rule(m, n, k, sms), 2, m, n, k)
    assert chosen == expected and chosen.config["split_k"] > 1
    assert chosen.config["block_sizes"][:2] == tile
    check_matmul(a, b)
    assert launched[0] is kernel.split_k_kernel


def test_a_thin_product_with_k_off_16_bytes_runs_the_thin_split(monkeypatch):
    """The GPT-2 head's grad_out @ mat2.T at 4 tokens (``narrow_tiles.thin``, K of 50257 off 16
    bytes): split-K on ``long_k.thin_split``'s config, as deep as ``pipelines.streaming``
    makes it."""
    from test_ops import launches

    m, k, n = 4, 50257, 768
    kernel.reset()  # (the next test's backward has this product's key: no plan from it)
    launched = launches(monkeypatch)
    a = make((m, k), torch.bfloat16)
    b = make((k, n), torch.bfloat16, transposed=True)
    assert narrow_tiles.thin(m, n, k)
    bound = kernel.split_k_kernel.bind((a.detach(), b.detach()))
    sms = configs.sm_count(a.device)
    expected = pipelines.streaming(long_k.thin_split(m, n, k, sms), 2, m, n, k)
    assert configs.choose_config(bound, a, b) == expected
    check_matmul(a, b)
    assert launched[0] is kernel.split_k_kernel


@pytest.mark.parametrize(
    "m,k,n,transposed,tma",
    [
        (16, 4096, 6144, False, True),
        (1, 3072, 9216, False, True),  # at most 32 rows, a K short of THIN_K
        (12, 4544, 18176, True, True),  # 128 columns for a wave of programs
        (48, 5120, 5120, True, True),
        (2, 8192, 8192, False, True),
        (33, 4096, 6144, False, True),
        (4, 768, 50257, False, False),  # the GPT-2 head's forward at 4 tokens
    ],
)
def test_a_few_rows_product_runs_narrow_tiles(monkeypatch, m, k, n, transposed, tma):
    """Decode steps' products (``narrow_tiles.few_rows``: thin ones whose narrow tiles pay, those
    of at most 32 rows and a long K, and the GPT-2 head's forward, b's rows of 50257 off 16
    bytes, unstaged) run the plain kernel
    on ``narrow_tiles.few_rows_config``; forward and backward against float64, with a bias too."""
    from test_ops import launches

    # The GPT-2 head's forward has the key of the test above's backward product: with that
    # key's plan the first call would launch through it, past ``_run``: the likely cause of
    # this test's one failure, in call 254's whole suite (its message was not kept).
    kernel.reset()
    launched = launches(monkeypatch)
    a = make((m, k), torch.bfloat16)
    b = make((k, n), torch.bfloat16, transposed=transposed)
    x, y = a.detach(), b.detach()
    assert narrow_tiles.few_rows(x, y) and loads.tma_aligned(x, y) is tma
    assert not staging.worth_staging(x, y) and not configs.transposed_pays(x, y)
    bound = kernel.matmul_kernel.bind((x, y, kernel.scaled(1.0)))
    assert configs.choose_config(bound, x, y) == narrow_tiles.few_rows_config(m, n, tma)
    check_matmul(a, b)
    assert launched[0] is kernel.matmul_kernel
    check_addmm(make((n,), torch.bfloat16), a, b, alpha=1.5, beta=0.5)


@pytest.mark.parametrize(
    "m,k,n,transposed",
    [(16384, 4096, 1, False), (6144, 5120, 8, False), (12288, 4096, 1, True)],
    ids=str,
)
def test_a_few_columns_product_runs_transposed_on_narrow_tiles(monkeypatch, m, k, n, transposed):
    """A router's or a value head's product (``narrow_tiles.few_columns``) runs the transposed
    kernel on the narrow tiles of its transposed product; forward and backward against
    float64, with a bias too."""
    from test_ops import launches

    kernel.reset()
    launched = launches(monkeypatch)
    a = make((m, k), torch.bfloat16)
    b = make((k, n), torch.bfloat16, transposed=transposed)
    x, y = a.detach(), b.detach()
    assert narrow_tiles.few_columns(x, y) and configs.transposed_pays(x, y)
    bound = kernel.transposed_kernel.bind((x, y, kernel.scaled(1.0)))
    assert configs.choose_config(bound, x, y) == narrow_tiles.few_rows_config(n, m, True)
    check_matmul(a, b)
    assert launched[0] is kernel.transposed_kernel
    # Nothing copied onto lines, forward or backward: every product is bandwidth-bound
    # (``staging.priced_by_model``; b was copied first on d51aa69, NOTES 180).
    assert kernel.padded_copy_kernel not in launched
    launched.clear()
    check_addmm(make((n,), torch.bfloat16), a, b, alpha=1.5, beta=0.5)
    assert launched[0] is kernel.transposed_kernel


@pytest.mark.parametrize(
    "m,k,n", [(4096, 8192, 8), (4096, 16384, 1), (4096, 6144, 8), (4096, 4096, 8)], ids=str
)
def test_a_few_columns_product_of_a_long_k_splits_over_k(monkeypatch, m, k, n):
    """A LoRA A of rank 8, a value head's (``narrow_tiles.few_columns_long_k``): the split-K
    kernel on 16 columns' tiles; forward and backward against float64, with a bias too."""
    from test_ops import launches

    kernel.reset()
    launched = launches(monkeypatch)
    a, b = make((m, k), torch.bfloat16), make((k, n), torch.bfloat16)
    x, y = a.detach(), b.detach()
    bound = kernel.split_k_kernel.bind((x, y))
    assert configs.choose_config(bound, x, y).config["block_sizes"][:2] == [128, 16]
    check_matmul(a, b)
    assert launched[0] is kernel.split_k_kernel
    launched.clear()
    check_addmm(make((n,), torch.bfloat16), a, b, alpha=1.5, beta=0.5)
    assert launched[0] is kernel.split_k_kernel


def test_a_rank_4_lora_bs_weight_gradient_copies_its_few_rows(monkeypatch):
    """8192x5120x4: the weight gradient a.T @ grad_out (4x5120x8192, a.T's columns of 8
    bytes) copies a.T (``staging.few_rows_worth_copying``) for the narrow tiles; forward and
    backward against float64."""
    from test_ops import staged_copies

    kernel.reset()
    copied = staged_copies(monkeypatch)
    a, b = make((8192, 4), torch.bfloat16), make((4, 5120), torch.bfloat16)
    check_matmul(a, b)
    assert (4, 8192) in copied


def test_a_rank_4_lora_as_weight_gradient_reads_the_staged_grad_out_transposed(monkeypatch):
    """8192x4x5120: the backward copies grad_out (rows of 8 bytes) for grad_out @ mat2.T, and
    mat1.T @ grad_out reads that copy on the few columns' transposed narrow tiles
    (``narrow_tiles.few_columns``), not on 128x128 tiles; forward and backward against
    float64."""
    from test_ops import launches

    kernel.reset()
    launched = launches(monkeypatch)
    a, b = make((8192, 5120), torch.bfloat16), make((5120, 4), torch.bfloat16)
    check_matmul(a, b)
    assert kernel.transposed_kernel in launched[1:]


def test_a_router_of_60_experts_runs_64_columns_tiles(monkeypatch):
    """16384x60x2048 (``narrow_tiles.narrow_columns``): b staged onto rows of 64, then the
    plain kernel on 128x64 tensor-descriptor tiles; forward and backward against float64."""
    from test_ops import launches

    kernel.reset()
    launched = launches(monkeypatch)
    a, b = make((16384, 2048), torch.bfloat16), make((2048, 60), torch.bfloat16)
    check_matmul(a, b)
    assert launched[0] is kernel.matmul_kernel
    staged = staging.aligned_copy(b.detach())
    bound = kernel.matmul_kernel.bind((a.detach(), staged, kernel.scaled(1.0)))
    assert configs.choose_config(bound, a.detach(), staged).config["block_sizes"][:2] == [128, 64]


def test_a_split_of_one_piece_runs_the_plain_kernel(monkeypatch):
    """Where ``split_rule`` would cut K in one piece (2048x2048 outputs: 128 tiles of 128x256
    already fill a wave), the product runs the plain kernel, without the fp32 sums and cast;
    where it cuts K, the split-K kernel."""
    from test_ops import launches

    launched = launches(monkeypatch)
    one = (make((2048, 16384), torch.bfloat16), make((16384, 2048), torch.bfloat16))
    cut = (make((700, 30000), torch.bfloat16), make((30000, 300), torch.bfloat16))
    sms = configs.sm_count(one[0].device)
    assert long_k.split_rule(2048, 2048, 16384, sms).config["split_k"] == 1
    assert kernel.wants_split_k(2048, 2048, 16384, torch.bfloat16) and not configs.splits_k(*one)
    assert configs.splits_k(*cut)
    check_matmul(*one)
    assert launched[0] is kernel.matmul_kernel
    launched.clear()
    check_matmul(*cut)
    assert launched[0] is kernel.split_k_kernel


def test_a_kernel_first_compiled_in_another_thread_runs_in_this_one():
    """A backward runs in autograd's thread; what it compiles must also run in the caller's.

    Triton's scratch allocator for tensor descriptors is a thread-local setting, and the
    4096^3 column-major-a table entry uses tensor descriptors.
    """
    from reference import assert_matches

    kernel.reset()
    a = make((4096, 4096), torch.bfloat16, transposed=True).detach()
    b = make((4096, 4096), torch.bfloat16).detach()
    assert table.config_key(a, b)[-1] == "cr"
    outputs = {}
    thread = threading.Thread(target=lambda: outputs.update(other=helion_ops.matmul(a, b)))
    thread.start()
    thread.join()
    assert "other" in outputs, "the call in the other thread raised"
    want = a.double() @ b.double()
    for name, got in [*outputs.items(), ("this", helion_ops.matmul(a, b))]:
        assert_matches(name, got, torch.matmul(a, b), want)


def test_backends_on_shared_leaves_time_their_backward_on_one_stream():
    """OLD tritonbench's backward support under CUDA graphs: a second backend on the same
    leaves, while the first's graph lives (tritonbench keeps its baseline), accumulates the
    leaves' grads without syncing with another stream, and its backward captures and replays.
    """
    from types import SimpleNamespace

    from helion_ops.tritonbench_bwd import get_bwd_fn, grad_leaves

    bias, a, b = grad_leaves(
        [make(s, torch.bfloat16).detach() for s in [(256, 64), (256, 96), (96, 64)]]
    )
    op = SimpleNamespace(example_inputs=(bias, a, b), use_cuda_graphs=True)
    baseline = get_bwd_fn(op, lambda: torch.addmm(bias, a, b))
    baseline()
    ours = get_bwd_fn(op, lambda: helion_ops.addmm(bias, a, b))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*AccumulateGrad node's stream")
        ours()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            ours()
        graph.replay()
        torch.cuda.synchronize()
    ours()  # eager again, after the replay: the grads of a fresh call
    torch.manual_seed(0)
    dy = 0.1 * torch.randn(256, 64, device="cuda", dtype=torch.bfloat16)  # get_bwd_fn's dy
    from reference import assert_matches

    want = dy.double() @ b.detach().double().T
    assert_matches("grad of mat1", a.grad, dy @ b.detach().T, want)
    torch.testing.assert_close(bias.grad, dy, rtol=0, atol=0)


def test_graphed_backward_replays_on_one_stream():
    """OLD tritonbench's backward as the plugin installs it, captured as triton's
    ``do_bench_cudagraph`` captures it (its warm-up call on a stream of its own, the capture
    on ``torch.cuda.graph``'s default stream), aten first on shared leaves: a replay runs every
    backward's kernels on one stream (with the forward on a stream of its own, each backward
    got a stream and an idle gap of its own, NOTES 164), with the grads of float64."""
    from types import SimpleNamespace

    from torch.profiler import ProfilerActivity, profile

    from helion_ops.tritonbench_bwd import get_bwd_fn, grad_leaves

    a, b = grad_leaves([make((512, 256), torch.bfloat16), make((384, 256), torch.bfloat16).T])
    op = SimpleNamespace(example_inputs=(a, b), use_cuda_graphs=True)
    torch.manual_seed(0)
    dy = 0.1 * torch.randn(512, 384, device="cuda", dtype=torch.bfloat16)  # get_bwd_fn's dy
    a0, b0 = a.detach(), b.detach()
    for fn in (torch.matmul, helion_ops.matmul):
        bwd_fn = get_bwd_fn(op, functools.partial(fn, a, b))
        with torch.cuda.stream(torch.cuda.Stream()):
            bwd_fn()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(3):
                    bwd_fn()
            a.grad.fill_(float("nan"))  # the captured calls' grads, filled by the replay
            b.grad.fill_(float("nan"))
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                graph.replay()
                torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        assert len(kernels) >= 3, kernels
        assert len({e.device_resource_id for e in kernels}) == 1, fn
        assert_matches("grad of a", a.grad, dy @ b0.T, dy.double() @ b0.double().T)
        assert_matches("grad of b", b.grad, a0.T @ dy, a0.double().T @ dy.double())


def test_a_tall_backward_runs_its_two_products_side_by_side():
    """A tall input's backward (its weight gradient a long-K product, split over K) runs the
    other product on a stream of its own: a capture keeps the two streams, and the grads of
    the first eager call and of a replay (outputs poisoned before it) match float64's."""
    from torch.profiler import ProfilerActivity, profile

    a, b = make((20120, 1536), torch.bfloat16), make((1536, 512), torch.bfloat16)
    dy = torch.randn(20120, 512, device="cuda", dtype=torch.bfloat16)
    a0, b0 = a.detach(), b.detach()

    def backward():
        return torch.autograd.grad(helion_ops.matmul(a, b), (a, b), dy)

    grads = backward()
    graph, captured = capture(backward)
    for g in captured:
        g.fill_(float("nan"))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert len({e.device_resource_id for e in kernels}) == 2, kernels
    for got in (grads, captured):
        assert_matches("grad of a", got[0], dy @ b0.T, dy.double() @ b0.double().T)
        assert_matches("grad of b", got[1], a0.T @ dy, a0.double().T @ dy.double())


def test_a_tall_backward_side_by_side_under_cuda_graph_trees():
    """torch.compile's CUDA graph trees (``mode="reduce-overhead"``: a warm-up step, a
    captured one, then replays) over a tall backward whose products run side by side, the
    side one's output made on the side stream: every step's grads match float64's."""
    torch._dynamo.reset()
    a, b = make((20120, 1536), torch.bfloat16), make((1536, 512), torch.bfloat16)
    dy = torch.randn(20120, 512, device="cuda", dtype=torch.bfloat16)
    a0, b0 = a.detach(), b.detach()
    step = torch.compile(helion_ops.matmul, mode="reduce-overhead")
    for _ in range(4):
        a.grad = b.grad = None
        step(a, b).backward(dy)
        torch.cuda.synchronize()
        assert_matches("grad of a", a.grad, dy @ b0.T, dy.double() @ b0.double().T)
        assert_matches("grad of b", b.grad, a0.T @ dy, a0.double().T @ dy.double())


@pytest.mark.parametrize("mode", ["bwd", "fwd_bwd"])
@pytest.mark.parametrize("op", ["gemm", "addmm"])
def test_the_built_in_harness_times_backwards_under_cuda_graphs(op, mode):
    """run_bench without tritonbench, ``--cudagraph``: the baseline's accuracy pass, then each
    backend's captured backward (on the H200 the first capture once failed, and every later
    random draw with it)."""
    from benchmarks import harness
    from benchmarks.suite import BACKENDS

    names = BACKENDS[op]
    for _ in range(2):  # a second call: nothing left broken by the first
        argv = ["--op", op, "--mode", mode, "--cudagraph", "--precision", "bf16"]
        argv += ["--metrics", "accuracy,latency", "--only", f"{names.baseline},{names.helion}"]
        baseline, helion = harness.run_call([*argv, "--m", "512", "--n", "384", "--k", "256"])
        assert isinstance(baseline.metrics["latency"], float), baseline.metrics
        assert isinstance(helion.metrics["latency"], float), helion.metrics
        assert helion.metrics["accuracy"] == 1.0


def test_copies_of_grads_outlast_the_next_backward_from_another_stream():
    """The accuracy pass's copies of a backward's grads (``settled_grads``): under graphs the
    grads lie in the forward's stream's pool, and the timed backward, launched from
    do_bench's stream once they are cleared, reuses their memory. The caller's stream is held
    back (``torch.cuda._sleep``) so that a copy merely queued there would read that backward's
    grads (the harness's gemm bwd once read accuracy 0 under 16 workers, NOTES 145)."""
    from helion_ops.tritonbench_bwd import on_the_capture_stream, settled_grads

    a, b = (make(s, torch.bfloat16) for s in ((512, 256), (256, 384)))
    with on_the_capture_stream(True):
        y = helion_ops.matmul(a, b)
    dy = torch.randn_like(y)
    y.backward(dy, retain_graph=True)
    torch.cuda.synchronize()
    expected = [a.grad.clone(), b.grad.clone()]
    torch.cuda._sleep(200_000_000)  # about 0.1 s of the caller's stream
    copies = settled_grads([a, b])
    freed = {a.grad.data_ptr(), b.grad.data_ptr()}
    a.grad = b.grad = None
    with torch.cuda.stream(torch.cuda.Stream()):
        y.backward(-dy, retain_graph=True)
    torch.cuda.synchronize()
    for got, want in zip(copies, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    # The race is real here: the second backward's grads took the first's memory.
    assert freed & {a.grad.data_ptr(), b.grad.data_ptr()}
    torch.testing.assert_close(a.grad, -expected[0])  # (the second backward ran)


@pytest.mark.parametrize("mode", ["bwd", "fwd_bwd"])
def test_new_tritonbench_lazy_forward_backward_captures_for_every_backend(mode):
    """NEW tritonbench's get_bwd_fn as fixed by the plugin: its forward runs in bwd_fn's first
    call, which is the accuracy check's on the legacy default stream (fwd_bwd runs a forward
    of its own before it); then do_bench captures the call on a stream of its own. Unfixed,
    the capture fails (cudaErrorStreamCaptureImplicit)."""
    from helion_ops import tritonbench_bwd

    class NewOperator:  # NEW's get_bwd_fn, reduced to what matters here
        use_cuda_graphs = True
        requires_grad = True

        def _get_bm_func(self, bm_func_name):  # the plugin wraps it; unused here
            raise NotImplementedError

        def get_input_iter(self):
            shapes = ((256, 96), (96, 64))
            yield tritonbench_bwd.grad_leaves([make(s, torch.bfloat16) for s in shapes])

        def get_bwd_fn(self, fwd_fn):
            state = {}

            def bwd_fn():
                if not state:
                    state["y"] = fwd_fn()
                    torch.manual_seed(0)
                    state["dy"] = 0.1 * torch.randn_like(state["y"])
                state["y"].backward(state["dy"], retain_graph=True)

            return bwd_fn

    tritonbench_bwd.fix_native_backward(NewOperator)
    op = NewOperator()
    a, b = next(op.get_input_iter())
    grads = {}
    for name, fn in (("aten", torch.matmul), ("helion", helion_ops.matmul)):
        fwd_fn = functools.partial(fn, a, b)
        bwd_fn = op.get_bwd_fn(fwd_fn)

        def timed(bwd_fn=bwd_fn, fwd_fn=fwd_fn):  # NEW's bwd_fn, or its fwd_bwd_fn
            if mode == "fwd_bwd":
                fwd_fn()
            bwd_fn()

        a.grad = b.grad = None
        timed()  # the accuracy check, on the legacy default stream
        torch.cuda.synchronize()
        grads[name] = (a.grad.clone(), b.grad.clone())
        with torch.cuda.stream(torch.cuda.Stream()):
            timed()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                a.grad = b.grad = None
                timed()
            graph.replay()
        torch.cuda.synchronize()
    for got, want in zip(grads["helion"], grads["aten"], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("m,k,n", [(1000, 777, 333), (4096, 4096, 4096)], ids=str)
def test_operands_on_another_gpu_than_the_current_one(m, k, n):
    """Triton launches on the current device; the launchers launch on the operands'."""

    def leaf(*shape):
        return torch.randn(shape, dtype=torch.bfloat16, device="cuda:1").requires_grad_()

    assert torch.cuda.current_device() == 0
    for _ in range(2):  # the first call builds the launch plans, the second runs them
        a, b, bias = leaf(m, k), leaf(k, n), leaf(n)
        check_matmul(a, b)
        check_addmm(bias, a, b, alpha=1.5, beta=0.5)
        assert helion_ops.matmul(a, b).device == torch.device("cuda:1")
    assert torch.cuda.current_device() == 0


def test_an_output_past_2_31_elements():
    """65536 x 32800 outputs from operands of far fewer elements: 64-bit offsets."""
    a = torch.randn(65536, 768, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(768, 32800, dtype=torch.bfloat16, device="cuda")
    out = helion_ops.matmul(a, b)
    last = slice(65536 - 64, None)  # the rows whose offsets pass 2**31
    assert_matches("last rows", out[last], a[last] @ b, a[last].double() @ b.double())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("m,k,n", [(992, 992, 1000), (300, 512, 3000), (4096, 2560, 1000)], ids=str)
def test_b_rows_on_16_bytes_run_transposed_at_size(monkeypatch, dtype, m, k, n):
    """The transposed kernel with the model's real configs (tensor descriptors, persistent):
    each forward launches it first (the backwards' products as the model decides)."""
    from test_ops import launches

    monkeypatch.setattr(kernel, "last_wave_split", lambda a, b: None)
    launched = launches(monkeypatch)
    a, b = make((m, k), dtype), make((k, n), dtype)
    check_matmul(a, b)
    assert launched[0] is kernel.transposed_kernel
    launched.clear()
    check_addmm(make((n,), dtype), a, b, alpha=1.5, beta=0.5)
    assert launched[0] is kernel.transposed_kernel


@pytest.mark.parametrize(
    "m,n,k,pays",
    [
        (992, 1000, 992, True),
        (8192, 1000, 4096, True),
        (32768, 1000, 512, False),
        (8192, 1024, 4096, False),
    ],
    ids=str,
)
def test_transposed_pays_for_long_k_or_few_tiles(m, n, k, pays):
    a = torch.empty(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.empty(k, n, dtype=torch.bfloat16, device="cuda")
    assert configs.transposed_pays(a, b) is pays


def test_an_entry_for_the_product_and_its_epilogue_keeps_it_plain(monkeypatch):
    """A plain entry keeps a @ b plain, a bias entry addmm's forward: ``tune`` writes one
    only where it beats the transposed kernel."""
    a = torch.empty(992, 992, dtype=torch.bfloat16, device="cuda")
    b = torch.empty(992, 1000, dtype=torch.bfloat16, device="cuda")
    key = (*table.config_key(a, b), "bias")
    entry = helion.Config(block_sizes=[64, 128, 64], num_warps=4, num_stages=3)
    assert configs.transposed_pays(a, b, "plain") and configs.transposed_pays(a, b, "bias")
    monkeypatch.setattr(configs, "tuned_table", lambda arch: {key: entry})
    assert configs.transposed_pays(a, b, "plain") and not configs.transposed_pays(a, b, "bias")


@pytest.mark.skipif(not triton.__version__.startswith("3.6."), reason="Triton 3.6's runner")
def test_plans_launch_through_tritons_c_launcher_with_and_without_scratch():
    """On Triton 3.6 every plan, of pointer loads (no scratch) and of tensor descriptors built
    in the kernel (scratch memory each launch), calls the C launch function itself, and a
    second call (through it) computes its own operands' product."""
    kernel.reset()
    config = configs.choose_config
    for indexing in ("pointer", "tensor_descriptor"):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(
                configs,
                "choose_config",
                lambda bound, *ops, indexing=indexing: helion.Config(
                    **{
                        **config(bound, *ops).config,
                        "indexing": indexing,
                        "host_tensor_descriptors": False,
                    }
                ),
            )
            for _ in range(3):
                a, b = make((1024, 768), torch.bfloat16), make((768, 512), torch.bfloat16)
                out = kernel.launch_mm(a.detach(), b.detach())
                want = a.detach().double() @ b.detach().double()
                assert_matches(indexing, out, a.detach() @ b.detach(), want)
        (plan,) = [p for p in kernel._compiled.values() if isinstance(p, plans.LaunchPlan)]
        assert plan.direct is not None, indexing
        assert (plan.direct.scratch > 0) == (indexing == "tensor_descriptor")
        kernel.reset()
