"""Where each kernel's warps wait, by SASS instruction: ncu's source page summed per kernel
(BENCHMARKS.md run 226). A kernel-wide stall ratio averages over every warp, idle ones too;
the source page's samples say which instruction each warp sat on.

On the device machine::

    ncu --profile-from-start off --clock-control none --set full -o rep \\
        python scripts/ncu_probe.py 4096x4096x4096/float8_e4m3fn-row
    ncu -i rep.ncu-rep --page source --csv --print-source sass > sass.csv
    python scripts/ncu_stalls.py sass.csv            # every kernel; --top N, --kernel SUBSTRING

Per kernel: its warp samples, the ``--top`` instructions by samples with their three largest
stall reasons, and the samples by how often an instruction ran: code run once a CTA, once a
tile and once a stage falls into separate groups, so the main loop, the epilogue and idle
warps read apart.
"""

from __future__ import annotations

import argparse
import collections
import csv
import sys
from collections.abc import Iterable, Iterator
from typing import NamedTuple

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


class Line(NamedTuple):
    address: int
    sass: str
    samples: int
    executed: int
    stalls: dict[str, int]


class Kernel(NamedTuple):
    name: str
    lines: list[Line]


def kernels(rows: Iterable[list[str]]) -> Iterator[Kernel]:
    """The kernels of a source-page CSV: a ``"Kernel Name", name`` row, the header, its lines."""
    name, header, lines = None, None, []
    for row in rows:
        if row[:1] == ["Kernel Name"]:
            if name is not None:
                yield Kernel(name, lines)
            name, header, lines = row[1], None, []
        elif name is not None and header is None:
            header = {field: i for i, field in enumerate(row)}
        elif name is not None and header is not None and row:
            lines.append(_line(row, header))
    if name is not None:
        yield Kernel(name, lines)


def _line(row: list[str], header: dict[str, int]) -> Line:
    def number(field: str) -> int:
        return int(row[header[field]] or 0) if field in header else 0

    stalls = {
        field.removeprefix("stall_"): number(field)
        for field in header
        if field.startswith("stall_") and not field.endswith("(Not Issued)")
    }
    return Line(
        int(row[header["Address"]], 16),
        row[header["Source"]].strip(),
        number(SAMPLES),
        number(EXECUTED),
        stalls,
    )


def summary(kernel: Kernel, top: int) -> str:
    """The kernel's samples, its ``top`` instructions and its samples by execution count."""
    total = sum(line.samples for line in kernel.lines)
    out = [f"== {kernel.name[:100]}: {total} samples, {len(kernel.lines)} instructions"]
    for line in sorted(kernel.lines, key=lambda line: -line.samples)[:top]:
        reasons = sorted(line.stalls.items(), key=lambda kv: -kv[1])[:3]
        why = " ".join(f"{reason} {n}" for reason, n in reasons if n)
        out.append(
            f"  {line.address & 0xFFFFF:05x} {line.samples:6d} ran {line.executed:8d}  "
            f"{line.sass[:56]:56s} {why}"
        )
    by_count: dict[int, list[int]] = collections.defaultdict(lambda: [0, 0])
    for line in kernel.lines:
        by_count[line.executed][0] += line.samples
        by_count[line.executed][1] += 1
    out.append("  by times run: samples (instructions)")
    ranked = sorted(by_count.items(), key=lambda kv: -kv[1][0])
    out += [f"    {count:9d}: {s:6d} ({n})" for count, (s, n) in ranked[:top] if s]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", help="ncu -i REPORT --page source --csv --print-source sass")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--kernel", default="", help="only kernels whose name holds this")
    args = parser.parse_args(argv)
    with open(args.csv, newline="") as f:
        for kernel in kernels(csv.reader(f)):
            if args.kernel in kernel.name:
                print(summary(kernel, args.top))


if __name__ == "__main__":
    main(sys.argv[1:])
