"""Tuning candidates: each scheduler's configurations ranked by a cheap model, each planned.

A scheduler's configurations are the combinations of the values its ``space`` offers the tuner
(``Space.examples``; ``docs/plugin-reference.md`` lists them) that its ``rules`` allow: the
search fixes one field after another, in the order of the space, and drops a partial
combination as soon as a rule that read only fields already fixed fails, so the whole product
is never built; a rule is asked again only when a field it read changed, and its outcome on
values it saw before is reused (``_Memo``). A field without examples takes the tuner's
preference (``PREFERRED``) or the ``MatmulParams`` default where its space allows it, else its
first legal value. Of those the tuner tries CTAs of at most ``MAX_WARP_TILES`` warp tiles
(``MAX_WARP_GRID`` along M or N), warp tiles under twice the product's columns, and split-K
where each split keeps ``MIN_SPLIT_K_TILES`` K tiles (``_preferred``, asked as a rule during
the search). Any registered scheduler is tuned this way (``scheduler_names``).

The model estimates a kernel's time as the larger of its tensor-core time (padded tiles, wave
quantization) and its memory time (each work unit streams its A and B panels through L2, HBM
reads each operand once), with a small penalty for shallow pipelines, plus split-K's reading
back of its float32 partials through a workspace (mma.sync priced at ``MMA_SYNC_SHARE`` of the
peak). Only the
best-ranked configurations are planned; a candidate is kept when ``plan_problem`` takes it as
caller overrides (every validator ran on it) and the plan changed nothing: illegal
configurations never reach a build. cta_order and grid_swizzle_factor are not searched: every
configuration walks its tiles in the order of *order* (the scheduler's default choice, so that
tiles are compared under one order), or in ``MatmulParams``' default order without one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final, NamedTuple, TypeAlias, cast

import attrs

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.errors import InvalidParamsError, NoSchedulerError, PluginResultError, UsageError
from mmaplug.planning.device import Device
from mmaplug.planning.params import MatmulParams, TileShape
from mmaplug.planning.plan import plan_problem
from mmaplug.planning.scheduler import Rule, Scheduler, Space
from mmaplug.planning.scheduler_registry import schedulers

__all__ = ["candidates", "configurations", "estimate_us", "legal", "scheduler_names"]

PEAK_TFLOPS: Final = 989.0  # dense 16-bit tensor-core peak of an H100/H200 SXM
PEAK_GBPS: Final = 4800.0  # H200 HBM3e
L2_GBPS: Final = 12000.0  # L2 to SMs, roughly (the model only ranks)
MMA_SYNC_SHARE: Final = 0.6  # of the wgmma peak that mma.sync reaches on sm_90 (ranking only)
MIN_SPLIT_K_TILES: Final = 4  # K tiles each split keeps, at least (shorter splits never paid)
# CTAs tried: at most 4 warp tiles along M or N and 8 in all (more, smaller warp tiles only
# give up operand reuse)
MAX_WARP_GRID: Final = 4
MIN_WARP_COLUMNS: Final = 8  # the narrowest instruction's columns (mma.sync n8, wgmma n8)
MAX_WARP_TILES: Final = 8
#: Values tried for a field the scheduler offers no examples of, where its space allows them:
#: the staged epilogue beat the register one on the H200 (BENCHMARKS.md run 17).
PREFERRED: Final[Mapping[str, object]] = {"use_smem_epilogue": True}
_FIELDS: Final = attrs.fields_dict(MatmulParams)


def scheduler_names(pm: Any = None) -> tuple[str, ...]:
    """The registered schedulers of *pm* (``get_plugin_manager()`` when None), highest
    priority first, then by name: what the tuner can tune."""
    found = schedulers(pm)
    return tuple(sorted(found, key=lambda name: (-found[name][1].priority, name)))


def estimate_us(params: MatmulParams, problem: MatmulProblem, device: Device) -> float:
    """The model's time for *params* (microseconds; only the order matters)."""
    if params.swap_ab:  # the tiles are the transposed product's
        problem = problem.transposed()
    cta = params.cta_tile
    m_tiles, n_tiles = math.ceil(problem.m / cta.m), math.ceil(problem.n / cta.n)
    units = problem.batch * m_tiles * n_tiles * params.splitk_factor
    waves = math.ceil(units / device.sm_count)
    k_split = math.ceil(problem.k / params.splitk_factor)
    unit_flops = 2.0 * cta.m * cta.n * k_split
    share = MMA_SYNC_SHARE if params.instruction_tile.m == 16 else 1.0  # mma.sync m16n8k16
    compute = waves * unit_flops / (share * PEAK_TFLOPS * 1e12 / device.sm_count)
    itemsize = problem.operand_dtype.itemsize
    # every unit streams its A and B panels through L2; HBM sees each operand once
    panels = units * (cta.m + cta.n) * k_split * itemsize
    # split-K through the workspace: float32 partials written to HBM and read back after the
    # main loop, not overlapped with it (summed in the cluster they stay in shared memory)
    split = params.splitk_factor if not params.splitk_in_cluster else 1
    out_bytes = 4 if split > 1 else 2
    unique = problem.batch * (
        (problem.m + problem.n) * problem.k * itemsize + problem.m * problem.n * out_bytes * split
    )
    memory = max(unique / (PEAK_GBPS * 1e9), panels / (L2_GBPS * 1e9))
    shallow = 1.0 + 0.15 * max(0, 4 - params.stages)
    reduce = problem.batch * problem.m * problem.n * (4 * split + itemsize) if split > 1 else 0
    return 1e6 * (max(compute, memory) * shallow + reduce / (PEAK_GBPS * 1e9))


