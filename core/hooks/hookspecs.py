"""The hook specifications: the manual for writing an mmaplug plugin.

A plugin is a module (or an object) with functions named after the hooks below, each marked with
``mmaplug.hookimpl``. It may implement any subset of the hooks and, for each hook, any subset of
its arguments: pluggy matches arguments by name, so take only what you use.

Registration sequence (``mmaplug.hooks.manager.make_plugin_manager``):

1. names in ``block`` (and ``MMAPLUG_DISABLE``) are blocked;
2. the built-in plugins of ``DEFAULT_PLUGINS`` are registered: ``default`` (the default
   heuristic), ``patterns`` (the built-in matmul recognisers), ``ampere``, ``hopper`` and
   ``testing`` (the ``override_matmul_params`` context);
3. the ``mmaplug`` entry points of installed distributions are loaded, unless
   ``MMAPLUG_DISABLE_PLUGIN_AUTOLOAD=1``;
4. plugins passed explicitly are registered, then ``check_pending()`` rejects any function
   named ``mmaplug_*`` that matches no hook below: an installed plugin with one is skipped with a
   ``PluginWarning`` naming it and its distribution, an explicit one is a ``PluginError``.

Call order: pluggy calls the most recently registered implementation first; ``tryfirst=True`` and
``trylast=True`` move an implementation to the front or the back of that order. mmaplug's own
fallbacks are ``trylast``; use ``tryfirst`` only for observers and caches, never to win a value.
Correctness never depends on registration order: schedulers compete through an explicit priority,
and conflicting overrides are an error rather than a race.

``None`` always means "I have nothing to say": a ``firstresult`` hook moves on to the next
implementation, an all-results hook leaves the answer out.

Every hook is called through ``mmaplug.hooks.guard.Guard``, with every argument passed by
keyword. Core calls each implementation on its own so that an answer, a wrong answer or an
exception can be attributed to the plugin that gave it: a fault raises an error naming the
plugin and the hook (strict mode, built-in plugins, hooks without a fallback) or is dropped
with a ``PluginWarning`` and the hook's fallback, such as the default heuristic's answer (the
production default; the table is in docs/decisions.md, "Plugin faults").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from mmaplug.markers import hookspec

if TYPE_CHECKING:
    from mmaplug.analysis.bindings import MatmulAnalysis
    from mmaplug.analysis.patterns import MatmulPattern
    from mmaplug.analysis.problem import MatmulProblem
    from mmaplug.ir.fusion import Fusion
    from mmaplug.planning.choices import Adjustment, KernelSpec, Rejection, SchedulerChoice
    from mmaplug.planning.device import Device
    from mmaplug.planning.params import MatmulParams, ParamOverride, Violation
    from mmaplug.planning.scheduler import Scheduler


# -------------------------------------------------------------------------------------------------
# Translation: fusion IR -> matmul patterns -> MmaOp (identical for every architecture)
# -------------------------------------------------------------------------------------------------


@hookspec
def mmaplug_matmul_patterns(fusion: Fusion) -> Sequence[MatmulPattern] | None:
    """Return the matmul patterns you recognise in *fusion*.

    Called by ``find_matmul_patterns`` before translation. Core merges the answers of all plugins
    and drops duplicates (two recognisers finding the same output). The built-in recognisers of
    ``matmul``, ``linear``, ``mma`` and ``mul`` + ``sum`` are themselves an implementation of this
    hook, in ``mmaplug.analysis.patterns``.

    :param fusion: The fusion being compiled; do not modify it here.
    :returns: The patterns found, possibly empty, or None when you recognise nothing.

    Implement this to teach mmaplug a matmul-like op it does not know. A pattern of your own
    ``kind`` must then be translated by your ``mmaplug_translate_pattern``: translation is the
    same on every architecture, and only scheduler plugins differ.
    """


@hookspec(firstresult=True)
def mmaplug_translate_pattern(fusion: Fusion, pattern: MatmulPattern) -> bool | None:
    """Rewrite *pattern*, of a kind you recognised, into an ``MmaOp`` in *fusion*, in place.

    Stops at first non-None result.

    Called by ``translate_matmul_patterns`` for every pattern whose ``kind`` is not a built-in
    one (``matmul``, ``linear``, ``mul_sum``, ``mma``). The simplest translation rewrites the
    pattern as a built-in kind:
    ``mmaplug.analysis.translate.translate_as(fusion, pattern, "linear")``.

    :param fusion: The fusion being translated.
    :param pattern: Your pattern; afterwards ``pattern.a``/``pattern.b`` must be the MmaOp's
        operands and ``pattern.output`` its result.
    :returns: True when you translated it; None to leave it to another plugin (if none
        translates it, core rejects the fusion naming the kind).
    """


@hookspec
def mmaplug_fusion_translated(fusion: Fusion, patterns: Sequence[MatmulPattern]) -> None:
    """Notify that *patterns* of *fusion* were translated to ``MmaOp``, in place.

    Called once per fusion after ``translate_matmul_patterns``; the return value is ignored.

    :param fusion: The translated fusion; treat it as read-only.
    :param patterns: The patterns as they were before translation.

    Implement this to log, count or check translations (e.g. a plugin that dumps the IR).
    """


# -------------------------------------------------------------------------------------------------
# Scheduling: choose a scheduler, then its MatmulParams
# -------------------------------------------------------------------------------------------------


@hookspec
def mmaplug_schedulers() -> Sequence[Scheduler] | Scheduler | None:
    """Return your scheduler objects, one per kernel family
    (``mmaplug.planning.scheduler.Scheduler``).

    Called when planning first needs the schedulers, and again after a plugin is registered
    or unregistered (``mmaplug.planning.scheduler_registry.schedulers`` keeps the answers; ``mmaplug
    plugins`` lists them). Each scheduler owns its kernels: whether it takes a
    problem (``accepts``), the legal values of each field (``space``), the rules between them
    (``rules``), its resource model (``resources``), the changes it must force
    (``adjustments``) and the kernel (``build``). Core plans with them; the default heuristic,
    the tuner, ``mmaplug explain`` and ``docs/plugin-reference.md`` ask them. Two schedulers of
    one name are a ``PluginError`` naming both plugins. A block-scaled problem
    (``MatmulProblem.block_scaled``: FP8 sums scaled every 128 of K, the scales in
    ``LaunchArgs.scales``) is offered only to a scheduler with ``block_scales = True``: one that
    ignored the scales would return a wrong sum. A scheduler method that raises, or
    answers something of the wrong kind, is a fault named ``mmaplug_schedulers (<name>.<method>)``
    with the usual policy; ``build`` has no fallback, and its ``KernelBuildError`` propagates.

    :returns: A ``Scheduler``, a list of them, or None.

    Implemented by scheduler plugins (built in: ``ampere``, ``hopper``). It replaces
    ``mmaplug_scheduler_candidates`` and ``mmaplug_build_kernel``, which still work for one
    release with a ``DeprecationWarning`` naming the plugin. A scheduler's own rules and
    adjustments are its object's; ``mmaplug_validate_params`` and ``mmaplug_adjust_params``
    stay for plugins that add rules to any scheduler (a site's policy).
    """


@hookspec
def mmaplug_scheduler_candidates(
    problem: MatmulProblem, device: Device
) -> SchedulerChoice | Rejection | None:
    """Deprecated: say whether your scheduler can take *problem* on *device*.

    Asked for one more release, with a ``DeprecationWarning`` naming the plugin, and only of
    plugins that return no scheduler objects from ``mmaplug_schedulers`` (whose ``accepts``
    replaces it). Called first when planning. Core picks the accepting scheduler with the
    highest priority, ties broken by name; when none accepts, ``NoSchedulerError`` lists every
    rejection.

    :param problem: Shape, layout, precision and epilogue of the matmul.
    :param device: The target GPU (``device.cc``, ``device.target``).
    :returns: ``SchedulerChoice(name, priority)`` to accept, ``Rejection(name, reason)`` to
        decline with a reason a user can act on, or None if you are not a scheduler.

    Implemented by scheduler plugins only (built in: ``ampere`` with priority 10, ``hopper``).
    Express preference through ``priority``, never through ``tryfirst``.
    """


@hookspec(firstresult=True)
def mmaplug_matmul_params(
    problem: MatmulProblem, device: Device, scheduler: str
) -> MatmulParams | None:
    """Return base parameters for *problem* on *device*, or None to defer.

    Stops at first non-None result.

    Called once the scheduler is chosen. With ``MMAPLUG_HEURISTIC=<name>`` (or
    ``make_plugin_manager(heuristic=<name>)``) only that plugin and the default are asked.

    :param problem: Shape, layout, precision and epilogue of the matmul; ``problem.horizontal``
        > 1 is a horizontal fusion, whose ``cta_tile.n`` is the MMA width of all its B tiles
        (h x the output tile's n; see ``MatmulParams``).
    :param device: The target GPU.
    :param scheduler: Name of the chosen scheduler (``"ampere"``, ...); while planning,
        ``mmaplug.planning.scheduler.active(scheduler)`` is its object (None for a deprecated one).
    :returns: A complete, valid ``MatmulParams``; partial changes belong in
        ``mmaplug_matmul_overrides``. Anything else than ``MatmulParams`` or None is a
        ``PluginResultError``.

    Default implementation: ``mmaplug.heuristics.default`` (``trylast=True``) always answers.
    Implement this in a heuristic plugin (tuned table, analytic model) and answer only for the
    problems you know.
    """


@hookspec
def mmaplug_matmul_overrides(
    problem: MatmulProblem, device: Device, params: MatmulParams
) -> ParamOverride | Mapping[str, object] | None:
    """Return partial changes to the base *params*, or None to leave them.

    Called after ``mmaplug_matmul_params``; every implementation is asked. Core merges all
    answers: two sources setting one field to different values raise ``OverrideConflictError``
    naming both, and an unknown field raises ``UnknownParamError`` naming you. Overrides passed
    by the caller (``plan_problem(..., overrides=...)``) are applied afterwards and always win.

    :param params: The base parameters (already validated).
    :returns: ``ParamOverride(source, changes)`` or a plain mapping of MatmulParams field names to
        values (the source is then your registered name). Tiles take ``(m, n, k)`` tuples.

    Built in: ``testing`` answers with the changes of the active ``override_matmul_params``
    context. Implement this for tweaks (one field for one shape) and for test fakes.
    """


@hookspec
def mmaplug_validate_params(
    params: MatmulParams, problem: MatmulProblem, device: Device, scheduler: str
) -> Sequence[Violation] | None:
    """Return every rule *params* break for *scheduler* on *device*; empty if none.

    Called on the base parameters and again on the final ones; every implementation is asked.
    Core raises one ``InvalidParamsError`` holding the violations of all plugins, each naming
    the plugin that supplied the offending value (or, in warning mode, drops that plugin's
    contribution and falls back to the default heuristic).

    :param scheduler: The chosen scheduler's name; return an empty list for one your rules
        do not cover.
    :returns: ``Violation(field, value, limit, message)`` values; the message says what the
        target allows and what to change.

    The chosen scheduler object's own ``rules`` are checked first, without this hook (they are
    blamed on the plugin that registered it). Implement this to add rules to any scheduler: a
    site's policy, a limit of your deployment.
    """


@hookspec
def mmaplug_adjust_params(
    params: MatmulParams, problem: MatmulProblem, device: Device, scheduler: str
) -> Sequence[Adjustment] | None:
    """Return the changes *scheduler* must force on valid *params*, or None.

    Called last, on the validated final parameters. Core applies each ``Adjustment`` and records
    it (field, old, new, reason) in ``KernelSpec.provenance``; ``mmaplug explain`` shows it and a
    ``ParamAdjustedWarning`` is issued when the old value came from a plugin other than the
    default heuristic. The result is validated again.

    :param scheduler: The chosen scheduler's name.
    :returns: ``Adjustment(field, old, new, reason)`` values, ``old`` being the current value.

    The chosen scheduler object's own ``adjustments`` are applied with these answers (a
    scheduler that cannot honour a legal value, e.g. stages capped by the K-loop length).
    Implement this to force a change on any scheduler's plans. Prefer a validation error: an
    adjustment is a last resort, never silent.
    """


# -------------------------------------------------------------------------------------------------
# Kernel building
# -------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def mmaplug_build_kernel(spec: KernelSpec, analysis: MatmulAnalysis) -> object | None:
    """Deprecated: build the kernel described by *spec* for the fusion described by *analysis*.

    Stops at first non-None result.

    Called by ``mp.compile`` after planning, for one more release, only when the chosen
    scheduler is no scheduler object (whose ``build`` replaces this hook, with the same
    artifact); an answer used gives a ``DeprecationWarning`` naming the plugin.

    :param spec: The plan: ``spec.scheduler``, ``spec.params``, ``spec.problem``,
        ``spec.device``.
    :param analysis: The translated fusion's bindings and ``EpilogueProgram``
        (``analysis.epilogue``), which the kernel must apply before storing.
    :returns: If ``spec.scheduler`` is yours, an artifact with ``kernel_name`` (str),
        ``ptx()`` (PTX text, no GPU needed) and ``launch(args: LaunchArgs)``; else None. Raise
        ``KernelBuildError`` from the underlying compiler error when building fails. An
        optional ``source()`` (the generated source, a str) feeds ``compiled.source`` and
        ``MMAPLUG_DUMP=source``; an optional ``cubin()`` (bytes: the main kernel as launches
        load it) feeds ``compiled.sass`` and ``MMAPLUG_DUMP=sass``, which otherwise link
        ``ptx()`` alone. An optional ``kernel_jobs()`` (a list of
        ``mmaplug.cuda.launching.KernelJob``: picklable, each builds one cubin your launches
        load through ``generated_kernel``) lets ``mp.prebuild`` build them in worker
        processes; without it your kernels build at their first launch.

    Implemented by scheduler plugins of the deprecated form; no default.
    """


@hookspec
def mmaplug_kernel_built(spec: KernelSpec, artifact: object) -> None:
    """Notify that *artifact* was built for *spec*.

    Called after every kernel built (by a scheduler's ``build`` or ``mmaplug_build_kernel``); the
    return value is ignored.

    :param spec: The plan the kernel was built from.
    :param artifact: What the scheduler returned.

    Implement this for logging, caching and profiling; do not modify either argument.
    """
