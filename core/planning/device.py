"""Device: the GPU facts heuristics and limits read, from a named preset or the local GPU."""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Mapping
from types import MappingProxyType, SimpleNamespace
from typing import Any, Final

import attrs

from mmaplug.errors import UnsupportedTargetError, UsageError
from mmaplug.ir.arguments import as_int, int_field, is_int, of_type

_KIB: Final = 1024
_MIB: Final = 1024 * 1024


def _as_cc(value: Any) -> Any:
    """Converter: a sequence of integers becomes a tuple of ints; the validator checks it."""
    try:
        return tuple(as_int(v) for v in value)
    except TypeError:
        return value


def _is_cc(instance: Any, attribute: Any, value: Any) -> None:
    if not (
        isinstance(value, tuple)
        and len(value) == 2
        and all(is_int(v) and int(v) >= 0 for v in value)
    ):
        raise UsageError(
            f"Device.cc={value!r} is not allowed; it must be (major, minor), e.g. (9, 0)"
        )


@attrs.frozen(kw_only=True)
class Device:
    """What mmaplug needs to know about a GPU; sizes are in bytes.

    ``arch_suffix`` is ``"a"`` for a GPU whose architecture-specific features (``wgmma``,
    ``setmaxnreg``) are targeted, as in ``sm_90a``; it is empty otherwise.
    """

    name: str = attrs.field(validator=of_type(str, "a str"))
    cc: tuple[int, int] = attrs.field(converter=_as_cc, validator=_is_cc)
    arch_suffix: str = attrs.field(default="", validator=of_type(str, 'a str ("" or "a")'))
    sm_count: int = attrs.field(converter=as_int, validator=int_field(1))
    smem_per_block_optin: int = attrs.field(converter=as_int, validator=int_field(1))
    smem_per_sm: int = attrs.field(converter=as_int, validator=int_field(1))
    regs_per_sm: int = attrs.field(default=65536, converter=as_int, validator=int_field(1))
    threads_per_sm: int = attrs.field(default=2048, converter=as_int, validator=int_field(1))
    ctas_per_sm: int = attrs.field(default=32, converter=as_int, validator=int_field(1))
    max_threads_per_block: int = attrs.field(default=1024, converter=as_int, validator=int_field(1))
    l2_bytes: int = attrs.field(default=0, converter=as_int, validator=int_field(0))
    warp_size: int = attrs.field(default=32, converter=as_int, validator=int_field(1))

    @property
    def target(self) -> str:
        """The PTX target name, e.g. ``"sm_80"`` or ``"sm_90a"``."""
        major, minor = self.cc
        return f"sm_{major}{minor}{self.arch_suffix}"


_PRESETS: Final[Mapping[str, Device]] = MappingProxyType(
    {
        "a100": Device(
            name="a100",
            cc=(8, 0),
            sm_count=108,
            smem_per_block_optin=166_912,
            smem_per_sm=164 * _KIB,
            l2_bytes=40 * _MIB,
        ),
        "h100": Device(
            name="h100",
            cc=(9, 0),
            arch_suffix="a",
            sm_count=132,
            smem_per_block_optin=232_448,
            smem_per_sm=228 * _KIB,
            l2_bytes=50 * _MIB,
        ),
        "h200": Device(
            name="h200",
            cc=(9, 0),
            arch_suffix="a",
            sm_count=132,
            smem_per_block_optin=232_448,
            smem_per_sm=228 * _KIB,
            l2_bytes=60 * _MIB,
        ),
    }
)

PRESET_NAMES: Final[tuple[str, ...]] = tuple(_PRESETS)

_NO_GPU: Final = "no CUDA GPU found; pass a preset name such as device='h200' to plan without one"


def get_device(name: str | Device | None = None) -> Device:
    """Return the device to plan for.

    :param name: a preset name (``"a100"``, ``"h100"``, ``"h200"``, any case), a ``Device``
        (returned as is), or ``None`` for the local GPU, read through ``numba.cuda``.
    :returns: the ``Device``.
    :raises UsageError: *name* is not a preset.
    :raises UnsupportedTargetError: *name* is ``None`` and there is no usable CUDA GPU.
    """
    if isinstance(name, Device):
        return name
    if name is None:
        return _local_device()
    if not isinstance(name, str):
        raise UsageError(f"device must be a preset name, a Device or None, not {name!r}")
    preset = _PRESETS.get(name.strip().lower())
    if preset is not None:
        return preset
    near = difflib.get_close_matches(name.strip().lower(), PRESET_NAMES, n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    raise UsageError(
        f"unknown device {name!r}{hint} presets: {', '.join(PRESET_NAMES)} "
        "(or pass None to use the local GPU)"
    )


def _local_device() -> Device:
    """Describe the current CUDA GPU: through the driver (no Numba: a cold start from the disk
    cache never imports it), else, and under Numba's simulator, through ``numba.cuda``."""
    from mmaplug.cuda.launching import simulating

    if not simulating():
        from mmaplug.cuda.driver import device_attributes

        with contextlib.suppress(Exception):  # no libcuda or no GPU: numba says why below
            return device_from_attributes(SimpleNamespace(**device_attributes()))
    try:
        from numba import cuda  # lazy on purpose: core imports without numba
    except ImportError as error:
        raise UnsupportedTargetError(_NO_GPU) from error
    try:
        if not cuda.is_available():
            raise UnsupportedTargetError(_NO_GPU)
        gpu = cuda.get_current_device()
    except UnsupportedTargetError:
        raise
    except Exception as error:  # numba raises CudaSupportError and driver errors here.
        raise UnsupportedTargetError(f"{_NO_GPU} ({error})") from error
    return device_from_attributes(gpu)


def device_from_attributes(gpu: Any) -> Device:
    """Build a ``Device`` from a numba-cuda device object (or anything with its attributes)."""
    raw_name = gpu.name
    name = raw_name.decode() if isinstance(raw_name, bytes) else str(raw_name)
    major, minor = (int(part) for part in gpu.compute_capability)
    smem_per_block = int(getattr(gpu, "MAX_SHARED_MEMORY_PER_BLOCK", 48 * _KIB))
    return Device(
        name=name,
        cc=(major, minor),
        # numba-cuda builds cuda.jit kernels for sm_90a on a cc 9.x GPU (seen on the H200).
        arch_suffix="a" if major >= 9 else "",
        sm_count=int(gpu.MULTIPROCESSOR_COUNT),
        smem_per_block_optin=int(getattr(gpu, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", smem_per_block)),
        smem_per_sm=int(getattr(gpu, "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", smem_per_block)),
        regs_per_sm=int(getattr(gpu, "MAX_REGISTERS_PER_MULTIPROCESSOR", 65536)),
        threads_per_sm=int(getattr(gpu, "MAX_THREADS_PER_MULTIPROCESSOR", 2048)),
        ctas_per_sm=int(getattr(gpu, "MAX_BLOCKS_PER_MULTIPROCESSOR", 32)),
        max_threads_per_block=int(getattr(gpu, "MAX_THREADS_PER_BLOCK", 1024)),
        l2_bytes=int(getattr(gpu, "L2_CACHE_SIZE", 0)),
        warp_size=int(getattr(gpu, "WARP_SIZE", 32)),
    )
