"""Host time of a cached ``CompiledFusion.execute`` beside torch's own, in one process.

For a 2-input fusion (``x @ w.T``) and a 3-input one (``gelu(x @ w.T + b)``) on each scheduler
asked for, the script times single calls with ``time.perf_counter`` and no synchronisation
(blocks of ``--block`` calls, synchronised between blocks so the launch queue never fills) and
prints medians and p10/p90 next to ``torch.matmul`` / ``F.linear + gelu`` timed the same way,
then a breakdown of one call's pieces and, with ``--profile``, cProfile's top entries.

    python scripts/host_overhead.py                      # the local GPU's default scheduler
    python scripts/host_overhead.py --scheduler both --profile
    python scripts/host_overhead.py --symbolic           # M = -1: a fusion planned per shape
Targets (issue 9): <= 12 us with 2 inputs, <= 15 us with 3. ``--strict`` exits 1 when missed.
Without a GPU, ``scripts/host_overhead_stub.py`` times mmaplug's own part of a call.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
from collections.abc import Callable
from typing import Any

import torch

import mmaplug as mp
from mmaplug.cli.bench import linear_fusion
from mmaplug.cuda.frameworks import probe_all
from mmaplug.cuda.streams import is_capturing
from mmaplug.tune.measure import host_call_us, rel_error, sample_summary

TARGET_US = {2: 12.0, 3: 15.0}


def breakdown(compiled: Any, tensors: list[Any], reps: int, block: int) -> dict[str, float]:
    """Median host time of the pieces of one cached call (the latest shape class's launch)."""
    target = getattr(compiled, "latest", compiled)  # a symbolic fusion: its shape class's
    bound = next(iter(getattr(target, "_bound", {}).values()), None)
    if bound is None:
        return {}
    outs = [new() for new in bound.allocators]
    addresses = [t.data_ptr() for t in tensors] + [o.data_ptr() for o in outs]
    if bound.workspace:
        addresses.append(bound.scratch().data_ptr())
    stream = bound.stream()
    runs = getattr(bound.launch, "_runs", ())
    maps = getattr(bound.launch, "_maps", None)
    positions = target._tensor_positions
    shape, dtype, index = tuple(outs[0].shape), outs[0].dtype, outs[0].get_device()
    strides = tuple(outs[0].stride())
    pieces = {
        "probe_all (every input: key and addresses)": lambda: probe_all(tensors, positions),
        "allocate outputs": lambda: [new() for new in bound.allocators],
        "read current stream": bound.stream,
        "is_capturing(current stream)": lambda: is_capturing(stream),
        "bound launch (patch + driver launch)": lambda: bound.launch(addresses, (), stream),
        "driver launch alone (execute's: cuLaunchKernelEx, CUfunction)": lambda: [
            run(stream) for run in runs
        ],
        "execute(stream=<current>)": lambda: compiled.execute(tensors, stream=stream),
        "torch.empty alone": lambda: torch.empty(outs[0].shape, dtype=outs[0].dtype, device="cuda"),
        "torch.empty(device=<int>)": lambda: torch.empty(shape, dtype=dtype, device=index),
        "torch.empty_strided": lambda: torch.empty_strided(
            shape, strides, dtype=dtype, device=index
        ),
    }
    first = next(iter(getattr(bound.launch, "launches", ())), None)
    if first is not None and hasattr(first, "geometry"):
        pieces.update(handle_launches(first, stream))
    if maps is not None:  # hopper: the tensor maps of (A, B), looked up every call
        pieces["tensor maps lookup (hopper)"] = lambda: maps.get(addresses[0], addresses[1], stream)
    return {name: statistics.median(host_call_us(fn, reps, block)) for name, fn in pieces.items()}


def handle_launches(launch: Any, stream: int) -> dict[str, Callable[[], Any]]:
    """The bound launch's first kernel launched other ways than execute's (``cuLaunchKernelEx``
    of the current context's ``CUfunction``): with the context-independent ``CUkernel`` handle
    and, without clusters, through ``cuLaunchKernel`` (the launch execute made before: the
    ``CUkernel`` and 11 arguments): what resolving a ``CUkernel`` and each entry point cost."""
    from cuda.bindings import driver as cb

    (grid, block, smem, cluster), params = launch.geometry, launch.params.address
    kernel = cb.CUfunction(launch.kernel)
    err, function = cb.cuKernelGetFunction(cb.CUkernel(launch.kernel))
    if err:
        raise RuntimeError(f"cuKernelGetFunction: {err}")
    config = cb.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes, config.hStream = smem, cb.CUstream(stream)
    if cluster > 1:
        attr = cb.CUlaunchAttribute()
        attr.id = cb.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster, 1, 1
        config.attrs, config.numAttrs = [attr], 1
    pieces = {"cuLaunchKernelEx, CUkernel": lambda: cb.cuLaunchKernelEx(config, kernel, params, 0)}
    if cluster == 1:
        for name, handle in (("CUkernel (the launch before)", kernel), ("CUfunction", function)):
            pieces[f"cuLaunchKernel, {name}"] = lambda handle=handle: cb.cuLaunchKernel(
                handle, *grid, *block, smem, stream, params, 0
            )
    return pieces


def run(args: argparse.Namespace, scheduler: str, inputs: int) -> dict[str, Any]:
    block = ("hopper",) if scheduler == "ampere" else ()
    pm = mp.make_plugin_manager(block=block) if block else None
    m = -1 if args.symbolic else args.m
    compiled = mp.compile(linear_fusion(m, args.n, args.k, mp.float16, inputs == 3), pm=pm)
    gen = torch.Generator(device="cuda").manual_seed(0)
    shapes = [(args.m, args.k), (args.n, args.k), (args.n,)][:inputs]
    tensors = [torch.randn(s, device="cuda", dtype=torch.float16, generator=gen) for s in shapes]
    out = compiled.execute(tensors)[0]
    ref = tensors[0].double() @ tensors[1].double().T
    if inputs == 3:
        ref = torch.nn.functional.gelu(ref + tensors[2].double())
    err = rel_error(out, ref)
    ours = sample_summary(host_call_us(lambda: compiled.execute(tensors), args.reps, args.block))
    if inputs == 2:
        theirs_fn = lambda: torch.matmul(tensors[0], tensors[1].T)  # noqa: E731
    else:
        gelu, linear = torch.nn.functional.gelu, torch.nn.functional.linear
        theirs_fn = lambda: gelu(linear(*tensors))  # noqa: E731
    theirs = sample_summary(host_call_us(theirs_fn, args.reps, args.block))
    row = {
        "scheduler": getattr(getattr(compiled, "spec", None), "scheduler", scheduler),
        "inputs": inputs,
        "shape": [args.m, args.n, args.k],
        "symbolic": args.symbolic,
        "rel_error": err,
        "execute_us": ours,
        "torch_us": theirs,
        "target_us": TARGET_US[inputs],
        "met": ours["median"] <= TARGET_US[inputs],
        "breakdown_us": breakdown(compiled, tensors, max(200, args.reps // 5), args.block),
    }
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.reps):
            compiled.execute(tensors)
        prof.disable()
        torch.cuda.synchronize()
        print(f"--- cProfile, {scheduler}, {inputs} inputs, {args.reps} calls ---")
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scheduler", choices=["default", "ampere", "hopper", "both"],
                        default="default")  # fmt: skip
    parser.add_argument("--m", type=int, default=256)
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--k", type=int, default=256)
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--symbolic", action="store_true", help="define M as -1")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    schedulers = {"both": ["ampere", "hopper"], "default": ["default"]}.get(
        args.scheduler, [args.scheduler]
    )
    rows = [run(args, s, n) for s in schedulers for n in (2, 3)]
    if args.json:
        print(json.dumps(rows, indent=2))
    for r in rows:
        e, t = r["execute_us"], r["torch_us"]
        print(
            f"{r['scheduler']:>7} {r['inputs']} inputs {'x'.join(map(str, r['shape']))}"
            f"{' (M=-1)' if r['symbolic'] else ''}: execute {e['median']:.1f} us "
            f"(p10 {e['p10']:.1f}, p90 {e['p90']:.1f}) vs torch {t['median']:.1f} us "
            f"(p10 {t['p10']:.1f}); target <= {r['target_us']:.0f} us: "
            f"{'met' if r['met'] else 'MISSED'}; rel.err {r['rel_error']:.1e}"
        )
        for piece, us in r["breakdown_us"].items():
            print(f"      {piece}: {us:.2f} us")
    return 1 if args.strict and not all(r["met"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
