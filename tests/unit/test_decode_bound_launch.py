"""The decode kernel's bound (fast) launch of a horizontal fusion with an amax output, without a
GPU: the addresses it is called with land in the kernel's pointer slots in launch order (A, B,
B1, the outputs), each weight's own strides follow the shape, and the amax output is zeroed on
the stream before the launch."""

from __future__ import annotations

from typing import Any

import pytest

import mmaplug as mp


class Cai:
    """A device tensor as far as ``adapt`` reads one: its CUDA array interface."""

    def __init__(self, shape: tuple, address: int, strides: tuple | None = None,
                 typestr: str = "<u2") -> None:  # fmt: skip
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                         "data": (address, False), "version": 3}  # fmt: skip


def _outputs(an: Any) -> tuple:
    """The bf16 output at 0x400 and the float32 amax at 0x500."""
    from mmaplug.cuda.kernel_views import adapt

    y, amax = an.outputs
    return adapt(Cai(tuple(y.shape), 0x400), y), adapt(
        Cai(tuple(amax.shape), 0x500, None, "<f4"), amax
    )


def _ffn_with_amax() -> mp.Fusion:
    """y = silu(x @ W1.T) * (x @ W3.T) as bf16 and its amax; x [3, 64], W [40, 64]."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([3, 64], dtype=mp.bfloat16)
        w1, w3 = (fd.define_tensor([40, 64], dtype=mp.bfloat16) for _ in "13")
        y = fd.ops.mul(fd.ops.silu(fd.ops.linear(x, w1)), fd.ops.linear(x, w3))
        fd.add_output(fd.ops.cast(y, mp.bfloat16))
        fd.add_output(fd.ops.amax(y, [0, 1]))
    return fd.fusion


def test_bound_horizontal_launch_with_an_amax(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("numba")
    from mmaplug.cuda import launching
    from mmaplug.cuda.kernel_views import adapt
    from mmaplug.planning.artifact import LaunchArgs
    from mmaplug.plugins.decode import artifact

    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    compiled = mp.compile(_ffn_with_amax(), "h200", pm=pm)
    assert compiled.kernel_name == "decode_bf16_m8_w1_u3_h2"  # K = 64: one chunk, one warp
    an = compiled.analysis
    a = adapt(Cai((3, 64), 0x100), an.a)
    b = adapt(Cai((40, 64), 0x200), an.b)
    b1 = adapt(Cai((40, 64), 0x300, strides=(256, 2)), an.bs[1])  # rows of 128 elements
    outs = _outputs(an)
    args = LaunchArgs(a=a, b=b, more_b=(b1,), epilogue_inputs=(), scalars=(), outputs=outs,
                      problem=an.problem)  # fmt: skip
    blocks: list[Any] = []
    events: list[tuple] = []

    class Launch:
        def __init__(self, kernel: int, grid: tuple, block: tuple, smem: int, params: Any) -> None:
            blocks.append(params)
            assert (grid, block) == ((3, 1, 1), (64, 1, 1))  # 40 rows; a warp a product
            self.run = lambda stream: events.append(
                ("launch", [params.slots[s] for s in params.pointer_slots])
            )

    monkeypatch.setattr(artifact, "loaded", lambda *a: 0)
    monkeypatch.setattr(artifact, "DriverLaunch", Launch)
    monkeypatch.setattr(launching.driver, "memset_d32",
                        lambda address, value, count, stream: events.append(
                            ("zero", address, value, count)))  # fmt: skip
    bound = compiled._artifact.bind(args)
    bound([0x1000, 0x2000, 0x3000, 0x4000, 0x5000], [], 0)
    assert events == [("zero", 0x5000, 0, 1), ("launch", [0x1000, 0x2000, 0x3000, 0x4000, 0x5000])]
    (params,) = blocks
    shape = list(params.slots)[7 * 5 :][:9]  # after 5 arrays of 7 slots: M, N, K, strides
    assert shape == [3, 40, 64, 64, 64, 0, 0, 128, 0]  # b1's rows 128 apart


def test_a_misaligned_second_weight_is_declined_naming_it() -> None:
    """Each weight's rows must be 16-byte aligned for the loads: B operand 1 is named."""
    pytest.importorskip("numba")
    from mmaplug.cuda.kernel_views import adapt
    from mmaplug.errors import DeclinedLaunchError
    from mmaplug.planning.artifact import LaunchArgs

    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    compiled = mp.compile(_ffn_with_amax(), "h200", pm=pm)
    an = compiled.analysis
    a, b = adapt(Cai((3, 64), 0x100), an.a), adapt(Cai((40, 64), 0x200), an.b)
    b1 = adapt(Cai((40, 64), 0x302), an.bs[1])
    outs = _outputs(an)
    args = LaunchArgs(a=a, b=b, more_b=(b1,), epilogue_inputs=(), scalars=(), outputs=outs,
                      problem=an.problem)  # fmt: skip
    with pytest.raises(DeclinedLaunchError, match="B operand 1 .horizontal. must start 16-byte"):
        compiled._artifact.bind(args)
