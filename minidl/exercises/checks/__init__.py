"""The checks of the exercises, one module per topic, in the order of the course."""

MODULES = (
    "autograd",
    "layers",
    "conv",
    "optim",
    "perf",
    "collectives",
    "data_parallel",
    "consistency",
    "compression",
    "pipeline",
    "tensor_parallel",
    "spatial",
    "data",
    "recompute",
    "sharding",
    "sync_batchnorm",
)
