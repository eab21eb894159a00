"""Numba's CUDA simulator, opt-in: Python emulations of the intrinsics and the simulated launch.

``sim`` imports nothing of ``mmaplug.cuda`` (``cuda`` imports ``sim``: see its docstring) and
nothing of Numba at import, and patches nothing until ``simulator.simulated_launch`` runs.
Lowest first: ``threads`` (what is read of the simulator's threads and arrays), ``warp`` (the
warp exchange), ``block`` (per-block sm_90 state), ``tensormaps`` (the simulator's TMA maps),
``intrinsics``, ``wgmma`` and ``sm90`` (the emulations of the names ``mmaplug.cuda.intrinsics``
and ``mmaplug.cuda.sm90`` declare), ``simulator`` (its patches and the launch), ``cluster``.
"""
