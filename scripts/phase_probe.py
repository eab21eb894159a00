"""Where a hopper CTA's time goes, from inside the kernel: the default plan's kernel with
clock stamps written by its producer's issuing thread and its first consumer's first thread
(``%clock64``, the SM's cycle counter, and ``%globaltimer`` at entry and exit), straight to a
buffer whose address is baked into the generated source. The stamps show, per CTA, when the
producer had fenced and prefetched its tensor maps, when it issued each stage, when each stage
was full for the consumer, when the last wgmma finished and when the epilogue's stores were
issued. The kernel's result is checked against float64 first (the stamps change no output).

On the device machine, after the README's install (specs as ``scripts/ncu_probe.py`` takes
them)::

    python scripts/phase_probe.py 1024x1024x1024/float16 1024x1024x1024/float16@m2

One JSON line per spec: the kernel, its and cuBLAS's µs a call as CUDA-graph replays in turn,
the grid's spread of entry and exit times (ns), and per phase the 10th, 50th and 90th
percentile over the CTAs of cycles since the CTA's entry. A spec may name a variant of the
kernel after a ``%`` (``VARIANTS``: ``1024x1024x1024/float16%noprefetch``), for timing what a part
costs. Each spec builds in a process and cache directory of its own (the stamps' buffer address
is part of the kernel's source)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

from numba.cuda import types
from numba.cuda.extending import intrinsic

from mmaplug.cuda.asm import inline_asm

SLOTS = 64  # stamps per CTA
STAGES = 24  # stage stamps per role (more are dropped)
ENTRY, ENTRY_NS, FENCED, ISSUED = 0, 1, 2, 3  # the producer's (ENTRY: its first instruction)
CONSUMING, FULL = 28, 29  # the first consumer's: its first instruction, each stage full
DRAINED, STORED, EXIT_NS, SM = 54, 55, 56, 57
DECODED, WAITED = 58, 59  # the producer's first tile decoded, its first empty wait passed
# what a variant (``SPEC%variant``) changes in the kernel, for timing only: ``noprefetch`` drops
# the tensor maps' prefetches, ``early`` has thread 0 prefetch them first thing, before the
# barriers
VARIANTS = ("", "noprefetch", "early")


@intrinsic
def clock64(typingctx):  # noqa: ANN001, ANN201
    """``%clock64``: the SM's cycle counter."""

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        return inline_asm(builder, [types.uint64], "mov.u64 $0, %clock64;", [], [], effect=True)

    return types.uint64(), codegen


@intrinsic
def globaltimer(typingctx):  # noqa: ANN001, ANN201
    """``%globaltimer``: nanoseconds, the same clock on every SM."""

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        text = "mov.u64 $0, %globaltimer;"
        return inline_asm(builder, [types.uint64], text, [], [], effect=True)

    return types.uint64(), codegen


@intrinsic
def smid(typingctx):  # noqa: ANN001, ANN201
    """``%smid``: the SM the CTA runs on."""

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        value = inline_asm(builder, [types.uint32], "mov.u32 $0, %smid;", [], [], effect=True)
        return builder.zext(value, context.get_value_type(types.uint64))

    return types.uint64(), codegen


@intrinsic
def st64(typingctx, address, value):  # noqa: ANN001, ANN201
    """``st.global.u64 [address], value``."""

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        pairs = zip(args, sig.args, strict=True)
        a, v = (context.cast(builder, x, t, types.uint64) for x, t in pairs)
        text = "st.global.u64 [$0], $1;"
        inline_asm(builder, [], text, [types.uint64] * 2, [a, v], effect=True)
        return context.get_dummy_value()

    return types.void(address, value), codegen


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def varied(src: str, variant: str) -> str:
    """*src* as *variant* (``VARIANTS``) has it."""
    lines = src.splitlines()
    if variant == "noprefetch":
        lines = [line for line in lines if not line.strip().startswith("prefetch_tensormap(")]
    elif variant == "early":
        maps = ("tmap_", "prefetch_tensormap")
        moved = [i for i, line in enumerate(lines) if line.strip().startswith(maps)]
        block = [line.strip() for line in (lines[i] for i in moved)]
        lines = [line for i, line in enumerate(lines) if i not in moved]
        top = next(i for i, line in enumerate(lines) if line.strip() == "tid = cuda.threadIdx.x")
        ind = _indent(lines[top])
        lines[top + 1 : top + 1] = [f"{ind}if tid == 0:"] + [f"{ind}    {b}" for b in block]
    return "\n".join(lines) + "\n"


