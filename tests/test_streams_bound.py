"""Both schedulers' bound launches without a GPU: which address lands in which parameter slot.

The launches are recorded instead of run (``DriverLaunch`` replaced), so the layout execute
relies on is checked here: A, B, epilogue inputs, outputs, then the split-K workspace the
caller allocates; scalars as float32; every launch on the caller's stream.
"""

from __future__ import annotations

import struct
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mmaplug.cuda.launching import ARRAY_SLOTS
from mmaplug.ir.dtypes import DType
from mmaplug.plugins.ampere import bound as ampere_bound
from mmaplug.plugins.ampere.config import AmpereKernelConfig
from mmaplug.plugins.hopper import artifact as hopper_artifact
from mmaplug.plugins.hopper.config import HopperKernelConfig

sys.path.insert(0, str(Path(__file__).parent))  # tests/: ampere_harness
from ampere_harness import epilogue_program  # noqa: E402

A, B, C, OUT, WS, STREAM = 0xA00, 0xB00, 0xC00, 0xD00, 0xE00, 77


class Recorder:
    """Stands in for DriverLaunch: records the kernel, data pointers and scalars it launches."""

    launched: list[dict[str, Any]] = []

    def __init__(
        self, kern: Any, grid: Any, block: Any, smem: int, params: Any, cluster: int = 1
    ) -> None:
        self.kern, self.params = kern, params

    def __call__(self, stream: int) -> None:
        slots = list(self.params.slots)
        self.launched.append({
            "kernel": self.kern,
            "pointers": [slots[s] for s in self.params.pointer_slots],
            "by_value": [self.params.ptrs[s] for s in self.params.by_value_slots],
            "floats": [struct.unpack("<f", struct.pack("<I", v & 0xFFFFFFFF))[0] for v in slots],
            "stream": stream,
        })  # fmt: skip


@pytest.fixture(autouse=True)
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    Recorder.launched = []
    monkeypatch.setattr(ampere_bound, "DriverLaunch", Recorder)
    monkeypatch.setattr(ampere_bound, "loaded", lambda config, name, smem, slots: name)
    monkeypatch.setattr(hopper_artifact, "DriverLaunch", Recorder)
    monkeypatch.setattr(hopper_artifact, "loaded", lambda config, name, smem, slots: name)
    return Recorder.launched


@pytest.mark.parametrize("splitk", [1, 2])
def test_ampere_bound_layout(recorded: list[dict[str, Any]], splitk: int) -> None:
    """alpha*acc + beta*C: pointers in kernel order, the workspace last, scalars as float32."""
    config = AmpereKernelConfig(
        splitk=splitk, epilogue=epilogue_program("alpha_beta", DType.float16)
    )
    bound = ampere_bound.BoundGemm(
        config, [10, 20, 30, 40], (0, 32), (0, 32), [(0, 16, 1)], [(0, 16)], 2,
        m=16, n=16, k=32, batch=1,
    )  # fmt: skip
    addresses = [A, B, C, OUT] + ([WS] if splitk > 1 else [])
    bound(addresses, [1.5, -0.5], STREAM)
    assert bound.workspace == (2 * 16 * 16 if splitk > 1 else 0)
    assert all(launch["stream"] == STREAM for launch in recorded)
    if splitk == 1:
        (main,) = recorded
        assert main["pointers"] == [A, B, C, OUT]
        assert main["floats"][4 * ARRAY_SLOTS : 4 * ARRAY_SLOTS + 2] == [1.5, -0.5]
        return
    main, reduce = recorded
    assert (main["kernel"], main["pointers"]) == ("ampere_gemm", [A, B, WS])
    assert (reduce["kernel"], reduce["pointers"]) == ("ampere_splitk_reduce", [WS, C, OUT])
    assert reduce["floats"][3 * ARRAY_SLOTS : 3 * ARRAY_SLOTS + 2] == [1.5, -0.5]


@pytest.mark.parametrize(("splitk", "tma"), [(1, False), (2, False), (1, True)])
def test_hopper_bound_layout(recorded: list[dict[str, Any]], splitk: int, tma: bool) -> None:
    """The maps of (A, B) replace them, by value (and with TMA stores, of the outputs too: the
    output's address is in their key): the launch points at their words; the rest as ampere."""
    asked: list[tuple[int, int, tuple[int, ...]]] = []
    words = np.zeros(16 * (3 if tma else 2), np.uint64)

    def get(a: int, b: int, outputs: tuple[int, ...] = ()) -> tuple[np.ndarray, int]:
        asked.append((a, b, outputs))
        return words, words.ctypes.data

    maps = types.SimpleNamespace(get=get)
    config = HopperKernelConfig(
        cta_tile=(64, 64, 64), warp_tile=(64, 64, 64), stages=2, splitk=splitk,
        epilogue=epilogue_program("alpha_beta", DType.float16),
        smem_epilogue=tma, packed_stores=tma, tma_stores=tma,
    )  # fmt: skip
    artifact = types.SimpleNamespace(config=config)
    plan = hopper_artifact._Launch(
        config=config, maps=maps, grid=(4, 1, 1), shape=(16, 16, 32, 1, 0, 0),
        grid_args=(32, 1, 1, 1), epi_strides=(0, 16, 1), out_strides=(0, 16), scale_strides=(),
        m=16, n=16, batch=1, persistent=False,
    )  # fmt: skip
    array = types.SimpleNamespace
    args = types.SimpleNamespace(
        epilogue_inputs=[array(array=array(size=30))],
        outputs=[array(array=array(size=40))],
        scales=[],  # no block scales
    )
    bound = hopper_artifact.BoundHopper(artifact, plan, args)  # type: ignore[arg-type]
    bound([A, B, C, OUT] + ([WS] if splitk > 1 else []), [1.5, -0.5], STREAM)
    assert asked == [(A, B, (OUT,) if tma else ())]
    assert all(launch["stream"] == STREAM for launch in recorded)
    assert recorded[0]["by_value"] == [words.ctypes.data]
    if splitk == 1:
        (main,) = recorded
        assert main["pointers"] == [C, OUT]
        assert main["floats"][3 * ARRAY_SLOTS : 3 * ARRAY_SLOTS + 2] == [1.5, -0.5]
        return
    main, reduce = recorded
    assert bound.workspace == 2 * 16 * 16
    assert (main["kernel"], main["pointers"]) == ("hopper_gemm", [WS])
    assert (reduce["kernel"], reduce["pointers"]) == ("hopper_splitk_reduce", [WS, C, OUT])
    assert reduce["floats"][3 * ARRAY_SLOTS : 3 * ARRAY_SLOTS + 2] == [1.5, -0.5]
