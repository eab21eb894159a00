"""Correctness harness for the Ampere kernels: random problems, float64 reference, comparison.

Shared by the PTX, simulator and GPU tests and ``scripts/device_ampere.py``, which put tests/ on
``sys.path``. Builds operands in every layout (optionally with padded leading dimensions), the
standard epilogues, and checks the outputs (poisoned with NaN before the launch) against a NumPy
float64 reference.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np

from mmaplug.analysis.epilogue import EpilogueInput, EpilogueOutput, EpilogueProgram, Instr
from mmaplug.ir.dtypes import DType
from mmaplug.plugins.ampere.kernel import AmpereKernelConfig

EPILOGUES = ("none", "bias_gelu", "alpha_beta", "relu_aux")
_NAN_BITS = {DType.float16: 0x7E00, DType.bfloat16: 0x7FC0}


def epilogue_program(kind: str, dtype: DType) -> EpilogueProgram:
    """One of the standard epilogues, with outputs (and inputs) of *dtype*."""
    if kind == "none":
        return EpilogueProgram(
            instrs=(Instr(op="acc"),), outputs=(EpilogueOutput(name="d", src=0, dtype=dtype),)
        )
    if kind == "bias_gelu":
        return EpilogueProgram(
            inputs=(EpilogueInput(name="bias", dtype=dtype, axes=("n",)),),
            instrs=(
                Instr(op="acc"),
                Instr(op="input", arg=0),
                Instr(op="add", srcs=(0, 1)),
                Instr(op="gelu", srcs=(2,)),
            ),
            outputs=(EpilogueOutput(name="d", src=3, dtype=dtype),),
        )
    if kind == "alpha_beta":
        return EpilogueProgram(
            inputs=(EpilogueInput(name="c", dtype=dtype, axes=("batch", "m", "n")),),
            scalars=("alpha", "beta"),
            instrs=(
                Instr(op="acc"),
                Instr(op="scalar", arg=0),
                Instr(op="mul", srcs=(1, 0)),
                Instr(op="input", arg=0),
                Instr(op="scalar", arg=1),
                Instr(op="mul", srcs=(4, 3)),
                Instr(op="add", srcs=(2, 5)),
            ),
            outputs=(EpilogueOutput(name="d", src=6, dtype=dtype),),
        )
    if kind == "relu_aux":
        return EpilogueProgram(
            instrs=(Instr(op="acc"), Instr(op="relu", srcs=(0,))),
            outputs=(
                EpilogueOutput(name="d", src=1, dtype=dtype),
                EpilogueOutput(name="aux", src=0, dtype=DType.float32),
            ),
        )
    raise ValueError(f"unknown epilogue kind {kind!r}")


def _round(x: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype in (DType.float16, DType.bfloat16):
        return x.astype(dtype.numpy).astype(np.float64)
    if dtype is DType.float32:
        return x.astype(np.float32).astype(np.float64)
    return x


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def reference(
    prog: EpilogueProgram, acc: np.ndarray, inputs: list[np.ndarray], scalars: list[float]
) -> list[np.ndarray]:
    """Evaluate *prog* in float64 on ``acc [batch, m, n]``; inputs broadcastable to it."""
    vals: list[Any] = []  # arrays, or numpy scalars for scalar inputs and constants
    v: Any
    for ins in prog.instrs:
        s = [vals[i] for i in ins.srcs]
        op = ins.op
        if op == "acc":
            v = acc
        elif op == "input":
            v = inputs[int(ins.arg)]
        elif op == "scalar":
            v = np.float64(np.float32(scalars[int(ins.arg)]))
        elif op == "const":
            v = np.float64(np.float32(ins.arg))
        elif op == "cast":
            v = _round(s[0], ins.arg)
        elif op == "neg":
            v = -s[0]
        elif op == "relu":
            v = np.maximum(s[0], 0)
        elif op == "gelu":
            v = 0.5 * s[0] * (1 + _erf(s[0] / math.sqrt(2)))
        elif op == "silu":
            v = s[0] / (1 + np.exp(-s[0]))
        elif op == "sigmoid":
            v = 1 / (1 + np.exp(-s[0]))
        elif op == "sin":
            v = np.sin(s[0])
        elif op == "add":
            v = s[0] + s[1]
        elif op == "sub":
            v = s[0] - s[1]
        elif op == "mul":
            v = s[0] * s[1]
        else:
            raise ValueError(op)
        vals.append(np.broadcast_to(v, acc.shape) if np.ndim(v) else v)
    return [np.broadcast_to(vals[o.src], acc.shape) for o in prog.outputs]


def _bits(x: np.ndarray, dtype: DType) -> np.ndarray:
    """Storage of float array *x* in *dtype*: uint16 bits for 16-bit types, float32 otherwise."""
    if dtype in (DType.float16, DType.bfloat16):
        return np.ascontiguousarray(x.astype(dtype.numpy)).view(np.uint16)
    return np.ascontiguousarray(x.astype(np.float32))


def _from_bits(x: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype in (DType.float16, DType.bfloat16):
        return x.view(dtype.numpy).astype(np.float64)
    return x.astype(np.float64)


def _vec_for(*values: int) -> int:
    for v in (8, 4, 2):
        if all(x % v == 0 for x in values):
            return v
    return 1


def _operand(rng, batch, rows, k, k_inner, pad, shared_batch, dtype):
    """Random operand [batch, rows, k] quantized to dtype; storage (flat bits, sb, s_outer)."""
    nb = 1 if shared_batch else batch
    logical = rng.uniform(-1, 1, size=(nb, rows, k))
    logical = _round(logical, dtype)
    if k_inner:
        ld = k + pad
        store = np.zeros((nb, rows, ld))
        store[:, :, :k] = logical
        sb = rows * ld
    else:
        ld = rows + pad
        store = np.zeros((nb, k, ld))
        store[:, :, :rows] = logical.transpose(0, 2, 1)
        sb = k * ld
    flat = _bits(store.reshape(-1), dtype)
    full = np.broadcast_to(logical, (batch, rows, k))
    return flat, (0 if shared_batch else sb), ld, full


@attrs.frozen(kw_only=True)
class Case:
    dtype: DType = DType.float16
    a_k_inner: bool = True
    b_k_inner: bool = True
    m: int = 64
    n: int = 64
    k: int = 64
    batch: int = 1
    epilogue: str = "none"
    pad: int = 0
    shared_b: bool = False
    seed: int = 0


def config_for(case: Case, **overrides: Any) -> AmpereKernelConfig:
    """A config for *case* (vec widths from the case's strides), with *overrides* applied."""
    a_ld = (case.k if case.a_k_inner else case.m) + case.pad
    b_ld = (case.k if case.b_k_inner else case.n) + case.pad
    fields: dict[str, Any] = dict(
        operand_dtype=case.dtype,
        a_k_inner=case.a_k_inner,
        b_k_inner=case.b_k_inner,
        vec_a=_vec_for(a_ld),
        vec_b=_vec_for(b_ld),
        epilogue=epilogue_program(case.epilogue, case.dtype),
    )
    fields.update(overrides)
    return AmpereKernelConfig(**fields)


def run_case(case: Case, config: AmpereKernelConfig, *, stream: Any = 0) -> dict[str, Any]:
    """Run *config* on *case*; return ``{"ok", "max_err", "tol_ratio", "nan", ...}``."""
    from numba import cuda

    from mmaplug.plugins.ampere.launch import run_gemm

    rng = np.random.default_rng(case.seed)
    dt = case.dtype
    bsz, m, n, k = case.batch, case.m, case.n, case.k
    a_flat, a_sb, a_ld, a_full = _operand(rng, bsz, m, k, case.a_k_inner, case.pad, False, dt)
    b_flat, b_sb, b_ld, b_full = _operand(
        rng, bsz, n, k, case.b_k_inner, case.pad, case.shared_b, dt
    )
    acc = np.einsum("bik,bjk->bij", a_full, b_full)
    prog = config.epilogue
    inputs_host, inputs_dev, scalars = [], [], []
    for inp in prog.inputs:
        axes = tuple(str(ax) for ax in inp.axes)
        shape = (bsz if "batch" in axes else 1, m if "m" in axes else 1, n if "n" in axes else 1)
        x = _round(rng.uniform(-1, 1, size=shape), inp.dtype)
        inputs_host.append(x)
        sb = shape[1] * shape[2] if shape[0] > 1 else 0
        sm = shape[2] if shape[1] > 1 else 0
        sn = 1 if shape[2] > 1 else 0
        inputs_dev.append((cuda.to_device(_bits(x.reshape(-1), inp.dtype)), sb, sm, sn))
    scalars = [0.75, -1.25][: len(prog.scalars)]
    outs_dev = []
    for out in prog.outputs:
        if out.dtype in _NAN_BITS:
            host = np.full(bsz * m * n, _NAN_BITS[out.dtype], dtype=np.uint16)
        else:
            host = np.full(bsz * m * n, np.nan, dtype=np.float32)
        outs_dev.append((cuda.to_device(host), m * n, n))
    run_gemm(
        config,
        (cuda.to_device(a_flat), a_sb, a_ld),
        (cuda.to_device(b_flat), b_sb, b_ld),
        inputs_dev,
        scalars,
        outs_dev,
        m=m,
        n=n,
        k=k,
        batch=bsz,
        stream=stream,
    )
    refs = reference(prog, acc, inputs_host, scalars)
    result: dict[str, Any] = {"ok": True, "max_err": 0.0, "tol_ratio": 0.0, "nan": 0}
    for out, ref, (dev, _, _) in zip(prog.outputs, refs, outs_dev, strict=True):
        got = _from_bits(dev.copy_to_host(), out.dtype).reshape(bsz, m, n)
        want = _round(np.asarray(ref, dtype=np.float64), out.dtype)
        rtol = {DType.float16: 2.0**-9, DType.bfloat16: 2.0**-6}.get(out.dtype, 2.0**-18)
        atol = 1e-5 * math.sqrt(k) + 2.0**-14
        err = np.abs(got - want)
        tol = rtol * np.abs(want) + atol
        nan = int(np.isnan(got).sum())
        ratio = float(np.nanmax(err / tol)) if err.size else 0.0
        result["nan"] += nan
        result["max_err"] = max(result["max_err"], float(np.nanmax(err)))
        result["tol_ratio"] = max(result["tol_ratio"], ratio)
        if nan or ratio > 1.0:
            result["ok"] = False
            bad = np.argwhere(~(err <= tol))
            result.setdefault("first_bad", [])
            result["first_bad"].append([out.name, bad[:4].tolist()])
    return result
