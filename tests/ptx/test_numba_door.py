"""PTX tier: the door to Numba's internals (``mmaplug.cuda.numba_internals``). Outside the tested
releases, or with a name it patches gone, builds take Numba's stock pipeline to the same kernel,
and the ``mmaplug.build`` logger says which pipeline builds, once per process."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import textwrap
from collections import Counter
from typing import Any

import pytest

pytestmark = pytest.mark.ptx

numba_cuda = pytest.importorskip("numba.cuda")
from numba.cuda import compiler  # noqa: E402

from mmaplug.cuda import numba_internals, pipeline  # noqa: E402
from mmaplug.plugins.ampere import kernel as ampere  # noqa: E402
from mmaplug.plugins.hopper import kernel as hopper  # noqa: E402
from mmaplug.plugins.hopper.config import HopperKernelConfig  # noqa: E402

SMALL = {
    "ampere": (ampere, ampere.AmpereKernelConfig(cta_tile=(64, 64, 32), warp_tile=(32, 32, 32))),
    "hopper": (hopper, HopperKernelConfig(cta_tile=(64, 64, 64), warp_tile=(64, 64, 64), stages=2)),
}


def _build(plan: str) -> tuple[str, bytes]:
    """The PTX and cubin of the small *plan*'s main kernel (a freshly executed module)."""
    module, config = SMALL[plan]
    kernel = f"{plan}_gemm"
    namespace = module.load_module(config, sim=False)
    dispatcher = namespace[kernel]
    by_value = namespace.get("BY_VALUE", {}).get(kernel)  # hopper's maps
    signature = module.kernel_signatures(config)[kernel]
    cc = (8, 0) if plan == "ampere" else (9, 0)
    text = pipeline.ptx(dispatcher, signature, (*cc, "a") if plan == "hopper" else cc,
                        config.threads, by_value)  # fmt: skip
    image, entry = pipeline.compile_cubin(dispatcher, signature, cc, by_value)
    assert image[:4] == b"\x7fELF" and kernel in entry
    return text, image


def _same_names(ptx: str) -> str:
    """*ptx* with the mangled names' per-compilation version and the shared-array counter made
    equal (they differ between two compilations of one source in a process)."""
    ptx = re.sub(r"B\d+v\d+B", "BvB", ptx)
    seen: dict[str, str] = {}
    return re.sub(r"_cudapy_smem_\d+", lambda m: seen.setdefault(m[0], f"smem{len(seen)}"), ptx)


def _mix(ptx: str) -> Counter[str]:
    """How many of each instruction (opcode with its modifiers) the PTX holds."""
    return Counter(
        line.split()[0]
        for line in ptx.splitlines()
        if line.startswith("\t") and line.split() and line.split()[0][0].isalpha()
    )


