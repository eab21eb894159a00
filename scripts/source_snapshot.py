"""Snapshot of the generated kernel source for a fixed list of plans (issue 23's refactor proof).

The scheduler refactor (one Scheduler object per kernel family, ``core/`` in subpackages) must
leave every generated kernel identical, byte for byte. This script enumerates a FIXED,
deterministic list of plans (a fusion, a device preset, a plugin selection and optional
MatmulParams overrides) over the three schedulers, every epilogue kind, both 16-bit dtypes,
the four layouts, batch, split-K, horizontal fusion, ping-pong, CTA pairs, operand prologues,
symbolic extents, segmented fusions and FP8 ``scaled_mm`` (per tensor, per row, block
scales), compiles each with a hermetic strict plugin manager (no entry points: installed
plugins change no plan) and hashes each kernel's ``compiled.source`` (generating source needs
neither NVVM nor a GPU)::

    python scripts/source_snapshot.py --write scripts/source_snapshot.json \
        --keep /tmp/source_snapshot               # on the tree before the change
    python scripts/source_snapshot.py --check scripts/source_snapshot.json   # after it
    python scripts/source_snapshot.py --list      # the plans and the coverage table only

``--check`` prints every plan whose record differs (sha256, scheduler, kernel name or params),
a unified diff of the first differing source when the sources of the written snapshot were kept
(``--keep DIR`` at write time; ``--check`` reads DIR, by default ``/tmp/source_snapshot``), and
exits 1. ``--ptx`` also hashes each kernel's PTX (NVVM compiles it: minutes, not seconds).

Every listed plan must compile as listed: a plan the rules refuse, a scheduler other than the
one listed, or a declared feature the compiled kernel does not have is an error of the list
(exit 2), never skipped. Keys are plan ids; a plan with several kernels (a segmented fusion)
has one record per kernel, ``<plan id>@seg<i>``.
"""

from __future__ import annotations

import argparse
import collections
import difflib
import hashlib
import json
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

import mmaplug as mp

DEFAULT_KEEP = Path("/tmp/source_snapshot")
KEEP_MARKER = ".source_snapshot"  # only a folder holding it is cleared by --write --keep
LAYOUTS = ("TN", "TT", "NT", "NN")
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
SCALES = ("tensor", "row", "block")
# features a compiled plan is checked against (the others are how the fusion was written)
CHECKED = frozenset({"hopper", "ampere", "decode", "splitk", "pingpong", "cluster", "batch",
                     "horizontal", "segmented", "symbolic", "prologue", "swap", "kcluster",
                     "tma_stores", *LAYOUTS})  # fmt: skip


# -- fusions ------------------------------------------------------------------------------------


@attrs.frozen
class Gemm:
    """A fusion around one matmul (or a horizontal group of *h* sharing A), as data.

    ``layout``: nvFuser's letters (T: A K-inner; N: B K-inner); ``op``: how the product is
    written (``matmul`` A [*, m, k] @ B [*, k, n]; ``linear`` with w [n, k]; ``fms``
    fused_multiply_sum and ``mul_sum`` of broadcast operands, float32 out); ``symbolic``: the
    extents defined as -1 ("m", "b" batch); ``prologue``: the ops on A and on B before the mma.
    """

    layout: str = "TN"
    dtype: str = "float16"
    m: int = 256
    n: int = 192
    k: int = 128
    batch: int = 1
    b_batched: bool = True  # False: a 2-D B broadcast over A's batch
    op: str = "matmul"
    epilogue: str = "bare"
    out: str | None = None  # the output dtype of the epilogue (None: the operands')
    h: int = 1
    prologue: tuple[str, str] = ("none", "none")
    a_dtype: str | None = None  # A's input dtype when a prologue casts it
    symbolic: str = ""
    scale: str = ""  # ``scaled_mm`` of FP8 operands: "tensor", "row" or "block" scales

    @property
    def scaled(self) -> bool:
        """A ``scaled_mm`` of FP8 operands (K-major both: layout TN), float32 product."""
        return self.op == "scaled_mm"

    def __attrs_post_init__(self) -> None:
        needs = EPILOGUES[self.epilogue].needs if self.epilogue in EPILOGUES else "?"
        fits = {"": self.h == 1, "batch": self.batch > 1 and self.h == 1, "h2": self.h >= 2,
                "h3": self.h == 3}.get(needs, False)  # fmt: skip
        if self.layout not in LAYOUTS or not fits:
            raise ValueError(f"epilogue {self.epilogue!r} or layout does not fit {self}")
        fp8 = self.dtype in FP8_DTYPES
        if fp8 != self.scaled or (fp8 and (self.scale not in SCALES or self.layout != "TN"
                                           or self.out is None or self.h > 1)):  # fmt: skip
            raise ValueError(f"an FP8 scaled_mm takes a scale, layout TN and an out: {self}")

    @property
    def tag(self) -> str:
        """A short readable name for plan ids."""
        shape = f"{self.m}x{self.n}x{self.k}" + (f"b{self.batch}" if self.batch > 1 else "")
        dt = {"float16": "f16", "bfloat16": "bf16", "float8_e4m3fn": "e4m3",
              "float8_e5m2": "e5m2"}[self.dtype]  # fmt: skip
        return f"{self.layout}_{dt}{self.scale and '_' + self.scale}_{shape}"

    def features(self) -> set[str]:
        """What this fusion exercises (dtype, layout, epilogue kind, batch, ...)."""
        found = {self.layout, self.dtype, f"epilogue:{self.epilogue}", f"op:{self.op}"}
        found |= {f"out:{d}" for d in EPILOGUES[self.epilogue].outputs(self)}
        if self.batch > 1 and self.op == "matmul":
            found.add("batch" if self.b_batched else "batch_broadcast_b")
        if self.h > 1:  # a kernel built horizontal is the plan's "horizontal" (not ampere's)
            found |= {"horizontal_fusion", f"horizontal{self.h}"}
        if self.prologue != ("none", "none"):
            found |= {"prologue", *(f"prologue:{p}" for p in self.prologue if p != "none")}
        if self.symbolic:
            found.add("symbolic")
        if self.scale:
            found.add(f"scale:{self.scale}")
        return found

    def build(self, symbolic: bool = True) -> mp.FusionDefinition:
        """A fresh definition (with the -1 extents of ``symbolic`` unless told otherwise)."""
        with mp.FusionDefinition() as fd:
            _Builder(fd, self, self.symbolic if symbolic else "").run()
        return fd

    def input_shapes(self) -> list[tuple[int, ...] | None]:
        """Concrete input shapes (None for a scalar): what a symbolic fusion is specialized to."""
        fusion = self.build(symbolic=False).fusion
        return [tuple(v.shape) if isinstance(v, mp.TensorView) else None for v in fusion.inputs]


