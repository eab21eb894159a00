"""The runtime: ``mp.compile``, compiled fusions and their kernels, segmentation, symbolic-shape
specialization, prebuild and dumps."""
