"""scripts/phase_probe.py without a GPU: the stamps land in each role of a generated hopper
kernel (alone and in CTA pairs), the stamped kernel still compiles for sm_90a with the clock
reads in it, and the stamps read back as each phase's percentiles."""

from __future__ import annotations

import re
from collections.abc import Callable
from types import ModuleType

import pytest

from mmaplug.plugins.hopper import kernel
from mmaplug.plugins.hopper.config import HopperKernelConfig

ALONE = HopperKernelConfig(cta_tile=(64, 128, 64), warp_tile=(64, 128, 64), stages=6)
PAIRS = HopperKernelConfig(cta_tile=(64, 128, 64), warp_tile=(64, 128, 64), stages=6, cluster_m=2)


@pytest.fixture(scope="module")
def script(load_script: Callable[[str], ModuleType]) -> ModuleType:
    return load_script("phase_probe")


def _slot_lines(src: str, slot: int) -> list[str]:
    mark = re.compile(rf"uint64\(64\) \+ uint64\({slot}[ )]")
    return [line for line in src.splitlines() if mark.search(line)]


@pytest.mark.parametrize("cfg", [ALONE, PAIRS], ids=["alone", "pairs"])
def test_every_phase_is_stamped_once_in_its_role(script: ModuleType, cfg: HopperKernelConfig):
    src = kernel.generate_source(cfg, sim=False)
    stamped = script.stamped(src, 1 << 40)
    producer, consumer = stamped.split("c = wg - 1")
    for slot in (script.FENCED, script.ISSUED):
        assert len(_slot_lines(producer, slot)) == 1 and not _slot_lines(consumer, slot)
    for slot in (script.FULL, script.DRAINED, script.STORED, script.EXIT_NS):
        assert len(_slot_lines(consumer, slot)) == 1 and not _slot_lines(producer, slot)
    # what the kernel computes is untouched: every original line is still there, in order
    kept = iter(stamped.splitlines())
    assert all(any(line == other for other in kept) for line in src.splitlines())


def test_the_stamped_kernel_compiles_with_its_clock_reads(
    script: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    generate = kernel.generate_source
    monkeypatch.setattr(
        kernel, "generate_source", lambda cfg, *, sim: script.stamped(generate(cfg, sim=sim), 1)
    )
    monkeypatch.syspath_prepend(str(script.__file__).rsplit("/", 1)[0])  # (its import)
    ptx = kernel.compile_ptx(ALONE)
    assert ptx.count("%clock64") >= 6 and ptx.count("%globaltimer") == 2
    assert "st.global.u64" in ptx and "wgmma.mma_async" in ptx


def test_variants_drop_or_hoist_the_maps_prefetch(script: ModuleType) -> None:
    """``noprefetch`` drops the maps' prefetches; ``early`` has thread 0 prefetch them first
    thing, before the barriers' initialisation, and nowhere else."""
    src = kernel.generate_source(ALONE, sim=False)
    assert "prefetch_tensormap(" not in script.varied(src, "noprefetch")
    early = script.varied(src, "early").splitlines()
    at = [i for i, line in enumerate(early) if "prefetch_tensormap(tmap_" in line]
    init = next(i for i, line in enumerate(early) if "mbarrier_init(" in line)
    assert len(at) == 2 and max(at) < init
    assert early[at[0] - 3].strip() == "if tid == 0:"


def test_phases_are_cycles_since_each_ctas_entry(script: ModuleType) -> None:
    def row(entry: int, entry_ns: int, full0: int, stored: int, sm: int) -> list[int]:
        r = [0] * script.SLOTS
        r[script.ENTRY], r[script.ENTRY_NS], r[script.SM] = entry, entry_ns, sm
        r[script.FULL], r[script.STORED], r[script.EXIT_NS] = full0, stored, entry_ns + 5000
        return r

    rows = [row(1000 * i, 100 + 10 * i, 1000 * i + 300 + i, 1000 * i + 900, i) for i in range(10)]
    rows.append([0] * script.SLOTS)  # a CTA the grid did not have
    found = script.phases(rows)
    assert found["ctas"] == 10 and found["sms"] == 10
    assert found["entry_ns"] == [0, 45, 90]
    assert found["full0"] == [301, 305, 309] and found["stored"] == [900, 900, 900]
    assert "full1" not in found and found["exit_ns"] == [5000, 5045, 5090]
