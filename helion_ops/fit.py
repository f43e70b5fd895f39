"""Fit the wave model to the tuner's timings: ``python -m helion_ops.fit RECORDS.jsonl``.

``python -m helion_ops.tune --training RECORDS`` times the model's candidates on its
training grid; this fits ``helion_ops.model`` to them (``--output`` writes the JSON the
runtime loads, such as ``helion_ops/tuned/sm90_model.json``) and reports how its choice
holds on shapes left out of the fit (``evaluate``). (A module of its own: ``python -m`` of
a module the package already imports runs a second copy of it.)
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path

import helion

from helion_ops.model import (
    BATCH_CANDIDATES,
    MODEL_CANDIDATES,
    Product,
    config_id,
    fit,
    pair_of,
    pair_products,
    record_off_lines,
    record_row_bytes,
)


def main(argv: list[str] | None = None) -> int:
    """``python -m helion_ops.fit RECORDS.jsonl --output tuned/sm90_model.json``: fit the
    model to the tuner's training timings and report how its choice holds on shapes left out
    of the fit (each shape's choice made by a model fit without it)."""
    parser = argparse.ArgumentParser(
        prog="python -m helion_ops.fit", description=" ".join(main.__doc__.split())
    )
    parser.add_argument(
        "records", type=Path, help="JSON lines of python -m helion_ops.tune --training"
    )
    parser.add_argument("--output", type=Path, help="where to write the model (JSON)")
    parser.add_argument(
        "--batch",
        action="store_true",
        help="fit the serving batch's model (BATCH_CANDIDATES, on its records)",
    )
    args = parser.parse_args(argv)
    try:
        lines = args.records.read_text().splitlines()
    except OSError as err:
        parser.error(f"{args.records}: {err.strerror}")
    records = []
    for number, line in enumerate(lines, 1):
        if not line:
            continue
        try:
            records.append(json.loads(line))
        except ValueError as err:
            parser.error(f"{args.records}, line {number}: not JSON ({err})")
    needed = {"config", "ms"}
    missing = [n for n, r in enumerate(records, 1) if not isinstance(r, dict) or needed - r.keys()]
    if not records or missing:
        where = f"record {missing[0]} lacks config or ms" if missing else "no records"
        parser.error(f"{args.records}: {where} (python -m helion_ops.tune --training writes them)")
    candidates = BATCH_CANDIDATES if args.batch else MODEL_CANDIDATES
    model = fit(records, candidates)
    report = evaluate(records, candidates)
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


def evaluate(records: list[dict], candidates: Sequence[helion.Config] = MODEL_CANDIDATES) -> dict:
    """Leave one shape out: for every training shape and layout, the time of the candidate a
    model fit without that shape chooses, against the best candidate's and aten's; for a
    backward's pair, the time of what it chooses (one launch of a candidate, or two launches)
    against the best of these."""
    shapes = sorted({(r["m"], r["n"], r["k"]) for r in records})
    lines, lost, against_aten, pairs = [], [], [], []
    for shape in shapes:
        rest = [r for r in records if (r["m"], r["n"], r["k"]) != shape]
        model = fit(rest, candidates)
        for layout in sorted({r["layout"] for r in records if (r["m"], r["n"], r["k"]) == shape}):
            here = [
                r
                for r in records
                if (r["m"], r["n"], r["k"]) == shape and r["layout"] == layout and r.get("ms")
            ]
            timed = {config_id(r["config"]): r["ms"] for r in here}
            # A backward's pair: one launch of the chosen candidate, or two launches (as the
            # runtime runs them) where the model predicts one no faster.
            pair = len(layout) == 4
            if pair:
                timed["two"] = here[0]["two_launches_ms"]
            best = min(timed.values())
            if pair:
                chosen = model.pair(*pair_products(here[0]))
                got = timed["two"] if chosen is None else timed.get(config_id(pair_of(chosen)))
                if got is not None:
                    pairs.append(best / got)
                    lines.append(
                        f"{'x'.join(map(str, shape))} {layout}: chosen {got:.4f} ms "
                        f"({'two launches' if chosen is None else 'one'}), best {best:.4f}, "
                        f"two launches {timed['two']:.4f}"
                    )
                continue
            aligned = here[0].get("aligned", True)
            sms, off_lines = here[0]["sms"], record_off_lines(here[0])
            row_bytes = record_row_bytes(here[0])
            chosen = model.choose(Product(*shape, layout, aligned, sms, off_lines, row_bytes))
            got = timed.get(config_id(chosen)) if chosen else None
            if got is None:
                continue
            lost.append(best / got)
            against_aten.append(here[0]["aten_ms"] / got)
            lines.append(
                f"{'x'.join(map(str, shape))} {layout}: chosen {got:.4f} ms, best {best:.4f}, "
                f"aten {here[0]['aten_ms']:.4f} ({here[0]['aten_ms'] / got:.3f}x)"
            )

    def geomean(values: list[float]) -> float:
        return statistics.geometric_mean(values) if values else float("nan")

    summary = {
        "keys": len(lost),
        "chosen_over_best_geomean": round(geomean(lost), 3),
        "chosen_over_best_min": round(min(lost, default=float("nan")), 3),
        "aten_over_chosen_geomean": round(geomean(against_aten), 3),
        "aten_over_chosen_min": round(min(against_aten, default=float("nan")), 3),
        **(
            {
                "pairs": len(pairs),
                "pair_chosen_over_best_geomean": round(geomean(pairs), 3),
                "pair_chosen_over_best_min": round(min(pairs), 3),
            }
            if pairs
            else {}
        ),
    }
    lines.append(f"held out: {summary}")
    return {"lines": lines, "summary": summary}


if __name__ == "__main__":
    raise SystemExit(main())
