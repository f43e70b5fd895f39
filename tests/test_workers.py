"""How many workers ``pytest -n auto`` (the README's test command) starts."""

from __future__ import annotations

import types

import conftest
import pytest
import torch


@pytest.mark.parametrize(
    ("cores", "memory_gib", "workers"),
    [(16, 139, 12), (128, 139, 12), (64, 24, 3), (2, 80, 2), (32, 6, 1)],
)
def test_gpu_machines_get_a_worker_per_core_within_the_gpus_memory(
    monkeypatch, cores, memory_gib, workers
):
    monkeypatch.setattr(conftest, "HAS_CUDA", True)
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    monkeypatch.setattr("xdist.plugin.pytest_xdist_auto_num_workers", lambda config: cores)
    memory = types.SimpleNamespace(total_memory=memory_gib * 2**30)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: memory)
    assert conftest.pytest_xdist_auto_num_workers(None) == workers


def test_without_a_gpu_xdist_counts_the_cores(monkeypatch):
    monkeypatch.setattr(conftest, "HAS_CUDA", False)
    assert conftest.pytest_xdist_auto_num_workers(None) is None


def test_a_count_the_user_set_is_xdists_to_read(monkeypatch):
    monkeypatch.setattr(conftest, "HAS_CUDA", True)
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "32")
    assert conftest.pytest_xdist_auto_num_workers(None) is None
