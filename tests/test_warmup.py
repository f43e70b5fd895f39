"""helion_ops.warmup: its operands in each of tritonbench's layouts, and its command line."""

from __future__ import annotations

import pytest
import torch

from helion_ops import warmup


@pytest.mark.parametrize(
    ("layout", "a_strides", "b_strides"),
    [
        ("tt", (24, 1), (40, 1)),
        ("tn", (24, 1), (1, 24)),
        ("nt", (1, 8), (40, 1)),
        ("nn", (1, 8), (1, 24)),
    ],
)
def test_operands_take_tritonbench_layouts(layout, a_strides, b_strides):
    a, b = warmup.operands(8, 40, 24, torch.float16, layout, device="cpu")
    assert (a.shape, b.shape) == ((8, 24), (24, 40))
    assert (a.stride(), b.stride()) == (a_strides, b_strides)
    assert a.is_leaf and b.is_leaf and a.requires_grad and b.requires_grad
    assert a.dtype == b.dtype == torch.float16


@pytest.mark.parametrize(
    ("flags", "warmed"),
    [
        (
            ["--dtype", "bf16", "--op", "matmul", "--layout", "tt,tn"],
            (["bf16"], ["matmul"], ("tt", "tn")),
        ),
        # the other commands' spellings: bfloat16 (tune's), gemm (run_bench's)
        (
            ["--dtype", "bfloat16,fp16", "--op", "gemm,addmm"],
            (["bf16", "fp16"], ["matmul", "addmm"], ("tt",)),
        ),
    ],
)
def test_every_dtype_op_and_layout_asked_for_is_warmed(flags, warmed, tmp_path, monkeypatch):
    shapes = tmp_path / "shapes.csv"
    shapes.write_text("M,N,K,Bias\n64,48,32,\n")
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(warmup, "warm", lambda *args: calls.append(args))
    assert warmup.main([str(shapes), *flags, "--jobs", "1"]) == 0
    dtypes, ops, layouts = warmed
    assert calls == [([(64, 48, 32)], dtypes, ops, 1, layouts)]


@pytest.mark.parametrize(
    ("flag", "value"), [("--layout", "tx"), ("--dtype", "int8"), ("--op", "bmm")]
)
def test_bad_choice_names_its_flag_before_any_gpu_check(tmp_path, flag, value, capsys):
    """On any machine, a GPU or not: the error names the flag and the value."""
    shapes = tmp_path / "shapes.csv"
    shapes.write_text("M,N,K\n8,8,8\n")
    assert warmup.main([str(shapes), flag, value]) == 2
    err = capsys.readouterr().err
    assert flag in err and value in err


def test_without_a_gpu_it_says_so(tmp_path, monkeypatch, capsys):
    shapes = tmp_path / "shapes.csv"
    shapes.write_text("M,N,K\n8,8,8\n")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert warmup.main([str(shapes), "--layout", "tn"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["A,B\n1,2\n", "M,N,K\n12x,5,5\n"])
def test_a_csv_without_integer_m_n_k_is_named(text, tmp_path):
    path = tmp_path / "shapes.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match="each row needs integer M, N and K columns"):
        warmup.read_shapes(path)


@pytest.mark.parametrize(
    ("text", "argv", "message"),
    [
        ("A,B\n1,2\n", [], "each row needs integer M, N and K"),
        ("M,N,K\n0,5,5\n", [], "every size must be 1 or more"),
        ("M,N,K\n4,5,5\n", ["--jobs", "0"], "--jobs and every size"),
        ("M,N,K\n", [], "shapes.csv: no shapes"),  # "warmed 0" and exit 0 on a GPU
    ],
)
def test_bad_shapes_or_jobs_exit_2_before_the_gpu_check(text, argv, message, tmp_path, capsys):
    path = tmp_path / "shapes.csv"
    path.write_text(text)
    assert warmup.main([str(path), *argv]) == 2
    assert message in capsys.readouterr().err
