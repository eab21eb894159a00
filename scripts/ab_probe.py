"""The default plan of whichever mmaplug is on the path against torch, on the issue-8 shapes:
one JSON line per problem (BENCHMARKS.md runs 58-60). To A/B two versions, install the other
one beside (``pip install --target /tmp/old <checkout>``) and alternate fresh processes::

    PYTHONPATH=... MMAPLUG_CACHE_DIR=/tmp/c_new python scripts/ab_probe.py new
    PYTHONPATH=/tmp/old:... MMAPLUG_CACHE_DIR=/tmp/c_old python scripts/ab_probe.py old

Each row is ``probes.probe_variants`` of the default plan (3 interleaved rounds): the
kernel checked against torch in float64, then timed beside ``F.linear`` or eager
``F.gelu(F.linear(...))``. Both installs need that function (this repository from the commit
that added it on; runs 58-60 ran its predecessor, the same measurement inlined).
"""

from __future__ import annotations

import json
import sys
import warnings

from probes import probe_variants

import mmaplug as mp

PROBLEMS = (  # m, n, k, dtype, with bias + GELU
    (16384, 1024, 512, "float16", False), (16384, 1024, 512, "bfloat16", False),
    (4096, 4096, 4096, "float16", False), (4096, 4096, 4096, "bfloat16", False),
    (4096, 4096, 4096, "float16", True), (4096, 4096, 4096, "bfloat16", True),
    (2048, 14336, 5120, "bfloat16", False), (2048, 14336, 5120, "bfloat16", True),
    (128, 4096, 4096, "float16", False), (8192, 8192, 8192, "bfloat16", False),
)  # fmt: skip


def main() -> None:
    warnings.simplefilter("ignore")
    tag = f"{sys.argv[1] if len(sys.argv) > 1 else 'ours'}:{mp.__file__}"
    for problem in PROBLEMS:
        row = probe_variants(*problem, (("default", None),), rounds=3)
        print(json.dumps({"tag": tag, **row}), flush=True)


if __name__ == "__main__":
    main()
