"""nvFuser's C++ matmul test scenarios (TR, SCH, MM in nvf_scenarios.py's source list), ported."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from nvf_scenarios import LAYOUTS, Dims, scenario

# matmulAtInput2D's operands per layout (batched: the "splitk-like" order), and the
# permutation canonicalizeInputToBMNK applies to bring each to [B, M or N, K].
_A = {"TT": ("M,B,K", [1, 0, 2]), "TN": ("M,B,K", [1, 0, 2]),
      "NT": ("B,K,M", [0, 2, 1]), "NN": ("B,K,M", [0, 2, 1])}  # fmt: skip
_B = {"TT": ("B,K,N", [0, 2, 1]), "TN": ("N,B,K", [1, 0, 2]),
      "NT": ("B,K,N", [0, 2, 1]), "NN": ("N,B,K", [1, 0, 2])}  # fmt: skip


def _dims(spec: str, d: Dims, batch: bool) -> list[str]:
    return [s for s in spec.split(",") if batch or s != "B"]


def _perm(spec: str, perm: list[int], batch: bool) -> list[int]:
    if batch:
        return perm
    return {"M,K": [0, 1], "N,K": [0, 1], "K,M": [1, 0], "K,N": [1, 0]}[
        ",".join(_dims(spec, {}, False))
    ]


def operands(fd: Any, mp: Any, d: Dims, layout: str, *, batch: bool, dtype: Any = None) -> tuple:
    """Inputs A, B as the scheduler tests make them, canonicalised to [B,] M, bN, K and
    [B,] bM, N, K (canonicalizeInputToBMNK); returns (A', B')."""
    dtype = dtype or mp.float16
    out = []
    for table, new_at in ((_A, -2), (_B, -3)):
        spec, perm = table[layout]
        names = _dims(spec, d, batch)
        tv = fd.define_tensor([d[s] for s in names], dtype=dtype)
        tv = fd.ops.permute(tv, _perm(spec, perm, batch))
        flags = [False] * (len(names) + 1)
        flags[new_at] = True
        out.append(fd.ops.broadcast(tv, flags))
    return tuple(out)


def canonical(x: np.ndarray, layout: str, which: str, batch: bool) -> np.ndarray:
    """The numpy twin of ``operands``' permute: A as [B,] M, K and B as [B,] N, K."""
    spec, perm = (_A if which == "a" else _B)[layout]
    return np.transpose(x, _perm(spec, perm, batch))


def mma_ref(x: list[np.ndarray], layout: str, batch: bool) -> np.ndarray:
    a, b = canonical(x[0], layout, "a", batch), canonical(x[1], layout, "b", batch)
    return a @ np.swapaxes(b, -1, -2)


# -- TR: tests/cpp/test_translate_mma.cpp ---------------------------------------------------------

for _lay in LAYOUTS:

    def _mul_sum(fd: Any, mp: Any, d: Dims, lay: str = _lay) -> None:
        a, b = operands(fd, mp, d, lay, batch=False)
        fd.add_output(fd.ops.sum(fd.ops.mul(a, b), [-1]))

    scenario(
        f"tr_mul_sum_to_matmul_pass_{_lay.lower()}",
        "TR MulSumToMatmul_Pass",
        reference=lambda x, d, lay=_lay: [mma_ref(x, lay, False)],
        layout=_lay,
    )(_mul_sum)


@scenario(
    "tr_mul_sum_to_matmul_fail1",
    "TR MulSumToMatmul_Fail1 (no broadcast operands: a reduction, not a matmul)",
    reference=lambda x, d: [np.sum(x[0] * x[1], axis=-1)],
    differ="no matmul pattern found",
)
def _mul_sum_fail(fd: Any, mp: Any, d: Dims) -> None:
    a = fd.define_tensor([d["B"], d["M"], d["K"]], dtype=mp.float16)
    b = fd.define_tensor([d["B"], d["M"], d["K"]], dtype=mp.float16)
    fd.add_output(fd.ops.sum(fd.ops.mul(a, b), [-1]))


@scenario(
    "tr_mul_sum_multiple_broadcasts",
    "TR MulSumToMatmul_MultipleBroadcasts (transposes, an extra broadcast batch dim)",
    reference=lambda x, d: [(x[0].T @ x[1])[None]],
    dims={"M": 256, "N": 128, "K": 64},
)
def _mul_sum_multi(fd: Any, mp: Any, d: Dims) -> None:
    a = fd.define_tensor([d["K"], d["M"]], dtype=mp.float16)
    b = fd.define_tensor([d["K"], d["N"]], dtype=mp.float16)
    a3 = fd.ops.broadcast(fd.ops.permute(a, [1, 0]), [True, False, True, False])
    b3 = fd.ops.broadcast(fd.ops.permute(b, [1, 0]), [True, True, False, False])
    fd.add_output(fd.ops.sum(fd.ops.mul(a3, b3), [-1]))


