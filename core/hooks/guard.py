"""The one way core calls plugin hooks: one implementation at a time, every fault named."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from typing import Any, Final, Literal, TypeVar

import pluggy

from mmaplug.errors import KernelBuildError, MatmulError, PluginError, UnsupportedFusionError
from mmaplug.hooks.manager import describe, fault, is_builtin

# What core does when a plugin raises or answers wrongly in each hook (docs/decisions.md, "Plugin
# faults"). None: there is no fallback, so the fault is a PluginError in every mode.
FALLBACKS: Final[dict[str, str | None]] = {
    "mmaplug_matmul_patterns": "its patterns are ignored",
    "mmaplug_translate_pattern": None,  # it may have half-rewritten the fusion
    "mmaplug_fusion_translated": "the notification is skipped",
    "mmaplug_scheduler_candidates": "its answer is ignored",
    "mmaplug_matmul_params": "using the default heuristic",
    "mmaplug_matmul_overrides": "its overrides are ignored; using the default heuristic",
    "mmaplug_validate_params": "its rules are not applied",
    "mmaplug_adjust_params": "its adjustments are not applied",
    "mmaplug_build_kernel": "the next builder is asked",
    "mmaplug_kernel_built": "the notification is skipped",
    # the scheduler objects: the hook, then each method (labels of ``scheduler_label``)
    "mmaplug_schedulers": "its schedulers are ignored",
    "mmaplug_schedulers (accepts)": "its answer is ignored",
    "mmaplug_schedulers (space)": "its schedulers are not used",
    "mmaplug_schedulers (rules)": "its schedulers are not used",
    "mmaplug_schedulers (adjustments)": "its adjustments are not applied",
    "mmaplug_schedulers (build)": None,  # the chosen scheduler must build its kernel
}
# Errors a hook's contract lets a plugin raise: they are verdicts, not faults, and propagate
# (with a note naming the plugin).
VERDICTS: Final[dict[str, tuple[type[MatmulError], ...]]] = {
    "mmaplug_matmul_patterns": (UnsupportedFusionError,),
    "mmaplug_translate_pattern": (UnsupportedFusionError,),
    "mmaplug_build_kernel": (KernelBuildError,),
    "mmaplug_schedulers (build)": (KernelBuildError,),
}

T = TypeVar("T")


class Skipped(enum.Enum):
    """What :meth:`Guard.ask` answers when the plugin gave no answer (dropped, or a fault)."""

    SKIPPED = "skipped"


SKIPPED: Final = Skipped.SKIPPED


def scheduler_label(scheduler: str, method: str) -> str:
    """The hook a scheduler object's *method* is named by in faults and warnings:
    ``mmaplug_schedulers (hopper.rules)``."""
    return f"mmaplug_schedulers ({scheduler}.{method})"


def _policy_key(hook: str) -> str:
    """The ``FALLBACKS`` / ``VERDICTS`` key of *hook*: a scheduler label loses its name."""
    head, dot, method = hook.rpartition(".")
    if dot and head.startswith("mmaplug_schedulers ("):
        return f"mmaplug_schedulers ({method}"
    return hook


class Guard:
    """Calls hooks of *pm* one implementation at a time, attributing answers and exceptions.

    A fault (an exception, or an answer the caller finds wrong through :meth:`fault`) of a
    third-party plugin is a ``PluginWarning`` and the hook's fallback (``FALLBACKS``); it is a
    ``PluginError`` naming plugin and hook in strict mode, when the hook has no fallback, or when
    the plugin is built in. Faulty plugins are then skipped by every later call (``dropped``).
    A scheduler object's methods are called the same way, through :meth:`ask`.
    """

    def __init__(self, pm: pluggy.PluginManager, *, strict: bool | None = None) -> None:
        self.pm = pm
        self.strict = bool(getattr(pm, "strict", False) if strict is None else strict)
        self.consulted: set[str] = set()
        self.dropped: set[str] = set()

    def call(
        self,
        hook: str,
        *,
        only: frozenset[str] | None = None,
        skip: frozenset[str] = frozenset(),
        needed: str = "",
        **kwargs: object,
    ) -> Iterator[tuple[str, object]]:
        """Yield ``(plugin, answer)`` for each implementation of *hook* that answers non-None.

        Implementations run in pluggy's order, each alone (wrappers and hook monitoring still
        apply); stop iterating to stop calling, as pluggy does for ``firstresult`` hooks.

        :param only: Ask only these plugins.
        :param skip: Do not ask these plugins.
        :param needed: A plugin whose fault has no fallback in this call (a PluginError).
        """
        caller = getattr(self.pm.hook, hook)
        impls = [i for i in caller.get_hookimpls() if not (i.hookwrapper or i.wrapper)]
        firstresult = bool(caller.spec and caller.spec.opts.get("firstresult"))
        for impl in reversed(impls):
            name = impl.plugin_name
            if name in self.dropped or name in skip or (only is not None and name not in only):
                continue
            self.consulted.add(name)
            subset = self.pm.subset_hook_caller(hook, [i.plugin for i in impls if i is not impl])
            try:
                result = subset(**kwargs)
            except VERDICTS.get(hook, ()) as verdict:
                verdict.add_note(f"raised by plugin {name!r} in {hook}")
                raise
            except Exception as error:
                if is_builtin(self.pm, name) and isinstance(error, MatmulError):
                    raise
                what = f"raised {type(error).__name__}: {error}"
                self.fault(name, hook, what, error, fallback=None if name == needed else "")
                continue
            if not firstresult:
                result = result[0] if result else None
            if result is not None:
                yield name, result

    def ask(
        self,
        plugin: str,
        label: str,
        function: Callable[..., T],
        *args: object,
        at: object = None,
    ) -> T | Literal[Skipped.SKIPPED]:
        """*function* (a method of *plugin*'s scheduler object, named by *label*, see
        :func:`scheduler_label`) called with *args*, its exceptions ruled on as a hook's.

        :param at: The plugin's function a warning points at (default: *function*).
        :returns: The answer, or ``SKIPPED`` when *plugin* was dropped or faulted (a warning);
            the caller checks the answer's kind and calls :meth:`fault` on a wrong one.
        """
        if plugin in self.dropped:
            return SKIPPED
        self.consulted.add(plugin)
        try:
            return function(*args)
        except VERDICTS.get(_policy_key(label), ()) as verdict:
            verdict.add_note(f"raised by plugin {plugin!r} in {label}")
            raise
        except Exception as error:
            if is_builtin(self.pm, plugin) and isinstance(error, MatmulError):
                raise
            what = f"raised {type(error).__name__}: {error}"
            self.fault(plugin, label, what, error, at=function if at is None else at)
            return SKIPPED

    def notify(self, hook: str, **kwargs: Any) -> None:
        """Call a notification hook; answers are ignored, faults ruled on."""
        for _ in self.call(hook, **kwargs):
            pass

    def fault(
        self,
        plugin: str,
        hook: str,
        what: str,
        cause: BaseException | None = None,
        *,
        cls: type[MatmulError] = PluginError,
        fallback: str | None = "",
        at: object = None,
    ) -> None:
        """Raise, or warn and drop *plugin*; *fallback* defaults to the hook's (``FALLBACKS``).

        :param at: The plugin's function a warning points at (default: its implementation of
            *hook*).
        """
        fallback = FALLBACKS.get(_policy_key(hook)) if fallback == "" else fallback
        fault(
            f"{hook}: plugin {describe(self.pm, plugin)} {what}",
            strict=self.strict or is_builtin(self.pm, plugin),
            plugin=plugin,
            hook=hook,
            fallback=fallback,
            cls=cls,
            cause=cause,
            pm=self.pm,  # a warning points at the plugin's implementation of the hook
            at=at,
        )
        self.dropped.add(plugin)


def shown(value: object) -> str:
    """A plugin's answer as a fault shows it: its repr, cut to 80 characters."""
    try:
        text = repr(value)
    except Exception as error:  # a hostile answer may not even print
        text = f"<unprintable: {type(error).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


def wrong(value: object, expected: str) -> str:
    """The text of a fault for an answer of the wrong kind."""
    return f"returned {shown(value)} ({type(value).__name__}); expected {expected}"
