"""The hopper default plan beside the same plan with CTA pairs (``cluster_dims=(2, 1)``) and
cuBLAS, interleaved in one process: BENCHMARKS.md runs 34-35.

On a GPU machine (after the README's install): ``python scripts/cluster_probe.py``; one JSON
line per problem with each variant's error against torch in float64, kernel name, median ms and
ratio to torch (``F.linear``, or ``F.gelu(F.linear(x, w, b))`` for the fused rows).
``--variant LABEL=JSON`` replaces the variants with MatmulParams overrides of your own
(repeatable; ``default`` is always first); ``--only 4096x4096x4096`` keeps the shapes whose
name starts so (repeatable).
"""

from __future__ import annotations

import json
import warnings

from probes import probe_arguments, probe_variants, shape_wanted

SHAPES = (
    (4096, 4096, 4096, "float16", False), (4096, 4096, 4096, "float16", True),
    (4096, 4096, 4096, "bfloat16", False), (8192, 8192, 8192, "float16", False),
    (8192, 8192, 8192, "bfloat16", False), (4096, 4096, 16384, "float16", False),
    (8192, 8192, 4096, "float16", False), (16384, 1024, 512, "float16", False),
    (16384, 1024, 512, "bfloat16", False), (2048, 14336, 5120, "bfloat16", False),
    (2048, 14336, 5120, "bfloat16", True), (128, 4096, 4096, "float16", False),
)  # fmt: skip
VARIANTS = (("default", None), ("c2", {"cluster_dims": (2, 1)}))


def main() -> None:
    args = probe_arguments(__doc__.split("\n\n")[0])
    variants = (("default", None), *args.variants) if args.variants else VARIANTS
    warnings.simplefilter("ignore")
    for shape in SHAPES:
        if not shape_wanted(*shape[:3], args.only):
            continue
        try:
            print(json.dumps(probe_variants(*shape, variants)), flush=True)
        except Exception as exc:  # a variant limits refuse: say so and go on
            print(json.dumps({"shape": shape, "error": f"{type(exc).__name__}: {exc}"}), flush=True)


if __name__ == "__main__":
    main()