# --- a scheduler's configurations -----------------------------------------------------------


class _Reading:
    """Params as a rule sees them during the search: the fields' values (the first example of
    a field not fixed yet), recording the fields the rule reads."""

    __slots__ = ("_values", "read")

    def __init__(self, values: Mapping[str, object]) -> None:
        self._values = values
        self.read: set[str] = set()

    def __getattr__(self, name: str) -> object:
        try:
            value = self._values[name]
        except KeyError:  # a method or property: the rule is asked again on real params
            raise AttributeError(name) from None
        self.read.add(name)
        return value


def _convert(name: str, value: object) -> object:
    """*value* as the ``MatmulParams`` field *name* holds it (tuples to tiles, strings to enums)."""
    converter = _FIELDS[name].converter
    return converter(value) if callable(converter) else value


def _examples(scheduler: Scheduler, space: Space) -> tuple[object, ...]:
    """*space*'s examples as field values, each once.

    :raises PluginResultError: an example its own space does not allow (naming the scheduler,
        the field and the value).
    """
    found = []
    for example in space.examples:
        value = _convert(space.field, example)
        if not space.allows(value):
            raise PluginResultError(
                f"scheduler {scheduler.name!r} offers the tuner {space.field}={example!r}, "
                f"which its space does not allow ({space.text}); give examples that are legal "
                f"values of {space.field}",
                hook="mmaplug_schedulers",
            )
        found.append(value)
    return tuple(dict.fromkeys(found))


def _untuned(scheduler: Scheduler, space: Space | None, name: str) -> object:
    """The value of field *name*, which *space* offers no examples of (None: not in the space)."""
    field = _FIELDS[name]
    choices = [PREFERRED[name]] if name in PREFERRED else []
    choices += [] if field.default is attrs.NOTHING else [field.default]
    for value in choices:
        if space is None or space.allows(value):
            return value
    if space is not None and space.values:
        return space.values[0]
    raise UsageError(
        f"scheduler {scheduler.name!r} gives the tuner no value of {name}: its space has no "
        f"examples{'' if space is None else ' or values'} of it and MatmulParams no default; "
        f"add examples to the {name} Space"
    )


_OpenRules: TypeAlias = tuple[tuple[Rule, frozenset[str]], ...]


class _Outcome(NamedTuple):
    """What a rule did when asked about a partial combination: the fields it read, and whether
    it refused (``broken``) or needed real params (``raised``)."""

    read: frozenset[str]
    broken: bool
    raised: bool


