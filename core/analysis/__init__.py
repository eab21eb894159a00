"""Fusion analysis: matmul patterns, the translation to MmaOp (one for every architecture), roles,
the MatmulProblem and the epilogue program.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    """Names of the 0.1 module ``mmaplug.analysis``, for one release (``mmaplug.moved``)."""
    from mmaplug.moved import package_getattr

    return package_getattr(__name__, name)
