"""``mp.compile``: a fusion to what runs it on one device.

One kernel (``mmaplug.runtime.kernels``), one plan per shape class for symbolic extents
(``mmaplug.runtime.specialize``), or segments where no kernel takes the fusion whole
(``mmaplug.runtime.segmented_fusion``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from mmaplug.analysis.translate import find_matmul_patterns
from mmaplug.errors import UnsupportedFusionError
from mmaplug.hooks.manager import get_plugin_manager
from mmaplug.ir.fusion import Fusion, as_fusion
from mmaplug.ir.symbolic import symbolic_dims
from mmaplug.planning.device import Device, get_device
from mmaplug.runtime.segmented_fusion import compile_concrete, segmented
from mmaplug.runtime.specialize import SymbolicFusion

if TYPE_CHECKING:
    from mmaplug.hooks.manager import PluginManager
    from mmaplug.runtime.compiled_fusion import CompiledFusion
    from mmaplug.runtime.segmented_fusion import SegmentedFusion, SymbolicSegments


def compile(  # noqa: A001 - the contract's name (mp.compile)
    fusion: Fusion,
    device: Device | str | None = None,
    *,
    pm: PluginManager | None = None,
    overrides: Mapping[str, object] | None = None,
) -> CompiledFusion | SymbolicFusion | SegmentedFusion | SymbolicSegments:
    """Plan, schedule and build *fusion* or a FusionDefinition for *device* (presets: no GPU).

    A fusion with symbolic (-1) extents gives a ``SymbolicFusion``, planned per call's shapes.
    A fusion no kernel takes whole (analysis refuses it, or no scheduler takes its several
    matmuls) gives a ``SegmentedFusion``: kernels for its matmuls, framework ops for the rest
    (``SymbolicSegments``, segmented per call's shapes, when its extents are symbolic).
    """
    fusion = as_fusion(fusion, "mp.compile")
    pm = pm or get_plugin_manager()
    target = get_device(device)
    if not symbolic_dims(fusion):
        return compile_concrete(fusion, target, pm=pm, overrides=overrides)
    if len(find_matmul_patterns(fusion, pm=pm)) > 1:  # no scheduler plans several yet
        return segmented(fusion, target, pm=pm, overrides=overrides, refused=None)
    try:
        return SymbolicFusion(fusion, target, pm=pm, overrides=overrides)
    except UnsupportedFusionError as refused:
        return segmented(fusion, target, pm=pm, overrides=overrides, refused=refused)
