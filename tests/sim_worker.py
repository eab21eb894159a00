"""A simulator worker: runs the jobs it reads from stdin, one after another, in this process.

Each stdin line is a job, ``[script, *args]``; the script runs as ``__main__`` with that argv and
its directory first on ``sys.path``, as ``python script args`` would. For each the worker prints
one line, ``{"code": exit status, "stdout": what the script printed, "error": traceback or ""}``.
Started by the ``simulate`` fixture (tests/conftest.py) with NUMBA_ENABLE_CUDASIM=1: a job
then costs only its own work, not the 3-4 s of importing Numba and mmaplug that a process of
its own pays first (most of a small simulator case).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import sys
import traceback


def run(job: list[str]) -> dict:
    """Run *job* as its script's ``__main__``; its exit status, output and traceback."""
    sys.argv = list(job)
    sys.path[0] = os.path.dirname(os.path.abspath(job[0]))
    out, code, error = io.StringIO(), 0, ""
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(job[0], run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported to the fixture, which fails the case
        code, error = 1, traceback.format_exc()[-4000:]
    return {"code": code, "stdout": out.getvalue(), "error": error}


if __name__ == "__main__":
    reply = sys.stdout
    for line in sys.stdin:
        print(json.dumps(run(json.loads(line))), file=reply, flush=True)
