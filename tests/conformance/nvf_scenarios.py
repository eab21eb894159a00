"""nvFuser's public matmul test scenarios, ported to mmaplug's frontend (scenarios, not code).

Sources, all at NVIDIA/Fuser commit 81c4b22fd750d377d69e24928c32233162f6b2bd (2026-04-03):
  PY  = tests/python/direct/test_matmul.py
  OPI = tests/python/opinfo/opinfo_input_generators.py (matmul/linear/slice/reshape generators)
  TR  = tests/cpp/test_translate_mma.cpp
  SCH = tests/cpp/test_matmul_scheduler.cpp (layouts and batched inputs from tests/cpp/utils.cpp:
        matmulAtInput2D, canonicalizeInputToBMNK, biasEpilogue)
  MM  = tests/cpp/test_matmul.cpp

Each scenario builds one fusion at a size (``dims``: small ones for the simulator), gives a
numpy float64 reference written from the source test's ATen reference, and says what
mmaplug does with it: ``runs`` (compiles on the listed schedulers) or ``differ`` (a regex of
our refusal; docs/decisions.md, "Conformance with nvFuser", says why).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Dims = dict[str, int]
Ref = Callable[[list[np.ndarray], Dims], list[np.ndarray]]

BIG: Dims = {"M": 504, "N": 136, "K": 248, "B": 2}  # the scheduler tests' sizes
SMALL: Dims = {"M": 40, "N": 24, "K": 48, "B": 2}  # simulator sizes (fast, ragged tiles)
LAYOUTS = ("TT", "TN", "NT", "NN")


@dataclass(frozen=True)
class Scenario:
    name: str
    source: str
    build: Callable[[Any, Any, Dims], None]  # (fd, mp, dims)
    reference: Ref
    differ: str | None = None  # regex of our refusal where we deliberately differ
    vec: tuple[int, int, int] | None = None  # nvFuser's expected supported_vec_size
    layout: str | None = None
    dims: Dims = field(default_factory=lambda: dict(BIG))


SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str, source: str, **kw: Any) -> Callable[[Callable], Callable]:
    def add(build: Callable) -> Callable:
        SCENARIOS[name] = Scenario(name, source, build, **kw)
        return build

    return add


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _tensor(fd: Any, mp: Any, shape: list[int], dtype: Any, inner: str = "row") -> Any:
    """A 2-D or 3-D input, row-major or with its last two dims swapped in memory ("col")."""
    if inner == "row":
        return fd.define_tensor(shape, dtype=dtype)
    order = list(range(len(shape) - 1, -1, -1))
    order[-1], order[-2] = order[-2], order[-1]
    return fd.define_tensor(shape, dtype=dtype, stride_order=order)


# -- PY: tests/python/direct/test_matmul.py -------------------------------------------------------

_PY_INNER = {"TT": ("row", "row"), "TN": ("row", "col"), "NT": ("col", "row"), "NN": ("col", "col")}

for _lay in LAYOUTS:

    def _py_matmul(fd: Any, mp: Any, d: Dims, lay: str = _lay) -> None:
        a = _tensor(fd, mp, [d["M"], d["K"]], mp.float16, _PY_INNER[lay][0])
        b = _tensor(fd, mp, [d["K"], d["N"]], mp.float16, _PY_INNER[lay][1])
        fd.add_output(fd.ops.matmul(a, b))

    scenario(
        f"py_matmul_{_lay.lower()}",
        "PY test_matmul (inputs_tt/tn/nt/nn by as_strided)",
        reference=lambda x, d: [x[0] @ x[1]],
        dims={"M": 24, "N": 16, "K": 8},
    )(_py_matmul)

for _bias, _lay in itertools.product((False, True), LAYOUTS):

    def _py_linear(fd: Any, mp: Any, d: Dims, lay: str = _lay, bias: bool = _bias) -> None:
        # the test's mk_nk / mk_kn / km_nk / km_kn strides: "col" swaps the weight to N-inner
        x = _tensor(fd, mp, [d["M"], d["K"]], mp.float16, _PY_INNER[lay][0])
        w = _tensor(fd, mp, [d["N"], d["K"]], mp.float16, _PY_INNER[lay][1])
        args = [x, w] + ([fd.define_tensor([d["N"]], dtype=mp.float16)] if bias else [])
        fd.add_output(fd.ops.linear(*args))

    scenario(
        f"py_linear_{'bias_' if _bias else ''}{_lay.lower()}",
        "PY test_linear[bias] (inputs_mk_nk, mk_kn, km_nk, km_kn)",
        reference=lambda x, d: [x[0] @ x[1].T + (x[2] if len(x) > 2 else 0)],
        dims={"M": 24, "N": 16, "K": 8},
    )(_py_linear)

for _bias in (False, True):

    def _py_linear_bf16(fd: Any, mp: Any, d: Dims, bias: bool = _bias) -> None:
        x = fd.define_tensor([d["M"], d["K"]], dtype=mp.bfloat16)
        w = fd.define_tensor([d["N"], d["K"]], dtype=mp.bfloat16)
        b = [fd.define_tensor([d["N"]], dtype=mp.bfloat16)] if bias else []
        fd.add_output(fd.ops.linear(x, w, *b))

    scenario(
        f"py_linear_{'with' if _bias else 'without'}_bias_bf16",
        f"PY test_linear_{'with' if _bias else 'without'}_bias",
        reference=lambda x, d: [x[0] @ x[1].T + (x[2] if len(x) > 2 else 0)],
        dims={"M": 24, "N": 16, "K": 8},
    )(_py_linear_bf16)


@scenario(
    "py_linear_slice",
    "PY test_linear_slice (float32 linear, then slice)",
    reference=lambda x, d: [(x[0] @ x[1].T)[0:1, 0:2, 0:3]],
    differ=r"slice\(T\d+\): a matmul kernel cannot take a slice",
)
def _py_linear_slice(fd: Any, mp: Any, d: Dims) -> None:
    a, b = fd.define_tensor([1, 2, 3]), fd.define_tensor([4, 3])
    c = fd.ops.linear(a, b)
    fd.add_output(fd.ops.slice(c, start_indices=[0, 0, 0], end_indices=[1, 2, 3]))


@scenario(
    "py_matmul_operand_a_2d_operand_b_3d",
    "PY test_matmul_operandA_2d_operandB_3d (float32)",
    reference=lambda x, d: [x[0] @ x[1]],
    differ="tensor-core operands must be float16, bfloat16",
)
def _py_matmul_2d_3d(fd: Any, mp: Any, d: Dims) -> None:
    fd.add_output(fd.ops.matmul(fd.define_tensor([2, 3]), fd.define_tensor([7, 3, 5])))


for _order in itertools.permutations(range(4)):

    def _py_matmul_stride(fd: Any, mp: Any, d: Dims, order: tuple = _order) -> None:
        q = fd.define_tensor([4, 8, 16, 8], dtype=mp.float16)
        k = fd.define_tensor([4, 8, 16, 8], dtype=mp.float16)
        out = fd.ops.matmul(q, fd.ops.permute(k, [0, 1, 3, 2]))
        fd.add_output(fd.ops.stride_order(out, list(order)))

    scenario(
        "py_matmul_stride_" + "".join(map(str, _order)),
        "PY test_matmul_stride (stride_order on the output)",
        reference=lambda x, d: [x[0] @ np.swapaxes(x[1], -1, -2)],
        differ=None if _order == (3, 2, 1, 0) else r"asks stride_order .*logical order",
    )(_py_matmul_stride)


# -- OPI: matmul_input_generator, linear_input_generator -----------------------------------------

_OPI_A = {"k": "K", "mk": "M,K", "1k": "1,K", "bmk": "B,M,K", "b1mk": "B,1,M,K"}
_OPI_B = {"k": "K", "kn": "K,N", "k1": "K,1", "bkn": "B,K,N"}


def _shape(spec: str, d: Dims) -> list[int]:
    return [1 if s == "1" else d[s] for s in spec.split(",")]


for (_an, _as), (_bn, _bs), _dt in itertools.product(
    _OPI_A.items(), _OPI_B.items(), ("float16", "bfloat16")
):

    def _opi_matmul(fd: Any, mp: Any, d: Dims, sa: str = _as, sb: str = _bs, dt: str = _dt) -> None:
        a = fd.define_tensor(_shape(sa, d), dtype=getattr(mp, dt))
        b = fd.define_tensor(_shape(sb, d), dtype=getattr(mp, dt))
        fd.add_output(fd.ops.matmul(a, b))

    one_d = "1-D; matrix-vector products are not tensor-core work"
    scenario(
        f"opi_matmul_{_an}_{_bn}_{_dt}",
        "OPI matmul_input_generator",
        reference=lambda x, d: [np.matmul(x[0], x[1])],
        differ=one_d
        if "k" in (_an, _bn)
        else (
            r"dims ordered \['n', 'k', 'n'\]"
            if (_an in ("mk", "1k", "b1mk") and _bn == "bkn")
            else None
        ),
        dims={"M": 256, "N": 128, "K": 32, "B": 4},
    )(_opi_matmul)

_OPI_IN = {"k": "K", "mk": "M,K", "bmk": "B,M,K", "b1mk": "B,1,M,K"}
for (_xn, _xs), _w, _bias in itertools.product(_OPI_IN.items(), ("nk", "1k"), (False, True)):
    if _bias and _w == "1k":
        continue  # the generator's bias cases use the [N, K] weight

    def _opi_linear(
        fd: Any, mp: Any, d: Dims, xs: str = _xs, w: str = _w, bias: bool = _bias
    ) -> None:
        x = fd.define_tensor(_shape(xs, d), dtype=mp.float16)
        wt = fd.define_tensor(_shape("N,K" if w == "nk" else "1,K", d), dtype=mp.float16)
        b = [fd.define_tensor([d["N"]], dtype=mp.float16)] if bias else []
        fd.add_output(fd.ops.linear(x, wt, *b))

    scenario(
        f"opi_linear_{_xn}_{_w}{'_bias' if _bias else ''}",
        "OPI linear_input_generator",
        reference=lambda x, d: [x[0] @ x[1].T + (x[2] if len(x) > 2 else 0)],
        differ="1-D; matrix-vector products" if _xn == "k" else None,
        dims={"M": 512, "N": 256, "K": 32, "B": 64},
    )(_opi_linear)
