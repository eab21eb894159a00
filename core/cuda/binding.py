"""Where the simulator binding happens: an intrinsic module's declared names become its inline-PTX
intrinsics, or, under Numba's CUDA simulator (which cannot run inline PTX), Python emulations.

Each intrinsic module (``intrinsics``, ``sm90``, ``mathfuncs``) declares its names once, as
documented stubs listed in its ``__all__``, and ends with one ``bind`` call. Generated kernels
import the names from those modules in both modes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from numba.cuda.core import config

__all__ = ["bind"]


def bind(
    namespace: dict[str, Any],
    intrinsics: Callable[[], Mapping[str, Any]],
    emulations: Callable[[], Mapping[str, Any]],
) -> None:
    """Bind each name of ``namespace["__all__"]`` (a module's globals) to ``intrinsics()``'s
    value of that name, or under the simulator to ``emulations()``'s (called only then).

    An ImportError names any declared name left without an implementation, and any intrinsic
    made for a name that is not declared.
    """
    names = namespace["__all__"]
    simulated = bool(config.ENABLE_CUDASIM)
    made = emulations() if simulated else intrinsics()
    kind = "emulation" if simulated else "intrinsic"
    missing = sorted(set(names) - set(made))
    extra = [] if simulated else sorted(set(made) - set(names))
    if missing or extra:
        raise ImportError(
            f"{namespace['__name__']}: no {kind} for the declared {missing}"
            + (f"; {kind}s of undeclared names {extra}" if extra else "")
        )
    namespace.update({name: made[name] for name in names})