def _untested(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on the door finds numba-cuda outside its tested releases (decided afresh)."""
    monkeypatch.setattr(numba_internals, "TESTED", (("numba-cuda", (0, 1), (0, 2)),))
    monkeypatch.setattr(numba_internals, "_door_now", None)


def _pipelines(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The pipelines of each ``compile_cuda`` call from here on."""
    seen: list[list[str]] = []
    inner = compiler.compile_cuda

    def compile_cuda(*args: Any, **kwargs: Any) -> Any:
        result = inner(*args, **kwargs)
        seen.append(list(result.metadata["pipeline_times"]))
        return result

    monkeypatch.setattr(compiler, "compile_cuda", compile_cuda)
    return seen


@pytest.mark.parametrize("plan", sorted(SMALL))
def test_stock_pipeline_builds_the_kernel_the_lean_one_builds(
    plan: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Untested releases: the kernel comes from Numba's own pipeline, and it is the lean one's.

    Ampere's PTX is the same text. Hopper's differs only in register numbering and the order of
    a few independent instructions (the lean pipeline skips SSA reconstruction, so its phis
    come out in another order): the same instructions, as many of each (wgmma included)."""
    assert numba_internals.mode() == numba_internals.LEAN  # the installed releases are tested
    lean_ptx, lean_cubin = _build(plan)
    _untested(monkeypatch)
    seen = _pipelines(monkeypatch)
    with caplog.at_level(logging.INFO, logger="mmaplug.build"):
        stock_ptx, stock_cubin = _build(plan)
    assert numba_internals.mode() == numba_internals.STOCK
    assert seen and all(names == ["cuda"] for names in seen), seen  # Numba's pipeline only
    (record,) = [r for r in caplog.records if r.name == "mmaplug.build"]
    assert record.levelno == logging.WARNING
    assert re.search(r"stock \(numba-cuda 0\.\d+\.\d+ is outside the tested", record.message)
    if plan == "ampere":
        assert _same_names(stock_ptx) == _same_names(lean_ptx)
    else:
        assert _mix(stock_ptx) == _mix(lean_ptx)
        assert stock_ptx.count("wgmma.mma_async") == lean_ptx.count("wgmma.mma_async") > 0
    assert len(stock_cubin) > 1000 and len(lean_cubin) > 1000


MISSING_PASS = textwrap.dedent(
    """
    import json, logging
    from numba.cuda.core import untyped_passes

    del untyped_passes.LiteralUnroll  # as if a numba-cuda release renamed it
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append([record.levelname, record.getMessage()])

    logging.getLogger("mmaplug.build").addHandler(Keep())
    logging.getLogger("mmaplug.build").setLevel(logging.INFO)
    from mmaplug.plugins.ampere.kernel import AmpereKernelConfig, compile_ptx

    config = AmpereKernelConfig(cta_tile=(64, 64, 32), warp_tile=(32, 32, 32))
    ptx = [compile_ptx(config) for _ in range(2)]
    from mmaplug.cuda import numba_internals
    print(json.dumps({"mode": numba_internals.mode(), "records": records,
                      "mma": [p.count("mma.sync.aligned.m16n8k16") for p in ptx]}))
    """
)


def test_a_missing_pass_builds_through_numba_with_one_log_line() -> None:
    """A pass the lean pipeline leaves out, gone from numba-cuda: no AttributeError at import
    or build; kernels build through Numba's pipeline, and the log says so once."""
    done = subprocess.run(
        [sys.executable, "-c", MISSING_PASS], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["mode"] == numba_internals.STOCK
    ((level, message),) = report["records"]
    assert level == "WARNING"
    assert "numba.cuda.core.untyped_passes.LiteralUnroll" in message, message
    assert report["mma"][0] == report["mma"][1] > 0


@pytest.mark.parametrize("stock", [False, True], ids=["lean", "stock"])
def test_the_log_names_the_pipeline_once(
    stock: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The first build of a process says which pipeline builds (INFO: lean, with the releases;
    WARNING: stock, with why and what the lean one needs); later builds say nothing."""
    if stock:
        _untested(monkeypatch)
    else:
        monkeypatch.setattr(numba_internals, "_door_now", None)
    with caplog.at_level(logging.INFO, logger="mmaplug.build"):
        for _ in range(2):
            ampere.compile_ptx(SMALL["ampere"][1])
    records = [r for r in caplog.records if r.name == "mmaplug.build"]
    assert len(records) == 1, [r.message for r in records]
    if stock:
        assert records[0].message.startswith("Numba pipeline: stock (")
        assert "numba-cuda>=0.1,<0.2" in records[0].message  # what the lean pipeline needs
    else:
        assert records[0].levelno == logging.INFO
        assert re.match(r"Numba pipeline: lean \(numba-cuda 0\.30\.\d+, numba ", records[0].message)


def test_a_fault_in_the_lean_machinery_falls_back_to_numbas_step(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An internal the lean lowering reads, changed under it: that build uses Numba's own scan
    (the same PTX), logged once, never a raw AttributeError."""

    def changed(*args: Any) -> set[str]:
        raise AttributeError("'FunctionIR' object has no attribute 'blocks'")

    monkeypatch.setattr(numba_internals, "_singly_assigned", changed)
    monkeypatch.setattr(numba_internals, "_faults", set())
    with caplog.at_level(logging.INFO, logger="mmaplug.build"):
        faulty = [ampere.compile_ptx(SMALL["ampere"][1]) for _ in range(2)]
    monkeypatch.undo()
    assert _same_names(faulty[0]) == _same_names(ampere.compile_ptx(SMALL["ampere"][1]))
    faults = [r.message for r in caplog.records if "variable scan failed" in r.message]
    assert len(faults) == 1 and "AttributeError" in faults[0], faults
