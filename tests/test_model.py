"""The wave model, its fit, the user table, and the shapes that measure how it generalizes."""

from __future__ import annotations

import csv
import gzip
import itertools
import json
import math
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest
import torch

from helion_ops import configs, fit, kernel, loads, long_k, model, shapes, tune, warmup
from helion_ops.candidates import config, flattened

SHAPE_SETS = Path(__file__).parent.parent / "benchmarks" / "shapes"
VALIDATION_CSV = SHAPE_SETS / "validation.csv"
# A second held-out set, drawn the same way later (results README: "a second draw").
SECOND_DRAW_CSV = SHAPE_SETS / "second_draw.csv"
# A third, drawn the same way on 2026-12-02 (results README: "a third draw").
THIRD_DRAW_CSV = SHAPE_SETS / "third_draw.csv"
# Decode products of 1-64 rows from models the thin set does not hold, drawn on 2026-12-03
# (results README: "thin products").
THIN_DRAW_CSV = SHAPE_SETS / "thin_draw.csv"
# Serving batches of 72-640 rows (decode batches, short prompts, MoE experts), drawn on
# 2026-12-03 (results README: "a held-out draw of serving batches").
BATCH_DRAW_CSV = SHAPE_SETS / "batch_draw.csv"
# Linear layers (x @ w.T, tritonbench's --layout tn) of 66-128 rows from models no earlier set
# holds, drawn on 2026-12-04 to test what NOTES 122 left open, before any run.
LINEAR_DRAW_CSV = SHAPE_SETS / "linear_draw.csv"
# Linear layers of 65-128 rows from models no earlier set holds, drawn on 2026-12-04 to test
# long_k.one_wave_stream (NOTES 125) before its first run.
STREAM_DRAW_CSV = SHAPE_SETS / "stream_draw.csv"
# Linear layers of 65-128 rows from models no earlier set holds, drawn on 2026-12-04 to test
# one_wave_stream's 64x64 tiles (NOTES 126) before their first run.
STREAM_SECOND_DRAW_CSV = SHAPE_SETS / "stream_second_draw.csv"
# LLM, vision, speech and recommendation layers and round sizes from models no earlier set
# holds, drawn on 2026-12-04 as validation.csv was, before any run (results README: "a
# general draw").
GENERAL_DRAW_CSV = SHAPE_SETS / "general_draw.csv"
# Products of a narrow output or inner size (1 to 256: MoE routers, LoRA adapters, value and
# classifier heads, DLRM's dense input), drawn on 2026-12-04 before any run: a class no
# earlier set holds.
NARROW_DRAW_CSV = SHAPE_SETS / "narrow_draw.csv"
# A second draw of that class, on 2026-12-05 before any run, after the first had set the rules
# of NOTES 133 (the first no longer holds them out).
NARROW_SECOND_DRAW_CSV = SHAPE_SETS / "narrow_second_draw.csv"
# LLM, vision and recommendation layers and round sizes from models no earlier set holds,
# drawn on 2026-12-05 as validation.csv was, before any run, to measure the current code
# (results README: "a fourth draw").
FOURTH_DRAW_CSV = SHAPE_SETS / "fourth_draw.csv"
# The same, drawn on 2026-12-07 before any run, from models no earlier set holds (NOTES 173).
FIFTH_DRAW_CSV = SHAPE_SETS / "fifth_draw.csv"
TUNED = Path(configs.__file__).parent / "tuned"
MODEL_FIT = SHAPE_SETS.parent / "results" / "2026-11-30_h200_any_shape" / "model_fit"
TRAINING_RECORDS = MODEL_FIT / "training.jsonl.gz"
# The batch model's (results README: "the batch model's fit").
BATCH_RECORDS = MODEL_FIT / "batch_training.jsonl.gz"
FIT_SHAPES = [*shapes.TRAINING_SHAPES, *shapes.BATCH_TRAINING_SHAPES]


def products(m: int, n: int, k: int) -> set[tuple[int, int, int]]:
    """(M, N, K) of a shape's forward and both backward products."""
    return {(m, n, k), (m, k, n), (k, n, m)}


def validation_shapes(path: Path = VALIDATION_CSV) -> list[tuple[int, int, int]]:
    with path.open() as f:
        return [(int(r["M"]), int(r["N"]), int(r["K"])) for r in csv.DictReader(f)]


# Each held-out set, in the order drawn, and the least number of shapes it holds.
HELD_OUT_SETS = [
    (VALIDATION_CSV, 30),
    (SECOND_DRAW_CSV, 16),
    (THIRD_DRAW_CSV, 16),
    (THIN_DRAW_CSV, 16),
    (BATCH_DRAW_CSV, 16),
    (LINEAR_DRAW_CSV, 16),
    (STREAM_DRAW_CSV, 16),
    (STREAM_SECOND_DRAW_CSV, 20),
    (GENERAL_DRAW_CSV, 18),
    (NARROW_DRAW_CSV, 18),
    (NARROW_SECOND_DRAW_CSV, 18),
    (FOURTH_DRAW_CSV, 16),
    (FIFTH_DRAW_CSV, 16),
]


@pytest.mark.parametrize("path,least", HELD_OUT_SETS, ids=str)
def test_validation_shapes_were_never_fit_or_tuned(path, least):
    """No product of a held-out shape is a product of a training shape or a table key, and
    a later draw repeats no shape of an earlier set."""
    fitted = set().union(*(products(*s) for s in FIT_SHAPES))
    table = json.loads((TUNED / "sm90.json").read_text())
    tuned = {(e["m"], e["n"], e["k"]) for e in table["entries"]}
    held_out = validation_shapes(path)
    assert len(held_out) >= least and len(set(held_out)) == len(held_out)
    for shape in held_out:
        assert not products(*shape) & fitted, f"{shape} is a training point"
        assert not products(*shape) & tuned, f"{shape} is a table key"
    earlier = [p for p, _ in HELD_OUT_SETS]
    for other in earlier[: earlier.index(path)]:
        assert not set(held_out) & set(validation_shapes(other)), f"a shape of {other.name}"


def test_the_check_above_can_fail():
    fitted = set().union(*(products(*s) for s in shapes.TRAINING_SHAPES))
    assert products(4096, 4096, 4096) & fitted
    assert products(1024, 4096, 1024) & fitted  # its backward's (1024, 1024, 4096) too


