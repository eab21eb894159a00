"""The plugin host: the hookspecs (the plugin author's manual), the plugin manager, the guard
every hook call goes through, the checks of a plugin's hook functions at registration, and where
a warning about a plugin points.

It imports only the foundation modules at run time, so every stage (analysis's pattern and
translation hooks, planning's heuristic and scheduler hooks) may call plugins through it; the
hookspecs' type-only imports name the types of those stages.
"""
