"""The tuner's candidates come from the schedulers' spaces and rules: the built-in lists are
unchanged, and a third scheduler registered by a plugin is tuned with no change to core."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

import mmaplug as mp
from mmaplug.analysis.problem import MatmulProblem
from mmaplug.errors import InvalidParamsError, PluginResultError, UsageError
from mmaplug.hooks.manager import PluginManager
from mmaplug.planning.choices import Adjustment, KernelSpec
from mmaplug.planning.device import Device, get_device
from mmaplug.planning.params import MatmulParams, TileShape
from mmaplug.planning.scheduler import Resources, Rule, Space, violations
from mmaplug.planning.scheduler_registry import schedulers
from mmaplug.tune import candidates, work
from mmaplug.tune.corpus import TuneProblem

H200 = get_device("h200")

# candidates(problem, H200, work.tuning_manager(scheduler), limit=10, scheduler=scheduler) as
# the generator listing hopper's and ampere's tiles, stages, splits and strategies itself
# computed them, before those lists moved into the schedulers' spaces (issue 23)
FROZEN = {
    ("bfloat16_TN_none_b1_4096x6144x4096", "hopper"): [
        "cta128x256x64_warp128x128x64_inst64x128x16_s4_k1_smemepi_persistent_ws",
        "cta128x256x64_warp128x128x64_inst64x128x16_s4_k1_smemepi_ws",
        "cta128x256x64_warp64x256x64_inst64x256x16_s4_k1_smemepi_persistent_ws",
        "cta128x256x64_warp64x256x64_inst64x256x16_s4_k1_smemepi_ws",
        "cta256x128x64_warp128x128x64_inst64x128x16_s4_k1_smemepi_persistent_ws",
        "cta256x128x64_warp128x128x64_inst64x128x16_s4_k1_smemepi_ws",
        "cta128x192x64_warp128x96x64_inst64x96x16_s4_k1_smemepi_persistent_ws",
        "cta128x192x64_warp128x96x64_inst64x96x16_s4_k1_smemepi_ws",
        "cta128x192x64_warp128x96x64_inst64x96x16_s5_k1_smemepi_persistent_ws",
        "cta128x192x64_warp128x96x64_inst64x96x16_s5_k1_smemepi_ws",
    ],
    ("bfloat16_TN_none_b1_4096x6144x4096", "ampere"): [
        "cta128x128x32_warp128x64x32_inst16x8x16_s4_k1_smemepi",
        "cta128x128x32_warp128x64x32_inst16x8x16_s5_k1_smemepi",
        "cta128x128x32_warp32x64x32_inst16x8x16_s4_k1_smemepi",
        "cta128x128x32_warp32x64x32_inst16x8x16_s5_k1_smemepi",
        "cta128x128x32_warp64x128x32_inst16x8x16_s4_k1_smemepi",
        "cta128x128x32_warp64x128x32_inst16x8x16_s5_k1_smemepi",
        "cta128x128x32_warp64x32x32_inst16x8x16_s4_k1_smemepi",
        "cta128x128x32_warp64x32x32_inst16x8x16_s5_k1_smemepi",
        "cta128x128x32_warp64x64x32_inst16x8x16_s4_k1_smemepi",
        "cta128x128x32_warp64x64x32_inst16x8x16_s5_k1_smemepi",
    ],
    ("float16_NN_none_b1_1000x1000x1000", "hopper"): [
        "cta128x96x64_warp128x96x64_inst64x96x16_s4_k1_smemepi_persistent_pingpong_ws",
        "cta128x96x64_warp128x96x64_inst64x96x16_s4_k1_smemepi_persistent_ws",
        "cta128x96x64_warp128x96x64_inst64x96x16_s4_k1_smemepi_ws",
        "cta128x96x64_warp128x96x64_inst64x96x16_s5_k1_smemepi_persistent_pingpong_ws",
        "cta128x96x64_warp64x96x64_inst64x96x16_s4_k1_smemepi_persistent_ws",
        "cta128x96x64_warp64x96x64_inst64x96x16_s4_k1_smemepi_ws",
        "cta128x96x64_warp64x96x64_inst64x96x16_s5_k1_smemepi_persistent_ws",
        "cta128x96x64_warp64x96x64_inst64x96x16_s5_k1_smemepi_ws",
        "cta128x96x128_warp128x96x128_inst64x96x16_s3_k1_smemepi_persistent_pingpong_ws",
        "cta128x96x128_warp128x96x128_inst64x96x16_s3_k1_smemepi_persistent_ws",
    ],
    ("float16_NN_none_b1_1000x1000x1000", "ampere"): [
        "cta128x64x32_warp128x64x32_inst16x8x16_s4_k1_smemepi",
        "cta128x64x32_warp128x64x32_inst16x8x16_s5_k1_smemepi",
        "cta128x64x32_warp32x32x32_inst16x8x16_s4_k1_smemepi",
        "cta128x64x32_warp32x32x32_inst16x8x16_s5_k1_smemepi",
        "cta128x64x32_warp32x64x32_inst16x8x16_s4_k1_smemepi",
        "cta128x64x32_warp32x64x32_inst16x8x16_s5_k1_smemepi",
        "cta128x64x32_warp64x32x32_inst16x8x16_s4_k1_smemepi",
        "cta128x64x32_warp64x32x32_inst16x8x16_s5_k1_smemepi",
        "cta128x64x32_warp64x64x32_inst16x8x16_s4_k1_smemepi",
        "cta128x64x32_warp64x64x32_inst16x8x16_s5_k1_smemepi",
    ],
}
PROBLEMS = {
    tp.key: tp
    for tp in (
        TuneProblem(m=4096, n=6144, k=4096, dtype="bfloat16"),
        TuneProblem(m=1000, n=1000, k=1000, layout="NN"),
    )
}


@pytest.mark.parametrize(("key", "scheduler"), list(FROZEN), ids=[f"{k}/{s}" for k, s in FROZEN])
def test_builtin_candidates_are_unchanged(key: str, scheduler: str) -> None:
    """Hopper's and ampere's candidates, now enumerated from their spaces' examples and
    filtered by their rules, are the lists the generator that restated them gave."""
    pm = work.tuning_manager(scheduler)
    found = candidates.candidates(PROBLEMS[key].problem(), H200, pm, limit=10, scheduler=scheduler)
    assert [p.name for p in found] == FROZEN[key, scheduler]


def test_builtin_configurations_keep_only_what_the_rules_allow() -> None:
    """Every configuration the search yields passes its scheduler's rules."""
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    problem = PROBLEMS["float16_NN_none_b1_1000x1000x1000"].problem()
    for name in ("hopper", "ampere"):
        scheduler = schedulers(pm)[name][1]
        found = list(candidates.configurations(scheduler, problem, H200))
        assert found and len({p.name for p in found}) == len(found)
        assert all(violations(scheduler, p, problem, H200) == [] for p in found)


