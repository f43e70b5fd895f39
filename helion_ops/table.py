"""The tuned table: its keys, its files and the user's own table over the shipped one.

An entry is an exact config for one (M, N, K, dtype, operand layout, epilogue), measured by
``python -m helion_ops.tune``. ``helion_ops.configs`` decides with it (entries override the
wave model); this module only names, reads and finds them.
"""

from __future__ import annotations

import functools
import json
import os
import warnings
from importlib import resources
from pathlib import Path

import helion
import torch

from helion_ops.model import power_of_two_pieces

# A table of the user's own (JSON, the shipped table's format) read over the shipped one.
TABLE_ENV = "HELION_OPS_TABLE"
# A split-K entry's ``split_k`` counts the pieces its kernel cuts K in (equal ones, NOTES 118).
# Files written before said how many ways to cut K in blocks of a power of two; they carry no
# ``"split_k": "pieces"`` and their entries are read as the pieces they ran (``entries_of``).
SPLIT_K_FORMAT = "pieces"


def operand_layout(t: torch.Tensor) -> str:
    """'r' for a row-major operand, 'c' for column-major (a transposed view), 's' otherwise."""
    if t.stride(1) == 1:
        return "r"
    if t.stride(0) == 1:
        return "c"
    return "s"


def product_mnk(a: torch.Tensor, b: torch.Tensor) -> tuple[int, int, int]:
    """(M, N, K) of ``a @ b``."""
    return a.shape[0], b.shape[1], a.shape[1]


def config_key(a: torch.Tensor, b: torch.Tensor, *pair: torch.Tensor) -> tuple:
    """The table key of ``a @ b``: (M, N, K, dtype name, layout of a and b, e.g. 'rc').

    For two products in one launch (``pair_kernel``: ``a @ b`` and ``pair[0] @ pair[1]``)
    M, N and K are the first product's and the layout names all four operands, e.g. 'rccr'
    for the backward's ``grad_out @ b.T`` and ``a.T @ grad_out``, whose first product fixes
    the second.
    """
    dtype = str(a.dtype).removeprefix("torch.")
    return *product_mnk(a, b), dtype, "".join(operand_layout(t) for t in (a, b, *pair))


def portable(config: dict) -> dict:
    """A plain entry made to fit every epilogue: per-memory-op lists collapsed or left to Helion.

    A plain entry is measured on the ``alpha * acc`` epilogue (loads of x and y, one store);
    addmm's epilogue adds a load of the bias, so lists with one entry per load or store would
    be one short. A uniform ``indexing`` list becomes its single value.
    """
    config = dict(config)
    indexing = config.get("indexing")
    if isinstance(indexing, list):
        if len(set(indexing)) == 1:
            config["indexing"] = indexing[0]
        else:
            del config["indexing"]
    for per_op in ("load_eviction_policies", "atomic_indexing"):
        config.pop(per_op, None)
    return config


TableKey = tuple[int, int, int, str, str, str]


def entry_key(entry: dict) -> TableKey:
    """The key of a table entry: ``config_key``'s fields and the epilogue."""
    return entry["m"], entry["n"], entry["k"], entry["dtype"], entry["layout"], entry["epilogue"]


def user_table_path(arch: str) -> Path:
    """Where this user's own table for ``arch`` lives: ``$HELION_OPS_TABLE`` if set, else
    ``$XDG_CACHE_HOME/helion_ops/<arch>.json`` (``~/.cache`` by default). ``python -m
    helion_ops.tune`` writes there unless told otherwise."""
    if os.environ.get(TABLE_ENV):
        return Path(os.environ[TABLE_ENV])
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "helion_ops" / f"{arch}.json"


def entries_of(data: dict) -> list[dict]:
    """A table file's entries (its parsed JSON), each split-K entry's ``split_k`` the pieces it
    runs in: a file without ``"split_k": "pieces"`` (``SPLIT_K_FORMAT``) counts power-of-two
    blocks, converted by ``model.power_of_two_pieces``."""
    if data.get("split_k") == SPLIT_K_FORMAT:
        return data["entries"]
    return [_as_pieces(e) if "split_k" in e["config"] else e for e in data["entries"]]


def _as_pieces(entry: dict) -> dict:
    pieces = power_of_two_pieces(entry["k"], entry["config"]["split_k"])
    return {**entry, "config": {**entry["config"], "split_k": pieces}}


def read_entries(data: dict) -> dict[TableKey, helion.Config]:
    """A table file's entries (its parsed JSON) by key (``entries_of``). A plain entry is made
    ``portable``; a bias entry is measured with the bias load and keeps its per-memory-op lists
    (x, y, bias, output)."""
    table = {}
    for e in entries_of(data):
        config = portable(e["config"]) if e["epilogue"] == "plain" else e["config"]
        table[entry_key(e)] = helion.Config(**config)
    return table


def table_document(path: Path) -> dict:
    """A table file's JSON, its entries checked to be readable.

    Raises:
        ValueError: naming the file and what is wrong with it.
    """
    try:
        data = json.loads(path.read_text())
        for entry in entries_of(data):
            helion.Config(**entry["config"])
            entry_key(entry)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(
            f"helion_ops: {path} is not a readable table ({type(error).__name__}: {error}); "
            "fix or delete it, or write it again with python -m helion_ops.tune"
        ) from error
    return data


@functools.cache
def tuned_table(arch: str) -> dict[TableKey, helion.Config]:
    """The table for a GPU architecture such as 'sm90': the shipped one with the user's own
    (``user_table_path``) read over it; empty where neither exists. A ``$HELION_OPS_TABLE``
    that names no file is warned of (a typo would quietly drop the user's entries); a file
    that cannot be read is an error that names it (``table_document``).

    Keys are ``config_key`` plus the epilogue ("plain" or "bias").
    """
    table = {}
    shipped = resources.files("helion_ops") / "tuned" / f"{arch}.json"
    user = user_table_path(arch)
    if os.environ.get(TABLE_ENV) and not user.is_file():
        warnings.warn(
            f"helion_ops: ${TABLE_ENV} names {user}, which is not a file: only the shipped "
            "table is read (python -m helion_ops.tune writes there)",
            stacklevel=2,
        )
    for path in (shipped, user):
        if path.is_file():
            table.update(read_entries(table_document(path)))
    return table


def gpu_arch(device: torch.device) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm{major}{minor}"
