"""Unit tier: TensorMapSpec limits, and encode's driver call (mocked: no libcuda here)."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from mmaplug.cuda import tensormap as T
from mmaplug.errors import LaunchError, UsageError
from mmaplug.ir.dtypes import DType

# A row-major 100 x 200 fp16 matrix with a 208-element pitch, K-major 64 x 128 boxes, SW128.
GOOD = T.TensorMapSpec(DType.float16, (200, 100), (416,), (64, 128), 128)


def _spec(**changes) -> T.TensorMapSpec:
    fields = dict(
        dtype=GOOD.dtype,
        dims=GOOD.dims,
        strides_bytes=GOOD.strides_bytes,
        box=GOOD.box,
        swizzle=GOOD.swizzle,
    )
    return T.TensorMapSpec(**(fields | changes))


def test_good_spec_has_no_violations():
    assert GOOD.violations(0x7F0000001000) == ()
    assert GOOD.box_bytes == 64 * 128 * 2
    assert GOOD.rank == 2
    GOOD.check(0x7F0000001000)


def test_fields_are_converted_to_int_tuples():
    spec = T.TensorMapSpec(DType.bfloat16, [np.int64(64), 8], np.array([128]), [64, 8], "64")
    assert spec.dims == (64, 8) and spec.strides_bytes == (128,) and spec.swizzle == 64
    assert type(spec.dims[0]) is int


BAD = {
    "unaligned address": (dict(), 0x1008, r"base address 0x1008 is not 16-byte aligned"),
    "stride not multiple of 16": (
        dict(strides_bytes=(402,)),
        None,
        r"dim 1 has a stride of 402 bytes; TMA needs a positive multiple of 16 below 2\*\*40 "
        r"\(a leading dimension that is a multiple of 8 float16 elements\)",
    ),
    "stride too large": (dict(strides_bytes=(1 << 40,)), None, r"stride of 1099511627776 bytes"),
    "rank 1": (dict(dims=(200,), strides_bytes=(), box=(64,)), None, r"rank 1 .* not in 2\.\.5"),
    "rank 6": (
        dict(dims=(8,) * 6, strides_bytes=(16,) * 5, box=(8,) * 6),
        None,
        r"rank 6 .* 2\.\.5",
    ),
    "stride count": (dict(strides_bytes=(416, 832)), None, r"2 strides for 2 dims"),
    "box count": (dict(box=(64,)), None, r"box \(64,\) has 1 entries for 2 dims"),
    "dim zero": (dict(dims=(200, 0)), None, r"dim 1 has 0 elements; TMA needs 1\.\.2\*\*32"),
    "dim too large": (dict(dims=((1 << 32) + 1, 100)), None, r"dim 0 has 4294967297 elements"),
    "box too large": (dict(box=(64, 257)), None, r"box dim 1 is 257 elements; .* 1\.\.256"),
    "box zero": (dict(box=(64, 0)), None, r"box dim 1 is 0 elements"),
    "inner box not 16 B": (dict(box=(12, 8), swizzle=0), None, r"inner box row is 24 bytes; .* 16"),
    "box wider than swizzle": (
        dict(box=(64, 8), swizzle=64),
        None,
        r"inner box row is 128 bytes, more than the 64-byte swizzle span: use at most 32 elements",
    ),
    "swizzle value": (dict(swizzle=16), None, r"swizzle 16 is not one of \(0, 32, 64, 128\)"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_each_rule_gives_a_message(name):
    changes, address, message = BAD[name]
    found = _spec(**changes).violations(address)
    assert len(found) == 1, found
    assert re.search(message, found[0]), found[0]


def test_unswizzled_box_may_be_wider_than_128_bytes():
    assert _spec(box=(128, 16), swizzle=0).violations() == ()


def test_check_raises_usage_error_listing_all():
    spec = _spec(strides_bytes=(402,), box=(64, 300))
    with pytest.raises(UsageError, match=r"stride of 402 bytes.*; box dim 1 is 300 elements"):
        spec.check()


def test_encode_rejects_a_bad_spec_before_the_driver(monkeypatch):
    monkeypatch.setattr(T, "_driver_encode", lambda *a: pytest.fail("driver called"))
    with pytest.raises(
        LaunchError,
        match=r"cannot encode a TMA tensor map for TensorMapSpec\("
        r".*base address 0x1002 is not 16-byte aligned",
    ):
        T.encode(GOOD, 0x1002)


class _FakeMap:
    opaque = [7 * i for i in range(16)]


def test_encode_calls_the_driver_with_typed_arguments(monkeypatch):
    from cuda.bindings import driver as drv

    calls = []

    def fake(*args):
        calls.append(args)
        return drv.CUresult.CUDA_SUCCESS, _FakeMap()

    monkeypatch.setattr(drv, "cuTensorMapEncodeTiled", fake)
    spec = T.TensorMapSpec(DType.bfloat16, (256, 64, 3), (512, 32768), (64, 32, 1), 128)
    words = T.encode(spec, 0x7F0000000100)
    assert words.dtype == np.uint64 and words.shape == (16,)
    np.testing.assert_array_equal(words, np.arange(16, dtype=np.uint64) * 7)
    (args,) = calls
    dtype, rank, address, dims, strides, box, estrides, inter, swz, l2, oob = args
    assert dtype == drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
    assert rank == 3 and address == 0x7F0000000100
    assert all(isinstance(v, drv.cuuint64_t) for v in dims + strides)
    assert all(isinstance(v, drv.cuuint32_t) for v in box + estrides)
    assert [int(v) for v in dims] == [256, 64, 3] and [int(v) for v in strides] == [512, 32768]
    assert [int(v) for v in box] == [64, 32, 1] and [int(v) for v in estrides] == [1, 1, 1]
    assert inter == drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE
    assert swz == drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B
    assert l2 == drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B
    assert oob == drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE


@pytest.mark.parametrize(("swizzle", "name"), [(0, "NONE"), (32, "32B"), (64, "64B")])
def test_encode_swizzle_and_dtype_enums(monkeypatch, swizzle, name):
    from cuda.bindings import driver as drv

    seen = {}

    def fake(*args):
        seen["dtype"], seen["swizzle"] = args[0], args[8]
        return drv.CUresult.CUDA_SUCCESS, _FakeMap()

    monkeypatch.setattr(drv, "cuTensorMapEncodeTiled", fake)
    T.encode(T.TensorMapSpec(DType.float32, (8, 8), (32,), (8, 8), swizzle), 0x1000)
    assert seen["dtype"] == drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32
    assert seen["swizzle"] == getattr(drv.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{name}")


def test_encode_driver_failure_is_a_launch_error(monkeypatch):
    from cuda.bindings import driver as drv

    monkeypatch.setattr(
        drv,
        "cuTensorMapEncodeTiled",
        lambda *a: (drv.CUresult.CUDA_ERROR_INVALID_VALUE, None),
    )
    with pytest.raises(
        LaunchError,
        match=r"cuTensorMapEncodeTiled failed with .*INVALID_VALUE.*"
        r"for TensorMapSpec\(.*\) at 0x1000",
    ):
        T.encode(GOOD, 0x1000)


def test_simulator_maps_round_trip(monkeypatch):
    from numba.cuda.core import config

    monkeypatch.setattr(config, "ENABLE_CUDASIM", True)
    words = T.encode(GOOD, 0x2000)
    other = T.encode(_spec(box=(32, 64)), 0x2000)
    assert words[0] == T.SIM_MAGIC and words.shape == (16,) and words.dtype == np.uint64
    assert T.sim_lookup(words) == (GOOD, 0x2000)
    assert T.sim_lookup(other) == (_spec(box=(32, 64)), 0x2000)
    np.testing.assert_array_equal(T.encode(GOOD, 0x2000), words)  # same map, same id


def test_sim_lookup_rejects_other_words():
    with pytest.raises(UsageError, match="not a map made by mmaplug.cuda.tensormap.encode"):
        T.sim_lookup(np.arange(16, dtype=np.uint64))


def test_import_does_not_import_numba():
    code = "import sys, mmaplug.cuda.tensormap; sys.exit('numba' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_device_address_of_cuda_and_simulator_arrays():
    class Cuda:
        __cuda_array_interface__ = {"data": (0x7F00_0000_0400, False)}

    class Sim:
        _ary = np.zeros(4, np.float16)

    assert T.device_address(Cuda()) == 0x7F00_0000_0400
    assert T.device_address(Sim()) == Sim._ary.__array_interface__["data"][0]
    with pytest.raises(UsageError, match="expected a CUDA device array, got list"):
        T.device_address([1, 2])
