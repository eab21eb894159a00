"""Tuning corpora: problems (shape, dtype, layout, epilogue), built in or from JSON/TOML files.

A corpus file holds a list of problems under ``problems`` (JSON) or ``[[problems]]`` (TOML)::

    [[problems]]
    m = 4096
    n = 6144
    k = 4096
    dtype = "bfloat16"   # float16, bfloat16, float8_e4m3fn or float8_e5m2 (default float16)
    layout = "TN"        # nvFuser MmaLayout letters (default TN)
    epilogue = "none"    # none, bias_gelu or swiglu (default none)
    batch = 1            # default 1
    scale = "row"        # FP8 only, and required there: "tensor", "row" or "block"

An FP8 problem is ``torch._scaled_mm``: layout TN (a weight ``[N, K]`` transposed), batch 1,
scales per tensor, per row of A and column of B, or per block (1x128 of A, 128x128 of B), a
bfloat16 output. ``swiglu`` is the llama FFN, ``silu(A @ B1) * (A @ B3)`` with two B operands
of one layout (a horizontal fusion: one kernel where a scheduler takes it); FP8, two
``scaled_mm`` sharing A and its scale, per tensor or per row (no block scales).
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from mmaplug.analysis.problem import Layout, MatmulProblem
from mmaplug.errors import UsageError
from mmaplug.ir.dtypes import DType
from mmaplug.ir.fusion import Fusion, TensorView
from mmaplug.ir.ops import SCALE_BLOCK

EPILOGUES: Final = ("none", "bias_gelu", "swiglu")
FP8_DTYPES: Final = ("float8_e4m3fn", "float8_e5m2")
DTYPES: Final = ("float16", "bfloat16", *FP8_DTYPES)
#: How an FP8 problem's operands are scaled: one float32 each, one per row of A and column of B,
#: or one per 1x128 block of A and 128x128 block of B.
SCALES: Final = ("tensor", "row", "block")
_FIELDS: Final = ("m", "n", "k", "batch", "dtype", "layout", "epilogue", "scale")


@attrs.frozen(kw_only=True)
class TuneProblem:
    """One corpus entry: ``matmul(A, B)`` of *layout*, optionally ``+ bias`` then GELU, cast,
    or ``silu(A @ B1) * (A @ B3)`` (``swiglu``: two products sharing A), cast; or, for an FP8
    *dtype*, ``scaled_mm`` with *scale* ``tensor``, ``row`` or ``block`` scales.

    :raises UsageError: *scale* is missing on an FP8 problem or given on a 16-bit one, an FP8
        problem is not layout TN, batch 1, or is ``swiglu`` with block scales.
    """

    m: int
    n: int
    k: int
    batch: int = 1
    dtype: str = "float16"
    layout: str = "TN"
    epilogue: str = "none"
    scale: str = ""

    def __attrs_post_init__(self) -> None:
        if not self.is_fp8:
            if self.scale:
                raise UsageError(
                    f"scale={self.scale!r} on a {self.dtype} problem; scales are for "
                    f"{' and '.join(FP8_DTYPES)} only: drop it"
                )
            return
        if self.scale not in SCALES:
            raise UsageError(
                f"scale={self.scale!r} on a {self.dtype} problem; FP8 problems need scale "
                f"{', '.join(map(repr, SCALES))} (per tensor, per row of A and column of B, per "
                "block)"
            )
        if self.epilogue == "swiglu" and self.scale == "block":
            raise UsageError(
                "epilogue 'swiglu' with block scales; an FP8 swiglu problem is scaled per "
                "tensor or per row (no kernel fuses block-scaled products)"
            )
        if (self.layout, self.batch) != ("TN", 1):
            raise UsageError(
                f"a {self.dtype} problem of layout {self.layout}, batch {self.batch}; FP8 problems "
                "are torch._scaled_mm's, layout TN (both operands K-major), batch 1"
            )

    @property
    def is_fp8(self) -> bool:
        """True for ``scaled_mm`` problems (float8_e4m3fn or float8_e5m2 operands)."""
        return self.dtype in FP8_DTYPES

    @property
    def key(self) -> str:
        """The database's problem key: ``bfloat16_TN_none_b1_4096x4096x4096``; an FP8 problem's
        dtype carries its scale, ``float8_e4m3fn-row_TN_none_b1_4096x4096x4096``."""
        dtype = f"{self.dtype}-{self.scale}" if self.scale else self.dtype
        return f"{dtype}_{self.layout}_{self.epilogue}_b{self.batch}_{self.m}x{self.n}x{self.k}"

    @property
    def products(self) -> int:
        """The matmuls of the problem, each M x N x K: two for ``swiglu``, else one."""
        return 2 if self.epilogue == "swiglu" else 1

    @property
    def flops(self) -> float:
        """Multiply-adds counted twice, over every product."""
        return 2.0 * self.products * self.batch * self.m * self.n * self.k

    @property
    def scale_count(self) -> int:
        """The float32 scales of an FP8 problem (each B's with ``swiglu``); 0 for 16-bit."""
        if not self.is_fp8:
            return 0
        shape_a, shape_b = self.scale_shapes
        return math.prod(shape_a) + self.products * math.prod(shape_b)

    @property
    def scale_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The shapes of an FP8 problem's scales of A and of B (by ``scale``)."""
        if self.scale == "row":
            return (self.m, 1), (1, self.n)
        if self.scale == "block":
            kb, nb = -(-self.k // SCALE_BLOCK), -(-self.n // SCALE_BLOCK)
            return (self.m, kb), (kb, nb)
        return (), (1,)

    def as_dict(self) -> dict[str, Any]:
        """Plain fields; ``TuneProblem(**d)`` rebuilds."""
        return attrs.asdict(self)

    def fusion(self) -> Fusion:
        """The fusion this entry describes (operands in its layout, outputs ``[batch, M, N]``;
        ``swiglu``: inputs A, B1, B3).

        FP8: inputs A ``[M, K]``, B ``[K, N]`` (K-major), scale_a float32 ``[]``, ``[M, 1]`` or
        ``[M, ceil(K / 128)]``, scale_b ``[1]``, ``[1, N]`` or ``[ceil(K / 128), ceil(N /
        128)]``, then a bfloat16 bias ``[N]`` when fused (``swiglu``: B3 and its scale_b);
        the output is ``scaled_mm(...)`` in bfloat16, ``cast(gelu(scaled_mm(..., bias,
        float32)))`` or ``cast(silu(scaled_mm(A, B1)) * scaled_mm(A, B3))``.
        """
        from mmaplug.ir.frontend import FusionDefinition

        layout, dtype = Layout(self.layout), DType[self.dtype]
        batch = [self.batch] if self.batch > 1 else []
        outer = list(range(len(batch) + 1, 1, -1))
        with FusionDefinition() as fd:
            a_order = [1, 0] if layout.a_k_inner else [0, 1]
            b_order = [0, 1] if layout.b_k_inner else [1, 0]
            a = fd.define_tensor([*batch, self.m, self.k], dtype, [*outer, *a_order])
            b = fd.define_tensor([*batch, self.k, self.n], dtype, [*outer, *b_order])
            if self.is_fp8:
                fd.add_output(self._scaled_mm(fd, a, b))
                return fd.fusion
            out = fd.ops.matmul(a, b)
            if self.epilogue == "swiglu":
                b3 = fd.define_tensor([*batch, self.k, self.n], dtype, [*outer, *b_order])
                out = fd.ops.mul(fd.ops.silu(out), fd.ops.matmul(a, b3))
            elif self.epilogue == "bias_gelu":
                bias = fd.define_tensor([self.n], dtype)
                shape = [*batch, self.m, self.n]
                out = fd.ops.gelu(
                    fd.ops.add(out, fd.ops.broadcast_in_dim(bias, shape, [len(shape) - 1]))
                )
            fd.add_output(fd.ops.cast(out, dtype))
        return fd.fusion

    def _scaled_mm(self, fd: Any, a: TensorView, b: TensorView) -> TensorView:
        """The bfloat16 output of an FP8 entry, its scales (and bias) defined after A and B."""
        shape_a, shape_b = self.scale_shapes
        scale_a = fd.define_tensor(list(shape_a), DType.float32)
        scale_b = fd.define_tensor(list(shape_b), DType.float32)
        if self.epilogue == "swiglu":
            b3 = fd.define_tensor([self.k, self.n], b.dtype, [0, 1])
            scale_b3 = fd.define_tensor(list(shape_b), DType.float32)
            gate, up = (
                fd.ops.scaled_mm(a, w, scale_a, s, out_dtype=DType.float32)
                for w, s in ((b, scale_b), (b3, scale_b3))
            )
            return fd.ops.cast(fd.ops.mul(fd.ops.silu(gate), up), DType.bfloat16)
        if self.epilogue != "bias_gelu":
            return fd.ops.scaled_mm(a, b, scale_a, scale_b, out_dtype=DType.bfloat16)
        bias = fd.define_tensor([self.n], DType.bfloat16)
        # float32 through the GELU: one rounding, at the end
        out = fd.ops.scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=DType.float32)
        return fd.ops.cast(fd.ops.gelu(out), DType.bfloat16)

    def problem(self) -> MatmulProblem:
        """The ``MatmulProblem`` heuristics see for this entry."""
        from mmaplug.analysis.matmul_analysis import matmul_problem

        return matmul_problem(self.fusion())


def _entry(raw: object, where: str) -> TuneProblem:
    if not isinstance(raw, Mapping):
        raise UsageError(f"{where}: a problem is a table of {', '.join(_FIELDS)}; got {raw!r}")
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        raise UsageError(
            f"{where}: unknown field(s) {', '.join(unknown)}; fields: {', '.join(_FIELDS)}"
        )
    fields = dict(raw)
    for dim in ("m", "n", "k", "batch"):
        value = fields.get(dim, 1 if dim == "batch" else None)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**31:
            raise UsageError(f"{where}: {dim}={value!r}; extents are ints from 1 to 2**31 - 1")
    checks = (
        ("dtype", DTYPES, "float16"),
        ("layout", tuple(x.value for x in Layout), "TN"),
        ("epilogue", EPILOGUES, "none"),
    )
    for name, accepted, default in checks:
        value = fields.setdefault(name, default)
        if value not in accepted:
            raise UsageError(f"{where}: {name}={value!r}; choose from {', '.join(accepted)}")
    if not isinstance(fields.setdefault("scale", ""), str):
        raise UsageError(f"{where}: scale={fields['scale']!r}; choose from {', '.join(SCALES)}")
    try:
        return TuneProblem(**fields)
    except UsageError as error:
        raise UsageError(f"{where}: {error}") from None


def parse(text: str, *, toml: bool, source: str = "corpus") -> list[TuneProblem]:
    """The problems of a corpus document (JSON, or TOML when *toml*)."""
    try:
        doc = tomllib.loads(text) if toml else json.loads(text)
    except (ValueError, RecursionError) as error:  # (the decoders' errors are ValueErrors)
        what = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        raise UsageError(f"{source}: not valid {'TOML' if toml else 'JSON'}: {what}") from None
    entries = doc.get("problems") if isinstance(doc, Mapping) else None
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"{source}: expected a non-empty list 'problems' of problem tables")
    return [_entry(raw, f"{source}: problem {i + 1}") for i, raw in enumerate(entries)]


