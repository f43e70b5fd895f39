"""``--gpus N|all``: the suite on N local GPUs at once, one process per GPU.

Process i runs this same command with ``--shard i/N`` and ``CUDA_VISIBLE_DEVICES=i``, so it
takes the i-th block of every op's inputs and sees only its own GPU (a GPU shared by two runs
would skew both timings). All write into the one output directory; the caller merges their
JSON files into one summary.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

# The flags the workers must not get: the GPU split is theirs as a shard, and the comparison
# and the --output CSV are made once, from the merged results.
PARENT_FLAGS = ("--gpus", "--compare", "--output-dir")


def gpu_count(text: str, available: int) -> int:
    """The number of GPUs ``--gpus`` asks for.

    Args:
        text: "all" or a positive number.
        available: the local GPUs.

    Returns:
        The count.

    Raises:
        ValueError: more GPUs than there are, or none at all.
    """
    count = available if text == "all" else int(text)
    if available == 0 or count > available:
        raise ValueError(f"--gpus {text}: this machine has {available} CUDA GPU(s)")
    return count


def worker_argv(argv: Sequence[str], index: int, count: int, output_dir: Path) -> list[str]:
    """The command line of worker ``index``: the caller's, less PARENT_FLAGS, plus its shard.

    Args:
        argv: the caller's arguments.
        index: the worker (its GPU).
        count: how many workers.
        output_dir: the run's output directory, shared by all.

    Returns:
        The worker's arguments.
    """
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name, has_value, _ = arg.partition("=")
        if name in PARENT_FLAGS:
            skip = not has_value
            continue
        kept.append(arg)
    return [*kept, "--shard", f"{index}/{count}", "--output-dir", str(output_dir)]


def run_workers(
    argv: Sequence[str],
    count: int,
    output_dir: Path,
    spawn: Callable[..., subprocess.Popen] = subprocess.Popen,
) -> list[int]:
    """Start one worker per GPU, wait for all, and return their exit statuses.

    Args:
        argv: the caller's arguments.
        count: how many GPUs (workers).
        output_dir: the shared output directory.
        spawn: how a process is started (``subprocess.Popen``; a fake in tests).

    Returns:
        Each worker's exit status, in GPU order.
    """
    workers = [
        spawn(
            [sys.executable, "-m", "benchmarks.main", *worker_argv(argv, i, count, output_dir)],
            env=worker_env(i),
        )
        for i in range(count)
    ]
    return [worker.wait() for worker in workers]


def worker_env(index: int) -> dict[str, str]:
    """The environment of a worker process on GPU ``index``: it sees only that GPU, and
    ``python -m benchmarks...`` imports this checkout from any working directory, installed
    or not (the folder that holds this package goes first on ``PYTHONPATH``)."""
    root = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "CUDA_VISIBLE_DEVICES": str(index), "PYTHONPATH": path}