def read_records(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def training_records() -> list[dict]:
    """The timings the shipped model was fit to (results README: "the wave model's fit")."""
    return read_records(TRAINING_RECORDS)


@pytest.mark.parametrize(
    "path,grid",
    [(TRAINING_RECORDS, shapes.TRAINING_SHAPES), (BATCH_RECORDS, shapes.BATCH_TRAINING_SHAPES)],
    ids=["model", "batch"],
)
def test_every_timing_fit_is_of_a_training_shape(path, grid):
    """The check above holds for what the models were fit to: every record's product is a
    product of their training shapes."""
    fitted = set().union(*(products(*s) for s in grid))
    timed = {(r["m"], r["n"], r["k"]) for r in read_records(path)}
    assert timed - fitted == set()


@pytest.mark.parametrize(
    "name,path,candidates",
    [
        ("sm90_model.json", TRAINING_RECORDS, model.MODEL_CANDIDATES),
        ("sm90_batch_model.json", BATCH_RECORDS, model.BATCH_CANDIDATES),
    ],
    ids=["model", "batch"],
)
def test_the_shipped_model_is_the_fit_of_its_records(name, path, candidates):
    shipped = json.loads((TUNED / name).read_text())
    refit = model.fit(read_records(path), candidates).to_json()
    assert len(refit["candidates"]) == len(shipped["candidates"])
    for ours, theirs in zip(refit["candidates"], shipped["candidates"], strict=True):
        assert ours["config"] == theirs["config"]
        assert ours["params"].keys() == theirs["params"].keys()
        for layout, values in ours["params"].items():
            assert values == pytest.approx(theirs["params"][layout], rel=1e-6, abs=1e-12)
        if theirs["unaligned"] is None:  # (the batch model's records are all aligned)
            assert ours["unaligned"] is None
        else:
            assert ours["unaligned"].keys() == theirs["unaligned"].keys()
            for row_bytes, values in ours["unaligned"].items():
                assert values == pytest.approx(theirs["unaligned"][row_bytes], rel=1e-6)
        assert ours["off_lines"] == pytest.approx(theirs["off_lines"], rel=1e-6)


def test_a_serving_batchs_forwards_are_the_batch_models():
    """64 to 704 rows, operands row-major and 16-byte aligned; there the batch model chooses
    its own candidate where its records say so."""
    assert model.batch_product(product(64, 4096, 4096))
    assert model.batch_product(product(704, 4096, 4096))
    assert not model.batch_product(product(63, 4096, 4096))
    assert not model.batch_product(product(705, 4096, 4096))
    assert not model.batch_product(product(176, 8192, 8192, "rc"))
    assert not model.batch_product(product(176, 8192, 8192, aligned=False))
    # A linear layer's x @ w.T of at most 128 rows: the choice for the product row-major.
    linear = product(100, 9216, 2304, "rc")
    assert model.batch_product(linear)
    assert not model.batch_product(product(129, 9216, 2304, "rc"))
    assert not model.batch_product(product(100, 9216, 2304, "cr"))
    assert model.batch_choice(linear) == product(100, 9216, 2304)
    batch = model.shipped_batch_model("sm90")
    assert batch.candidates == model.BATCH_CANDIDATES
    assert all("rr" in p for p in batch.params)
    wide = model.BATCH_CANDIDATES[-1]
    assert batch.choose(product(176, 8192, 8192)) == wide  # 51.9 us against 79.0 (call 262)
    assert model.shipped_model("sm90").choose(product(176, 8192, 8192)) != wide
    # 100x9216x2304 'rc' on 64x256 tiles: 15.4 us against 20.6 on the shipped model's 128x128
    # (H200, bf16, call 278).
    assert batch.choose(model.batch_choice(linear)) == wide
    assert model.shipped_model("sm90").choose(linear) != wide


def test_tune_batch_flag_selects_the_batch_models_grid(capsys):
    """``--training --batch``: the forwards of BATCH_TRAINING_SHAPES that the model chooses
    for (the others split over K: ``kernel.long_k_product``); its records, timed before that
    class took seven, hold all of them. Without ``--training`` the flag is an error."""
    selected = tune.selected_keys(tune.parse_args(["--training", "x.jsonl", "--batch"]))
    bf16 = torch.bfloat16
    modelled = [s for s in shapes.BATCH_TRAINING_SHAPES if not kernel.long_k_product(*s, bf16)]
    assert [key[:3] for key in selected] == modelled and len(modelled) == 18
    assert {key[4] for key in selected} == {"rr"}
    timed = {(r["m"], r["n"], r["k"]) for r in read_records(BATCH_RECORDS)}
    assert timed == set(shapes.BATCH_TRAINING_SHAPES)
    with pytest.raises(SystemExit):
        tune.parse_args(["--batch"])
    assert "give --training too" in capsys.readouterr().err


def test_training_times_the_batch_candidates_on_a_serving_batchs_forward(monkeypatch):
    monkeypatch.setattr(tune, "candidates_of_key", lambda key, dtype: ["default"])
    batch = (176, 8192, 8192, "bfloat16", "rr", "plain")
    assert tune.training_candidates(batch, None, SMS) == ["default", *model.BATCH_CANDIDATES]
    tall = (8192, 176, 8192, "bfloat16", "rr", "plain")
    assert tune.training_candidates(tall, None, SMS) == ["default", *model.MODEL_CANDIDATES]


SMS = 132


# An unaligned factor of 1 (at any K), for models built by hand.
UNIT = {2: (1.0, 0.0, 1, 1)}


def product(
    m: int, n: int, k: int, layout: str = "rr", aligned: bool = True, off_lines=model.NO_LINES
) -> model.Product:
    """A ``model.Product`` on an H100's or H200's SMs."""
    return model.Product(m, n, k, layout, aligned, SMS, off_lines)


BIG = config(128, 256, 64, 8, 3, "persistent_interleaved", flatten=True)
SMALL = config(64, 64, 128, 4, 3, "flat", "pointer")


def synthetic_records(params: dict, unaligned: dict, off_line: dict) -> list[dict]:
    """Timings that follow the model exactly, for two candidates on a grid of shapes (bf16,
    'rr': rows of K = 1000 put a off lines, of N = 5000 b; N = 5004 puts b's rows on 8 bytes
    and N = 5001 on 2, where ``unaligned[id(candidate)][row_bytes]`` is (factor at
    ``UNALIGNED_K``, exponent of K))."""
    records = []
    for m in (512, 1024, 3000, 8192):
        for n in (256, 2048, 5000, 5001, 5004):
            for k in (256, 1000, 1024, 4096):
                for candidate in (BIG, SMALL):
                    a, b, c = params[id(candidate)]
                    x = model.features(candidate, m, n, k, SMS)
                    ms = a * x[0] + b * x[1] + c
                    aligned = n % 8 == 0
                    if not aligned:
                        factor, exponent = unaligned[id(candidate)][n % 8 * 2]
                        ms *= factor * (k / model.UNALIGNED_K) ** exponent
                    else:
                        a_off, b_off = off_line[id(candidate)]
                        ms *= (a_off if k == 1000 else 1) * (b_off if n == 5000 else 1)
                    records.append(
                        {
                            "m": m,
                            "n": n,
                            "k": k,
                            "dtype": "bfloat16",
                            "layout": "rr",
                            "aligned": aligned,
                            "sms": SMS,
                            "config": dict(candidate),
                            "ms": ms,
                            "aten_ms": ms,
                        }
                    )
    return records


def test_the_fit_recovers_the_parameters_and_the_alignment_factors():
    params = {id(BIG): (7e-4, 3e-3, 2e-3), id(SMALL): (9e-5, 1e-3, 0.0)}
    unaligned = {id(BIG): {2: (3.0, 0.2), 8: (1.5, 0.1)}, id(SMALL): {2: (2.0, 0.0), 8: (1.1, 0.3)}}
    off_line = {id(BIG): (1.05, 1.2), id(SMALL): (1.3, 1.0)}
    fitted = model.fit(synthetic_records(params, unaligned, off_line), [BIG, SMALL])
    for i, candidate in enumerate((BIG, SMALL)):
        assert fitted.params[i]["rr"] == pytest.approx(params[id(candidate)], rel=1e-6, abs=1e-9)
        assert fitted.off_line[i] == pytest.approx(off_line[id(candidate)])
        assert fitted.unaligned[i].keys() == {2, 8}
        for row_bytes, (factor, exponent) in unaligned[id(candidate)].items():
            got = fitted.unaligned[i][row_bytes]
            assert got[:2] == pytest.approx((factor, exponent), abs=1e-9)
            assert got[2:] == (256, 4096)  # the Ks fit, to which K is clamped
    # Rows of 4 bytes, never measured, take the factor of rows of 2; K beyond the fit, that
    # of the greatest K fit.
    unaligned_product = product(3000, 5004, 4096, aligned=False)
    at_4 = unaligned_product._replace(row_bytes=4)
    assert fitted.factor(0, at_4) == pytest.approx(3.0 * 2**0.2)
    long_k = unaligned_product._replace(row_bytes=8, k=65536)
    assert fitted.factor(0, long_k) == pytest.approx(1.5 * 2**0.1)


def test_row_bytes_of_dense_products():
    """The widest vector every operand's rows start on: 16 where aligned, else the least
    power of two of a leading dimension's bytes."""
    assert model.dense_row_bytes(1000, 1000, 1000, "rr", 2) == 16
    assert model.dense_row_bytes(1000, 1300, 1000, "rr", 2) == 8  # b's rows of 2600 bytes
    assert model.dense_row_bytes(1300, 1000, 1000, "cr", 2) == 8  # a's columns of 2600
    assert model.dense_row_bytes(1300, 1000, 1000, "rr", 2) == 16  # a's rows are of K
    assert model.dense_row_bytes(1000, 1102, 1000, "rr", 2) == 4
    assert model.dense_row_bytes(1000, 1000, 479, "rr", 2) == 2
    assert model.dense_row_bytes(1000, 1000, 479, "rr", 4) == 4


def pair_records() -> list[dict]:
    """Timings that follow a model of BIG and SMALL in every layout exactly: of single
    products on a grid of aligned shapes on lines, and of backwards' pairs in one launch of
    each candidate (records as ``tune --training`` writes them; two launches as planned)."""
    params = {"rr": [7e-4, 3e-3, 2e-3], "rc": [8e-4, 3e-3, 2e-3], "cr": [9e-4, 4e-3, 2e-3]}
    small = {layout: [v[0] / 3, v[1] / 3, 0.0] for layout, v in params.items()}
    truth = model.Model([BIG, SMALL], [params, small], [UNIT, UNIT])
    records = []

    def timing(m, n, k, layout, config, ms, **more):
        return {
            **{"m": m, "n": n, "k": k, "layout": layout, "config": dict(config), "ms": ms},
            **{"dtype": "bfloat16", "aligned": True, "sms": SMS, "aten_ms": ms, **more},
        }

    for m, n, k in itertools.product((256, 1024, 4096), (512, 2048), (128, 1024, 4096)):
        for layout in ("rr", "rc", "cr"):
            for i, candidate in enumerate(truth.candidates):
                ms = truth.predict(i, product(m, n, k, layout))
                records.append(timing(m, n, k, layout, candidate, ms))
    for shape in ((1792, 2816, 1280), (2816, 1792, 3072), (2304, 2304, 2304)):
        first, second = backward_pair(*shape)
        mnk, layout = tune.backward_pair(*shape)
        key = (*mnk, layout)
        two = sum(truth.planned(p)[0] for p in (first, second))
        for i, candidate in enumerate(truth.candidates):
            ms = truth.predict_pair(i, first, second)
            records.append(timing(*key, model.pair_of(candidate), ms, two_launches_ms=two))
    return records


def test_a_pair_records_products_are_the_backwards_as_tune_times_them():
    records = [r for r in pair_records() if len(r["layout"]) == 4]
    for shape in ((1792, 2816, 1280), (2816, 1792, 3072)):
        first = backward_pair(*shape)[0]
        record = next(r for r in records if (r["m"], r["n"], r["k"]) == first[:3])
        assert model.pair_products(record) == backward_pair(*shape)


def test_leaving_shapes_out_reports_the_pair_choice_too():
    """Pairs are scored against the best of one launch of any candidate and two launches;
    with timings that follow the model the choice loses at most what ``PAIR_GAIN`` leaves."""
    summary = fit.evaluate(pair_records())["summary"]
    assert summary["pairs"] == 3
    assert model.PAIR_GAIN <= summary["pair_chosen_over_best_min"] <= 1.0
    # The fit reads single products only: the pairs' records change none of its parameters.
    singles = [r for r in pair_records() if len(r["layout"]) == 2]
    assert (
        model.fit(pair_records(), [BIG, SMALL]).to_json()
        == model.fit(singles, [BIG, SMALL]).to_json()
    )


def test_off_lines_reads_each_operands_leading_dimension():
    assert model.dense_off_lines(3000, 3000, 3000, "rr", 2) == (True, True)
    assert model.dense_off_lines(3000, 4096, 1024, "rr", 2) == (False, False)  # M is no row
    assert model.dense_off_lines(3000, 4096, 1024, "cr", 2) == (True, False)  # a.T: M is
    assert model.dense_off_lines(4096, 4096, 1000, "rc", 2) == (True, True)  # K both
    assert model.dense_off_lines(4096, 4096, 1000, "rc", 4) == (True, True)
    assert model.dense_off_lines(4096, 4096, 1056, "rc", 4) == (False, False)  # 32 fp32 a line
    a, b = torch.empty(64, 1000), torch.empty(3000, 1024).T[:1000]
    assert loads.rows_off_lines(a, torch.empty(1000, 64)) == (True, False)
    # a.T's columns are a's rows; b is a slice whose columns keep the lines of 1024.
    assert loads.rows_off_lines(a.T, b) == (True, False)


def test_rows_off_lines_make_the_shipped_model_prefer_tensor_descriptors():
    """On the H200 off-line rows cost pointer loads of small tiles 1.1-1.9x and tensor
    descriptors of 128x256 tiles 1.0-1.2x (training shapes of sizes 1096-24200 that are
    multiples of 8, not 64): 2000^3's forward took a pointer candidate before they were
    fit."""
    shipped = model.shipped_model("sm90")
    lines = model.dense_off_lines(2000, 2000, 2000, "rr", 2)
    chosen = shipped.choose(product(2000, 2000, 2000, off_lines=lines))
    assert chosen.config["indexing"] == "tensor_descriptor"
    assert shipped.off_line[shipped.candidates.index(chosen)][1] < 1.25


def test_the_choice_follows_waves():
    """Big tiles where they fill the SMs; small ones where big tiles leave most SMs idle."""
    m = model.Model(
        [BIG, SMALL], [{"rr": [7e-4, 3e-3, 2e-3]}, {"rr": [2.5e-4, 1e-3, 0.0]}], [UNIT, UNIT]
    )
    assert m.choose(product(8192, 8192, 4096)) is BIG  # 16 rounds of big tiles
    assert m.choose(product(256, 512, 4096)) is SMALL  # 4 big tiles for 132 SMs
    # A layout without a fit of its own uses row-major's; a candidate without any is skipped.
    assert m.choose(product(256, 512, 4096, "cc")) is SMALL
    only_big = model.Model([BIG, SMALL], [{"rr": [7e-4, 3e-3, 2e-3]}, {}], [UNIT, None])
    assert only_big.choose(product(256, 512, 4096)) is BIG
    assert only_big.choose(product(256, 512, 4096, "rc")) is None  # 'rc' has its own fit
    assert (
        model.Model([SMALL], [{"rr": [1, 1, 1]}], [None]).choose(product(8, 8, 8, "rr", False))
        is None
    )


def test_near_ties_go_to_the_fewest_output_tiles():
    """Within ``PREDICTED_TIE`` of the fastest prediction the candidate with fewer tiles wins
    (on the H200, call 171: 200000x256x256's forward 69.5 -> 65.0 us, 4096x32128x512's 250
    -> 239); beyond it, or with ``break_ties`` off, the fastest prediction does."""
    tie = model.PREDICTED_TIE

    def two(big_ms: float) -> model.Model:
        return model.Model(
            [SMALL, BIG], [{"rr": [0, 0, 1.0]}, {"rr": [0, 0, big_ms]}], [UNIT, UNIT]
        )

    shape = product(4096, 4096, 4096)
    assert two(0.999 * tie).choose(shape) is BIG
    assert two(0.999 * tie).choose(shape, break_ties=False) is SMALL
    assert two(1.001 * tie).choose(shape) is SMALL
    assert two(0.999 * tie).best_plain(shape) == (1.0, SMALL)  # times stay the fastest's
    shipped = model.shipped_model("sm90")
    for shape, tile in [
        ((200000, 256, 256), [128, 128, 128]),
        ((4096, 32128, 512), [128, 256, 64]),
    ]:
        chosen, fastest = shipped.choose(product(*shape)), shipped.best_plain(product(*shape))
        assert chosen.config["block_sizes"] == tile and chosen is not fastest[1]
        assert shipped.predict(shipped.candidates.index(chosen), product(*shape)) <= (
            tie * fastest[0]
        )


def test_the_shipped_model_loads_and_chooses_for_any_shape():
    shipped = model.shipped_model("sm90")
    assert shipped is not None
    assert len(shipped.candidates) == len(model.MODEL_CANDIDATES)
    for m, n, k in validation_shapes():
        for layout in ("rr", "rc", "cr"):
            for aligned in (True, False):
                assert shipped.choose(product(m, n, k, layout, aligned)) is not None
    # What it has learnt: 128x256 tiles for large squares, smaller ones where those leave
    # most SMs idle.
    assert shipped.choose(product(8192, 8192, 8192)).config["block_sizes"] == [128, 256, 64]
    small = shipped.choose(product(512, 512, 512)).config["block_sizes"]
    assert small[0] * small[1] <= 128 * 128


def test_tma_only_chooses_among_tensor_descriptor_candidates():
    """Where some size would not vectorize pointer loads (32768x1024x479 staged: K of 958
    bytes, whose masks load element by element; measured on the H200: 0.22 ms against 0.10
    with tensor descriptors), ``tma_only`` leaves the pointer candidates out, even where the
    fit would choose one (1536^3 on the shipped fit)."""
    shipped = model.shipped_model("sm90")
    assert shipped.choose(product(1536, 1536, 1536)).config["indexing"] == "pointer"
    for shape in ((1536, 1536, 1536), (32768, 1024, 479)):
        chosen = shipped.choose(product(*shape), tma_only=True)
        assert chosen.config["indexing"] == "tensor_descriptor"


# Splits count K's equal pieces (NOTES 120).
@pytest.mark.parametrize(
    "m,n,k,tile,split",
    [
        (1536, 512, 20120, (128, 256), 5),  # the table's tuned tile and pieces for this key
        (256, 768, 1000000, (128, 256), 22),  # 24 tiles in 22 pieces: 4 whole rounds
        # 96 tiles in 4 pieces of 12608 (3 rounds); 13, as costed in power-of-two blocks
        # before, ran 1.002x slower in its backward on the H200 (call 271).
        (4096, 768, 50257, (128, 256), 4),
        (128, 128, 9000, (128, 128), 47),  # one tile: the fewest pieces of the least steps
        # Measured on the H200 (call 141, NOTES 84): 128x128 tiles 1.2-1.3x faster than the
        # 128x256 tiles of the rule before (in 12 and 8 pieces).
        (256, 512, 12288, (128, 128), 16),
        (256, 384, 24576, (128, 128), 22),
        (256, 1024, 8192, (128, 128), 8),
    ],
)
def test_split_rule_takes_the_tile_and_split_of_least_wave_cost(m, n, k, tile, split):
    config = long_k.split_rule(m, n, k, SMS).config
    assert (tuple(config["block_sizes"][:2]), config["split_k"]) == (tile, split)


# The thin products of call 243 (H200, NOTES 112) and the split that ran fastest or within 3%
# of it there; 48x5120x5120 cuts K in 5 pieces of 1024 (200 programs), 4x768x50257 in 50.
@pytest.mark.parametrize(
    "m,n,k,split",
    [(1, 4096, 4096, 8), (16, 4096, 14336, 7), (32, 6144, 4096, 4), (48, 5120, 5120, 5),
     (4, 768, 50257, 50)],
)  # fmt: skip
def test_split_rule_cuts_thin_products_into_two_programs_an_sm(m, n, k, split):
    config = long_k.split_rule(m, n, k, SMS).config
    assert (config["block_sizes"], config["split_k"]) == ([64, 128, 64], split)
    programs = math.ceil(n / 128) * math.ceil(k / model.split_k_block(k, split))
    assert 2 * SMS / 1.5 < programs < 2 * SMS * 1.5


def test_tensor_descriptor_alignment():
    rows = torch.empty(64, 40, dtype=torch.bfloat16)  # 80-byte rows
    assert loads.tma_aligned(rows, rows.T)
    assert not loads.tma_aligned(torch.empty(64, 41, dtype=torch.bfloat16))  # 82-byte rows
    assert not loads.tma_aligned(rows[:, 1:])  # base 2 bytes past an aligned one
    assert not loads.tma_aligned(rows[:, ::2])  # no unit stride


def test_tune_takes_any_shape_and_refuses_an_empty_selection(capsys):
    keys = tune.keys_of(None, [(1536, 1536, 1536), (5000, 3000, 1000)], "float16", None)
    assert (1536, 1536, 1536, "float16", "rr", "plain") in keys
    assert (1000, 3000, 5000, "float16", "cr", "plain") in keys
    assert (5000, 3000, 1000, "float16", "rr", "bias") in keys
    assert tune.keys_of("gemm", [(1536, 1536, 1536)], "float16", "bias") == []
    assert tune.main(["--only", "gemm", "--epilogue", "bias", "--shape", "1536x1536x1536"]) == 2
    assert "select no key" in capsys.readouterr().err


def test_tune_layout_flag_keeps_those_layouts_only(capsys):
    """``--layout rc,cr`` retunes a shape's 'rc' and 'cr' keys and leaves its others (the
    targets' 'rr', the pair) as they are."""
    args = tune.parse_args(["--shape", "1024x1024x1024", "--layout", "rc,cr"])
    layouts = sorted(key[4] for key in tune.selected_keys(args))
    assert layouts == ["cr", "rc"]
    everything = tune.selected_keys(tune.parse_args(["--shape", "1024x1024x1024"]))
    assert {key[4] for key in everything} == {"rr", "rc", "cr", "rccr"}
    assert tune.main(["--shape", "1024x1024x1024", "--layout", "crrc"]) == 2
    assert "--layout ['crrc']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tune.parse_args(["--layout", "rt"])
    assert "--layout takes layouts such as" in capsys.readouterr().err


def test_tune_takes_either_spelling_of_its_dtypes():
    assert tune.parse_args(["--dtype", "bf16"]).dtype == "bfloat16"
    assert tune.parse_args(["--dtype", "float16"]).dtype == "float16"


def test_tune_leaves_the_keys_its_table_has(monkeypatch, tmp_path, capsys):
    """Past the GPU check (faked here): a key already in the output table is not timed again
    without --force."""
    keys = tune.keys_of("gemm", [(64, 32, 16)], "bfloat16", None)
    fields = ("m", "n", "k", "dtype", "layout", "epilogue")
    entries = [{**dict(zip(fields, key, strict=True)), "config": dict(SMALL)} for key in keys]
    output = tmp_path / "mine.json"
    output.write_text(json.dumps({"entries": entries}))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tune.table, "gpu_arch", lambda device: "sm90")
    argv = ["--only", "gemm", "--shape", "64x32x16", "--output", str(output)]
    assert tune.main(argv) == 0
    assert f"All {len(keys)} selected keys are in" in capsys.readouterr().out


