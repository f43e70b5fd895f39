"""The tuned table: its keys, its files, the user's own table over the shipped one."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import helion
import pytest
import torch

from helion_ops import table
from helion_ops.candidates import config

# Any valid config, as a user's entry.
SMALL = config(64, 64, 128, 4, 3, "flat", "pointer")


def test_operand_layout_and_key():
    a = torch.randn(8, 4)
    b = torch.randn(6, 4).T
    assert table.config_key(a, b) == (8, 6, 4, "float32", "rc")
    assert table.operand_layout(torch.randn(8, 8)[:, ::2]) == "s"
    # A pair: the first product's sizes, every operand's layout.
    g = torch.randn(8, 6)
    assert table.config_key(g, b.T, a.T, g) == (8, 4, 6, "float32", "rrcr")


def test_portable_configs_fit_every_epilogue():
    entry = {
        "block_sizes": [64, 64, 64],
        "indexing": ["pointer", "pointer", "pointer"],
        "load_eviction_policies": ["", ""],
        "atomic_indexing": [],
    }
    assert table.portable(entry) == {"block_sizes": [64, 64, 64], "indexing": "pointer"}
    mixed = {"indexing": ["pointer", "tensor_descriptor", "pointer"]}
    assert table.portable(mixed) == {}


def test_shipped_tables_are_valid(monkeypatch, tmp_path):
    monkeypatch.setenv(table.TABLE_ENV, str(tmp_path / "none.json"))  # no user table
    table.tuned_table.cache_clear()
    tuned = resources.files("helion_ops") / "tuned"
    for path in tuned.iterdir():
        if path.name.endswith(".json") and not path.name.endswith("_model.json"):
            data = json.loads(path.read_text())
            assert {"device", "entries"} <= data.keys()
            entries = table.tuned_table(path.name.removesuffix(".json"))
            assert len(entries) == len(data["entries"])
    table.tuned_table.cache_clear()


def test_user_table_is_read_over_the_shipped_one(tmp_path, monkeypatch):
    key = (1536, 1536, 1536, "bfloat16", "rr", "plain")
    entry = {
        "m": 1536,
        "n": 1536,
        "k": 1536,
        "dtype": "bfloat16",
        "layout": "rr",
        "epilogue": "plain",
        "config": dict(SMALL),
    }
    shipped = Path(table.__file__).parent / "tuned" / "sm90.json"
    shipped_key = next(iter(table.read_entries(json.loads(shipped.read_text()))))
    override = {
        **entry,
        **dict(zip(("m", "n", "k", "dtype", "layout", "epilogue"), shipped_key, strict=True)),
    }
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"entries": [entry, override]}))
    monkeypatch.setenv(table.TABLE_ENV, str(path))
    table.tuned_table.cache_clear()
    try:
        entries = table.tuned_table("sm90")
        assert entries[key] == helion.Config(**table.portable(dict(SMALL)))
        assert entries[shipped_key] == helion.Config(**table.portable(dict(SMALL)))
        assert len(entries) > 2  # the shipped entries are still there
    finally:
        monkeypatch.delenv(table.TABLE_ENV)
        table.tuned_table.cache_clear()


def test_user_table_path_defaults_to_the_cache_folder(monkeypatch, tmp_path):
    monkeypatch.delenv(table.TABLE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert table.user_table_path("sm90") == tmp_path / "helion_ops" / "sm90.json"
    monkeypatch.setenv(table.TABLE_ENV, "/x/y.json")
    assert table.user_table_path("sm90") == Path("/x/y.json")


def test_a_split_entry_of_an_older_table_runs_the_pieces_it_was_measured_with():
    """Older tables (no ``"split_k": "pieces"``) counted K's power-of-two blocks: 8 ways of
    K = 20120 were 5 blocks of 4096, now 5 equal pieces. Newer ones count pieces; the
    shipped table is one."""
    entry = {
        "m": 1536,
        "n": 512,
        "k": 20120,
        "dtype": "bfloat16",
        "layout": "cr",
        "epilogue": "plain",
        "config": {"block_sizes": [128, 256, 64], "num_warps": 8, "num_stages": 3, "split_k": 8},
    }
    key = table.entry_key(entry)
    older = json.dumps({"entries": [entry]})
    assert table.read_entries(json.loads(older))[key].config["split_k"] == 5
    newer = json.dumps({"split_k": table.SPLIT_K_FORMAT, "entries": [entry]})
    assert table.read_entries(json.loads(newer))[key].config["split_k"] == 8
    plain = {**entry, "config": dict(SMALL)}
    assert table.entries_of({"entries": [plain]}) == [plain]
    shipped = json.loads((Path(table.__file__).parent / "tuned" / "sm90.json").read_text())
    assert shipped["split_k"] == table.SPLIT_K_FORMAT


def test_the_tuner_writes_tables_of_pieces(tmp_path, monkeypatch):
    from helion_ops import tune

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "GPU")
    entry = {"m": 8, "n": 8, "k": 8192, "dtype": "bfloat16", "layout": "rr", "epilogue": "plain"}
    entry["config"] = {"block_sizes": [64, 64, 64], "split_k": 3}
    path = tmp_path / "sm90.json"
    tune.write_table(path, {table.entry_key(entry): entry}, "sm90", "python -m helion_ops.tune")
    written = json.loads(path.read_text())
    assert written["split_k"] == table.SPLIT_K_FORMAT
    assert table.entries_of(written) == [entry]


@pytest.mark.parametrize(
    "text", ["{not json", "[]", '{"entries": [{"m": 1}]}', '{"entries": [{"config": 3}]}']
)
def test_an_unreadable_user_table_is_an_error_naming_it(text, tmp_path, monkeypatch):
    path = tmp_path / "mine.json"
    path.write_text(text)
    monkeypatch.setenv(table.TABLE_ENV, str(path))
    table.tuned_table.cache_clear()
    try:
        with pytest.raises(ValueError, match=re.escape(f"helion_ops: {path} is not a readable")):
            table.tuned_table("sm90")
    finally:
        table.tuned_table.cache_clear()


def test_a_user_table_variable_naming_no_file_is_warned_of(tmp_path, monkeypatch):
    monkeypatch.setenv(table.TABLE_ENV, str(tmp_path / "typo.json"))
    table.tuned_table.cache_clear()
    try:
        with pytest.warns(UserWarning, match="typo.json, which is not a file"):
            assert table.tuned_table("sm90")  # the shipped entries
    finally:
        table.tuned_table.cache_clear()
