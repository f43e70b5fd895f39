"""Fetch tritonbench at the commit helion_ops is measured with, and the submodule addmm needs.

    python -m benchmarks.get_tritonbench [--url URL] [--submodule-url URL] [--dest DIR]

tritonbench is not on PyPI and does not install from a git URL (pip checks out all eight of
its submodules, and the installed package lacks the ``run.py`` and the submodule that its
runner and addmm look for next to it). So this clones it: the pinned commit ``COMMIT``, and
of its submodules only ``submodules/generative-recommenders`` at the commit tritonbench pins,
into ``default_dest()``. run_bench.py puts that clone on ``sys.path`` whenever tritonbench
itself is not importable; nothing is pip-installed. The URLs may be anything git clones (a
mirror, a path on disk); where the submodule's URL lacks the pinned commit, its default
branch is used and a warning says so.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

URL = "https://github.com/meta-pytorch/tritonbench"
COMMIT = "66b557c69bd6d260381987bb3265f2a82cea09c7"
SUBMODULE = "submodules/generative-recommenders"


def default_dest() -> Path:
    """Where the clone goes and where run_bench looks for it: under the user's cache."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "helion_ops" / f"tritonbench-{COMMIT[:7]}"


def _git(*args: str | Path) -> str:
    done = subprocess.run(["git", *map(str, args)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(map(str, args))} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def fetch(url: str = URL, dest: Path | None = None, submodule_url: str | None = None) -> Path:
    """Clone tritonbench at ``COMMIT`` and its generative-recommenders submodule into dest.

    A complete clone already there is kept. The clone is made next to dest and renamed into
    place, so an interrupted fetch leaves nothing that run_bench would take for a clone; a
    failed one removes its partial clone.

    Returns:
        dest.
    """
    dest = dest or default_dest()
    if (dest / "tritonbench").is_dir():
        print(f"tritonbench {COMMIT[:7]} is already at {dest}")
        return dest
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    print(f"cloning {url} at {COMMIT[:7]} into {dest}")
    try:
        _clone_into(partial, url, submodule_url)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)  # a failed fetch leaves no clone behind
        raise
    partial.rename(dest)
    return dest


def _clone_into(partial: Path, url: str, submodule_url: str | None) -> None:
    """tritonbench at ``COMMIT`` and its submodule at the commit it pins, into ``partial``."""
    _git("clone", "--quiet", "--no-checkout", url, partial)
    try:
        _git("-C", partial, "checkout", "--quiet", "--detach", COMMIT)
    except RuntimeError as err:
        message = f"{url}: no commit {COMMIT[:7]}, the one run_bench pins? ({err})"
        raise RuntimeError(message) from err
    pinned = _git("-C", partial, "rev-parse", f"{COMMIT}:{SUBMODULE}")
    if submodule_url is None:
        key = f"submodule.{SUBMODULE}.url"
        submodule_url = _git("-C", partial, "config", "-f", ".gitmodules", key)
    submodule = partial / SUBMODULE
    shutil.rmtree(submodule, ignore_errors=True)  # the empty directory of the gitlink
    print(f"cloning {submodule_url} at {pinned[:7]} into {SUBMODULE}")
    _git("clone", "--quiet", submodule_url, submodule)
    try:
        _git("-C", submodule, "checkout", "--quiet", "--detach", pinned)
    except RuntimeError:
        head = _git("-C", submodule, "rev-parse", "HEAD")
        warnings.warn(
            f"{submodule_url} has no commit {pinned[:7]} (the one tritonbench {COMMIT[:7]} "
            f"pins): using its default branch, {head[:7]}",
            stacklevel=3,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.get_tritonbench", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--url", default=URL, help=f"tritonbench's git URL (default {URL})")
    parser.add_argument(
        "--submodule-url", help=f"{SUBMODULE}'s git URL (default: the one tritonbench names)"
    )
    parser.add_argument("--dest", type=Path, help=f"default {default_dest()}")
    args = parser.parse_args(argv)
    try:
        dest = fetch(args.url, args.dest, args.submodule_url)
    except (RuntimeError, OSError) as err:
        print(f"get_tritonbench: {err}", file=sys.stderr)
        return 1
    if args.dest is not None and args.dest != default_dest():
        print(f"run_bench.py looks in {default_dest()}; for {dest}: PYTHONPATH={dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
