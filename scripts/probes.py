"""What the device probe scripts share (``cluster_probe.py``, ``epilogue_probe.py``,
``ab_probe.py``, ...): their command line, their shape filter, a variant's check and timing beside
torch, and where results go (``$OUT``). Scripts import it as ``from probes import ...`` (they run
as ``python scripts/NAME.py``); the tests load it from this folder.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from mmaplug.cli.bench import linear_fusion
from mmaplug.ir.dtypes import DType
from mmaplug.tune.measure import interleaved_ms, rel_error


def save_to_out(name: str, data: Any) -> None:
    """Write *data* as JSON to ``$OUT/name`` when ``$OUT`` is set (the folder a device run's
    files come back from); values JSON cannot hold are written as their ``str``."""
    import json
    import os

    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], name), "w") as fh:
            json.dump(data, fh, indent=1, default=str)


def probe_arguments(description: str, argv: Sequence[str] | None = None) -> Any:
    """The command line of the variant probes (``scripts/cluster_probe.py``,
    ``scripts/epilogue_probe.py``): ``--variant LABEL=JSON`` (repeatable; MatmulParams
    overrides, parsed into ``args.variants`` as (label, dict) pairs) and ``--only MxNxK``
    (repeatable; shape-name prefixes, see :func:`shape_wanted`)."""
    import argparse
    import json

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--variant", action="append", default=[], metavar="LABEL=JSON")
    parser.add_argument("--only", action="append", default=[], metavar="MxNxK")
    args = parser.parse_args(argv)
    args.variants = [
        (label, json.loads(text)) for label, text in (v.split("=", 1) for v in args.variant)
    ]
    return args


def shape_wanted(m: int, n: int, k: int, only: Sequence[str]) -> bool:
    """Whether ``MxNxK`` starts with one of the *only* prefixes (every shape without any)."""
    return not only or any(f"{m}x{n}x{k}".startswith(o) for o in only)


def probe_variants(
    m: int,
    n: int,
    k: int,
    name: str,
    fused: bool,
    variants: Sequence[tuple[str, dict[str, object] | None]],
    rounds: int = 2,
) -> dict[str, object]:
    """One :func:`linear_fusion` problem in dtype *name* for the probe scripts: each variant's
    plan (a label and MatmulParams overrides, None for the default) checked against torch in
    float64, then all timed in *rounds* interleaved rounds beside torch (``F.linear``, or
    ``F.gelu(F.linear(x, w, b))`` when *fused*). The row holds ``<label>_err``, ``_kernel``,
    ``_ms`` and ``_ratio`` (torch's time over ours) per variant, and ``torch_ms``."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    from mmaplug.runtime.compile import compile as compile_fusion

    dtype, tdtype = DType[name], getattr(torch, name)
    x = torch.randn(m, k, device="cuda", dtype=tdtype)
    w = torch.randn(n, k, device="cuda", dtype=tdtype) / 64
    bias = torch.randn(n, device="cuda", dtype=tdtype)
    inputs = [x, w, bias] if fused else [x, w]

    def reference() -> Any:
        return F.gelu(F.linear(x, w, bias)) if fused else F.linear(x, w)

    ref = reference().double()
    row: dict[str, object] = {"shape": f"{m}x{n}x{k}", "dtype": name, "fused": fused}
    fns: dict[str, Callable[[], object]] = {"torch": reference}
    for label, overrides in variants:
        compiled = compile_fusion(linear_fusion(m, n, k, dtype, fused), overrides=overrides)
        row[f"{label}_err"] = rel_error(compiled.execute(inputs)[0], ref)
        row[f"{label}_kernel"] = compiled.kernel_name
        fns[label] = functools.partial(compiled.execute, inputs)
    times = interleaved_ms(fns, rounds, reps=20, inner=10)
    torch_ms = statistics.median(times["torch"])
    row["torch_ms"] = round(torch_ms, 4)
    for label, _ in variants:
        ms = statistics.median(times[label])
        row[f"{label}_ms"], row[f"{label}_ratio"] = round(ms, 4), round(torch_ms / ms, 3)
    return row