def stamped(src: str, buffer: int) -> str:
    """*src*, a generated hopper kernel, with stamps written to the device buffer at *buffer*
    (``SLOTS`` uint64 per CTA, by ``blockIdx.x``)."""
    lines = src.splitlines()
    at = f"uint64({buffer}) + uint64(8) * (uint64(cuda.blockIdx.x) * uint64({SLOTS}) + uint64("

    def put(slot: str, value: str) -> str:
        return f"st64({at}{slot})), {value})"

    out: list[str] = []
    role = "top"
    for i, line in enumerate(lines):
        text = line.strip()
        ind = _indent(line)
        if text.startswith("from mmaplug.cuda.sm90 import (shared_base"):
            out.append("from phase_probe import clock64, globaltimer, smid, st64")
        if role == "producer" and text.startswith("k0 = kb") and "_pn" in "".join(out):
            out.append(f"{ind}if _pn == 0:")
            out.append(f"{ind}    {put(str(DECODED), 'clock64()')}")
        if role == "consumer" and text == "u += ustep":
            out.append(f"{ind}if tid == 128:")
            out.append(f"{ind}    {put(str(STORED), 'clock64()')}")
            out.append(f"{ind}    {put(str(EXIT_NS), 'globaltimer()')}")
        out.append(line)
        if text == "tid = cuda.threadIdx.x":
            out += [f"{ind}_c0 = clock64()", f"{ind}_g0 = globaltimer()"]
        elif text.startswith("wg = warp_uniform("):
            out += [f"{ind}if tid == 0:", f"{ind}    {put(str(ENTRY), '_c0')}",
                    f"{ind}    {put(str(ENTRY_NS), '_g0')}", f"{ind}    {put(str(SM), 'smid()')}",
                    f"{ind}if tid == 128:", f"{ind}    {put(str(CONSUMING), '_c0')}"]  # fmt: skip
            role = "producer"
        elif role == "producer" and text == "s = 0" and "_pn = 0" not in "".join(out):
            # the tensor maps fenced and prefetched: the issuing thread's ring starts
            out[-1:-1] = [f"{ind}{put(str(FENCED), 'clock64()')}", f"{ind}_pn = 0"]
        elif (
            role == "producer"
            and text.startswith("mbarrier_wait(uint32(bar + 8 * (")
            and ("mbarrier_arrive_expect_tx" in lines[i + 2])
        ):
            out += [f"{ind}if _pn == 0:", f"{ind}    {put(str(WAITED), 'clock64()')}"]
        elif role == "producer" and text.startswith("mbarrier_arrive_expect_tx(full"):
            out += [f"{ind}if _pn < {STAGES}:", f"{ind}    {put(f'{ISSUED} + _pn', 'clock64()')}",
                    f"{ind}    _pn += 1"]  # fmt: skip
        elif text.startswith("c = wg - 1"):
            role = "consumer"
            out.append(f"{ind}_cn = 0")
        elif role == "consumer" and text.startswith("mbarrier_wait(uint32(bar + 8 * s), ph)"):
            out += [f"{ind}if tid == 128 and _cn < {STAGES}:",
                    f"{ind}    {put(f'{FULL} + _cn', 'clock64()')}",
                    f"{ind}    _cn += 1"]  # fmt: skip
        elif role == "consumer" and text.startswith("wgmma_wait_group(0)"):
            out += [f"{ind}if tid == 128:", f"{ind}    {put(str(DRAINED), 'clock64()')}"]
    return "\n".join(out) + "\n"


