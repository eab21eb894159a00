"""Kernel-source emission both schedulers share: the line emitter, epilogue programs, the staged
epilogue, the CTA tile order's decode (``grid``) and the fields every kernel config takes from a
plan (``kernel_config``).
"""

from typing import Any


def __getattr__(name: str) -> Any:
    """Names of the 0.1 module ``mmaplug.codegen``, for one release (``mmaplug.moved``)."""
    from mmaplug.moved import package_getattr

    return package_getattr(__name__, name)