@scenario(
    "tr_swap_a_and_b",
    "TR SwapAandB (mul(B', A'): roles by broadcasts, not argument order)",
    reference=lambda x, d: [x[0] @ x[1].T],
    layout="TN",
)
def _swap(fd: Any, mp: Any, d: Dims) -> None:
    a = fd.define_tensor([d["M"], d["K"]], dtype=mp.float16)
    b = fd.define_tensor([d["N"], d["K"]], dtype=mp.float16)
    a3 = fd.ops.broadcast(a, [False, True, False])
    b3 = fd.ops.broadcast(b, [True, False, False])
    fd.add_output(fd.ops.sum(fd.ops.mul(b3, a3), [-1]))


for _op, _epi, _raw in itertools.product(("matmul", "linear"), (False, True), (False, True)):

    def _cast_count(
        fd: Any, mp: Any, d: Dims, op: str = _op, epi: bool = _epi, raw: bool = _raw
    ) -> None:
        a = fd.define_tensor([d["M"], d["K"]], dtype=mp.float16)
        shape = [d["K"], d["N"]] if op == "matmul" else [d["N"], d["K"]]
        b = fd.define_tensor(shape, dtype=mp.float16)
        y = getattr(fd.ops, op)(a, b)
        fd.add_output(fd.ops.sin(y) if epi else y)
        if raw and epi:
            fd.add_output(y)

    def _cast_ref(x: list, d: Dims, op: str = _op, epi: bool = _epi, raw: bool = _raw) -> list:
        y = x[0] @ (x[1] if op == "matmul" else x[1].T)
        return [np.sin(y), y] if epi and raw else [np.sin(y) if epi else y]

    scenario(
        f"tr_translation_cast_{_op}{'_sin' if _epi else ''}{'_raw' if _raw and _epi else ''}",
        "TR TranslationCastTest.CountCasts",
        reference=_cast_ref,
    )(_cast_count)

_NODE = {1: "K", 2: "M,K", 3: "B,M,K", 4: "C,B,M,K"}
_NODE_B = {1: "K", 2: "K,N", 3: "B,K,N", 4: "C,B,K,N"}
for _da, _db in ((2, 2), (3, 3), (3, 2), (4, 4), (2, 3), (3, 4), (1, 2), (2, 1)):

    def _node(fd: Any, mp: Any, d: Dims, da: int = _da, db: int = _db) -> None:
        d = {**d, "C": 2}
        a = fd.define_tensor([d[s] for s in _NODE[da].split(",")], dtype=mp.float16)
        b = fd.define_tensor([d[s] for s in _NODE_B[db].split(",")], dtype=mp.float16)
        fd.add_output(fd.ops.cast(fd.ops.sin(fd.ops.matmul(a, b)), mp.float16))

    differ = None
    if 1 in (_da, _db):
        differ = "1-D; matrix-vector products"
    elif _db > _da:
        differ = "the dims of one role must be adjacent"
    scenario(
        f"tr_matmul_node_{_da}d_{_db}d",
        "TR MatmulNodeTranslationTest (matmul + sin + cast; batch 3 in the source, 2 here)",
        reference=lambda x, d: [np.sin(np.matmul(x[0], x[1]))],
        differ=differ,
        dims={"M": 504, "N": 136, "K": 248, "B": 3},
    )(_node)

for _xs, _bias, _ta in (("M,K", 0, False), ("M,K", 1, False), ("M,K", 1, True), ("M,K", 0, True),
                        ("K", 0, False), ("B,M,K", 1, False), ("C,B,M,K", 1, False)):  # fmt: skip

    def _lin_node(
        fd: Any, mp: Any, d: Dims, xs: str = _xs, bias: int = _bias, ta: bool = _ta
    ) -> None:
        d = {**d, "C": 2}
        shape = [d[s] for s in xs.split(",")]
        x = fd.define_tensor(shape, dtype=mp.float16, stride_order=[0, 1] if ta else None)
        w = fd.define_tensor([d["N"], d["K"]], dtype=mp.float16)
        b = [fd.define_tensor([d["N"]], dtype=mp.float16)] if bias else []
        fd.add_output(fd.ops.cast(fd.ops.sin(fd.ops.linear(x, w, *b)), mp.float16))

    scenario(
        f"tr_linear_node_{_xs.replace(',', '').lower()}{'_bias' if _bias else ''}"
        f"{'_transposed_a' if _ta else ''}",
        "TR LinearNodeTranslationTest (linear + optional bias + sin + cast)",
        reference=lambda x, d: [np.sin(x[0] @ x[1].T + (x[2] if len(x) > 2 else 0))],
        differ="1-D; matrix-vector products" if _xs == "K" else None,
        dims={"M": 504, "N": 136, "K": 248, "B": 3},
    )(_lin_node)