def phases(rows: list[list[int]]) -> dict:
    """Per-CTA stamps (``SLOTS`` each) as the grid's spread and each phase's percentiles of
    cycles since the CTA's entry."""
    ran = [r for r in rows if r[ENTRY_NS]]
    entry = [r[ENTRY_NS] for r in ran]
    first = min(entry)
    named = {"fenced": FENCED, "decoded": DECODED, "waited": WAITED, "drained": DRAINED}
    named |= {"stored": STORED}
    named |= {f"issued{j}": ISSUED + j for j in range(STAGES)}
    named |= {f"full{j}": FULL + j for j in range(STAGES)}
    out: dict = {
        "ctas": len(ran),
        "entry_ns": [min(entry) - first, statistics.median(entry) - first, max(entry) - first],
        "exit_ns": [
            min(r[EXIT_NS] for r in ran) - first,
            statistics.median(r[EXIT_NS] for r in ran) - first,
            max(r[EXIT_NS] for r in ran) - first,
        ],
        "sms": len({r[SM] for r in ran}),
    }
    for name, slot in named.items():
        cycles = sorted(r[slot] - r[ENTRY] for r in ran if r[slot])
        if not cycles:
            continue
        out[name] = [cycles[min(len(cycles) - 1, int(q * len(cycles)))] for q in (0.1, 0.5, 0.9)]
    return out


def run(arg: str) -> dict:
    """*arg*'s (``SPEC[%variant]``) default kernel, varied and stamped: checked, launched 200
    times, then once more into a zeroed buffer whose stamps are read back; then timed as
    CUDA-graph replays in turn with cuBLAS."""
    import torch
    from ncu_probe import built, parse_spec, problem_and_overrides

    import mmaplug as mp
    from mmaplug.cli.bench import torch_call
    from mmaplug.plugins.hopper import kernel
    from mmaplug.tune.measure import interleaved_graph_us, rel_error
    from mmaplug.tune.work import problem_inputs, reference

    spec, _, variant = arg.partition("%")
    assert variant in VARIANTS, f"{variant!r}: one of {VARIANTS}"
    parsed = parse_spec(spec)
    problem, overrides = problem_and_overrides(parsed)
    buffer = torch.zeros(1 << 16, SLOTS, dtype=torch.int64, device="cuda")
    generate = kernel.generate_source

    def patched(cfg, *, sim):  # noqa: ANN001, ANN202
        return stamped(varied(generate(cfg, sim=sim), variant), buffer.data_ptr())

    kernel.generate_source = patched
    try:
        pm = mp.make_plugin_manager(block=["decode", "ampere"])
        compiled = built(problem, overrides, parsed[-1], pm)
        inputs = problem_inputs(problem)
        error = rel_error(compiled.execute(inputs)[0], reference(problem, inputs))
        assert error < 1e-2, (arg, error)
        for _ in range(200):
            compiled.execute(inputs)
        torch.cuda.synchronize()
        buffer.zero_()
        compiled.execute(inputs)
        torch.cuda.synchronize()
        rows = [r for r in buffer.cpu().tolist() if r[ENTRY_NS]]
        sides = {"ours": lambda: compiled.execute(inputs), "cublas": torch_call(problem, inputs)}
        us = interleaved_graph_us(sides, calls=20, reps=40)
    finally:
        kernel.generate_source = generate
    return {"spec": arg, "kernel": compiled.kernel_name, "us": us, **phases(rows)}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:  # one spec, in a process (and kernel cache) of its own
        print(json.dumps(run(sys.argv[2])), flush=True)
        sys.exit()
    for arg in sys.argv[1:]:  # each spec's kernel built afresh: a variant shares its config
        env = {**os.environ, "MMAPLUG_CACHE_DIR": tempfile.mkdtemp(prefix="phase_probe_")}
        subprocess.run([sys.executable, __file__, "--one", arg], env=env, check=False)
