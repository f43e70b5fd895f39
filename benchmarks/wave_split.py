"""GPU time of products with and without their last wave split over K: ``python -m
benchmarks.wave_split --shape MxNxK ...``.

For each shape and operand layout (``rr``, ``rc``, ``cr``: the forward and the backward's
products) it times ``torch.mm``, helion_ops' plain kernel (the model's tile shape) and, where
the model has a split for it (``Model.best_split``, whatever its predicted gain), the product
with its last wave split (``last_wave_kernel``, with the fp32 buffer and the finishing pass),
under CUDA graphs (the measure of tritonbench's ``--cudagraph``), beside the model's
predicted ratio and whether the split's candidate has a flattened loop. This is what
``helion_ops.model.LAST_WAVE_GAIN`` and ``LAST_WAVE_GAIN_FLATTENED`` are set from. Use shapes
that are not in ``benchmarks/shapes/validation.csv``.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import triton

from helion_ops import configs, kernel, table
from helion_ops.candidates import flattened
from helion_ops.dtype_names import torch_name
from helion_ops.tune import operands, parse_shape


def bench(fn) -> float:
    """Microseconds per call, replayed from a CUDA graph (median)."""
    return triton.testing.do_bench_cudagraph(fn, rep=50, return_mode="median") * 1e3


def main(argv: list[str] | None = None) -> int:
    description = " ".join(__doc__.split("\n\n")[0].split())
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.wave_split", description=description
    )
    parser.add_argument("--shape", type=parse_shape, action="append", required=True)
    parser.add_argument(
        "--dtype", default="bfloat16", type=torch_name, choices=["bfloat16", "float16"]
    )
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks.wave_split needs a CUDA GPU", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.dtype)
    model = configs.shipped_model(table.gpu_arch(torch.device("cuda")))
    rows = []
    print(
        "product layout rows | predicted split/plain | us: aten plain split | split/plain"
        " | flattened"
    )
    for m, n, k in args.shape:
        for layout in ("rr", "rc", "cr"):
            a, b = operands(m, n, k, layout, dtype)
            product = configs.model_product(a, b)
            split = model.best_split(product)
            row = {"m": m, "n": n, "k": k, "layout": layout, "rows": split and split[2]}
            row["aten_us"] = bench(lambda a=a, b=b: torch.mm(a, b))
            row["plain_us"] = bench(
                lambda a=a, b=b: kernel._run(kernel.matmul_kernel, (a, b, kernel.scaled(1.0)))
            )
            if split is not None:
                row["predicted"] = split[0] / model.best_plain(product)[0]
                row["flattened"] = flattened(split[1])
                row["split_us"] = bench(
                    lambda a=a, b=b, r=split[2]: kernel.launch_last_wave(None, a, b, 1.0, 0.0, r)
                )
                row["measured"] = row["split_us"] / row["plain_us"]
            rows.append(row)
            print(
                f"{m}x{n}x{k} {layout} {row['rows']} | {row.get('predicted', 0):.3f} | "
                f"{row['aten_us']:.1f} {row['plain_us']:.1f} {row.get('split_us', 0):.1f} | "
                f"{row.get('measured', 0):.3f} | {row.get('flattened', '-')}",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            meta = {"device": torch.cuda.get_device_name(), "dtype": args.dtype}
            json.dump({**meta, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