@pytest.mark.parametrize(("m", "swapped"), [(40, True), (72, True), (112, True), (136, False)])
def test_hopper_tries_the_swap_where_the_default_may_take_it(m: int, swapped: bool) -> None:
    """The tuner tries the transposed product up to 128 activation rows (the default swaps up
    to 112, heuristics/default/streaming.py ``SWAP_WIDE_M``), with the warp tile whose wgmma N
    is the rows rounded up to 8s; not past them."""
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    problem = TuneProblem(m=m, n=6144, k=4096, dtype="bfloat16").problem()
    found = list(candidates.configurations(schedulers(pm)["hopper"][1], problem, H200))
    swaps = [p for p in found if p.swap_ab]
    assert bool(swaps) == swapped
    cols = 8 * -(-m // 8)
    assert not swapped or any(p.warp_tile.n == cols and p.cta_tile.m == 64 for p in swaps)


# --- a third scheduler, from a plugin ------------------------------------------------------------


def _depth(params: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    if params.stages * params.splitk_factor <= 6:
        return None
    return f"toy keeps stages * splitk_factor <= 6, not {params.stages} * {params.splitk_factor}"


def _rows(params: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    return None if params.cta_tile.m in (64, 128) else "toy runs 64 or 128 rows"


class Toy:
    """A scheduler the tuner has never heard of: two CTA tiles, stages, split-K."""

    name = "toy"
    priority = 30  # above hopper and ampere

    def __init__(self, cta_examples: Sequence[object] = ((64, 64, 32), (128, 64, 32))) -> None:
        self.cta_examples = tuple(cta_examples)

    def accepts(self, problem: MatmulProblem, device: Device) -> str | None:
        return None

    def space(self, problem: MatmulProblem, device: Device) -> Sequence[Space]:
        return [
            Space(
                "cta_tile",
                "m 64 or 128",
                accepts=lambda t: isinstance(t, TileShape) and t.m in (64, 128),
                examples=self.cta_examples,
            ),
            Space("warp_tile", "64x64x32", values=(TileShape(64, 64, 32),)),
            Space("instruction_tile", "16x8x16", values=(TileShape(16, 8, 16),)),
            Space("stages", "2 to 4", values=(2, 3, 4), examples=(2, 3, 4)),
            Space("splitk_factor", ">= 1", accepts=lambda v: v >= 1, examples=(1, 2)),
        ]

    def rules(self, problem: MatmulProblem, device: Device) -> Sequence[Rule]:
        return [
            Rule("cta_tile", "m 64 or 128", _rows),
            Rule("splitk_factor", "stages * splitk_factor <= 6", _depth),
        ]

    def resources(self, params: MatmulParams, problem: MatmulProblem) -> Resources:
        return Resources(smem_bytes=0, threads=32)

    def adjustments(
        self, params: MatmulParams, problem: MatmulProblem, device: Device
    ) -> Sequence[Adjustment]:
        return ()

    def build(self, spec: KernelSpec, analysis: object) -> object:
        raise NotImplementedError


class ToyPlugin:
    """Registers Toy and answers the params hook for it (the default heuristic does not)."""

    def __init__(self, toy: Toy) -> None:
        self.toy = toy

    @mp.hookimpl
    def mmaplug_schedulers(self) -> list[Toy]:
        return [self.toy]

    @mp.hookimpl
    def mmaplug_matmul_params(self, scheduler: str) -> MatmulParams | None:
        if scheduler != "toy":
            return None
        return MatmulParams(
            cta_tile=(64, 64, 32), warp_tile=(64, 64, 32), instruction_tile=(16, 8, 16)
        )


def _toy_manager(toy: Toy | None = None) -> PluginManager:
    return mp.make_plugin_manager(plugins=[ToyPlugin(toy or Toy())], load_entrypoints=False)


def _every_combination(scheduler: object, problem: MatmulProblem, device: Device) -> list[str]:
    """The search's oracle: every combination of the space's examples in its order (the rest
    of the fields as the search fixes them) that makes params, breaks no rule and is tried."""
    spaces = {space.field: space for space in scheduler.space(problem, device)}  # type: ignore[attr-defined]
    searched = {f: candidates._examples(scheduler, s) for f, s in spaces.items() if s.examples}  # type: ignore[arg-type]
    fixed = {
        f: candidates._untuned(scheduler, spaces.get(f), f)  # type: ignore[arg-type]
        for f in candidates._FIELDS
        if f not in searched
    }
    found = []
    for combination in itertools.product(*searched.values()):
        try:
            params = MatmulParams(**{**fixed, **dict(zip(searched, combination, strict=True))})
        except InvalidParamsError:
            continue
        if not violations(scheduler, params, problem, device) and candidates._preferred(
            params, problem
        ):
            found.append(params.name)
    return found


def _late_split(params: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    # reads stages only when split: the fields a rule reads depend on the values it sees
    if params.splitk_factor == 1 or params.stages <= 3:
        return None
    return "toy splits K only over at most 3 stages"


def _real_params(params: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    # a method the search's view does not have: asked again on real params
    given = params.as_dict()
    if given["stages"] == 4 and given["cta_tile"] == (128, 64, 32):
        return "toy runs no 128-row CTA over 4 stages"
    return None


class ReadingToy(Toy):
    """Toy with rules whose reads depend on values, and one that needs real params."""

    def rules(self, problem: MatmulProblem, device: Device) -> Sequence[Rule]:
        return [
            Rule("splitk_factor", "split over at most 3 stages", _late_split),
            Rule("stages", "128 rows over at most 3 stages", _real_params),
            Rule("cta_tile", "m 64 or 128", _rows),
        ]


@pytest.mark.parametrize("name", ["ampere", "decode", "toy"])
def test_the_search_finds_what_every_combination_would(name: str) -> None:
    """The pruned walk (rules asked on partial combinations, their outcomes reused while the
    fields they read keep their values) yields exactly the configurations, in the same order,
    that checking every combination of the examples yields."""
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    scheduler = ReadingToy() if name == "toy" else schedulers(pm)[name][1]
    problem = TuneProblem(m=8, n=1000, k=4096, layout="NN").problem()
    expected = _every_combination(scheduler, problem, H200)
    found = [p.name for p in candidates.configurations(scheduler, problem, H200)]  # type: ignore[arg-type]
    assert found == expected and len(found) > 3


def test_a_third_scheduler_gets_candidates() -> None:
    """A scheduler registered by a plugin is tuned over its space's examples, less what its
    rules refuse (stages * split 8) and what the tuner does not try (split-K of few K tiles),
    each candidate planned on it unchanged."""
    pm = _toy_manager()
    assert candidates.scheduler_names(pm) == ("decode", "toy", "hopper", "ampere")
    problem = TuneProblem(m=1024, n=1024, k=1024).problem()
    found = candidates.candidates(problem, H200, pm, limit=50, scheduler="toy")
    got = {(p.cta_tile.m, p.stages, p.splitk_factor) for p in found}
    rows, stages, splits = (64, 128), (2, 3, 4), (1, 2)
    assert got == {(m, s, k) for m in rows for s in stages for k in splits if s * k <= 6}
    for params in found:
        spec = mp.plan_problem(problem, H200, pm=pm, overrides=params.as_dict())
        assert (spec.scheduler, spec.params) == ("toy", params)
    # a K of two tiles is never split (each split keeps at least MIN_SPLIT_K_TILES)
    short = TuneProblem(m=1024, n=1024, k=64).problem()
    assert {p.splitk_factor for p in candidates.candidates(short, H200, pm, scheduler="toy")} == {1}


def test_an_example_its_space_refuses_is_an_error() -> None:
    """A scheduler offering the tuner a value its own space does not allow is named."""
    toy = Toy(cta_examples=((64, 64, 32), (32, 64, 32)))
    problem = TuneProblem(m=1024, n=1024, k=1024).problem()
    with pytest.raises(PluginResultError, match=r"'toy' offers the tuner cta_tile=\(32, 64, 32\)"):
        list(candidates.configurations(toy, problem, H200))


def test_an_unknown_scheduler_is_named() -> None:
    """Tuning a scheduler nobody registered lists those that are."""
    pm = mp.make_plugin_manager(load_entrypoints=False, block=["ampere"])
    problem = TuneProblem(m=1024, n=1024, k=1024).problem()
    with pytest.raises(
        UsageError, match="no scheduler 'volta' to tune; registered: decode, hopper"
    ):
        candidates.candidates(problem, H200, pm, scheduler="volta")