def shaped(shapes: Iterable[tuple[int, ...]], **fields: Any) -> tuple[TuneProblem, ...]:
    """Problems of *fields* at each of *shapes*: ``(M, N, K)`` or ``(batch, M, N, K)``."""
    return tuple(
        TuneProblem(m=s[-3], n=s[-2], k=s[-1], batch=s[0] if len(s) == 4 else 1, **fields)
        for s in shapes
    )


#: Llama-3 weights as (N, K) of each projection: 8B and 70B, qkv, o, gate+up, down.
LLAMA_WEIGHTS: Final = {
    "8b_qkv": (6144, 4096),
    "8b_o": (4096, 4096),
    "8b_gate_up": (28672, 4096),
    "8b_down": (4096, 14336),
    "70b_qkv": (10240, 8192),
    "70b_o": (8192, 8192),
    "70b_gate_up": (57344, 8192),
    "70b_down": (8192, 28672),
}


def _serving() -> tuple[TuneProblem, ...]:
    w = LLAMA_WEIGHTS
    decode = [(1, *w[name]) for name in w if name != "8b_o"]  # 1x4096x4096 bf16 is in skinny
    for m in (2, 4, 8):
        decode += [(m, *w["8b_gate_up"]), (m, *w["70b_o"])]
    decode += [(16, *w["70b_gate_up"]), (16, *w["8b_down"]), (16, *w["70b_qkv"])]
    decode += [(32, *w["8b_qkv"]), (32, *w["70b_down"]), (64, *w["8b_gate_up"])]
    decode += [(64, *w["70b_o"])]
    skinny = [(96, *w["8b_qkv"]), (192, *w["8b_down"]), (256, *w["70b_o"])]
    skinny += [(384, *w["8b_gate_up"]), (512, *w["70b_qkv"]), (512, *w["8b_o"])]
    deep_k = [(256, 256, 16384), (128, 128, 32768), (64, 512, 28672), (512, 512, 65536)]
    # the llama FFN (gate and up projections, silu, mul; 8B's and 70B's): decode steps, a prefill
    ffn = [(1, 14336, 4096), (4, 14336, 4096), (16, 14336, 4096), (1, 28672, 8192)]
    ffn += [(32, 14336, 4096), (2048, 14336, 4096)]
    return (
        shaped(decode + skinny + deep_k, dtype="bfloat16")
        + shaped([(1, 4096, 4096), (16, 8192, 8192), (2048, 2048, 2048)], dtype="float16")
        + shaped([(3333, 4444, 5632), (1000, 1000, 1000), (8192, 8192, 8192)], dtype="bfloat16")
        + tuple(
            TuneProblem(m=4096, n=4096, k=4096, dtype="bfloat16", layout=layout)
            for layout in ("TT", "NT", "NN")
        )
        + (TuneProblem(m=1, n=4096, k=4096, dtype="bfloat16", layout="NN"),)
        + shaped([(32, 1, 4096, 128), (8, 16, 4096, 4096), (16, 2048, 2048, 128)], dtype="bfloat16")
        + shaped([(4096, 4096, 4096), (1, 14336, 4096)], dtype="bfloat16", epilogue="bias_gelu")
        + shaped([(4096, 4096, 4096)], dtype="float16", epilogue="bias_gelu")
        + shaped(ffn, dtype="bfloat16", epilogue="swiglu")
    )


