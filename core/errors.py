"""The error tree: every exception mmaplug raises derives from :class:`MatmulError`."""

from __future__ import annotations

from typing import Any


class MatmulError(Exception):
    """Root of every error mmaplug raises."""


class FusionError(MatmulError):
    """A fusion definition is malformed (shapes, dtypes, arguments)."""


class UnsupportedFusionError(MatmulError):
    """A well-formed fusion that no matmul scheduler can take (a reject reason)."""


class UsageError(MatmulError):
    """The library was called or configured wrongly (bad names, environment, arguments)."""


class PluginError(MatmulError):
    """A plugin failed to load, raised or answered wrongly; ``plugin`` and ``hook`` name it."""

    def __init__(self, message: str, *, plugin: str = "", hook: str = "") -> None:
        super().__init__(message)
        self.plugin = plugin
        self.hook = hook

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, {"plugin": self.plugin, "hook": self.hook}))


class PluginResultError(PluginError):
    """A plugin answered a hook with a value of the wrong kind."""


class UnknownParamError(MatmulError, KeyError):
    """An override names a field that MatmulParams does not have."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want the plain message.
        return str(self.args[0]) if self.args else ""


class InvalidParamsError(MatmulError):
    """Parameters break one or more rules; ``violations`` lists every one of them."""

    def __init__(self, message: str, violations: tuple[Any, ...] = ()) -> None:
        super().__init__(message)
        self.violations = tuple(violations)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.args[0], self.violations))


class OverrideConflictError(MatmulError):
    """Two plugins set one field to different values."""

    def __init__(self, message: str, *, field: str = "", sources: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.field = field
        self.sources = tuple(sources)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, {"field": self.field, "sources": self.sources}))


class NoSchedulerError(MatmulError):
    """No scheduler plugin accepted the problem; ``rejections`` holds each one's reason."""

    def __init__(self, message: str, rejections: tuple[Any, ...] = ()) -> None:
        super().__init__(message)
        self.rejections = tuple(rejections)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.args[0], self.rejections))


class UnsupportedTargetError(MatmulError):
    """The device cannot run what was asked (compute capability, missing GPU, resources)."""


class KernelBuildError(MatmulError):
    """Generating or compiling a kernel failed; raised ``from`` the underlying error."""


class LaunchError(MatmulError):
    """Inputs handed to a compiled fusion do not match it (shape, dtype, device, kind)."""


class DeclinedLaunchError(LaunchError):
    """A built kernel cannot run on these particular tensors (e.g. TMA needs 16-byte aligned
    addresses); ``execute`` runs them on a kernel planned without ``scheduler``."""

    def __init__(self, scheduler: str, reason: str) -> None:
        super().__init__(f"the {scheduler} kernel declines these tensors: {reason}")
        self.scheduler = scheduler
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.scheduler, self.reason))


class MatmulWarning(UserWarning):
    """Root of every warning mmaplug emits."""


class PluginWarning(MatmulWarning):
    """A plugin misbehaved and was skipped or replaced (non-strict mode); names plugin and hook."""

    def __init__(self, message: str, *, plugin: str = "", hook: str = "") -> None:
        super().__init__(message)
        self.plugin = plugin
        self.hook = hook


class ParamAdjustedWarning(MatmulWarning):
    """A scheduler changed a plugin's value; provenance records from what, to what and why."""


class EnvWarning(MatmulWarning):
    """An environment variable has a value mmaplug does not understand; the default is used."""


class FallbackWarning(MatmulWarning):
    """A compiled fusion ran tensors its kernel declined on another scheduler's kernel."""


class CacheWarning(EnvWarning):
    """The disk cache failed at a path (named with the fault); the kernel is built in memory."""


def _rebuild(cls: type[Exception], args: tuple[Any, ...], attrs: dict[str, Any]) -> Exception:
    error = cls(*args)
    for name, value in attrs.items():
        setattr(error, name, value)
    return error
