"""The GPU tier's setup: every test here is marked ``gpu`` and skipped below its ``sm80`` /
``sm90`` marker's compute capability; the ``checks`` fixture holds the float64 checks they share,
``scaled_linear`` the FP8 linear layer the FP8 files build.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.cuda.presence import cuda_device_count
from mmaplug.tune.measure import poison_free_memory, rel_error

HERE = Path(__file__).parent
NUMBA_PERFORMANCE = "numba.core.errors.NumbaPerformanceWarning"  # small grids, on purpose
NEEDS = {  # marker: (the test runs when the compute capability is ..., the skip reason)
    "sm90": (lambda cc: cc == (9, 0), "needs an sm_90 GPU (H100/H200)"),
    "sm80": (lambda cc: cc >= (8, 0), "needs a CUDA GPU with compute capability >= 8.0"),
}


@functools.cache
def compute_capability() -> tuple[int, int]:
    """The current GPU's compute capability; (0, 0) without a GPU."""
    if not cuda_device_count():
        return (0, 0)
    from mmaplug.planning.device import get_device

    major, minor = get_device().cc
    return (major, minor)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark this folder's tests ``gpu``, let Numba's performance warnings pass, and skip those
    whose ``sm90`` (else ``sm80``) marker asks for more than this machine has."""
    for item in items:
        if not item.path.is_relative_to(HERE):
            continue
        item.add_marker(pytest.mark.gpu)
        item.add_marker(pytest.mark.filterwarnings(f"ignore::{NUMBA_PERFORMANCE}"))
        need = next((NEEDS[name] for name in NEEDS if item.get_closest_marker(name)), None)
        if need is not None and not need[0](compute_capability()):
            item.add_marker(pytest.mark.skip(reason=need[1]))


class Checks:
    """Random inputs with the declared strides, outputs poisoned before each call, float64."""

    # FP8: relative Frobenius error of a few FP8 steps (2**-3 e4m3, 2**-2 e5m2) at most
    TOLERANCE = {mp.float16: 1e-2, mp.bfloat16: 2e-2, mp.float32: 1e-3,
                 mp.float8_e4m3fn: 0.07, mp.float8_e5m2: 0.13}  # fmt: skip

    @staticmethod
    def inputs(fusion: mp.Fusion, rng: np.random.Generator, uniform: float = 0.0) -> list:
        """A CUDA tensor per tensor input, strided as its ``stride_order`` declares, standard
        normal (or with *uniform*, uniform in ±*uniform*); a float in [0.5, 1.5] per scalar."""
        import torch

        out: list = []
        for val in fusion.inputs:
            if not isinstance(val, mp.TensorView):
                out.append(float(rng.uniform(0.5, 1.5)))
                continue
            shape = val.shape
            host = rng.uniform(-uniform, uniform, shape) if uniform else rng.standard_normal(shape)
            order = val.alloc_order  # outermost → innermost
            stored = torch.tensor(np.array(host.transpose(order), order="C"), dtype=torch.float64)
            dtype = getattr(torch, val.dtype.label)  # torch names every mmaplug dtype alike
            out.append(stored.to("cuda", dtype).permute(np.argsort(order).tolist()))
        return out

    @staticmethod
    def expected(fusion: mp.Fusion, inputs: list) -> list:
        """``mp.evaluate`` of *fusion* (float64 inside) on the host copies of *inputs*."""
        host = [x.double().cpu().numpy() if hasattr(x, "double") else x for x in inputs]
        return mp.evaluate(fusion, host)

    def outputs(
        self, fusion: mp.Fusion, outputs: list, expected: list, operand_floor: bool = False
    ) -> None:
        """Each output has its declared shape and every element written, within its dtype's
        relative error of *expected* (with *operand_floor*, at least the operands' tolerance:
        a float32 output of a half matmul keeps the accumulator, the reference rounds)."""
        for tv, got, ref in zip(fusion.outputs, outputs, expected, strict=True):
            assert tuple(got.shape) == tv.shape, f"{tv.name}: shape {tuple(got.shape)}"
            err = rel_error(got, ref)
            assert not np.isnan(err), f"{tv.name}: unwritten (NaN) elements"
            tol = self.TOLERANCE[tv.dtype]
            if operand_floor:
                tol = max(tol, self.TOLERANCE[fusion.inputs[0].dtype])
            assert err < tol, f"{tv.name}: relative error {err:.2e}"

    def calls(
        self,
        compiled: Any,
        fusion: mp.Fusion,
        inputs: list,
        expected: list | None = None,
        operand_floor: bool = False,
    ) -> None:
        """Execute twice (the second call takes the bound launch) on poisoned memory; check
        the outputs of each against *expected* (default: :meth:`expected`)."""
        import torch

        expected = self.expected(fusion, inputs) if expected is None else expected
        for _ in range(2):
            poison_free_memory()
            outputs = compiled.execute(inputs)
            torch.cuda.synchronize()
            self.outputs(fusion, outputs, expected, operand_floor)

    def run(
        self,
        fusion: mp.Fusion,
        pm: mp.PluginManager,
        inputs: list,
        overrides: dict[str, Any] | None = None,
        **checked: Any,
    ) -> Any:
        """``mp.compile`` *fusion* with *overrides*, then :meth:`calls` (*checked*: its
        ``expected`` and ``operand_floor``); return the compiled fusion."""
        compiled = mp.compile(fusion, pm=pm, overrides=overrides or None)
        self.calls(compiled, fusion, inputs, **checked)
        return compiled


@pytest.fixture(scope="session")
def checks() -> Checks:
    """The GPU tier's float64 checks (:class:`Checks`)."""
    return Checks()


