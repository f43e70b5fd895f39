"""Test setup: on a machine without a GPU the kernels run on the CPU.

fp32 and fp16 run the real generated Triton code in Triton's interpreter (TRITON_INTERPRET=1).
Its bf16 dot is wrong (triton issue 11584), so bf16 runs through Helion's ref mode, which
executes the kernel body as eager PyTorch; that needs a CPU ``aten::mm.dtype``, added here.
"""

from __future__ import annotations

import os
import threading

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"

from helion.runtime.settings import RefMode  # noqa: E402

from helion_ops import kernel  # noqa: E402

DEVICE = "cuda" if HAS_CUDA else "cpu"
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU (real sizes, real configs)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` on a machine with a GPU: one worker per core, but at most one per 8 GiB of
    the GPU's memory (each worker holds a CUDA context and its tests' tensors there) and 12 in
    all (an H200 machine's 16 cores ran 12, call 92). Without a GPU, or where the user set
    PYTEST_XDIST_AUTO_NUM_WORKERS, xdist's own count."""
    if not HAS_CUDA or os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    from xdist.plugin import pytest_xdist_auto_num_workers as per_core

    memory_gib = torch.cuda.get_device_properties(0).total_memory / 2**30
    return max(1, min(per_core(config), 12, int(memory_gib // 8)))


@pytest.fixture(autouse=True)
def keep_triton_interpret():
    """run_bench's ``main`` sets TRITON_INTERPRET for the rest of its process where it sees no
    GPU; a test that fakes a machine without one must not leave the GPU tests after it (in
    its process) in the interpreter."""
    was = os.environ.get("TRITON_INTERPRET")
    yield
    if was is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = was


@pytest.fixture(autouse=True)
def poison_uninitialized_memory(monkeypatch):
    """torch.empty fills floats with NaN, so an output element the kernel never writes fails.

    That takes torch's deterministic mode, which would also keep helion_ops off its atomic
    kernels (split-K, the last-wave split): their tests need them, so helion_ops reads the
    mode as off unless a test restores ``kernel.deterministic_algorithms``."""
    from helion_ops import kernel

    monkeypatch.setattr(kernel, "deterministic_algorithms", lambda: False)
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    yield
    torch.use_deterministic_algorithms(was, warn_only=True)


def capture(fn):
    """``fn()`` captured into a CUDA graph on a side stream: (the graph, fn's output)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn()
    torch.cuda.current_stream().wait_stream(stream)
    return graph, out


@pytest.fixture
def restore_tf32():
    """torch's TF32 switch for fp32 products as it was before the test."""
    was = torch.backends.cuda.matmul.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32 = was


@pytest.fixture
def python_path_only(monkeypatch):
    """helion_ops' C++ fast path off (``helion_ops.native``): for tests that patch the Python
    path (a Function's backward, a faked capture) and need every call to go through it. A
    build already under way (the plugin's ``register`` begins one on a GPU) is let finish
    first, or it would load the extension mid-test."""
    from helion_ops import native

    if native.started:
        native.ready(None)
    monkeypatch.setattr(native, "module", None)
    monkeypatch.setattr(native, "started", True)
    # As a finished build: else a tool's wait for it (``native.ready``, the plugin's warm-up
    # on a CPU tensor) would wait out its 600 s for a build never begun.
    built = threading.Event()
    built.set()
    monkeypatch.setattr(native, "_built", built)


_cpu_mm_dtype_lib = None


def _register_cpu_mm_dtype() -> None:
    global _cpu_mm_dtype_lib
    if _cpu_mm_dtype_lib is not None:
        return
    _cpu_mm_dtype_lib = torch.library.Library("aten", "IMPL")

    def mm_dtype(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        return torch.mm(a.to(out_dtype), b.to(out_dtype))

    _cpu_mm_dtype_lib.impl("mm.dtype", mm_dtype, "CPU")


def _set_ref_mode(mode: RefMode) -> None:
    for k in kernel.KERNELS:
        k.settings.ref_mode = mode
    kernel.reset()


@pytest.fixture
def dtype_mode(request: pytest.FixtureRequest) -> torch.dtype:
    """The dtype under test; bf16 on the CPU switches the kernels to ref mode for the test."""
    dtype = request.param
    if dtype == torch.bfloat16 and not HAS_CUDA:
        _register_cpu_mm_dtype()
        _set_ref_mode(RefMode.EAGER)
        yield dtype
        _set_ref_mode(RefMode.OFF)
    else:
        yield dtype