def _fp8() -> tuple[TuneProblem, ...]:
    w = LLAMA_WEIGHTS
    both = [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 14336, 5120), (4096, *w["8b_gate_up"])]
    both += [(128, 4096, 4096), (16, 4096, 4096), (1000, 1040, 528)]
    rowwise = [(4096, *w[name]) for name in ("8b_qkv", "8b_down", "70b_qkv", "70b_o", "70b_down")]
    rowwise += [(1, 4096, 4096), (64, 4096, 4096), (3000, 5008, 2048)]
    # decode steps and small batches against llama weights (the decode kernel, M <= 16)
    rowwise += [(1, *w["8b_gate_up"]), (1, *w["70b_o"]), (4, *w["8b_down"])]
    rowwise += [(4, *w["70b_qkv"]), (16, *w["70b_gate_up"])]
    ffn = [(1, 14336, 4096), (16, 14336, 4096), (2048, 14336, 4096)]  # 8B's FFN, one fusion
    e4m3 = "float8_e4m3fn"
    return (
        shaped(both, dtype=e4m3, scale="tensor")
        + shaped(both + rowwise, dtype=e4m3, scale="row")
        + shaped([(4096, 4096, 4096)], dtype="float8_e5m2", scale="tensor")
        + shaped([(4096, 4096, 4096)], dtype=e4m3, scale="tensor", epilogue="bias_gelu")
        + shaped([(4096, 4096, 4096)], dtype=e4m3, scale="row", epilogue="bias_gelu")
        + shaped(ffn, dtype=e4m3, scale="tensor", epilogue="swiglu")
        + shaped(ffn, dtype=e4m3, scale="row", epilogue="swiglu")
    )


