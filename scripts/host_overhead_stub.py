"""Host time of a cached ``CompiledFusion.execute`` without a GPU: a stub libcuda, a stand-in torch.

The CUDA driver is ``tests/unit/stub_libcuda.c`` built as libcuda.so.1 (every call succeeds,
nothing runs), loaded before mmaplug so its ctypes and ``cuda.bindings`` calls reach it; the
kernels' cubins are fake bytes stored in a temporary cache (Numba generates the kernels but never
compiles them), so the whole Python side of a cached call runs: probing the inputs, looking up
the bound launch, allocating outputs, tensor maps (hopper), patching the parameter blocks and
the driver launch (through the ``CUfunction`` of the stream's context, as on a GPU; the stub
counts launches and those through a function). torch is a stand-in (``StandInTorch``): CUDA
tensors whose attribute reads are Python calls and whose ``empty`` bumps a pointer, so figures
hold those cheap stand-ins (printed as references) instead of torch's own allocation and
attribute costs, which ``host_overhead.py`` measures on a GPU.

    python scripts/host_overhead_stub.py                     # every case: median, p10, p90 us
    python scripts/host_overhead_stub.py --profile --cases hopper-2-static
    python scripts/host_overhead_stub.py --stream 0x1110     # a non-legacy current stream
    python scripts/host_overhead_stub.py --splitk 2 --json   # split-K: two launches, scratch
    python scripts/host_overhead_stub.py --cluster --cases hopper-2-static  # CTA pairs

Cases: ampere and hopper (device preset h200; ampere with the hopper plugin blocked), 2 inputs
(``x @ w.T``) and 3 (``gelu(x @ w.T + b)``), static and symbolic (M = -1) extents.
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import itertools
import json
import math
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STUB = ROOT / "tests" / "unit" / "stub_libcuda.c"
M, N, K = 256, 256, 256
_stub: Any = None  # the stub libcuda (stub_launches, stub_function_launches count launches)
_STRIDES: dict[tuple[int, ...], tuple[int, ...]] = {}  # row-major strides per shape
_TYPESTR = {"float16": "<f2", "float32": "<f4", "int16": "<i2", "bfloat16": "<V2"}


class _DType:
    def __init__(self, name: str, itemsize: int) -> None:
        self.name, self.itemsize = name, itemsize


class Tensor:
    """A row-major CUDA tensor on device 0, as much of one as mmaplug reads."""

    is_cuda = True
    device = "cuda:0"

    def __init__(self, shape: tuple[int, ...], dtype: _DType, ptr: int) -> None:
        self.shape, self.dtype, self._ptr = shape, dtype, ptr
        strides = _STRIDES.get(shape)
        if strides is None:
            strides = _STRIDES[shape] = tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))
        self._strides = strides

    def stride(self) -> tuple[int, ...]:
        return self._strides

    def data_ptr(self) -> int:
        return self._ptr

    def get_device(self) -> int:
        return 0

    def view(self, dtype: _DType) -> Tensor:
        return Tensor(self.shape, dtype, self._ptr)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        size = self.dtype.itemsize
        return {
            "shape": self.shape,
            "strides": tuple(s * size for s in self._strides),
            "typestr": _TYPESTR[self.dtype.name],
            "data": (self._ptr, False),
            "version": 3,
        }


Tensor.__module__ = "torch"


class StandInTorch(types.ModuleType):
    """torch's surface that execute touches: dtypes, ``empty``, the current raw stream."""

    def __init__(self) -> None:
        super().__init__("torch")
        for name, size in (("float16", 2), ("bfloat16", 2), ("float32", 4), ("int16", 2)):
            setattr(self, name, _DType(name, size))
        self.current = 0  # the legacy default stream, torch's unless another is made current
        self._next = itertools.count(1 << 20, 1 << 20).__next__
        self._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda index: self.current)

    def empty(self, shape: tuple[int, ...], dtype: _DType, device: str) -> Tensor:
        return Tensor(tuple(shape), dtype, self._next())

    def empty_strided(
        self, shape: tuple[int, ...], strides: tuple[int, ...], dtype: _DType, device: object
    ) -> Tensor:
        return self.empty(shape, dtype, "cuda")