@pytest.mark.parametrize("problem", ["a directory", "not writable", "corrupt"])
def test_tune_refuses_an_output_it_could_not_use_before_any_timing(
    problem, monkeypatch, tmp_path, capsys
):
    """A table that cannot be read or written is an error naming it, before any key is timed
    (else every measurement of the run would be lost at the end)."""
    output = tmp_path / "mine.json"
    if problem == "a directory":
        output.mkdir()
    elif problem == "not writable":
        output.write_text(json.dumps({"entries": []}))
        monkeypatch.setattr(tune.os, "access", lambda path, mode: False)
    else:
        output.write_text("{not json")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tune.table, "gpu_arch", lambda device: "sm90")

    def no_timing(*args):
        raise AssertionError("keys were timed")

    monkeypatch.setattr(tune, "tune_keys", no_timing)
    assert tune.main(["--only", "gemm", "--shape", "64x32x16", "--output", str(output)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("helion_ops.tune: error: ") and str(output) in err


def test_ctrl_c_in_tuning_keeps_what_was_measured(monkeypatch, tmp_path, capsys):
    """The first key is measured, Ctrl-C comes during the second: the table gets the first,
    and the run exits 130 (a later run resumes after it)."""
    keys = tune.keys_of("gemm", [(64, 32, 16), (64, 32, 48)], "bfloat16", None)
    monkeypatch.setattr(torch.cuda, "set_device", lambda gpu: None)
    monkeypatch.setattr(tune.configs, "sm_count", lambda device: 132)
    monkeypatch.setattr(tune, "candidates_of_key", lambda key, dtype: [])
    monkeypatch.setattr(tune, "operands", lambda m, n, k, layout, dtype, fill: (None, None))
    monkeypatch.setattr(tune.loads, "tma_aligned", lambda a, b: True)
    measured = []

    def tune_key(key, *args):
        if measured:
            raise KeyboardInterrupt
        measured.append(key)
        return {"ms": 1.0, "aten_ms": 1.0, "speedup_vs_aten": 1.0}

    monkeypatch.setattr(tune, "tune_key", tune_key)
    args = tune.parse_args(["--only", "gemm", "--jobs", "1"])
    found, records, interrupted = tune.tune_keys(0, keys, args)
    assert interrupted and list(found) == measured == keys[:1] and records == []
    assert f"interrupted: 1 of {len(keys)} keys measured" in capsys.readouterr().out

    entry = {"m": 64, "n": 32, "k": 16, "dtype": "bfloat16", "layout": "rr", "epilogue": "plain"}
    monkeypatch.setattr(tune, "tune_keys", lambda gpu, keys, args: ({keys[0]: entry}, [], True))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "NVIDIA H200")
    monkeypatch.setattr(tune.table, "gpu_arch", lambda device: "sm90")
    output = tmp_path / "mine.json"
    argv = ["--only", "gemm", "--shape", "64x32x16", "--output", str(output)]
    assert tune.main(argv) == 130
    assert [e["m"] for e in json.loads(output.read_text())["entries"]] == [64]


@pytest.mark.parametrize("failure", [KeyboardInterrupt(), BrokenProcessPool("ended")], ids=str)
def test_a_gpu_worker_cut_outside_its_loop_leaves_the_others_keys(failure, capsys):
    """With several GPUs, Ctrl-C may reach a worker before its first key (its call then
    returns the interrupt) or between calls (its process ends, the pool broken): that worker
    counts as interrupted with nothing measured, and what another returned is kept."""
    measured = Future()
    measured.set_result(({"key": {"ms": 1.0}}, [], True))
    cut = Future()
    cut.set_exception(failure)
    assert tune.worker_result(0, measured, True) == ({"key": {"ms": 1.0}}, [], True)
    assert tune.worker_result(1, cut, True) == ({}, [], True)
    assert "[gpu 1] interrupted before it returned what it measured" in capsys.readouterr().out


def test_a_gpu_workers_crash_without_ctrl_c_is_raised():
    crashed = Future()
    crashed.set_exception(BrokenProcessPool("a worker ended abruptly"))
    with pytest.raises(BrokenProcessPool):
        tune.worker_result(0, crashed, False)


def test_tune_gpus_flag():
    assert tune.parse_gpus("all") == 0
    assert tune.parse_gpus("2") == 2
    for bad in ("0", "-1", "two"):
        with pytest.raises(Exception, match="--gpus"):
            tune.parse_gpus(bad)


def test_training_keys_are_products_and_pairs_the_model_chooses_for():
    keys = tune.training_keys("bfloat16")
    assert len(keys) == len(set(keys)) > 60
    assert all(k[5] == "plain" for k in keys)
    singles = [k for k in keys if len(k[4]) == 2]
    assert not any(tune.wants_split_k(*k[:3], torch.bfloat16) for k in singles)
    # Pairs: both products modelled (no split-K), aligned, outputs past ``SMALL_OUTPUT``.
    pairs = [k for k in keys if len(k[4]) == 4]
    assert len(pairs) > 30
    for m, n, k, _, layout, _ in pairs:
        second = model.second_of_pair(m, n, k, layout)
        assert not any(tune.wants_split_k(*mnk, torch.bfloat16) for mnk in ((m, n, k), second))
        assert max(m * n, second[0] * second[1]) > configs.SMALL_OUTPUT
        assert m % 8 == n % 8 == k % 8 == 0


def test_training_keys_of_given_shapes():
    """``tune --training RECORDS --shape ...`` times those shapes' three products, and their
    backward's pair where the model may run it in one launch, longer K first as ``ops``."""
    keys = tune.training_keys("bfloat16", [(3400, 2304, 1400)])
    assert keys == [
        (3400, 2304, 1400, "bfloat16", "rr", "plain"),
        (3400, 1400, 2304, "bfloat16", "rc", "plain"),
        (1400, 2304, 3400, "bfloat16", "cr", "plain"),
        (1400, 2304, 3400, "bfloat16", "crrc", "plain"),
    ]
    assert tune.training_keys("bfloat16", [(1792, 2816, 1280)])[-1] == (
        1792, 1280, 2816, "bfloat16", "rccr", "plain"
    )  # fmt: skip
    # No pair of unaligned sizes (no tensor descriptors), of small outputs (``pair_rule``'s),
    # or of a product the split-K kernel takes.
    for shape in ((2500, 1700, 1203), (640, 640, 640), (24576, 512, 1024)):
        assert all(len(key[4]) == 2 for key in tune.training_keys("bfloat16", [shape]))
    assert tune.parse_args(["--training", "r.jsonl", "--shape", "8x8x8"]).shape == [(8, 8, 8)]


def test_training_times_a_pair_on_the_candidates_the_model_may_run_it_with():
    """Each candidate in the pair kernel, where both products' tiles make at most
    ``PAIR_WAVES`` waves; none for a pair beyond that for every candidate."""
    key = (1792, 1280, 2816, "bfloat16", "rccr", "plain")
    timed = tune.training_candidates(key, torch.bfloat16, SMS)
    within = [c for c in model.MODEL_CANDIDATES if model.pair_of(c) in timed]
    assert timed == [model.pair_of(c) for c in within]
    assert len(within) == 10  # 64x32 tiles: 1120 + 1760, beyond 16 waves of 132
    assert (
        tune.training_candidates((3328, 6144, 9728, "bfloat16", "rccr", "plain"), None, SMS) == []
    )


def test_tune_pairs_flag_keeps_the_pairs_only(capsys):
    assert tune.main(["--training", "r.jsonl", "--pairs", "--shape", "640x640x640"]) == 2
    assert "select no key" in capsys.readouterr().err


def test_warmup_reads_tritonbench_shape_files():
    assert warmup.read_shapes(VALIDATION_CSV) == validation_shapes()


@pytest.mark.parametrize("k", [4096, 5632, 8192, 11008, 14339, 18944, 20120, 1000000])
@pytest.mark.parametrize("split", [1, 2, 3, 4, 5, 7, 8, 62])
def test_the_split_k_kernel_cuts_k_in_equal_pieces(k, split):
    """At most ``split_k`` pieces of whole K steps of 64, the last no longer than the others
    (the power-of-two blocks before left a short last piece: 18944 in 8192, 8192, 2560);
    ``split_k`` of them where the rounding to 64 adds less than a block."""
    block = model.split_k_block(k, split)
    pieces = math.ceil(k / block)
    assert block % 64 == 0 and block - 64 < math.ceil(k / split) <= block
    assert 0 < k - (pieces - 1) * block <= block and pieces <= split
    if k >= 64 * split * split:
        assert pieces == split


def test_power_of_two_splits_count_their_pieces():
    """``thin_split`` costs power-of-two blocks, as it was measured, and older tables count
    them (``table.entries_of``): the table's 8 ways of K = 20120 were 5 blocks of 4096, 64
    ways of 1e6 were 62."""
    assert model.power_of_two_pieces(20120, 8) == 5
    assert model.power_of_two_pieces(1000000, 64) == 62
    assert model.power_of_two_pieces(8192, 4) == 4


# The batch training shapes of the split class and the split that call 266 timed fastest.
# (72x10240x8192, whose fastest split was 128x256 in 3 pieces, now streams unsplit on 128x128
# tiles: ``long_k.one_wave_stream``, NOTES 125.)
@pytest.mark.parametrize(
    "m,n,k,tile,split",
    [
        (208, 4096, 11008, (128, 256), 4),
        (232, 3072, 8192, (128, 256), 5),
        (336, 2048, 8192, (128, 256), 5),
        (480, 2048, 5632, (128, 128), 2),
        (144, 5120, 13824, (64, 256), 2),
        (704, 1536, 8960, (64, 256), 2),
    ],
)
def test_a_serving_batchs_split_is_of_least_wave_cost_in_equal_pieces(m, n, k, tile, split):
    assert long_k.long_k_batch(m, n, k)
    config = long_k.split_rule(m, n, k, SMS).config
    assert (tuple(config["block_sizes"][:2]), config["split_k"]) == (tile, split)
    tiles = math.ceil(m / tile[0]) * math.ceil(n / tile[1])
    assert tiles * split <= SMS  # one wave


def test_few_tiles_of_a_long_k_split_on_the_wide_tiles():
    """A product of both split classes (few tiles and a long K, and a serving batch's) costs
    only ``SPLIT_TILES``, whose splits the few-tiles class was measured with: 136x1536x16384
    runs 128x256 in 11 pieces where 64x256 in 7 would cost less."""
    m, n, k = 136, 1536, 16384
    assert long_k.long_k_batch(m, n, k) and long_k.few_tiles_long_k(m, n, k)
    chosen = long_k.split_rule(m, n, k, SMS).config
    assert (chosen["block_sizes"][:2], chosen["split_k"]) == ([128, 256], 11)
    batch = long_k.least_cost_split(m, n, k, SMS, long_k.BATCH_SPLIT_TILES).config
    assert (batch["block_sizes"][:2], batch["split_k"]) == ([64, 256], 7)


def test_tail_split_cuts_k_until_the_tail_fills_the_sms():
    assert model.tail_split(24, 2960, SMS) == (1024, 3)  # 72 programs; 512 would make 144
    assert model.tail_split(200, 4096, SMS) == (4096, 1)  # more tiles than SMs: no cut
    assert model.tail_split(1, 256, SMS) == (64, 4)  # never below one K step of 64


def test_the_tails_k_pieces_are_the_blocks_tail_split_chose():
    # last_wave_config's K blocks divide these pieces only if the split gives back the block
    # (a block overrunning its piece reads the next one: Helion drops that tensor-descriptor
    # load's mask).
    for k in (1, 15, 63, 64, 65, 129, 1000, 1025, 2960, 4097, 12345, 65537):
        for tiles in (1, 7, 40, 66, 131, 132, 500):
            block, _ = model.tail_split(tiles, k, SMS)
            assert model.k_block(k, model.split_of(k, block)) == block, (k, tiles)


def test_last_wave_keeps_whole_waves_and_splits_the_rest():
    # 2960^3 in 128x256 tiles: 24 x 12 = 288 tiles, 2 whole waves of 132 are 22 tile rows.
    assert model.last_wave(BIG, 2960, 2960, 2960, SMS) == (22 * 128, 3, 2 * 47 + 16)
    assert model.last_wave(BIG, 1024, 1024, 1024, SMS) is None  # 32 tiles: no whole wave
    assert model.last_wave(BIG, 128 * 33, 256 * 4, 512, SMS) is None  # exactly one wave


def test_a_flattened_candidate_splits_only_where_predicted_to_gain_more():
    """The split runs a flattened candidate's full waves unflattened (NOTES 81), so such a
    split must be predicted at ``LAST_WAVE_GAIN_FLATTENED`` of the plain time, another at
    ``LAST_WAVE_GAIN``. Both products here are predicted at 0.94-0.96 of it: 2560x2560x4096
    (flattened 128x128 tiles) measured 1.02 on the H200, 1508x1536x1536 (flat pointer tiles)
    0.92."""
    shipped = model.shipped_model("sm90")
    for shape, is_flattened in [((2560, 2560, 4096), True), ((1508, 1536, 1536), False)]:
        split, candidate, _ = shipped.best_split(product(*shape))
        ratio = split / shipped.best_plain(product(*shape))[0]
        assert model.LAST_WAVE_GAIN_FLATTENED < ratio <= model.LAST_WAVE_GAIN, (shape, ratio)
        assert flattened(candidate) is is_flattened, shape
        splits = shipped.plan(product(*shape))[1] < shape[0]
        assert splits is not is_flattened, shape


def test_a_split_must_beat_the_transposed_kernel_where_that_runs_the_product():
    """Products whose b rows lie on 16 bytes but not 32 run unsplit on the transposed kernel
    (``configs.transposed_pays``), about ``TRANSPOSED_PLAIN`` of the plain kernel's time. On
    the H200 (NOTES 65 and 81) it beat the split at 2000x3000x2000 (51.2 us against 59.7; split
    predicted at 0.89 of the plain time) and lost at 1500x3000x3000 (84.2 against 63.3; 0.70)."""
    shipped = model.shipped_model("sm90")

    def off_lines(m, n, k):
        return product(m, n, k, off_lines=model.dense_off_lines(m, n, k, "rr", 2))

    for shape, splits in [((2000, 3000, 2000), False), ((1500, 3000, 3000), True)]:
        assert shipped.plan(off_lines(*shape))[1] < shape[0]  # against the plain kernel
        transposed = shipped.plan(off_lines(*shape), model.TRANSPOSED_PLAIN)
        assert (transposed[1] < shape[0]) is splits, shape


def test_the_plan_splits_the_last_wave_only_where_it_pays(monkeypatch):
    shipped = model.shipped_model("sm90")
    _, candidate, rows = shipped.best_split(product(2960, 2960, 2960))
    assert rows == 2816 and candidate.config["block_sizes"][:2] == [128, 256]
    assert candidate.config["range_flattens"][0]  # judged by the flattened candidates' gain
    monkeypatch.setattr(model, "LAST_WAVE_GAIN_FLATTENED", 1.0)
    assert shipped.plan(product(2960, 2960, 2960)) == (candidate, 2816)
    monkeypatch.setattr(model, "LAST_WAVE_GAIN_FLATTENED", 0.5)
    assert shipped.plan(product(2960, 2960, 2960))[1] == 2960
    split, plain = (
        f(product(8192, 8192, 8192))[0] for f in (shipped.best_split, shipped.best_plain)
    )
    assert split > plain  # 15.5 waves: the split saves less than it costs
    assert shipped.best_split(product(512, 512, 512)) is None  # less than a wave


def test_busiest_sm_runs_tiles_in_order():
    # 160 tiles of 3 then 96 of 5 on 132 SMs: the second product's tiles take the SMs that
    # the first one's last wave (28 tiles) leaves idle.
    for pid_type in ("flat", "persistent_interleaved"):
        assert model.busiest_sm([(160, 3.0), (96, 5.0)], SMS, pid_type) == 8.0
    # Flat programs start wherever an SM frees up; persistent ones take every SMS-th tile.
    assert model.busiest_sm([(1, 10.0), (263, 1.0)], SMS, "flat") == 10.0
    assert model.busiest_sm([(1, 10.0), (263, 1.0)], SMS, "persistent_interleaved") == 11.0
    tiles = [(301, 2.5), (77, 7.0)]
    loads = [0.0] * SMS
    for index, time in enumerate([2.5] * 301 + [7.0] * 77):
        loads[index % SMS] += time
    assert model.busiest_sm(tiles, SMS, "persistent_interleaved") == max(loads)


def backward_pair(m: int, n: int, k: int) -> tuple[model.Product, model.Product]:
    """The backward's two products of an aligned m x n x k, the longer K first (as ``ops``)."""
    grad_mat1, grad_mat2 = product(m, k, n, "rc"), product(k, n, m, "cr")
    return (grad_mat2, grad_mat1) if m > n else (grad_mat1, grad_mat2)


def test_the_pair_runs_in_one_launch_only_where_predicted_faster():
    shipped = model.shipped_model("sm90")
    # A training shape whose two products each end in a partial wave: one launch fills it.
    first, second = backward_pair(1792, 2816, 1280)
    candidate = shipped.pair(first, second)
    index = shipped.candidates.index(candidate)
    two = shipped.planned(first)[0] + shipped.planned(second)[0]
    assert shipped.predict_pair(index, first, second) <= model.PAIR_GAIN * two
    # Whole waves: nothing to fill; unaligned operands: no fit for one launch.
    assert shipped.pair(*backward_pair(4096, 4096, 4096)) is None
    assert shipped.pair(first._replace(aligned=False), second._replace(aligned=False)) is None
    only_tma = shipped.pair(first, second, tma_only=True)
    assert only_tma is None or only_tma.config["indexing"] == "tensor_descriptor"


def test_two_bandwidth_bound_products_run_in_two_launches_under_graphs(monkeypatch):
    """80x4096x4096's backward (77 FLOPs a byte): the wave model alone predicts one launch
    faster; it measured 1.18x slower (call 274). Eager calls still save a launch's host time.
    320x1408x2048's (231 FLOPs a byte, above the ridge) keeps its one launch."""
    shipped = model.shipped_model("sm90")
    first, second = backward_pair(80, 4096, 4096)
    assert model.bandwidth_bound(*first[:3]) and model.bandwidth_bound(*second[:3])
    assert shipped.pair(first, second) is None
    assert shipped.pair(first, second, eager=True) is not None
    above = backward_pair(320, 1408, 2048)
    assert not model.bandwidth_bound(*above[0][:3])
    assert shipped.pair(*above) is not None
    monkeypatch.setattr(model, "RIDGE_FLOPS_PER_BYTE", 0)
    assert shipped.pair(first, second) is not None


def test_eager_calls_count_the_host_time_one_launch_fewer_saves():
    """Outside CUDA graphs a pair predicted no faster than two launches still saves one
    launch's host time: 2048^3's backward (predicted as fast either way) pairs there only;
    4096^3's (0.38 ms, longer than ``EAGER_HOST_MS``) hides its host time and pairs nowhere."""
    shipped = model.shipped_model("sm90")
    short, long = backward_pair(2048, 2048, 2048), backward_pair(4096, 4096, 4096)
    two = sum(shipped.planned(p)[0] for p in long)
    assert two > model.EAGER_HOST_MS
    assert shipped.pair(*short) is None
    assert shipped.pair(*short, eager=True) is not None
    assert shipped.pair(*long) is None
    assert shipped.pair(*long, eager=True) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "No such file"),
        ("", "no records"),
        ('{"config": {}, "ms": 1.0}\n{not json\n', "line 2: not JSON"),
        ('{"config": {}}\n', "record 1 lacks config or ms"),
        ("[1, 2]\n", "record 1 lacks config or ms"),
    ],
)
def test_the_fit_command_names_what_is_wrong_with_its_records(text, message, tmp_path, capsys):
    records = tmp_path / "records.jsonl"
    if text is not None:
        records.write_text(text)
    with pytest.raises(SystemExit) as exit_info:
        fit.main([str(records)])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("command", ["helion_ops.fit", "helion_ops.tune", "helion_ops.warmup"])
def test_the_package_s_commands_run_without_a_second_copy_of_their_module(command):
    """``python -m helion_ops.model`` printed runpy's RuntimeWarning first: the package had
    imported the module already, so the command ran a second copy of it. Each command is a
    module the package does not import."""
    import subprocess
    import sys

    argv = [sys.executable, "-W", "error::RuntimeWarning", "-m", command, "--help"]
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=root, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"usage: python -m {command}" in done.stdout
