"""A wave model of the matmul kernel's time on any shape, and the config it picks.

An exact table fits the shapes it was tuned on; users bring their own. What decides a tile
shape's time on a new shape is mostly how its tiles fill the SMs: a product of ``tiles``
output tiles runs in ``rounds = ceil(tiles / (SMs * resident))`` waves (``resident``:
programs one SM holds at once), each of ``steps = ceil(K / bk)`` K steps. So for each
candidate of ``MODEL_CANDIDATES`` and each operand layout the model is

    time = a * rounds * steps + b * rounds + c

``a``: one K step of a wave; ``b``: a wave's prologue and epilogue (the loads before the first
dot, the store); ``c``: the launch. Wave quantization (a last wave that leaves SMs idle),
tails (tiles that overhang M or N, counted whole) and short K loops (where ``b`` dominates) all
come out of it. ``a``, ``b`` and ``c`` are fit, per candidate and layout, by non-negative least
squares on relative error over a training grid (``helion_ops.shapes.TRAINING_SHAPES``, timed
by ``python -m helion_ops.tune --training``); ``python -m helion_ops.model`` does the fit and
reports how well the choice holds on shapes left out of it.

The choice: the candidate of least predicted time among those the operands allow (tensor
descriptors need 16-byte-aligned operands: otherwise Helion silently falls back to pointer
indexing, so only the pointer-indexed candidates, whose fit holds either way, are used).
"""

from __future__ import annotations

import functools
import json
import math
from importlib import resources
from typing import TYPE_CHECKING

import helion

from helion_ops.candidates import config

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

# The tile shapes that won the tuned table's keys (H200, 2026-11-30), from the largest to the
# smallest output tile: what the model chooses from.
MODEL_CANDIDATES = [
    config(128, 256, 64, 8, 3, "persistent_interleaved", flatten=True),
    config(256, 128, 64, 8, 3, "persistent_interleaved", flatten=True),
    config(128, 128, 128, 8, 3, "persistent_interleaved", flatten=True),
    config(128, 128, 64, 4, 4, "persistent_interleaved", flatten=True),
    config(128, 256, 64, 8, 3, "flat"),
    config(128, 256, 64, 8, 4, "flat", "pointer"),
    config(128, 128, 64, 4, 3, "flat", "pointer"),
    config(128, 64, 64, 4, 5, "flat", "pointer"),
    config(64, 128, 64, 4, 5, "flat", "pointer"),
    config(64, 64, 128, 4, 3, "flat", "pointer"),
    config(64, 32, 128, 4, 3, "flat", "pointer"),
]

# Hopper: 228 KiB of shared memory per SM, 1 KiB of it reserved per program; 64K registers.
SHARED_MEMORY_PER_SM = 228 * 1024
REGISTERS_PER_SM = 65536
MAX_PROGRAMS_PER_SM = 32


def uses_tensor_descriptors(candidate: helion.Config) -> bool:
    indexing = candidate.config.get("indexing", "pointer")
    return "tensor_descriptor" in ([indexing] if isinstance(indexing, str) else indexing)