class _Memo:
    """The rules' outcomes during one search. A rule is a function of the params it reads (the
    contract of ``Rule.check``): asked again about values that agree on every field it read
    before, it takes the same path and returns the same, so that outcome is reused. The walk
    asks each rule at every node, mostly about fields it does not read (the rules times the
    nodes: about a million checks for a decode problem's hopper space); this keeps the distinct
    ones."""

    def __init__(self) -> None:
        # rule -> (the fields it read, in order -> their values -> outcome)
        self._seen: dict[int, dict[tuple[str, ...], dict[tuple[object, ...], _Outcome]]] = {}

    def ask(
        self, rule: Rule, values: Mapping[str, object], problem: MatmulProblem, device: Device
    ) -> _Outcome:
        """*rule*'s outcome on *values*, from an earlier ask with the same read values or new."""
        seen = self._seen.setdefault(id(rule), {})
        for fields, outcomes in seen.items():
            found = outcomes.get(tuple(values[name] for name in fields))
            if found is not None:
                return found
        view = _Reading(values)
        try:
            broken = rule.check(cast(MatmulParams, view), problem, device) is not None
            raised = False
        except Exception:  # a rule that needs real params: asked again once all are fixed
            broken, raised = False, True
        outcome = _Outcome(frozenset(view.read), broken, raised)
        fields = tuple(sorted(outcome.read))
        seen.setdefault(fields, {})[tuple(values[name] for name in fields)] = outcome
        return outcome


def _open_rules(
    rules: _OpenRules,
    values: Mapping[str, object],
    changed: str,
    fixed: frozenset[str],
    memo: _Memo,
    problem: MatmulProblem,
    device: Device,
) -> _OpenRules | None:
    """The rules (with the fields each read) that read a field not *fixed* yet; None when one
    that read only fixed fields fails (no choice of the other fields can mend it). A rule that
    did not read the field *changed* last time reads the same values again: it stays open."""
    still = []
    for rule, read in rules:
        if changed not in read:
            still.append((rule, read))
            continue
        outcome = memo.ask(rule, values, problem, device)
        if outcome.raised or not outcome.read <= fixed:
            still.append((rule, outcome.read))
        elif outcome.broken:
            return None
    return tuple(still)


def configurations(
    scheduler: Scheduler, problem: MatmulProblem, device: Device
) -> Iterator[MatmulParams]:
    """Every combination of *scheduler*'s examples that its rules allow (see the module
    docstring) and the tuner tries (``_preferred``).

    :raises PluginResultError: the scheduler's space offers an example it does not allow.
    :raises UsageError: a required field has neither examples nor values.
    """
    spaces = {space.field: space for space in scheduler.space(problem, device)}
    searched = {name: _examples(scheduler, s) for name, s in spaces.items() if s.examples}
    untuned = {
        name: _untuned(scheduler, spaces.get(name), name)
        for name in _FIELDS
        if name not in searched
    }
    search = _Search(problem, device, tuple(searched.items()), frozenset(untuned))
    start = {**untuned, **{name: examples[0] for name, examples in searched.items()}}
    # the tuner's preference walks as a rule: it prunes whole branches (a warp grid too large)
    rules = (*scheduler.rules(problem, device), _TRIED)
    every = frozenset(_FIELDS)  # (not asked yet: as if it read every field)
    for values, still in search.walk(0, start, tuple((rule, every) for rule in rules)):
        try:
            params = MatmulParams(**values)
        except InvalidParamsError:
            continue
        if all(rule.check(params, problem, device) is None for rule, _ in still):
            yield params