def load_stub(where: Path) -> None:
    """Build the stub libcuda in *where* and load it globally (before mmaplug or cuda.bindings)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        sys.exit("host_overhead_stub: no C compiler (cc or gcc) to build the stub libcuda")
    library = where / "libcuda.so.1"
    cmd = [compiler, "-O1", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(library)]
    cmd += [str(STUB), "-ldl"]
    subprocess.run(cmd, check=True)
    global _stub
    _stub = ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
    _stub.stub_launches.restype = _stub.stub_function_launches.restype = ctypes.c_long


def fake_cubins() -> None:
    """Store fake bytes instead of compiling: the stub driver loads anything."""
    from mmaplug.cuda import launching
    from mmaplug.cuda.cubin import Binary

    def fake_binary(dispatcher: Any, signature: Any, cc: Any, by_value: Any = None) -> Binary:
        from numba import types as nb_types

        name = dispatcher.py_func.__name__
        slots = sum(
            launching.ARRAY_SLOTS if isinstance(t, nb_types.Array) else 1 for t in signature.args
        )
        return Binary(f"cubin of {name}".encode(), f"_Z{name}", slots)

    launching.numba_binary = fake_binary


def case(mp: Any, torch: StandInTorch, name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Bind case *name* (``scheduler-inputs-extents``), then time and optionally profile it."""
    from mmaplug.cli.bench import linear_fusion
    from mmaplug.tune.measure import host_call_us, sample_summary

    scheduler, inputs, extents = name.split("-")
    block = () if scheduler == "hopper" else ("hopper",)
    pm = mp.make_plugin_manager(block=block, load_entrypoints=False)
    m = -1 if extents == "symbolic" else M
    overrides: dict[str, Any] = {"splitk_factor": args.splitk} if args.splitk else {}
    if args.cluster and scheduler == "hopper":
        overrides["cluster_dims"] = (2, 1)
    fusion = linear_fusion(m, N, K, mp.float16, inputs == "3")
    compiled = mp.compile(fusion, "h200", pm=pm, overrides=overrides or None)
    shapes = [(M, K), (N, K), (N,)][: int(inputs)]
    tensors = [torch.empty(s, torch.float16, "cuda") for s in shapes]
    compiled.execute(tensors)  # binds (loads the fake cubin)
    spec = getattr(compiled, "latest", compiled).spec
    if spec.scheduler != scheduler:
        sys.exit(f"host_overhead_stub: case {name} ran the {spec.scheduler} kernel")
    run = lambda: compiled.execute(tensors)  # noqa: E731
    host_call_us(run, args.reps // 10)  # warm
    launched, through = _stub.stub_launches(), _stub.stub_function_launches()
    row = {
        "case": name,
        "kernel": spec.name,
        "execute_us": sample_summary(host_call_us(run, args.reps)),
        "launches_per_call": (_stub.stub_launches() - launched) / args.reps,
        "function_launches_per_call": (_stub.stub_function_launches() - through) / args.reps,
    }
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.reps):
            run()
        prof.disable()
        print(f"--- cProfile, {name}, {args.reps} calls ---")
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)
    return row


CASES = [
    f"{s}-{i}-{e}" for s in ("ampere", "hopper") for i in (2, 3) for e in ("static", "symbolic")
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=CASES, default=CASES)
    parser.add_argument("--reps", type=int, default=20000)
    parser.add_argument("--profile", action="store_true", help="cProfile of each case")
    parser.add_argument("--top", type=int, default=20, help="profile entries shown")
    parser.add_argument(
        "--stream",
        type=lambda v: int(v, 0),
        default=0,
        help="the current stream's handle (default 0: legacy, torch's default)",
    )
    parser.add_argument("--splitk", type=int, default=0, help="override splitk_factor")
    parser.add_argument("--cluster", action="store_true", help="hopper: cluster_dims=(2, 1)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="mmaplug_stub_") as scratch:
        where = Path(scratch)
        load_stub(where)
        os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
        os.environ["MMAPLUG_CACHE_DIR"] = str(where / "cache")
        torch = StandInTorch()
        torch.current = args.stream
        sys.modules["torch"] = torch
        import mmaplug as mp
        from mmaplug.tune.measure import host_call_us, sample_summary

        fake_cubins()
        null = ctypes.c_void_p(0)
        launch = _stub.cuLaunchKernel
        floor = {
            "stand-in torch.empty": sample_summary(
                host_call_us(lambda: torch.empty((M, N), torch.float16, "cuda"), args.reps)
            ),
            "ctypes call of the stub cuLaunchKernel": sample_summary(
                host_call_us(lambda: launch(null, 1, 1, 1, 1, 1, 1, 0, null, null, null), args.reps)
            ),
        }
        rows = [case(mp, torch, name, args) for name in args.cases]
    if args.json:
        print(json.dumps({"cases": rows, "reference_us": floor}, indent=2))
        return 0
    for row in rows:
        e = row["execute_us"]
        print(
            f"{row['case']:>18}: execute {e['median']:5.2f} us (p10 {e['p10']:.2f}, p90 "
            f"{e['p90']:.2f}); {row['launches_per_call']:g} launch(es) a call, "
            f"{row['function_launches_per_call']:g} through a CUfunction"
        )
    for what, us in floor.items():
        print(f"{'':>18}  {what}: {us['median']:.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
