"""Numba's CUDA simulator, opt-in: Python emulations of the intrinsics and the simulated launch."""