def _preferred(params: MatmulParams, problem: MatmulProblem) -> bool:
    """Whether the tuner tries *params*: CTAs of a few warp tiles, warp tiles under twice the
    columns of the product the kernel computes (the transposed one with ``swap_ab``: the few
    activation rows), split-K only where every split keeps ``MIN_SPLIT_K_TILES`` K tiles."""
    cta, warp = params.cta_tile, params.warp_tile
    grid = (cta.m // warp.m, cta.n // warp.n)
    if max(grid) > MAX_WARP_GRID or grid[0] * grid[1] > MAX_WARP_TILES:
        return False
    columns = problem.m if params.swap_ab else problem.n
    if warp.n >= 2 * MIN_WARP_COLUMNS * math.ceil(columns / MIN_WARP_COLUMNS):
        return False
    k_tiles = math.ceil(problem.k / cta.k)
    return params.splitk_factor == 1 or k_tiles >= MIN_SPLIT_K_TILES * params.splitk_factor


def _tried(params: MatmulParams, problem: MatmulProblem, _device: Device) -> str | None:
    return None if _preferred(params, problem) else "the tuner does not try it (_preferred)"


_TRIED: Final = Rule("cta_tile", "what the tuner tries (_preferred)", _tried)


@attrs.frozen
class _Search:
    """The depth-first walk over the searched fields' examples, in the order of the space."""

    problem: MatmulProblem
    device: Device
    searched: tuple[tuple[str, tuple[object, ...]], ...]
    untuned: frozenset[str]
    memo: _Memo = attrs.field(factory=_Memo, eq=False)

    def walk(
        self, depth: int, values: dict[str, Any], rules: _OpenRules
    ) -> Iterator[tuple[dict[str, Any], _OpenRules]]:
        """(values, the rules still to ask on real params) of each combination below
        *depth* that no rule refused; *rules* read the fields they name on *values*."""
        if depth == len(self.searched):
            yield values, rules
            return
        name, examples = self.searched[depth]
        fixed = self.untuned.union(n for n, _ in self.searched[: depth + 1])
        for value in examples:
            here = {**values, name: value}
            still = _open_rules(rules, here, name, fixed, self.memo, self.problem, self.device)
            if still is not None:
                yield from self.walk(depth + 1, here, still)


def legal(
    params: MatmulParams,
    problem: MatmulProblem,
    device: Device,
    pm: Any,
    scheduler: str = "hopper",
) -> bool:
    """Whether planning takes *params* unchanged as caller overrides on *scheduler* (*pm*
    blocks the schedulers that would outrank it); not when no scheduler takes the problem."""
    try:
        spec = plan_problem(problem, device, pm=pm, overrides=params.as_dict(), strict=True)
    except (InvalidParamsError, NoSchedulerError):
        return False
    return spec.scheduler == scheduler and spec.params == params


def candidates(
    problem: MatmulProblem,
    device: Device,
    pm: Any,
    *,
    limit: int = 50,
    per_tile: int = 4,
    include: Sequence[MatmulParams] = (),
    scheduler: str = "hopper",
    order: MatmulParams | None = None,
) -> list[MatmulParams]:
    """Up to *limit* legal configurations of *scheduler* (any registered with *pm*),
    best-modelled first; *include* (the heuristics' choices) come first whatever the model
    says, when legal. A first pass keeps at most *per_tile* variants of each CTA/warp tile
    pair, so the model's favourite tile cannot fill the list with stage and strategy variants;
    a second pass fills what is left in model order. The configurations take *order*'s tile
    order (``cta_order``, ``grid_swizzle_factor``) where given.

    :raises UsageError: *scheduler* is not registered with *pm*.
    """
    registered = schedulers(pm)
    if scheduler not in registered:
        raise UsageError(
            f"no scheduler {scheduler!r} to tune; registered: "
            f"{', '.join(scheduler_names(pm)) or 'none'}"
        )
    raw = configurations(registered[scheduler][1], problem, device)
    if order is not None:
        walk = {"cta_order": order.cta_order, "grid_swizzle_factor": order.grid_swizzle_factor}
        raw = (p.with_overrides(**walk) for p in raw)
    ranked = sorted(raw, key=lambda p: (estimate_us(p, problem, device), p.name))
    chosen: dict[str, MatmulParams] = {}
    per: dict[tuple[TileShape, TileShape], int] = {}
    for cap in (per_tile, limit):
        for params in itertools.chain(include, ranked):
            tiles = (params.cta_tile, params.warp_tile)
            if len(chosen) >= max(limit, len(include)):
                break
            if params.name in chosen or per.get(tiles, 0) >= cap and params not in include:
                continue
            if legal(params, problem, device, pm, scheduler):
                chosen[params.name] = params
                per[tiles] = per.get(tiles, 0) + 1
    return list(chosen.values())