def _scheduler_pm(scheduler: str) -> mp.PluginManager:
    block = ("hopper", "decode") if scheduler == "ampere" else ("decode",)
    return mp.make_plugin_manager(load_entrypoints=False, strict=True, block=block)


@pytest.fixture(scope="session")
def scheduler_pm() -> Callable[[str], mp.PluginManager]:
    """``scheduler_pm(name)``: a hermetic, strict plugin manager that plans with *name*
    (``"ampere"`` blocks hopper and decode; ``"hopper"`` blocks decode: it wins on an sm_90
    GPU)."""
    return _scheduler_pm


Linear = Callable[..., mp.Fusion]


def _scaled_linear(m: int, n: int, k: int, dtype: mp.DType, scales: str, epilogue: str,
                   out: mp.DType = mp.bfloat16) -> mp.Fusion:  # fmt: skip
    """``scaled_mm`` of FP8 A ``[m, k]`` and a weight ``[n, k]`` (B ``[k, n]``, K-major) with
    float32 scales per tensor or (*scales* ``"row"``) per row of A and column of B; *epilogue*
    ``"none"``, ``"bias"`` (a bf16 bias inside scaled_mm) or ``"bias_gelu"`` (GELU of the
    float32 product and bias, cast to *out*)."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=dtype)
        b = fd.define_tensor([k, n], dtype=dtype, stride_order=[0, 1])
        sa = fd.define_tensor([m, 1] if scales == "row" else [], dtype=mp.float32)
        sb = fd.define_tensor([1, n] if scales == "row" else [1], dtype=mp.float32)
        bias = fd.define_tensor([n], dtype=mp.bfloat16) if epilogue != "none" else None
        if epilogue == "bias_gelu":
            y = fd.ops.gelu(fd.ops.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=mp.float32))
            fd.add_output(fd.ops.cast(y, out))
        else:
            fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out))
    return fd.fusion


@pytest.fixture(scope="session")
def scaled_linear() -> Linear:
    """The FP8 linear layer builder (:func:`_scaled_linear`)."""
    return _scaled_linear


#: Hopper kernel variants an FP8 epilogue feature runs on: split-K (the reduce kernel applies
#: the epilogue), stream-K (the last piece of a tile applies it), CTA pairs, ping-pong on
#: 64x128 tiles and both epilogues (registers, staged)
EPILOGUE_VARIANTS: dict[str, dict[str, Any]] = {
    "splitk3": {"splitk_factor": 3},
    "streamk3": {"splitk_factor": 3, "tiling_strategy": "persistent_streamk"},
    "cluster_pairs": {"cluster_dims": (2, 1)},
    "pingpong": {
        "tiling_strategy": "persistent_pingpong",
        "cta_tile": (64, 128, 128),
        "warp_tile": (64, 128, 128),
        "instruction_tile": (64, 128, 32),
    },
    "register_epilogue": {"use_smem_epilogue": False},
    "smem_epilogue": {"use_smem_epilogue": True},
}


@pytest.fixture(params=list(EPILOGUE_VARIANTS.values()), ids=list(EPILOGUE_VARIANTS))
def epilogue_variant(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Caller overrides of one of :data:`EPILOGUE_VARIANTS` (a test runs once per variant)."""
    return request.param
