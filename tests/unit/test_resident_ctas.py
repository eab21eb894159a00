"""``resident_ctas``: how many CTAs of a kernel's resources one SM holds at once."""

from __future__ import annotations

import attrs
import pytest

from mmaplug.planning.device import get_device
from mmaplug.planning.scheduler import Resources, resident_ctas

H200 = get_device("h200")


@pytest.mark.parametrize(
    ("resources", "ctas"),
    [
        (Resources(0, 32), 32),  # the SM's CTA limit
        (Resources(0, 256), 8),  # threads: 2048 / 256
        (Resources(100 * 1024, 128), 2),  # shared memory: 228 KiB / 100 KiB
        (Resources(1024, 128, 118), 4),  # registers: 120 a thread, 17 warps, 4 CTAs of 4
        (Resources(1024, 64, 120), 8),
        (Resources(1024, 128, 158), 3),  # 160 a thread: 12 warps
        (Resources(1024, 256, 206), 1),  # 208: 9 warps, one CTA of 8
        (Resources(0, 48, 128), 8),  # a partial warp takes a whole one: 16 warps, 8 CTAs of 2
        (Resources(300 * 1024, 128), 0),  # does not fit
    ],
)
def test_bounds(resources: Resources, ctas: int) -> None:
    assert resident_ctas(resources, H200) == ctas


def test_reads_the_device() -> None:
    """The bounds are the device's: an SM of 1,536 threads and 16 CTAs holds fewer."""
    small = attrs.evolve(H200, threads_per_sm=1536, ctas_per_sm=16)
    assert resident_ctas(Resources(0, 512), small) == 3
    assert resident_ctas(Resources(0, 32), small) == 16
