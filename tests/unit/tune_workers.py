"""Worker functions for the tuning runner's tests: they really crash, hang or raise."""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any


def behave(job: dict[str, Any]) -> dict[str, Any]:
    """Do what ``job["do"]`` says: answer, exit, segfault, hang or raise."""
    do = job["do"]
    if do == "exit":
        os._exit(3)
    if do == "segfault":
        ctypes.string_at(0)
    if do == "hang":
        time.sleep(600)
    if do == "raise":
        raise ValueError("candidate refused")
    return {"status": "ok", "pid": os.getpid(), "gpu": os.environ.get("CUDA_VISIBLE_DEVICES")}


def write_rows(path: str, writer: int, count: int) -> None:
    """Record *count* rows into the tuning database at *path* (one writer process)."""
    from mmaplug.tune import db

    conn = db.connect(path)
    for i in range(count):
        db.record(conn, row(f"w{writer}_p{i}", time_ms=1.0 + i))
    conn.close()


def row(key: str, *, params_name: str = "cand", time_ms: float | None = 1.0, **extra: Any) -> dict:
    """A database row of a bfloat16 TN problem *key* (extents 4096 unless given)."""
    base = {
        "problem_key": key, "m": 4096, "n": 4096, "k": 4096, "batch": 1, "dtype": "bfloat16",
        "layout": "TN", "epilogue": "none", "device": "h200", "scheduler": "hopper",
        "params_name": params_name, "params": {}, "plugins": [], "versions": {"mmaplug": "t"},
        "time_ms": time_ms, "tflops": None if time_ms is None else 137.4 / time_ms,
        "status": "ok" if time_ms is not None else "crash",
    }  # fmt: skip
    base.update(extra)
    return base


def fake_build(job: dict[str, Any]) -> dict[str, Any]:
    """A build that fails for params named ``bad`` and succeeds otherwise (no compiler)."""
    if job["params_name"] == "bad":
        return {"status": "error", "error": "ValueError: no such tile"}
    return {"status": "ok", "kernel": job["build_key"]}


def fake_measure(job: dict[str, Any]) -> dict[str, Any]:
    """A timing of ``job["ms"]`` milliseconds (default 0.8; no GPU)."""
    ms = job.get("ms", 0.8)
    return {"status": "ok", "time_ms": ms, "tflops": 1.0, "worker": "test:1/gpu0"}
