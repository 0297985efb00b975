"""Hidden checks: the instructor's own seeds and sizes for the exercises (never in a student tree).

``minidl exercise student`` does not copy this package; ``minidl exercise
grade`` runs its checks next to the visible ones. Each module registers its
checks with ``minidl.exercises.hidden_check`` and reuses the visible check's
comparisons (one home per oracle), with other inputs. Add a module's name to
``MODULES`` to include it.
"""

MODULES = (
    "layers",
    "optim",
    "collectives",
    "data",
    "pipeline",
    "spatial",
    "recompute",
    "sharding",
    "sync_batchnorm",
)
