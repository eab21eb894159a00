"""The runtime: ``mp.compile``, segmentation, symbolic-shape specialization, prebuild and dumps."""
