"""DirectLauncher: Triton's entry point on the first launch, the compiled kernel afterwards."""

from __future__ import annotations

from triton.compiler import CompiledKernel

from helion_ops.plans import DirectLauncher


class FakeCompiled(CompiledKernel):
    def __init__(self) -> None:  # no real binary behind it
        self.module = None
        self.launches: list[tuple] = []

    def __getitem__(self, grid):
        return lambda *args: self.launches.append((grid, args))


class FakeJitKernel:
    """What Helion's default launcher calls: ``run(*args, grid=, warmup=, **options)``."""

    def __init__(self, returns) -> None:
        self.returns = returns
        self.runs: list[tuple] = []

    def run(self, *args, grid, warmup, **options):
        self.runs.append((grid, args, options["num_warps"], options["num_stages"]))
        return self.returns


def test_compiles_through_triton_once_then_launches_directly():
    compiled = FakeCompiled()
    kernel = FakeJitKernel(returns=compiled)
    launch = DirectLauncher()
    for x in (1, 2, 3):
        launch(kernel, (132,), "x", x, 64, num_warps=8, num_stages=3)
    assert kernel.runs == [((132,), ("x", 1, 64), 8, 3)]
    # The same arguments, constexprs included, as Triton's entry point passes; grid padded to 3.
    assert compiled.launches == [((132, 1, 1), ("x", 2, 64)), ((132, 1, 1), ("x", 3, 64))]


def test_each_triton_kernel_keeps_its_own_compiled_kernel():
    first, second = FakeCompiled(), FakeCompiled()
    kernels = FakeJitKernel(first), FakeJitKernel(second)
    launch = DirectLauncher()
    for jit_kernel in (*kernels, *kernels):
        launch(jit_kernel, (4, 2), "y", num_warps=4, num_stages=2)
    assert [len(k.runs) for k in kernels] == [1, 1]
    assert first.launches == second.launches == [((4, 2, 1, 1), ("y",))]


def test_without_a_compiled_kernel_every_launch_goes_through_triton():
    # Triton's interpreter launches and returns no compiled kernel.
    kernel = FakeJitKernel(returns=None)
    launch = DirectLauncher()
    for _ in range(3):
        launch(kernel, (1,), "z", num_warps=4, num_stages=1)
    assert len(kernel.runs) == 3