def resident(candidate: helion.Config, itemsize: int = 2) -> int:
    """Programs of this candidate one SM runs at once: a persistent kernel's multiplier, else
    what shared memory (the pipeline's stages) and registers (the fp32 accumulator, about 40
    more a thread) allow."""
    c = candidate.config
    if c.get("pid_type", "flat").startswith("persistent"):
        return c.get("num_sm_multiplier", 1)
    bm, bn, bk = c["block_sizes"]
    shared = c["num_stages"] * (bm * bk + bk * bn) * itemsize + 1024
    threads = 32 * c["num_warps"]
    registers = threads * (bm * bn // threads + 40)
    return max(1, min(SHARED_MEMORY_PER_SM // shared, REGISTERS_PER_SM // registers, 32))


def features(candidate: helion.Config, m: int, n: int, k: int, sms: int) -> tuple[int, int, int]:
    """(rounds * steps, rounds, 1): the terms the model's a, b and c multiply."""
    bm, bn, bk = candidate.config["block_sizes"]
    tiles = math.ceil(m / bm) * math.ceil(n / bn)
    rounds = math.ceil(tiles / (sms * resident(candidate)))
    return rounds * math.ceil(k / bk), rounds, 1


def layout_class(layout: str) -> str:
    """The layout whose fit a product uses: its own for 'rr', 'rc' and 'cr'; 'rr' otherwise."""
    return layout if layout in ("rr", "rc", "cr") else "rr"


class Model:
    """Fitted (a, b, c) per candidate and layout; ``choose`` picks a config."""

    def __init__(self, candidates: Sequence[helion.Config], params: Sequence[dict]) -> None:
        self.candidates = list(candidates)
        self.params = list(params)  # per candidate: {layout: [a, b, c]}

    def predict(self, index: int, m: int, n: int, k: int, layout: str, sms: int) -> float | None:
        """Predicted milliseconds of candidate ``index``, or None where it has no fit."""
        coefficients = self.params[index].get(layout_class(layout))
        if coefficients is None:
            return None
        x = features(self.candidates[index], m, n, k, sms)
        return sum(c * f for c, f in zip(coefficients, x, strict=True))

    def ranked(
        self, m: int, n: int, k: int, layout: str, aligned: bool, sms: int
    ) -> list[tuple[float, int]]:
        """(predicted ms, candidate index), fastest first, of the candidates allowed."""
        ranking = []
        for index, candidate in enumerate(self.candidates):
            if not aligned and uses_tensor_descriptors(candidate):
                continue
            predicted = self.predict(index, m, n, k, layout, sms)
            if predicted is not None:
                ranking.append((predicted, index))
        return sorted(ranking)

    def choose(
        self, m: int, n: int, k: int, layout: str, aligned: bool, sms: int
    ) -> helion.Config | None:
        ranking = self.ranked(m, n, k, layout, aligned, sms)
        return self.candidates[ranking[0][1]] if ranking else None

    def to_json(self, **info: object) -> dict:
        return {
            **info,
            "form": "ms = a * rounds * steps + b * rounds + c",
            "candidates": [
                {"config": dict(c), "params": p}
                for c, p in zip(self.candidates, self.params, strict=True)
            ],
        }

    @classmethod
    def from_json(cls, data: dict) -> Model:
        entries = data["candidates"]
        return cls([helion.Config(**e["config"]) for e in entries], [e["params"] for e in entries])


@functools.cache
def shipped_model(arch: str) -> Model | None:
    """The model fit for a GPU architecture such as 'sm90', or None where none ships."""
    path = resources.files("helion_ops") / "tuned" / f"{arch}_model.json"
    if not path.is_file():
        return None
    return Model.from_json(json.loads(path.read_text()))


def fit(records: Iterable[dict], candidates: Sequence[helion.Config] = MODEL_CANDIDATES) -> Model:
    """Fit (a, b, c) >= 0 per candidate and layout to timings.

    Args:
        records: one per timing: m, n, k, layout, sms, config (a dict) and ms.
        candidates: the configs to fit; records of other configs are ignored.
    """
    import numpy as np
    from scipy.optimize import nnls

    keys = [json.dumps(dict(c), sort_keys=True) for c in candidates]
    rows: dict[tuple[int, str], list[tuple[tuple[int, int, int], float]]] = {}
    for r in records:
        key = json.dumps(r["config"], sort_keys=True)
        if key not in keys:
            continue
        index = keys.index(key)
        x = features(candidates[index], r["m"], r["n"], r["k"], r["sms"])
        rows.setdefault((index, r["layout"]), []).append((x, r["ms"]))
    params: list[dict] = [{} for _ in candidates]
    for (index, layout), points in rows.items():
        x = np.array([p[0] for p in points], dtype=float)
        t = np.array([p[1] for p in points], dtype=float)
        # Relative error: each row divided by its time, so small shapes count as much as large.
        coefficients, _ = nnls(x / t[:, None], np.ones_like(t))
        params[index][layout] = [float(c) for c in coefficients]
    return Model(candidates, params)


def _main(argv: list[str] | None = None) -> int:
    """``python -m helion_ops.model RECORDS.jsonl --output tuned/sm90_model.json``: fit the
    model to the tuner's training timings and report how its choice holds on shapes left out
    of the fit (each shape's choice made by a model fit without it)."""
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(description=_main.__doc__.splitlines()[0])
    parser.add_argument(
        "records", type=Path, help="JSON lines of python -m helion_ops.tune --training"
    )
    parser.add_argument("--output", type=Path, help="where to write the model (JSON)")
    args = parser.parse_args(argv)
    records = [json.loads(line) for line in args.records.read_text().splitlines() if line]
    model = fit(records)
    report = evaluate(records)
    for line in report["lines"]:
        print(line)
    if args.output:
        info = {
            "fit_on": args.records.name,
            "device": records[0].get("device"),
            "timing": records[0].get("timing"),
            "held_out": report["summary"],
        }
        args.output.write_text(json.dumps(model.to_json(**info), indent=1) + "\n")
    return 0


def evaluate(records: list[dict]) -> dict:
    """Leave one shape out: for every training shape and layout, the time of the candidate a
    model fit without that shape chooses, against the best candidate's and aten's."""
    shapes = sorted({(r["m"], r["n"], r["k"]) for r in records})
    lines, lost, against_aten = [], [], []
    for shape in shapes:
        rest = [r for r in records if (r["m"], r["n"], r["k"]) != shape]
        model = fit(rest)
        for layout in sorted({r["layout"] for r in records if (r["m"], r["n"], r["k"]) == shape}):
            here = [
                r
                for r in records
                if (r["m"], r["n"], r["k"]) == shape and r["layout"] == layout and r.get("ms")
            ]
            timed = {json.dumps(r["config"], sort_keys=True): r["ms"] for r in here}
            best = min(timed.values())
            aligned = here[0].get("aligned", True)
            chosen = model.choose(*shape, layout, aligned, here[0]["sms"])
            got = timed.get(json.dumps(dict(chosen), sort_keys=True)) if chosen else None
            if got is None:
                continue
            lost.append(best / got)
            against_aten.append(here[0]["aten_ms"] / got)
            lines.append(
                f"{'x'.join(map(str, shape))} {layout}: chosen {got:.4f} ms, best {best:.4f}, "
                f"aten {here[0]['aten_ms']:.4f} ({here[0]['aten_ms'] / got:.3f}x)"
            )

    def geomean(values: list[float]) -> float:
        return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")

    summary = {
        "keys": len(lost),
        "chosen_over_best_geomean": round(geomean(lost), 3),
        "chosen_over_best_min": round(min(lost, default=float("nan")), 3),
        "aten_over_chosen_geomean": round(geomean(against_aten), 3),
        "aten_over_chosen_min": round(min(against_aten, default=float("nan")), 3),
    }
    lines.append(f"held out: {summary}")
    return {"lines": lines, "summary": summary}


if __name__ == "__main__":
    raise SystemExit(_main())