class _Builder:
    """Defines a Gemm's inputs, product(s) and epilogue in one FusionDefinition."""

    def __init__(self, fd: mp.FusionDefinition, g: Gemm, symbolic: str) -> None:
        self.fd, self.g, self.ops = fd, g, fd.ops
        # (the epilogue's tensors of an FP8 product are of its output's type)
        self.dt = getattr(mp, g.out if g.scaled else g.dtype)  # type: ignore[arg-type]
        self.out_dt = getattr(mp, g.out or g.dtype)
        self.sym_m, self.sym_b = "m" in symbolic, "b" in symbolic
        folded = g.op == "linear" and g.batch > 1  # x [b, m, k] @ w.T: batch folds into M
        self.lead = [g.batch] if g.batch > 1 and g.op != "linear" else []
        self.out_shape = [*([g.batch] if folded else self.lead), g.m, g.n]

    # extents and broadcasts
    def _m(self) -> int:
        return -1 if self.sym_m else self.g.m

    def _lead(self) -> list[int]:
        return [-1 if self.sym_b else e for e in self.lead]

    def _bcast_shape(self, kept: Sequence[int]) -> list[int]:
        """out_shape for a broadcast_in_dim keeping dims *kept* of its input: a symbolic
        extent is -1 where kept (the input's extent) and 1 where new (it broadcasts)."""
        rank = len(self.out_shape)
        sym = {rank - 2} if self.sym_m else set()
        if self.sym_b and rank == 3:
            sym.add(0)
        return [(-1 if i in kept else 1) if i in sym else e for i, e in enumerate(self.out_shape)]

    def tensor(self, shape: list[int], dtype: mp.DType | None = None, order: Any = None) -> Any:
        return self.fd.define_tensor(shape, dtype=dtype or self.dt, stride_order=order)

    def bias_n(self, dtype: mp.DType | None = None) -> Any:
        rank = len(self.out_shape)
        bias = self.tensor([self.g.n], dtype)
        return self.ops.broadcast_in_dim(bias, self._bcast_shape([rank - 1]), [rank - 1])

    def bias_m(self) -> Any:
        rank = len(self.out_shape)
        bias = self.tensor([self._m()])
        return self.ops.broadcast_in_dim(bias, self._bcast_shape([rank - 2]), [rank - 2])

    def bias_batch_n(self) -> Any:
        bias = self.tensor([*self._lead(), self.g.n])
        return self.ops.broadcast_in_dim(bias, self._bcast_shape([0, 2]), [0, 2])

    def matrix(self, dtype: mp.DType | None = None) -> Any:
        shape = [*self.out_shape[:-2], self._m(), self.g.n]
        if self.sym_b and len(shape) == 3:
            shape[0] = -1
        return self.tensor(shape, dtype)

    def emit(self, value: Any, dtype: mp.DType | None = None) -> None:
        self.fd.add_output(self.ops.cast(value, dtype or self.out_dt))

    # operands and products
    def _a(self) -> Any:
        g, lead = self.g, self._lead()
        keep = [len(lead) + 1] * len(lead)  # the batch dim outermost
        order = [*keep, *([1, 0] if g.layout[0] == "T" else [0, 1])]
        if lead and not g.b_batched and g.layout[0] == "N":  # the batch folds into M-major M:
            order = [*range(len(lead), 0, -1), 0, len(lead) + 1]  # it sits right outside M
        dtype = getattr(mp, g.a_dtype) if g.a_dtype else self.dt
        a = self.tensor([*lead, self._m(), g.k], dtype, order)
        return self._prologue(a, g.prologue[0])

    def _b(self) -> Any:
        g = self.g
        lead = self._lead() if g.b_batched else []
        keep = [len(lead) + 1] * len(lead)
        if g.op == "linear":  # w [n, k]: K-inner is row-major
            order = [1, 0] if g.layout[1] == "N" else [0, 1]
            b = self.tensor([g.n, g.k], order=order)
        else:
            order = [*keep, *([0, 1] if g.layout[1] == "N" else [1, 0])]
            b = self.tensor([*lead, g.k, g.n], order=order)
        return self._prologue(b, g.prologue[1])

    def _prologue(self, x: Any, kind: str) -> Any:
        ops = self.ops
        if kind == "none":
            return x
        if kind == "cast":
            return ops.cast(x, self.dt)
        value = {
            "sin": lambda: ops.sin(x),
            "cos_plus_s": lambda: ops.add(ops.cos(x), self.fd.define_scalar()),
            "exp_neg": lambda: ops.exp(ops.neg(x)),
            "scale": lambda: ops.mul(x, 0.25),
            "relu": lambda: ops.relu(x),
            "sin_times_cos": lambda: ops.mul(ops.sin(x), ops.cos(x)),
        }[kind]()
        return ops.cast(value, self.dt)

    def _product(self, a: Any, b: Any) -> Any:
        g, ops = self.g, self.ops
        if g.op == "matmul":
            return ops.matmul(a, b)
        if g.op == "linear":
            return ops.linear(a, b)
        # [*, m, 1, k] x [*, 1, n, k], reduced over k: nvFuser's BasicMatmul form
        lead, m = self._lead(), self._m()
        r = len(lead)
        a3 = ops.broadcast_in_dim(a, [*lead, m, 1, g.k], [*range(r), r, r + 2])
        if lead and not g.b_batched:  # a 2-D B under a batched A
            bt = ops.permute(b, [1, 0])
            b3 = ops.broadcast_in_dim(bt, [*([1] * r), 1, g.n, g.k], [r + 1, r + 2])
        else:
            bt = ops.permute(b, [*range(r), r + 1, r])
            b3 = ops.broadcast_in_dim(bt, [*lead, 1, g.n, g.k], [*range(r), r + 1, r + 2])
        if g.op == "fms":
            return ops.fused_multiply_sum(a3, b3, [-1])
        return ops.sum(ops.mul(a3, b3), [-1])

    def _scaled_product(self) -> Any:
        """FP8 A [m, k] and B [k, n], K-major both, and the scales of ``Gemm.scale``: ``[]``
        each, A's rows [m, 1] and B's columns [1, n], or DeepSeek-V3's blocks, A's [m, k / 128]
        and B's [k / 128, n / 128]; the product in float32."""
        g, f32 = self.g, mp.float32
        a = self.tensor([g.m, g.k], getattr(mp, g.dtype), [1, 0])
        b = self.tensor([g.k, g.n], getattr(mp, g.dtype), [0, 1])
        kb, nb = -(-g.k // 128), -(-g.n // 128)
        shapes = {"tensor": ([], []), "row": ([g.m, 1], [1, g.n]), "block": ([g.m, kb], [kb, nb])}
        sa, sb = (self.tensor(shape, f32) for shape in shapes[g.scale])
        return self.ops.scaled_mm(a, b, sa, sb, out_dtype=f32)

    def run(self) -> None:
        g = self.g
        if g.op == "squeeze_set":  # operands through squeeze and set: A [1, m, k], B [n, k, 1]
            a, b = self.tensor([1, g.m, g.k]), self.tensor([g.n, g.k, 1])
            a2 = self.ops.set(self.ops.squeeze(a, [0]))
            b2 = self.ops.squeeze(self.ops.set(b), [2])
            a3 = self.ops.broadcast_in_dim(a2, [g.m, 1, g.k], [0, 2])
            b3 = self.ops.broadcast_in_dim(b2, [1, g.n, g.k], [1, 2])
            ys = [self.ops.fused_multiply_sum(a3, b3, [-1])]
        elif g.scaled:
            ys = [self._scaled_product()]
        elif g.op == "linear_bias":
            a = self._a()
            w = self.tensor([g.n, g.k], order=[1, 0] if g.layout[1] == "N" else [0, 1])
            ys = [self.ops.linear(a, w, self.tensor([g.n]))]
        else:
            a = self._a()
            ys = [self._product(a, self._b()) for _ in range(g.h)]
        EPILOGUES[g.epilogue].apply(self, ys)


@attrs.frozen
class Epilogue:
    """An epilogue kind: what it does to the product(s) ``ys`` and the output dtypes it makes
    (``None`` in ``dtypes``: the Gemm's output dtype; ``"acc"``: the product's own dtype)."""

    apply: Callable[[_Builder, list[Any]], None]
    dtypes: tuple[str | None, ...] = (None,)
    needs: str = ""  # where it applies: "" one product, "batch", "h2" (h >= 2), "h3" (h == 3)

    def outputs(self, g: Gemm) -> list[str]:
        acc = "float32" if g.op in ("fms", "mul_sum", "squeeze_set", "scaled_mm") else g.dtype
        return [acc if d == "acc" else d or g.out or g.dtype for d in self.dtypes]


def _gelu_tanh(b: _Builder, y: Any) -> Any:
    ops = b.ops
    cube = ops.mul(ops.mul(y, y), y)
    inner = ops.mul(ops.add(y, ops.mul(cube, 0.044715)), 0.7978845608028654)
    return ops.mul(ops.mul(y, 0.5), ops.add(ops.tanh(inner), 1.0))


def _silu_product(b: _Builder, ys: list[Any]) -> Any:
    value = b.ops.silu(ys[0])
    for y in ys[1:]:
        value = b.ops.mul(value, y)
    return value


def _epilogues() -> dict[str, Epilogue]:
    E = Epilogue
    F32 = "float32"

    def one(f: Callable[[_Builder, Any], Any], out: str | None = None) -> Epilogue:
        return E(lambda b, ys: b.emit(f(b, ys[0]), out and getattr(mp, out)), (out,))

    o = lambda b: b.ops  # noqa: E731
    return {
        "bare": E(lambda b, ys: b.fd.add_output(ys[0]), ("acc",)),
        "cast": one(lambda b, y: y),
        "out_f32": one(lambda b, y: y, F32),
        "out_f16": one(lambda b, y: y, "float16"),
        "out_bf16": one(lambda b, y: y, "bfloat16"),
        "cast_chain": one(lambda b, y: o(b).cast(o(b).cast(y, b.dt), mp.float32), F32),
        "bias": one(lambda b, y: o(b).add(y, b.bias_n())),
        "bias_f32": one(lambda b, y: o(b).add(y, b.bias_n(mp.float32))),
        "bias_m": one(lambda b, y: o(b).add(y, b.bias_m())),
        "bias_m_n": one(lambda b, y: o(b).add(o(b).add(y, b.bias_m()), b.bias_n())),
        "relu": one(lambda b, y: o(b).relu(y)),
        "gelu": one(lambda b, y: o(b).gelu(y)),
        "silu": one(lambda b, y: o(b).silu(y)),
        "sigmoid": one(lambda b, y: o(b).sigmoid(y)),
        "gelu_tanh": one(_gelu_tanh),
        "bias_relu": one(lambda b, y: o(b).relu(o(b).add(y, b.bias_n()))),
        "bias_gelu": one(lambda b, y: o(b).gelu(o(b).add(y, b.bias_n()))),
        "bias_silu_f32": one(lambda b, y: o(b).silu(o(b).add(y, b.bias_n())), F32),
        "alpha": one(lambda b, y: o(b).mul(y, b.fd.define_scalar())),
        "alpha_beta": one(
            lambda b, y: o(b).add(
                o(b).mul(y, b.fd.define_scalar()), o(b).mul(b.matrix(), b.fd.define_scalar())
            )
        ),
        "const_affine": one(lambda b, y: o(b).add(o(b).mul(0.5, y), 1.0)),
        "residual": one(lambda b, y: o(b).add(y, b.matrix())),
        "residual_f32": one(lambda b, y: o(b).add(y, b.matrix(mp.float32)), F32),
        "unary_mix": one(
            lambda b, y: o(b).add(
                o(b).mul(o(b).tanh(y), o(b).erf(o(b).neg(y))),
                o(b).add(o(b).sin(y), o(b).cos(o(b).abs(y))),
            )
        ),
        "math_mix": one(
            lambda b, y: o(b).sub(
                o(b).log(o(b).add(o(b).sqrt(o(b).abs(y)), 1.0)),
                o(b).mul(
                    o(b).reciprocal(o(b).add(o(b).exp(o(b).neg(o(b).abs(y))), 1.0)),
                    o(b).rsqrt(o(b).add(o(b).abs(y), 1.0)),
                ),
            )
        ),
        "binary_mix": one(
            lambda b, y: o(b).div(
                o(b).minimum(o(b).maximum(y, 0.0), b.matrix()), b.fd.define_scalar()
            )
        ),
        "aux_pre": E(
            lambda b, ys: (b.emit(b.ops.relu(ys[0])), b.emit(ys[0], mp.float32)), (None, F32)
        ),
        "bias_gelu_aux": E(_bias_gelu_aux, (None, F32)),
        "two_outputs": E(lambda b, ys: (b.emit(b.ops.relu(ys[0])), b.emit(ys[0])), (None, None)),
        "three_outputs": E(_three_outputs, (None, "bfloat16", F32)),
        "bias_batch": E(
            lambda b, ys: b.emit(b.ops.gelu(b.ops.add(ys[0], b.bias_batch_n()))), needs="batch"
        ),
        "sum_cut": E(_sum_cut, (F32,)),
        "fp8_amax": E(_fp8_amax, ("float8_e4m3fn", F32)),
        # horizontal: h products sharing A
        "swiglu": E(lambda b, ys: b.emit(_silu_product(b, ys)), needs="h2"),
        "swiglu_bias_scalar": E(
            lambda b, ys: b.emit(
                b.ops.add(
                    b.ops.add(b.ops.mul(_silu_product(b, ys[:2]), b.fd.define_scalar()), ys[2]),
                    b.bias_n(),
                )
            ),
            needs="h3",
        ),
        "qkv": E(lambda b, ys: [b.emit(y) for y in ys], (None, None, None), needs="h3"),
        "swiglu_aux": E(
            lambda b, ys: (b.emit(_silu_product(b, ys)), b.emit(ys[0], mp.float32)),
            (None, F32),
            needs="h2",
        ),
    }


def _bias_gelu_aux(b: _Builder, ys: list[Any]) -> None:
    pre = b.ops.add(ys[0], b.bias_n())
    b.emit(b.ops.gelu(pre))
    b.emit(pre, mp.float32)


def _three_outputs(b: _Builder, ys: list[Any]) -> None:
    b.emit(ys[0])
    b.emit(b.ops.sigmoid(ys[0]), mp.bfloat16)
    b.emit(b.ops.add(ys[0], b.bias_n()), mp.float32)


def _fp8_amax(b: _Builder, ys: list[Any]) -> None:
    """Delayed scaling: the product times an output scale, stored as e4m3 (saturating), and
    its float32 amax beside it."""
    scaled = b.ops.mul(ys[0], b.tensor([], mp.float32))
    b.fd.add_output(b.ops.cast(scaled, mp.float8_e4m3fn))
    b.fd.add_output(b.ops.amax(scaled, [0, 1]))


def _sum_cut(b: _Builder, ys: list[Any]) -> None:
    """A row sum after the product: no epilogue takes it, so it is a pointwise segment."""
    y = b.ops.cast(b.ops.relu(ys[0]), mp.float32)
    b.fd.add_output(b.ops.sum(y, [-1]))


EPILOGUES: dict[str, Epilogue] = _epilogues()


# -- plans ----------------------------------------------------------------------------------------


@attrs.frozen
class Plan:
    """One entry of the snapshot: *gemm* compiled for *device* with the built-in plugins less
    *block*, and *overrides*; *scheduler* is the one every kernel must come from, *kernels*
    how many kernels the compiled fusion must have (more than one: a segmented fusion)."""

    id: str
    gemm: Gemm
    device: str
    scheduler: str
    overrides: Mapping[str, object] | None = None
    block: tuple[str, ...] = ()
    kernels: int = 1
    extra: frozenset[str] = frozenset()  # further declared features (e.g. "segmented")

    @property
    def features(self) -> frozenset[str]:
        """Every feature the plan claims; those in ``CHECKED`` are verified after compiling."""
        found = self.gemm.features() | {self.scheduler, f"device:{self.device}"} | self.extra
        if self.block:
            found |= {f"block:{name}" for name in self.block}
        if self.scheduler == "ampere" and self.device == "h200":
            found.add("ampere_on_h200")
        ov: Mapping[str, Any] = self.overrides or {}
        found.add("overrides" if ov else "default_params")
        if ov.get("splitk_factor", 1) > 1:
            found.add("splitk")
        strategy = ov.get("tiling_strategy")
        if strategy == "persistent_pingpong":
            found.add("pingpong")
        elif strategy:
            found.add(f"tiling:{strategy}")
        if tuple(ov.get("cluster_dims", (1, 1))) == (2, 1):
            found.add("cluster")
        if ov.get("swap_ab"):
            found.add("swap")
        if ov.get("splitk_in_cluster"):
            found.add("kcluster")
        if "use_smem_epilogue" in ov:
            found.add("smem_epilogue" if ov["use_smem_epilogue"] else "register_epilogue")
        if ov.get("cta_order") == "column_major":
            found.add("cta_order:column_major")
        if ov.get("grid_swizzle_factor", 1) > 1:
            found.add("grid_swizzle")
        if self.kernels > 1:
            found.add("segmented")
        elif self.gemm.h > 1:
            found.add("horizontal")
        return frozenset(found)

    def manager(self) -> mp.PluginManager:
        """A fresh hermetic, strict plugin manager: the built-ins less *block*."""
        return mp.make_plugin_manager(block=self.block, load_entrypoints=False, strict=True)


def _hopper(cta: tuple[int, int, int], warp: tuple[int, int, int], stages: int = 2,
            k: int = 16, **extra: object) -> dict[str, object]:  # fmt: skip
    """Overrides of hopper's tiles: the wgmma of the warp tile's N and *k* (32 for FP8)."""
    return {"cta_tile": cta, "warp_tile": warp, "instruction_tile": (64, warp[1], k),
            "stages": stages, **extra}  # fmt: skip


def _ampere(cta: tuple[int, int, int], warp: tuple[int, int, int], stages: int = 2,
            **extra: object) -> dict[str, object]:  # fmt: skip
    return {"cta_tile": cta, "warp_tile": warp, "instruction_tile": (16, 8, 16),
            "stages": stages, **extra}  # fmt: skip


PERSISTENT = {"tiling_strategy": "persistent"}
PINGPONG = {"tiling_strategy": "persistent_pingpong"}
FORCED_AMPERE = ("hopper",)  # MMAPLUG_DISABLE=hopper on an h200


def _default_plans() -> Iterator[Plan]:
    """The default heuristics on both presets and on an h200 with hopper blocked: 4 layouts x
    2 dtypes x 3 shapes (square, ragged, skinny with a long K), an epilogue per shape."""
    shapes = (((1024, 1024, 1024), "bare"), ((200, 136, 264), "bias_relu"),
              ((32, 4096, 8192), "residual"))  # fmt: skip
    targets = (("hopper", "h200", ()), ("ampere", "a100", ()), ("ampere", "h200", FORCED_AMPERE))
    for scheduler, device, block in targets:
        for (m, n, k), epilogue in shapes:
            for dtype in ("float16", "bfloat16"):
                for layout in LAYOUTS:
                    g = Gemm(layout, dtype, m, n, k, epilogue=epilogue)
                    where = f"{device}-{scheduler}" if block else device
                    yield Plan(f"default/{where}/{g.tag}_{epilogue}", g, device, scheduler,
                               block=block)  # fmt: skip


EPILOGUE_SWEEP = (
    "bare", "cast", "out_f32", "out_f16", "out_bf16", "cast_chain", "bias", "bias_f32", "bias_m",
    "bias_m_n", "relu", "gelu", "silu", "sigmoid", "gelu_tanh", "bias_relu", "bias_gelu",
    "bias_silu_f32", "alpha", "alpha_beta", "const_affine", "residual", "residual_f32",
    "unary_mix", "math_mix", "binary_mix", "aux_pre", "bias_gelu_aux", "two_outputs",
    "three_outputs",
)  # fmt: skip


def _epilogue_plans() -> Iterator[Plan]:
    """Every epilogue kind on the hopper kernel (staged + packed stores, and from registers)
    and on the ampere kernel; layout and dtype rotate with the kind."""
    targets = (
        ("hopper_staged", "hopper", "h200",
         _hopper((128, 128, 64), (64, 128, 64), 3, use_smem_epilogue=True, **PERSISTENT)),
        ("hopper_registers", "hopper", "h200",
         _hopper((128, 128, 64), (64, 128, 64), 3, use_smem_epilogue=False, **PERSISTENT)),
        ("ampere", "ampere", "a100", _ampere((128, 128, 32), (64, 64, 32), 3)),
    )  # fmt: skip
    for i, kind in enumerate(EPILOGUE_SWEEP):
        layout, dtype = LAYOUTS[i % 4], ("float16", "bfloat16")[i // 4 % 2]
        g = Gemm(layout, dtype, 256, 192, 128, epilogue=kind)
        for name, scheduler, device, overrides in targets:
            yield Plan(f"epilogue/{name}/{kind}_{g.tag}", g, device, scheduler, overrides)
        if i % 3 == 0:  # ragged M and N (partial tiles, N % 8 != 0: no packed stores)
            r = Gemm(layout if layout[1] == "N" else "TN", dtype, 136, 90, 192, epilogue=kind)
            yield Plan(f"epilogue/hopper_staged/{kind}_{r.tag}", r, "h200", "hopper",
                       targets[0][3])  # fmt: skip
            yield Plan(f"epilogue/ampere/{kind}_{r.tag}", r, "a100", "ampere", targets[2][3])


def _hopper_plans() -> Iterator[Plan]:
    """The hopper kernel's parameters one at a time, then in combination."""
    tiles = (
        ("c64x64_w64x64", (64, 64, 64), (64, 64, 64), 2),
        ("c128x64_w64x64", (128, 64, 64), (64, 64, 64), 3),  # 2 consumers along M
        ("c64x128_w64x64", (64, 128, 64), (64, 64, 64), 3),  # 2 consumers along N
        ("c128x128_w64x128", (128, 128, 64), (64, 128, 64), 4),
        ("c128x256_w64x256", (128, 256, 64), (64, 256, 64), 4),
        ("c64x256_w64x256", (64, 256, 64), (64, 256, 64), 5),
        ("c128x128_w128x128", (128, 128, 64), (128, 128, 64), 4),
        ("c64x48_w64x48", (64, 48, 64), (64, 48, 64), 6),
        ("c64x64x128_w64x64", (64, 64, 128), (64, 64, 128), 2),  # BK 128: two boxes
        ("c128x64x256_w64x64", (128, 64, 256), (64, 64, 256), 2),
    )  # fmt: skip
    for j, (name, cta, warp, stages) in enumerate(tiles):
        # an N-major B (TT, NT) is read in 64-column swizzle rows: warp n a multiple of 64
        layouts = (LAYOUTS[j % 4], LAYOUTS[(j + 2) % 4]) if warp[1] % 64 == 0 else ("TN", "NN")
        for layout in layouts:
            g = Gemm(layout, ("float16", "bfloat16")[j % 2], 512, 512, 512, epilogue="bias_gelu")
            yield Plan(f"hopper/tiles/{name}_s{stages}_{g.tag}", g, "h200", "hopper",
                       _hopper(cta, warp, stages, **PERSISTENT))  # fmt: skip
    base = _hopper((128, 128, 64), (64, 128, 64), 3)
    for strategy in ("one_tile_per_cta", "persistent"):
        for smem in (False, True):
            for dtype in ("float16", "bfloat16"):
                g = Gemm("TN" if smem else "NT", dtype, 384, 256, 256, epilogue="bias_relu")
                overrides = {**base, "tiling_strategy": strategy, "use_smem_epilogue": smem}
                yield Plan(f"hopper/{strategy}/smem{int(smem)}_{g.tag}", g, "h200", "hopper",
                           overrides)  # fmt: skip
    for i, (cta, stages) in enumerate((((64, 128, 64), 4), ((128, 128, 64), 3), ((64, 256, 64), 4),
                                       ((128, 64, 64), 2))):  # fmt: skip
        for smem in (True, False):
            layout = LAYOUTS[(i + smem) % 4]
            g = Gemm(layout, ("float16", "bfloat16")[i % 2], 512, 384, 256,
                     epilogue=("relu", "bias_gelu", "aux_pre", "residual")[i])  # fmt: skip
            overrides = _hopper(cta, cta, stages, use_smem_epilogue=smem, **PINGPONG)
            yield Plan(f"hopper/pingpong/c{cta[0]}x{cta[1]}_smem{int(smem)}_{g.tag}", g, "h200",
                       "hopper", overrides)  # fmt: skip
    splitk = (
        (2, True, "TN", "bare", (64, 64, 64)), (2, False, "NN", "aux_pre", (64, 64, 64)),
        (3, True, "TT", "bias_gelu", (128, 64, 64)), (4, True, "NT", "alpha_beta", (64, 128, 64)),
        (4, False, "TN", "bias_m", (64, 64, 64)), (2, True, "NN", "two_outputs", (128, 128, 64)),
        (3, False, "TT", "residual_f32", (64, 64, 64)), (2, True, "TN", "bare", (128, 128, 64)),
    )  # fmt: skip
    for split, smem, layout, epilogue, cta in splitk:
        warp = (64, min(cta[1], 128), 64)
        g = Gemm(layout, "bfloat16" if split == 3 else "float16", 128, 128, 1024, epilogue=epilogue)
        overrides = _hopper(cta, warp, 3, splitk_factor=split, use_smem_epilogue=smem,
                            **PERSISTENT)  # fmt: skip
        yield Plan(f"hopper/splitk{split}/c{cta[0]}x{cta[1]}_smem{int(smem)}_{epilogue}_{g.tag}",
                   g, "h200", "hopper", overrides)  # fmt: skip
    cluster = (
        ("plain", "TN", "bare", 64, True, {}), ("plain", "TT", "bias_gelu", 128, True, {}),
        ("plain", "NT", "relu", 128, False, {}), ("plain", "NN", "aux_pre", 128, True, {}),
        ("splitk2", "TN", "bias", 64, True, {"splitk_factor": 2}),
        ("splitk2", "TT", "bias_gelu", 128, False, {"splitk_factor": 2}),
        ("pingpong", "TN", "bias", 64, True, PINGPONG),
        ("pingpong", "NN", "residual", 128, True, PINGPONG),
    )  # fmt: skip
    for what, layout, epilogue, n_tile, smem, extra in cluster:
        g = Gemm(layout, "bfloat16" if n_tile == 128 else "float16", 512, 512, 512,
                 epilogue=epilogue)  # fmt: skip
        overrides = _hopper((64, n_tile, 64), (64, n_tile, 64), 3, cluster_dims=(2, 1),
                            use_smem_epilogue=smem, **{**PERSISTENT, **extra})  # fmt: skip
        yield Plan(f"hopper/cluster2x1/{what}_n{n_tile}_smem{int(smem)}_{epilogue}_{g.tag}", g,
                   "h200", "hopper", overrides)  # fmt: skip
    shapes = (  # 4 CTAs along M, 2 or 4 along N (A multicast), 2x2 (both, masks by rank)
        ((4, 1), "TT", "relu", (64, 256, 64), {}),
        ((1, 2), "NN", "bias", (128, 64, 64), {"use_smem_epilogue": True}),
        ((1, 4), "TN", "bare", (64, 32, 64), {"splitk_factor": 2}),
        ((2, 2), "TN", "bias_gelu", (128, 128, 64), {"use_smem_epilogue": True}),
        ((2, 2), "NT", "aux_pre", (128, 128, 64), {"splitk_factor": 2}),
    )  # fmt: skip
    for dims, layout, epilogue, cta, extra in shapes:
        g = Gemm(layout, "float16", 512, 512, 512, epilogue=epilogue)
        warp = (64, cta[1], 64)
        overrides = _hopper(cta, warp, 3, cluster_dims=dims, **{**PERSISTENT, **extra})
        yield Plan(f"hopper/cluster{dims[0]}x{dims[1]}/{epilogue}_{g.tag}", g, "h200", "hopper",
                   overrides)  # fmt: skip
    for i, (order, swizzle) in enumerate((("column_major", 1), ("row_major", 3),
                                          ("column_major", 8), ("row_major", 8))):  # fmt: skip
        g = Gemm(LAYOUTS[i], "float16", 1024, 768, 256, epilogue="bias")
        yield Plan(f"hopper/grid/{order}_sw{swizzle}_{g.tag}", g, "h200", "hopper",
                   _hopper((128, 128, 64), (64, 128, 64), 4, cta_order=order,
                           grid_swizzle_factor=swizzle, **PERSISTENT))  # fmt: skip
    batch = (
        (Gemm("TT", "float16", 136, 64, 72, batch=2), _hopper((128, 64, 64), (64, 64, 64))),
        (Gemm("TT", "bfloat16", 72, 136, 64, batch=2, epilogue="bias_batch"),
         _hopper((64, 128, 64), (64, 128, 64), 2, use_smem_epilogue=True, **PINGPONG)),
        (Gemm("NN", "float16", 104, 80, 128, batch=3, epilogue="residual"),
         _hopper((128, 64, 64), (128, 64, 64), 2, splitk_factor=2, use_smem_epilogue=True)),
        (Gemm("TN", "float16", 128, 128, 128, batch=4, b_batched=False, epilogue="bias"),
         _hopper((64, 64, 64), (64, 64, 64), 3, **PERSISTENT)),
        (Gemm("NT", "bfloat16", 256, 128, 64, batch=2, epilogue="aux_pre"), None),
        (Gemm("TN", "float16", 64, 256, 512, batch=8, epilogue="bias_batch"), None),
    )  # fmt: skip
    for g, overrides in batch:
        what = ("default" if overrides is None else "set") + ("" if g.b_batched else "_bcastB")
        yield Plan(f"hopper/batch/{what}_{g.epilogue}_{g.tag}", g, "h200", "hopper", overrides)
    ops = (
        (Gemm("TN", "float16", 56, 16, 64, op="fms", epilogue="cast"),
         _hopper((64, 16, 64), (64, 16, 64))),
        (Gemm("TT", "bfloat16", 64, 64, 64, op="mul_sum", epilogue="bare"),
         _hopper((64, 64, 64), (64, 64, 64))),
        (Gemm("NT", "float16", 64, 64, 64, op="fms", epilogue="relu"), None),
        (Gemm("NN", "float16", 64, 24, 128, op="mul_sum", epilogue="cast"),
         _hopper((64, 24, 64), (64, 24, 64), splitk_factor=2)),
        (Gemm("TN", "float16", 64, 16, 64, batch=2, op="linear", epilogue="bias"), None),
        (Gemm("TN", "bfloat16", 512, 256, 128, op="linear_bias", epilogue="gelu"), None),
        (Gemm("TT", "float16", 512, 256, 128, op="linear", epilogue="silu"), None),
        (Gemm("TN", "float16", 64, 16, 64, op="squeeze_set", epilogue="cast"), None),
        (Gemm("TN", "float16", 64, 64, 64, batch=2, op="fms", epilogue="cast"), None),
    )  # fmt: skip
    for g, overrides in ops:
        yield Plan(f"hopper/ops/{g.op}_{g.epilogue}_{g.tag}", g, "h200", "hopper", overrides)
    swap = (  # the transposed product: its tiles' n covers the activations (the problem's M)
        (Gemm("TN", "bfloat16", 32, 1024, 256, epilogue="bare"), 32, {}),
        (Gemm("TT", "float16", 40, 512, 256, epilogue="bias_gelu"), 40, {}),
        (Gemm("NT", "bfloat16", 48, 512, 256, batch=2, epilogue="residual"), 64, {}),
        (Gemm("NN", "float16", 24, 512, 1024, epilogue="aux_pre"), 64, {"splitk_factor": 2}),
        (Gemm("TN", "float16", 32, 512, 256, epilogue="bias_m"), 32, {"cluster_dims": (2, 1)}),
        (Gemm("TN", "bfloat16", 20, 512, 256, epilogue="relu"), 24, PINGPONG),
    )  # fmt: skip
    for g, cols, extra in swap:
        overrides = _hopper((64, cols, 64), (64, cols, 64), 4, swap_ab=True,
                            use_smem_epilogue=False, **{**PERSISTENT, **extra})  # fmt: skip
        yield Plan(f"hopper/swap/{g.epilogue}_{g.tag}", g, "h200", "hopper", overrides)
    for g, cols, extra in swap[:4]:  # ... with the staged epilogue, its chunks transposed
        overrides = _hopper((64, cols, 64), (64, cols, 64), 4, swap_ab=True,
                            use_smem_epilogue=True, **{**PERSISTENT, **extra})  # fmt: skip
        yield Plan(f"hopper/swap_staged/{g.epilogue}_{g.tag}", g, "h200", "hopper", overrides)
    kcluster = (  # split-K summed in the cluster of a tile's splits
        (Gemm("TN", "bfloat16", 64, 512, 1024, epilogue="bias_gelu"), (64, 64, 128), (64, 64), 2),
        (Gemm("NT", "float16", 128, 256, 2048, batch=2, epilogue="aux_pre"), (128, 128, 64),
         (64, 128), 8),
        (Gemm("TN", "bfloat16", 32, 512, 1024, epilogue="residual"), (64, 32, 128), (64, 32), 4),
    )  # fmt: skip
    for g, cta, warp, split in kcluster:
        swap = {"swap_ab": True} if g.m == 32 else {}
        overrides = _hopper(cta, (*warp, cta[2]), 3, splitk_factor=split, splitk_in_cluster=True,
                            use_smem_epilogue=False, **PERSISTENT, **swap)  # fmt: skip
        yield Plan(f"hopper/kcluster/{g.epilogue}_{g.tag}", g, "h200", "hopper", overrides)


def _tma_store_plans() -> Iterator[Plan]:
    """Casts-only epilogues of grids of more work units than resident CTAs: the packed chunks
    leave by TMA stores (``stores_by_tma``), 16-bit and float32 boxes, CTA pairs, ping-pong."""
    tma = frozenset({"tma_stores"})
    plans = (
        ("default_bare", Gemm("TN", "float16", 4096, 4096, 4096, epilogue="bare"), None),
        ("default_bare", Gemm("TT", "bfloat16", 2048, 2048, 128, batch=16, epilogue="bare"), None),
        ("out_f32", Gemm("TN", "bfloat16", 4096, 4096, 256, epilogue="out_f32"),
         _hopper((128, 128, 64), (64, 128, 64), 3, use_smem_epilogue=True, **PERSISTENT)),
        ("cast", Gemm("NT", "float16", 4096, 2048, 256, epilogue="cast"),
         _hopper((128, 256, 64), (64, 256, 64), 4, use_smem_epilogue=True, **PERSISTENT)),
        ("pingpong_out_f16", Gemm("NN", "bfloat16", 4096, 4096, 256, epilogue="out_f16"),
         _hopper((128, 128, 64), (128, 128, 64), 4, use_smem_epilogue=True, **PINGPONG)),
    )  # fmt: skip
    for name, g, overrides in plans:
        yield Plan(f"hopper/tma_stores/{name}_{g.tag}", g, "h200", "hopper",
                   overrides, extra=tma)  # fmt: skip


def _horizontal_plans() -> Iterator[Plan]:
    """Horizontal fusions (hopper: one wgmma over the stacked B tiles; ampere: segmented)."""

    def g(layout: str, h: int, epilogue: str, dtype: str = "bfloat16", m: int = 256,
          n: int = 256, k: int = 128, **kw: Any) -> Gemm:  # fmt: skip
        return Gemm(layout, dtype, m, n, k, op="linear", h=h, epilogue=epilogue, **kw)

    cases = (
        ("default", g("TN", 2, "swiglu"), None),
        ("default", g("TT", 2, "swiglu", "float16", n=512), None),
        ("default", g("TN", 3, "swiglu_bias_scalar", "float16", n=240), None),
        ("default", g("TN", 3, "qkv"), None),
        ("default", g("TT", 4, "swiglu", "float16", n=512), None),
        ("default", g("NN", 2, "swiglu_aux", m=128), None),
        ("default_llama", g("TN", 2, "swiglu", m=2048, n=14336, k=5120), None),
        ("pingpong", g("TN", 2, "swiglu", m=512), _hopper((64, 256, 64), (64, 256, 64), 4,
                                                          use_smem_epilogue=True, **PINGPONG)),
        ("pingpong_regs", g("NT", 2, "swiglu", "float16", m=512),
         _hopper((64, 256, 64), (64, 256, 64), 3, use_smem_epilogue=False, **PINGPONG)),
        ("registers", g("TT", 2, "swiglu", "float16", n=512),
         _hopper((128, 256, 64), (64, 256, 64), 3, use_smem_epilogue=False, **PERSISTENT)),
        ("two_consumers", g("TN", 2, "swiglu_aux"),
         _hopper((128, 128, 64), (64, 128, 64), 3, use_smem_epilogue=True, **PERSISTENT)),
        ("bk128", g("TN", 3, "qkv", "float16", n=200),
         _hopper((64, 192, 128), (64, 192, 128), 2, **PERSISTENT)),
        ("batch2", Gemm("TN", "float16", 128, 64, 64, batch=2, h=2, epilogue="swiglu_aux"), None),
    )  # fmt: skip
    for name, gemm, overrides in cases:
        yield Plan(f"horizontal/hopper/{name}_h{gemm.h}_{gemm.epilogue}_{gemm.tag}", gemm, "h200",
                   "hopper", overrides)  # fmt: skip
    ffn = g("TN", 2, "swiglu")
    for device, block in (("a100", ()), ("h200", FORCED_AMPERE)):
        where = f"{device}-ampere" if block else device
        yield Plan(f"horizontal/segmented/{where}_{ffn.tag}", ffn, device, "ampere", block=block,
                   kernels=2)  # fmt: skip
        yield Plan(f"horizontal/segmented/{where}_set_{ffn.tag}", ffn, device, "ampere",
                   _ampere((64, 64, 32), (32, 32, 32), 3), block=block, kernels=2)  # fmt: skip
    qkv = g("NT", 3, "qkv", "float16")
    yield Plan(f"horizontal/segmented/a100_qkv_{qkv.tag}", qkv, "a100", "ampere", kernels=3)


def _decode_plans() -> Iterator[Plan]:
    """The decode kernel (few activation rows, the weight streamed to registers): its warps
    splitting K, chunks in flight, m tiles, epilogues, batch, horizontal fusions, and its
    default parameters."""
    cases = (
        (Gemm("TN", "float16", 1, 4096, 4096, op="linear", epilogue="cast"), None),
        (Gemm("TN", "bfloat16", 16, 1024, 2048, op="linear", epilogue="bias_gelu"), None),
        (Gemm("TN", "float16", 5, 40, 72, op="linear", epilogue="bare"), (1, 1)),
        (Gemm("TN", "bfloat16", 9, 48, 520, op="linear", epilogue="residual"), (2, 3)),
        (Gemm("TN", "float16", 16, 64, 1040, op="linear", epilogue="alpha"), (8, 4)),
        (Gemm("TN", "bfloat16", 3, 32, 256, op="linear", epilogue="two_outputs"), (4, 2)),
        (Gemm("TN", "float16", 2, 40, 200, batch=3, epilogue="bias_batch"), (2, 2)),
        # horizontal fusions: each product's warps in one CTA
        (Gemm("TN", "bfloat16", 1, 4096, 4096, op="linear", h=2, epilogue="swiglu"), None),
        (Gemm("TN", "float16", 16, 48, 520, op="linear", h=2, epilogue="swiglu_aux"), (2, 3)),
        (Gemm("TN", "bfloat16", 3, 32, 1040, op="linear", h=3, epilogue="qkv"), (4, 2)),
        (Gemm("TN", "float16", 9, 24, 136, op="linear", h=3, epilogue="swiglu_bias_scalar"),
         (1, 1)),
        # two row tiles: 32 weight rows a CTA (warps, chunks, weight rows)
        (Gemm("TN", "bfloat16", 5, 40, 200, op="linear", epilogue="bias_gelu"), (2, 2, 32)),
        (Gemm("TN", "float16", 9, 48, 520, op="linear", h=2, epilogue="swiglu"), (2, 4, 32)),
    )  # fmt: skip
    for g, plan in cases:
        what, overrides = "default", None
        if plan is not None:
            warps, unroll, *rows = plan
            what, overrides = f"w{warps}_u{unroll}", {"splitk_factor": warps, "stages": unroll}
            if rows:
                tile = (8 * -(-g.m // 8), rows[0], 64)
                what += f"_r{rows[0] // 16}"
                overrides |= {"cta_tile": tile, "warp_tile": tile}
        what += f"_h{g.h}" if g.h > 1 else ""
        yield Plan(f"decode/{what}_{g.epilogue}_{g.tag}", g, "h200", "decode", overrides)


def _ampere_plans() -> Iterator[Plan]:
    """The ampere kernel's parameters, odd extents (narrow vectors, plain loads), batch."""
    tiles = (
        ("c32x32_w16x16", (32, 32, 32), (16, 16, 32), 2),
        ("c64x64_w32x32", (64, 64, 32), (32, 32, 32), 3),
        ("c128x128_w64x64", (128, 128, 32), (64, 64, 32), 4),
        ("c128x64_w64x32", (128, 64, 32), (64, 32, 32), 3),
        ("c256x128_w64x64", (256, 128, 32), (64, 64, 32), 3),
        ("c32x32x16_w16x16", (32, 32, 16), (16, 16, 16), 3),
        ("c64x32x64_w32x32", (64, 32, 64), (32, 32, 64), 2),
        ("c64x48x64_w64x48", (64, 48, 64), (64, 48, 64), 4),
        ("c64x128x64_w32x64", (64, 128, 64), (32, 64, 64), 2),
        ("c128x256_w64x64", (128, 256, 32), (64, 64, 32), 2),
    )  # fmt: skip
    for j, (name, cta, warp, stages) in enumerate(tiles):
        for layout in (LAYOUTS[j % 4], LAYOUTS[(j + 1) % 4]):
            g = Gemm(layout, ("float16", "bfloat16")[j % 2], 512, 384, 256, epilogue="bias_gelu")
            yield Plan(f"ampere/tiles/{name}_s{stages}_{g.tag}", g, "a100", "ampere",
                       _ampere(cta, warp, stages))  # fmt: skip
    small = _ampere((32, 32, 32), (16, 16, 32), 2)
    for split, layout, epilogue in ((2, "TN", "alpha_beta"), (2, "NT", "bare"), (3, "TT", "bias"),
                                    (4, "NN", "aux_pre"), (3, "TN", "bias_gelu_aux"),
                                    (2, "TT", "two_outputs")):  # fmt: skip
        g = Gemm(layout, "float16", 64, 64, 384, batch=2 if split == 2 else 1, epilogue=epilogue)
        yield Plan(f"ampere/splitk{split}/{epilogue}_{g.tag}", g, "a100", "ampere",
                   {**small, "splitk_factor": split})  # fmt: skip
    for i, (order, swizzle) in enumerate((("column_major", 1), ("row_major", 2),
                                          ("column_major", 3), ("row_major", 8))):  # fmt: skip
        g = Gemm(LAYOUTS[i], "bfloat16", 1024, 512, 256, epilogue="relu")
        yield Plan(f"ampere/grid/{order}_sw{swizzle}_{g.tag}", g, "a100", "ampere",
                   _ampere((128, 128, 32), (64, 64, 32), 3, cta_order=order,
                           grid_swizzle_factor=swizzle))  # fmt: skip
    odd = (  # vector widths 1, 2, 4 from odd extents; 1 x 2 B is no cp.async size: plain loads
        (Gemm("TN", "float16", 37, 19, 45, epilogue="relu"), {"async_gmem_load_operands": False}),
        (Gemm("TT", "float16", 37, 19, 45, epilogue="aux_pre"),
         {"async_gmem_load_operands": False}),
        (Gemm("NN", "bfloat16", 40, 24, 42, epilogue="bias"), {}),
        (Gemm("NT", "float16", 36, 44, 40, epilogue="bias_gelu_aux"), {}),
        (Gemm("NT", "float16", 40, 24, 21, epilogue="relu"),  # odd K, 3 stages (M, N vectors)
         _ampere((32, 32, 16), (16, 16, 16), 3)),
        (Gemm("TN", "float16", 37, 45, 40, epilogue="bias_gelu_aux"), {"grid_swizzle_factor": 2}),
    )  # fmt: skip
    for g, extra in odd:
        overrides = {**small, **extra} if "cta_tile" not in extra else extra
        yield Plan(f"ampere/odd/{g.epilogue}_{g.tag}", g, "a100", "ampere", overrides)
        yield Plan(f"ampere/odd/default_{g.epilogue}_{g.tag}", g, "a100", "ampere")
    batch = (
        (Gemm("NN", "float16", 64, 32, 72, batch=2, b_batched=False),
         _ampere((64, 32, 64), (32, 32, 64), 2)),
        (Gemm("TT", "bfloat16", 40, 44, 40, batch=2, epilogue="bias_batch"), small),
        (Gemm("TN", "float16", 128, 256, 512, batch=4, epilogue="residual"), None),
        (Gemm("NT", "float16", 96, 96, 96, batch=3, op="fms", epilogue="cast"), None),
    )  # fmt: skip
    for g, overrides in batch:
        tail = "_bcastB" if not g.b_batched else ""
        yield Plan(f"ampere/batch/{g.op}_{g.epilogue}_{g.tag}{tail}", g, "a100", "ampere",
                   overrides)  # fmt: skip
    adjusted = Gemm("TN", "float16", 256, 256, 256, epilogue="bias")
    yield Plan(f"ampere/adjusted/stages1_smem0_{adjusted.tag}", adjusted, "a100", "ampere",
               _ampere((64, 64, 32), (32, 32, 32), 1, use_smem_epilogue=False))  # fmt: skip
    forced = (  # ampere on the h200 (MMAPLUG_DISABLE=hopper): sm_90 limits, same kernel family
        (Gemm("TN", "float16", 4096, 4096, 4096, epilogue="bias_gelu"), None),
        (Gemm("NT", "bfloat16", 512, 384, 256, epilogue="alpha_beta"),
         _ampere((128, 128, 32), (64, 64, 32), 4)),
        (Gemm("TT", "float16", 64, 64, 1024, epilogue="aux_pre"), {**small, "splitk_factor": 4}),
        (Gemm("NN", "bfloat16", 40, 24, 42, batch=2, epilogue="residual"), small),
        (Gemm("TN", "float16", 512, 512, 512, epilogue="bias"),
         _ampere((256, 128, 32), (64, 64, 32), 4)),
    )  # fmt: skip
    for g, overrides in forced:
        what = "default" if overrides is None else "set"
        yield Plan(f"ampere/on_h200/{what}_{g.epilogue}_{g.tag}", g, "h200", "ampere", overrides,
                   block=FORCED_AMPERE)  # fmt: skip


PROLOGUES = (  # (name, layout, a dtype, mma dtype, (m, n, k), batch, prologues, overrides)
    ("sin_a_ragged_k", "TN", "float16", "float16", (40, 24, 45), 1, ("sin", "none"), {}),
    ("scalar_a_exp_b_splitk3", "NT", "float16", "float16", (33, 40, 77), 1,
     ("cos_plus_s", "exp_neg"), {"splitk_factor": 3}),
    ("cast_f16_to_bf16", "TT", "float16", "bfloat16", (24, 40, 50), 1, ("cast", "none"), {}),
    ("relu_scale_batch2", "NN", "float16", "float16", (20, 18, 37), 2, ("relu", "scale"), {}),
    ("dag_bf16_splitk2_bk16", "TN", "bfloat16", "bfloat16", (24, 24, 100), 1,
     ("sin_times_cos", "cos_plus_s"),
     {"splitk_factor": 2, "cta_tile": (32, 32, 16), "warp_tile": (32, 32, 16), "stages": 3}),
    ("bk48_warps2x2_exp", "TN", "float16", "float16", (36, 30, 70), 1, ("exp_neg", "exp_neg"),
     {"cta_tile": (32, 32, 48), "warp_tile": (16, 16, 48)}),
    ("b_only_bk64", "NT", "float16", "float16", (30, 34, 90), 1, ("none", "cos_plus_s"),
     {"cta_tile": (32, 32, 64), "warp_tile": (32, 32, 64)}),
)  # fmt: skip


def _prologue_plans() -> Iterator[Plan]:
    """Operand prologues: the ampere kernel computes them (a100, and h200 where hopper declines
    them); with ampere blocked on the h200 they are a pointwise segment before a hopper kernel."""
    small = _ampere((32, 32, 32), (32, 32, 32), 2)
    for name, layout, a_dt, mma, (m, n, k), batch, prologue, extra in PROLOGUES:
        g = Gemm(layout, mma, m, n, k, batch=batch, epilogue="cast", prologue=prologue,
                 a_dtype=a_dt if a_dt != mma else None)  # fmt: skip
        yield Plan(f"prologue/a100/{name}_{g.tag}", g, "a100", "ampere", {**small, **extra})
    for name, layout, prologue in (("sin_a", "TN", ("sin", "none")),
                                   ("exp_b_bias", "TT", ("none", "exp_neg")),
                                   ("both_scalar", "NN", ("cos_plus_s", "relu"))):  # fmt: skip
        g = Gemm(layout, "bfloat16", 256, 128, 192, prologue=prologue,
                 epilogue="bias_gelu" if "bias" in name else "cast")  # fmt: skip
        yield Plan(f"prologue/h200/{name}_{g.tag}", g, "h200", "ampere")
    for name, layout, prologue in (("sin_a", "TN", ("sin", "none")),
                                   ("scale_b", "NT", ("none", "scale"))):  # fmt: skip
        g = Gemm(layout, "float16", 256, 128, 192, prologue=prologue, epilogue="relu")
        yield Plan(f"prologue/h200-hopper/{name}_{g.tag}", g, "h200", "hopper", block=("ampere",),
                   extra=frozenset({"segmented"}))  # fmt: skip


def _symbolic_plans() -> Iterator[Plan]:
    """-1 extents: compiled once, specialized to the Gemm's concrete shapes."""
    hopper = ("h200", "hopper", ())
    ampere = ("a100", "ampere", ())
    forced = ("h200", "ampere", FORCED_AMPERE)
    cases = (
        (Gemm("TN", "float16", 512, 384, 256, epilogue="bias_gelu", symbolic="m"), hopper),
        (Gemm("NT", "bfloat16", 200, 136, 264, epilogue="residual", symbolic="m"), hopper),
        (Gemm("TT", "float16", 96, 128, 64, batch=3, epilogue="bias_batch", symbolic="b"), hopper),
        (Gemm("TN", "float16", 512, 384, 256, epilogue="bias_gelu", symbolic="m"), ampere),
        (Gemm("NN", "bfloat16", 37, 45, 40, epilogue="aux_pre", symbolic="m"), ampere),
        (Gemm("TT", "float16", 64, 96, 128, batch=2, epilogue="relu", symbolic="mb"), ampere),
        (Gemm("TN", "float16", 512, 384, 256, epilogue="bias_m", symbolic="m"), forced),
        (Gemm("TN", "bfloat16", 256, 256, 128, op="linear", h=2, epilogue="swiglu", symbolic="m"),
         hopper),
    )  # fmt: skip
    for g, (device, scheduler, block) in cases:
        where = f"{device}-{scheduler}" if block else device
        yield Plan(f"symbolic/{where}/{g.symbolic}_{g.epilogue}_{g.tag}", g, device, scheduler,
                   block=block)  # fmt: skip
    cut = Gemm("TN", "float16", 256, 128, 128, epilogue="sum_cut", symbolic="m")
    yield Plan(f"symbolic/h200/{cut.symbolic}_{cut.epilogue}_{cut.tag}", cut, "h200", "hopper",
               extra=frozenset({"segmented"}))  # fmt: skip


def _fp8(m: int, n: int, k: int, scale: str, epilogue: str = "cast", out: str = "bfloat16",
         dtype: str = "float8_e4m3fn") -> Gemm:  # fmt: skip
    return Gemm("TN", dtype, m, n, k, op="scaled_mm", scale=scale, epilogue=epilogue, out=out)


def _fp8_plans() -> Iterator[Plan]:
    """FP8 scaled_mm (issue 24): the defaults of per-tensor, per-row and block scales over the
    shapes whose plans differ (block scales: two blocks a stage, 128x128, the 64x256 chunks,
    128x192 straddling two blocks of B's scales in CTA pairs), the decode kernel, and hopper's
    variants by override: the chunks in pairs and with ping-pong consumers, 128x160 tiles,
    split-K, stream-K, ping-pong e5m2, an e4m3 output with its amax."""
    defaults = (
        (_fp8(4096, 4096, 4096, "tensor"), "hopper"),
        (_fp8(4096, 4096, 4096, "row", "bias_gelu"), "hopper"),
        (_fp8(4096, 4096, 4096, "block"), "hopper"),
        (_fp8(8192, 8192, 8192, "block"), "hopper"),
        (_fp8(128, 4096, 4096, "block"), "hopper"),
        (_fp8(1000, 1040, 528, "block", "bias_gelu"), "hopper"),
        (_fp8(64, 4096, 4096, "tensor"), "hopper"),
        (_fp8(1, 4096, 4096, "tensor"), "decode"),
        (_fp8(16, 2048, 8192, "row", "bias"), "decode"),
    )
    for g, scheduler in defaults:
        yield Plan(f"fp8/default/{g.epilogue}_{g.tag}", g, "h200", scheduler)
    chunks = _hopper((128, 256, 128), (64, 256, 128), 4, k=32, **PERSISTENT)
    variants = (
        ("chunks_pairs", _fp8(520, 600, 432, "block"), {**chunks, "cluster_dims": (2, 1)}),
        ("chunks_pingpong", _fp8(130, 512, 304, "block", out="float16", dtype="float8_e5m2"),
         _hopper((64, 256, 128), (64, 256, 128), 2, k=32, **PINGPONG)),
        ("straddle160", _fp8(200, 400, 304, "block"),
         _hopper((128, 160, 128), (64, 160, 128), 4, k=32, **PERSISTENT)),
        ("two_blocks_splitk2", _fp8(128, 200, 1024, "block", "relu"),
         _hopper((64, 64, 256), (64, 64, 256), 3, k=32, splitk_factor=2, **PERSISTENT)),
        ("streamk2", _fp8(256, 256, 2048, "block"),
         _hopper((128, 128, 128), (64, 128, 128), 4, k=32, splitk_factor=2,
                     tiling_strategy="persistent_streamk")),
        ("pingpong", _fp8(128, 64, 256, "tensor", out="float16", dtype="float8_e5m2"),
         _hopper((64, 64, 256), (64, 64, 256), 2, k=32, **PINGPONG)),
        ("amax", _fp8(70, 80, 160, "row", "fp8_amax"),
         _hopper((64, 64, 128), (64, 64, 128), 2, k=32, **PERSISTENT)),
    )  # fmt: skip
    for what, g, overrides in variants:
        yield Plan(f"fp8/{what}_{g.epilogue}_{g.tag}", g, "h200", "hopper", overrides)


def _segmented_plans() -> Iterator[Plan]:
    """An epilogue no kernel takes (a row sum): a pointwise segment after the kernel."""
    for device, scheduler, layout in (("h200", "hopper", "TN"), ("a100", "ampere", "NT")):
        g = Gemm(layout, "float16", 256, 128, 128, epilogue="sum_cut")
        yield Plan(f"segmented/{device}/{g.epilogue}_{g.tag}", g, device, scheduler,
                   extra=frozenset({"segmented"}))  # fmt: skip


def plans() -> list[Plan]:
    """The fixed list, in a fixed order; ids unique."""
    found = [
        *_default_plans(), *_epilogue_plans(), *_hopper_plans(), *_horizontal_plans(),
        *_ampere_plans(), *_prologue_plans(), *_symbolic_plans(), *_segmented_plans(),
        *_tma_store_plans(), *_decode_plans(), *_fp8_plans(),
    ]  # fmt: skip
    seen = collections.Counter(p.id for p in found)
    if dupes := [i for i, c in seen.items() if c > 1]:
        raise ValueError(f"duplicate plan ids: {dupes}")
    return found


# -- compiling and hashing ------------------------------------------------------------------------


class PlanError(Exception):
    """A listed plan that does not compile as listed (a fault of the list, or a regression)."""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def ptx_digest(ptx: str) -> str:
    """sha256 of *ptx* without Numba's per-process counters, which number the kernels built
    before it in the process (so hashes would depend on the plans run before): the ``v<uid>``
    ABI tag of mangled names (``hopper_gemmB2v1...``) and ``_cudapy_smem_<n>``."""

    def tag(match: re.Match[str]) -> str:
        length, uid = match.groups()
        return "Bv#" if int(length) == 1 + len(uid) else match.group(0)

    text = re.sub(r"B(\d+)v(\d+)", tag, ptx)
    return _digest(re.sub(r"_cudapy_smem_\d+", "_cudapy_smem_#", text))


def _segmented(compiled: Any) -> bool:
    """A SegmentedFusion, told by its public attributes only (module paths may move)."""
    return hasattr(compiled, "segments") and hasattr(compiled, "kernels")


def _observed(compiled: Any, kernels: Sequence[Any], symbolic: bool) -> set[str]:
    """The ``CHECKED`` features the compiled plan has."""
    found = {k.spec.scheduler for k in kernels} | {str(k.spec.problem.layout) for k in kernels}
    params = [k.params for k in kernels]
    problems = [k.spec.problem for k in kernels]
    if any(p.splitk_factor > 1 for p in params):
        found.add("splitk")
    if any(p.tiling_strategy is mp.TilingStrategy.persistent_pingpong for p in params):
        found.add("pingpong")
    if any(tuple(p.cluster_dims) == (2, 1) for p in params):
        found.add("cluster")
    if any(p.swap_ab for p in params):
        found.add("swap")
    if any(p.splitk_in_cluster for p in params):
        found.add("kcluster")
    if any("_ps_ts" in k.kernel_name for k in kernels):
        found.add("tma_stores")
    if any(p.batch > 1 for p in problems):
        found.add("batch")
    if any(p.horizontal > 1 for p in problems):
        found.add("horizontal")
    if any(p.a_prologue_ops or p.b_prologue_ops for p in problems):
        found.add("prologue")
    if _segmented(compiled):
        found.add("segmented")
        if compiled.segments and compiled.segments[0].kind == "pointwise":
            found.add("prologue")  # computed in a segment of its own before the kernel
    if symbolic:
        found.add("symbolic")
    return found


def compile_plan(plan: Plan) -> list[tuple[str, Any]]:
    """The plan's kernels as ``(record key, CompiledFusion)``, checked against the plan.

    :raises PlanError: it does not compile, or not as the plan says.
    """
    try:
        compiled = mp.compile(
            plan.gemm.build(), plan.device, pm=plan.manager(), overrides=plan.overrides
        )
        symbolic = hasattr(compiled, "specialize")
        if symbolic:
            compiled = compiled.specialize(plan.gemm.input_shapes())
    except mp.MatmulError as error:
        raise PlanError(f"{plan.id}: refused: {type(error).__name__}: {error}") from error
    if _segmented(compiled):
        kernels = [(f"{plan.id}@seg{i}", k) for i, k in sorted(compiled.kernels.items())]
    else:
        kernels = [(plan.id, compiled)]
    faults = []
    if len(kernels) != plan.kernels:
        faults.append(f"{len(kernels)} kernels, not {plan.kernels}")
    schedulers = sorted({k.spec.scheduler for _, k in kernels})
    if schedulers != [plan.scheduler]:
        faults.append(f"scheduler {schedulers}, not {plan.scheduler!r}")
    seen = _observed(compiled, [k for _, k in kernels], symbolic)
    if missing := sorted((plan.features & CHECKED) - seen):
        faults.append(f"declared but not compiled: {missing} (compiled: {sorted(seen)})")
    if faults:
        raise PlanError(f"{plan.id}: " + "; ".join(faults))
    return kernels


def record(compiled: Any, ptx: bool) -> tuple[dict[str, str], str]:
    """One kernel's snapshot record and its source."""
    source = compiled.source
    entry = {
        "scheduler": compiled.spec.scheduler,
        "kernel_name": compiled.kernel_name,
        "params": compiled.params.name,
        "sha256": _digest(source),
    }
    if ptx:
        entry["ptx_sha256"] = ptx_digest(compiled.ptx)
    return entry, source


def snapshot(
    selected: Sequence[Plan], ptx: bool = False, progress: bool = False
) -> tuple[dict[str, dict[str, str]], dict[str, str], list[str]]:
    """Records and sources of every kernel of *selected*, and the faults of plans that failed.

    Warnings (a scheduler adjusting a caller's value, as ``adjusted/`` plans ask) are printed
    to stderr with *progress*, never raised. ``MMAPLUG_DUMP`` is ignored meanwhile.
    """
    records: dict[str, dict[str, str]] = {}
    sources: dict[str, str] = {}
    faults: list[str] = []
    dump = os.environ.pop("MMAPLUG_DUMP", None)  # a dump of every build would only slow it
    try:
        for i, plan in enumerate(selected):
            if progress and i % 50 == 0:
                print(f"  {i}/{len(selected)} {plan.id}", file=sys.stderr, flush=True)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    for key, compiled in compile_plan(plan):
                        records[key], sources[key] = record(compiled, ptx)
                except PlanError as fault:
                    faults.append(str(fault))
                except mp.MatmulError as error:  # no source() or no PTX
                    faults.append(f"{plan.id}: {type(error).__name__}: {error}")
            for w in caught if progress else ():
                first = str(w.message).splitlines()[0]
                print(f"  {plan.id}: {w.category.__name__}: {first}", file=sys.stderr)
    finally:
        if dump is not None:
            os.environ["MMAPLUG_DUMP"] = dump
    return records, sources, faults


# -- files -------------------------------------------------------------------------------------


def _source_file(directory: Path, key: str) -> Path:
    return directory / (key.replace("/", "__") + ".py")


def keep_sources(directory: Path, sources: Mapping[str, str], replace: bool) -> None:
    """Write each source to *directory* (``--keep``); *replace*: remove what a previous
    ``--write --keep`` left there first (only in a folder this script made)."""
    if directory.exists() and replace:
        if not (directory / KEEP_MARKER).exists() and any(directory.iterdir()):
            raise SystemExit(f"--keep {directory}: not a folder this script made; pick another")
        for old in directory.glob("*.py"):
            old.unlink()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / KEEP_MARKER).write_text("sources of scripts/source_snapshot.py --write\n")
    for key, text in sources.items():
        _source_file(directory, key).write_text(text)


def check(
    path: Path, records: Mapping[str, Mapping[str, str]], sources: Mapping[str, str],
    keep: Path | None, only: str | None,
) -> int:  # fmt: skip
    """Compare *records* with the snapshot at *path*; print every difference; 1 if any."""
    written = json.loads(path.read_text())
    if any("ptx_sha256" in r for r in records.values()) and not any(
        "ptx_sha256" in r for r in written.values()
    ):
        print(f"note: {path} holds no PTX hashes (written without --ptx): sources compared")
    if only:
        written = {k: v for k, v in written.items() if k.startswith(only)}
    bad = []
    for key in sorted(set(written) | set(records)):
        old, new = written.get(key), records.get(key)
        if old is None:
            bad.append((key, "new: not in the snapshot"))
        elif new is None:
            bad.append((key, "gone: in the snapshot, not compiled now"))
        else:
            # fields of both: a snapshot written without --ptx is checked on its sources
            fields = [f for f in sorted(set(old) & set(new)) if old[f] != new[f]]
            parts = ["source differs"] if "sha256" in fields else []
            parts += [f"{f} {old[f]!r} -> {new[f]!r}" for f in fields if f != "sha256"]
            if parts:
                bad.append((key, "; ".join(parts)))
    for key, what in bad:
        print(f"DIFFERS {key}: {what}")
    first = next((key for key, what in bad if what.startswith("source differs")), None)
    if first is not None:
        kept = _source_file(keep, first) if keep else None
        if kept is not None and kept.exists():
            diff = difflib.unified_diff(
                kept.read_text().splitlines(keepends=True),
                sources[first].splitlines(keepends=True),
                f"snapshot/{first}",
                f"now/{first}",
            )
            print(f"\nfirst difference, {first}:")
            sys.stdout.writelines(diff)
        else:
            print(f"\n(no kept source of {first} in {keep}: `--write FILE --keep DIR` on the "
                  "tree the snapshot was taken from keeps them for a diff)")  # fmt: skip
    print(f"{len(bad)} of {len(set(written) | set(records))} kernel records differ"
          if bad else f"all {len(records)} kernel records match {path}")  # fmt: skip
    return 1 if bad else 0


def coverage(selected: Sequence[Plan]) -> str:
    """A table: each declared feature and how many plans have it, by kind of feature."""
    counts = collections.Counter(f for p in selected for f in p.features)
    lines = [f"{len(selected)} plans"]
    for name, count in sorted(counts.items(), key=lambda kv: (":" in kv[0], kv[0])):
        lines.append(f"  {name:<32} {count:>4}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", type=Path, metavar="FILE", help="write the snapshot to FILE")
    mode.add_argument("--check", type=Path, metavar="FILE", help="compare with FILE; 1 if differs")
    mode.add_argument("--list", action="store_true", help="print the plans and coverage only")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="--write: keep every source in DIR; --check: DIR holds the written "
                        f"snapshot's sources (default {DEFAULT_KEEP})")  # fmt: skip
    parser.add_argument("--ptx", action="store_true", help="also hash each kernel's PTX (NVVM)")
    parser.add_argument("--only", metavar="PREFIX", help="only the plans whose id starts so")
    args = parser.parse_args(argv)
    if args.write and args.only:
        parser.error("--write takes every plan; --only is for --check and --list")
    selected = [p for p in plans() if not args.only or p.id.startswith(args.only)]
    if args.list:
        for plan in selected:
            print(plan.id)
        print(coverage(selected))
        return 0
    start = time.perf_counter()
    records, sources, faults = snapshot(selected, ptx=args.ptx, progress=True)
    seconds = time.perf_counter() - start
    print(f"{len(selected)} plans, {len(records)} kernels in {seconds:.1f} s", file=sys.stderr)
    if faults:
        print("plans that do not compile as listed (fix the list, or the regression):")
        print("\n".join(f"  {f}" for f in faults))
        if args.write:
            return 2  # never a partial snapshot
    if args.write:
        args.write.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
        if args.keep:
            keep_sources(args.keep, sources, replace=True)
        print(f"wrote {len(records)} kernel records of {len(selected)} plans to {args.write}"
              + (f"; sources in {args.keep}" if args.keep else ""))  # fmt: skip
        return 0
    differs = check(args.check, records, sources, args.keep or DEFAULT_KEEP, args.only)
    return 2 if faults else differs


if __name__ == "__main__":
    sys.exit(main())
