"""The fusion IR and its frontend: tensors, dtypes, ops, ``FusionDefinition``, symbolic extents,
and ``evaluate`` (the oracle).
"""
