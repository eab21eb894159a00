"""The contract between the runtime and a scheduler's kernel: the ``KernelArtifact`` a scheduler
builds, and the ``LaunchArgs`` the runtime launches it with.

Scheduler plugins import these; the runtime (``mmaplug.runtime``) drives them. Nothing here
imports the runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

if TYPE_CHECKING:
    from mmaplug.analysis.problem import MatmulProblem
    from mmaplug.cuda.kernel_views import DeviceTensor

__all__ = ["BoundLaunch", "KernelArtifact", "LaunchArgs"]


@attrs.frozen(kw_only=True)
class LaunchArgs:
    """A launch, as a scheduler's artifact receives it: flat device views with role strides.

    ``epilogue_inputs``, ``scalars`` and ``outputs`` follow the order of the spec's
    ``EpilogueProgram`` (``inputs``, ``scalars``, ``outputs``). ``stream`` is the raw
    ``CUstream`` handle to launch on (the caller's; 0 is the legacy default stream).
    ``problem`` is this launch's: take m, n, k and batch from it, not from the spec the
    artifact was built for (one kernel serves every shape class planned alike).
    ``more_b``: B operands 1, 2, ... of a horizontal fusion (``MatmulAnalysis.bs[1:]``).
    ``scales``: a block-scaled problem's scales (``MatmulAnalysis.scales``; their
    ``role_strides`` by ``mmaplug.analysis.bindings.SCALE_DIMS``), empty otherwise.
    """

    a: DeviceTensor
    b: DeviceTensor
    epilogue_inputs: tuple[DeviceTensor, ...]
    scalars: tuple[float, ...]
    outputs: tuple[DeviceTensor, ...]
    problem: MatmulProblem
    stream: int = 0
    more_b: tuple[DeviceTensor, ...] = ()
    scales: tuple[DeviceTensor, ...] = ()


#: What ``KernelArtifact.bind`` returns: called with data addresses, scalars and a stream handle.
BoundLaunch = Callable[[Sequence[int], Sequence[float], int], None]


class KernelArtifact(Protocol):
    """What ``Scheduler.build`` (or ``mmaplug_build_kernel``) returns: a launchable kernel for
    one analysed fusion.

    It is built once per kernel configuration (``mmaplug.runtime.kernels.kernel_key``) and then
    launched for every problem that differs from its spec's only in m, n, k and batch (a
    fusion with symbolic extents): read those from ``LaunchArgs.problem``.

    Optional: ``cubin() -> bytes``, the main kernel's cubin as launches load it, which kernel
    dumps disassemble (without it they link ``ptx()`` alone, which may not be what runs);
    ``kernel_jobs() -> list[KernelJob]``, the builds of the kernels its launches load, which
    ``mp.prebuild`` runs in worker processes (without it they build at the first launch).
    """

    kernel_name: str

    def ptx(self) -> str:
        """The PTX of the main kernel (compiled on demand; no GPU needed)."""

    def launch(self, args: LaunchArgs) -> None:
        """Run the kernel on *args* (asynchronously, on ``args.stream``)."""

    def bind(self, args: LaunchArgs) -> BoundLaunch:
        """A launcher for tensors shaped, strided and aligned like *args*' tensors.

        It is called with the data addresses of A, B, the further B operands of a horizontal
        fusion, the epilogue inputs and the outputs (in that order), the scalars and the raw
        stream handle, and must do as little host work as possible, allocate nothing and never
        synchronise (it may run under CUDA graph capture). A launcher that needs scratch memory
        says how much in a ``workspace`` attribute (float32 elements); ``execute`` then
        allocates it with the tensors' framework on the launch stream and passes its address
        after the outputs'.
        """
