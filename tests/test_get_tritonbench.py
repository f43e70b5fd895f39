"""benchmarks.get_tritonbench: a pinned clone that run_bench then imports tritonbench from.

Stand-ins for tritonbench and generative-recommenders are made as local git repositories
(git clones any path, as it does the fetched mirrors this was also run against).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import get_tritonbench, tritonbench_runner

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(repo: Path, *args: str) -> str:
    identity = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "protocol.file.allow=always"]
    done = subprocess.run(
        ["git", *identity, "-C", str(repo), *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def commit_files(repo: Path, files: dict[str, str]) -> str:
    repo.mkdir(parents=True, exist_ok=True)
    if not (repo / ".git").exists():
        git(repo, "init", "-q")
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "c")
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def upstream(tmp_path, monkeypatch):
    """A generative-recommenders with two commits and a tritonbench whose pinned commit
    records the first of them as its submodule, then moves on."""
    recommenders = tmp_path / "gr"
    pinned = commit_files(recommenders, {"generative_recommenders/__init__.py": "V = 1\n"})
    commit_files(recommenders, {"generative_recommenders/__init__.py": "V = 2\n"})
    tritonbench = tmp_path / "tb"
    modules = f'[submodule "{get_tritonbench.SUBMODULE}"]\n\tpath = {get_tritonbench.SUBMODULE}\n'
    modules += f"\turl = {recommenders}\n"
    commit_files(tritonbench, {"tritonbench/__init__.py": "", "run.py": "", ".gitmodules": modules})
    git(
        tritonbench,
        "update-index",
        "--add",
        "--cacheinfo",
        f"160000,{pinned},submodules/generative-recommenders",
    )
    git(tritonbench, "commit", "-q", "-m", "submodule")
    commit = git(tritonbench, "rev-parse", "HEAD")
    commit_files(tritonbench, {"later.txt": "after the pin\n"})
    monkeypatch.setattr(get_tritonbench, "COMMIT", commit)
    return tritonbench, recommenders, pinned


def test_clones_the_pinned_commit_with_its_pinned_submodule(upstream, tmp_path):
    tritonbench, _, pinned = upstream
    dest = get_tritonbench.fetch(str(tritonbench), tmp_path / "clone")
    assert git(dest, "rev-parse", "HEAD") == get_tritonbench.COMMIT
    assert not (dest / "later.txt").exists()
    submodule = dest / get_tritonbench.SUBMODULE
    assert git(submodule, "rev-parse", "HEAD") == pinned
    assert (submodule / "generative_recommenders/__init__.py").read_text() == "V = 1\n"
    assert not dest.with_name("clone.partial").exists()
    assert get_tritonbench.fetch(str(tritonbench), dest) == dest  # kept as it is


def test_a_submodule_url_without_the_pin_gives_its_default_branch_and_says_so(upstream, tmp_path):
    tritonbench, _, _ = upstream
    other = tmp_path / "gr_mirror"
    commit_files(other, {"generative_recommenders/__init__.py": "V = 3\n"})
    with pytest.warns(UserWarning, match="has no commit .* using its default branch"):
        dest = get_tritonbench.fetch(str(tritonbench), tmp_path / "clone", str(other))
    text = (dest / get_tritonbench.SUBMODULE / "generative_recommenders/__init__.py").read_text()
    assert text == "V = 3\n"


def test_a_failed_clone_leaves_nothing_run_bench_would_use(tmp_path, capsys):
    dest = tmp_path / "clone"
    assert get_tritonbench.main(["--url", str(tmp_path / "missing"), "--dest", str(dest)]) == 1
    assert "git clone" in capsys.readouterr().err
    assert not dest.exists()


def test_a_url_without_the_pinned_commit_says_so_and_leaves_no_partial_clone(
    upstream, tmp_path, monkeypatch, capsys
):
    tritonbench, _, _ = upstream
    monkeypatch.setattr(get_tritonbench, "COMMIT", "0" * 40)
    dest = tmp_path / "clone"
    assert get_tritonbench.main(["--url", str(tritonbench), "--dest", str(dest)]) == 1
    assert f"{tritonbench}: no commit 0000000, the one run_bench pins?" in capsys.readouterr().err
    assert not dest.exists()
    assert not dest.with_name("clone.partial").exists()


@pytest.fixture
def tritonbench_modules_kept():
    """sys.modules' tritonbench entries as they were before the test: a test that imports a
    fake clone's tritonbench must not leave it to the tests after it in its process (which
    would then import ``tritonbench.utils`` from the clone)."""

    def ours() -> dict[str, object]:
        return {k: m for k, m in sys.modules.items() if k.split(".")[0] == "tritonbench"}

    before = ours()
    yield
    for name in ours():
        del sys.modules[name]
    sys.modules.update(before)


def test_run_bench_imports_tritonbench_from_the_clone(
    upstream, tmp_path, monkeypatch, tritonbench_modules_kept
):
    tritonbench, _, _ = upstream
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "tritonbench", raising=False)
    monkeypatch.setattr("builtins.__import__", _without_installed_tritonbench(tmp_path))
    assert "get_tritonbench" in tritonbench_runner.tritonbench_import_error()
    dest = get_tritonbench.fetch(str(tritonbench))
    assert dest == tmp_path / "cache" / "helion_ops" / f"tritonbench-{get_tritonbench.COMMIT[:7]}"
    assert tritonbench_runner.tritonbench_import_error() is None
    assert Path(sys.modules["tritonbench"].__file__).parent == dest / "tritonbench"


def _without_installed_tritonbench(under: Path):
    """``__import__`` that finds tritonbench only below ``under`` (not a developer's own)."""
    real_import = __import__

    def importer(name, *args, **kwargs):
        if name == "tritonbench" and not any(p.startswith(str(under)) for p in sys.path):
            raise ImportError("No module named 'tritonbench'")
        return real_import(name, *args, **kwargs)

    return importer
