"""Planning: MatmulParams, the hookspecs (the plugin author's manual), the plugin manager, the
Scheduler protocol and the contract of its kernels (``artifact``: KernelArtifact, LaunchArgs),
and the planner (the only caller of ``pm.hook``).
"""