def _fp8_block() -> tuple[TuneProblem, ...]:
    w = LLAMA_WEIGHTS
    shapes = [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 14336, 5120)]
    shapes += [(4096, *w[name]) for name in ("8b_gate_up", "8b_down", "70b_qkv", "70b_down")]
    shapes += [(128, 4096, 4096), (1000, 1040, 528)]
    return shaped(shapes, dtype="float8_e4m3fn", scale="block") + shaped(
        [(4096, 4096, 4096)], dtype="float8_e4m3fn", scale="block", epilogue="bias_gelu"
    )


# Llama-3 8B / 70B projections at 4096 tokens (qkv, o, gate+up, down), plus bias+GELU MLP shapes
BUILTIN: Final[Mapping[str, tuple[TuneProblem, ...]]] = {
    "llm": shaped(
        [
            (4096, 6144, 4096),
            (4096, 4096, 4096),
            (4096, 28672, 4096),
            (4096, 4096, 14336),
            (4096, 10240, 8192),
            (4096, 8192, 8192),
            (4096, 8192, 28672),
        ],
        dtype="bfloat16",
    )
    + shaped([(2048, 14336, 5120)], dtype="bfloat16", epilogue="bias_gelu"),
    # decode and GEMV-like: few rows against a large weight, or few columns
    "skinny": shaped(
        [
            (1, 4096, 4096),
            (16, 4096, 4096),
            (64, 4096, 4096),
            (128, 14336, 4096),
            (4096, 16, 4096),
            (8192, 64, 8192),
        ],
        dtype="bfloat16",
    ),
    # extents that fill no tile evenly
    "odd": shaped(
        [
            (1000, 1000, 1000),
            (4095, 4097, 4096),
            (3000, 5000, 2048),
            (777, 1111, 4096),
            (1536, 1000, 7168),
        ],
        dtype="float16",
    ),
    # operands whose rows are no 16-byte multiples (rows of 4 and 2 elements; the 68 rows of A
    # and every extent of B in TN): hopper's TMA takes none, so on the H200 these run on ampere;
    # every layout, fp16 and bf16; `mmaplug bench --corpus narrow --graph`
    "narrow": tuple(
        TuneProblem(m=m, n=n, k=k, dtype=dtype, layout=layout)
        for dtype in ("float16", "bfloat16")
        for layout in ("TN", "NT", "NN", "TT")
        for m, n, k in (
            (4100, 4100, 1028),
            (4098, 4098, 1026),
            (1026, 1026, 1026),
            (516, 516, 260),
            (68, 4100, 4100),
        )
    ),
    # attention-like batched products
    "batched": shaped(
        [(8, 2048, 2048, 128), (32, 512, 512, 64), (16, 1024, 128, 1024), (64, 256, 256, 256)],
        dtype="bfloat16",
    ),
    # LLM serving as an H200 runs it (issue 25): decode M = 1..64 against llama-3 8B and 70B
    # weights (qkv, o, gate+up, down), skinny prefill chunks, deep K, squares and odd extents,
    # every layout, batched decode-like products and fused bias+GELU; time it with
    # `mmaplug bench --corpus serving --graph`
    "serving": _serving(),
    # FP8 as torch._scaled_mm runs it (TN, bfloat16 out), per-tensor and per-row scales: squares,
    # llama-3 8B / 70B projections at 4096 tokens, M = 128, decode M = 1..64 (M = 1, 4, 16 also
    # against llama weights: the decode kernel), odd extents, one e5m2, fused bias+GELU;
    # `mmaplug bench --corpus fp8 --graph` times it beside cuBLASLt
    "fp8": _fp8(),
    # FP8 with DeepSeek-V3's block scales (1x128 of A, 128x128 of B): squares, llama-3 8B / 70B
    # projections at 4096 tokens, M = 128 and odd extents; torch has no block-scaled kernel,
    # so `mmaplug bench --corpus fp8_block --graph` times cuBLASLt per tensor beside it
    "fp8_block": _fp8_block(),
}


def load(spec: str) -> list[TuneProblem]:
    """A built-in corpus by name (``llm``, ``skinny``, ``odd``, ``narrow``, ``batched``,
    ``serving``, ``fp8``, ``fp8_block``) or a ``.json`` / ``.toml`` file."""
    if spec in BUILTIN:
        return list(BUILTIN[spec])
    path = Path(spec)
    if path.suffix.lower() not in (".json", ".toml"):
        raise UsageError(
            f"corpus {spec!r} is neither a built-in ({', '.join(BUILTIN)}) nor a "
            ".json or .toml file"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"corpus {spec!r} cannot be read: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise UsageError(f"corpus {spec!r} is not UTF-8 text: {error}") from None
    return parse(text, toml=path.suffix.lower() == ".toml", source=spec)


def load_all(specs: Sequence[str]) -> list[TuneProblem]:
    """Several corpora, each problem once, in order."""
    return list(dict.fromkeys(p for spec in specs for p in load(spec)))
