"""The CUDA runtime of generated kernels (driver, cubins and their cache, launches, streams,
tensor maps) and the inline-PTX intrinsics they import (``intrinsics``, ``sm90``, ``mathfuncs``).

``cuda`` imports ``mmaplug.sim``, never the reverse: the intrinsic modules take their
simulator emulations only in ``binding.bind`` (and only under Numba's CUDA simulator),
``launching`` runs simulated launches inside ``sim.simulator.simulated_launch``, and ``tensormap``
makes the simulator's maps with ``sim.tensormaps``.
"""
