"""Tensor (model) parallelism: layers whose weights are split over the ranks of a group.

``functions.py``: the differentiable collectives and ``Split``; ``layers.py``: the
split ``Linear`` and ``Conv2d``; ``placement.py``: the rule that places a model's layers
(``plan``) and the parallel model (``TensorParallel``).
"""

from .functions import (
    TRAFFIC,
    Split,
    all_gather,
    class_parallel_cross_entropy,
    copy_to_group,
    gather_from_group,
    recv,
    reduce_from_group,
    reduce_scatter,
    send,
    split_to_group,
)
from .layers import (
    ColumnParallelLinear,
    FilterParallelConv2d,
    GroupParallelConv2d,
    InputChannelParallelConv2d,
    RowParallelLinear,
    ShardedModule,
)
from .placement import (
    BatchParallel,
    PlacementError,
    TensorParallel,
    one_weird_trick_plan,
    plan,
    tail_plan,
)

__all__ = [
    "TRAFFIC",
    "BatchParallel",
    "ColumnParallelLinear",
    "FilterParallelConv2d",
    "GroupParallelConv2d",
    "InputChannelParallelConv2d",
    "PlacementError",
    "RowParallelLinear",
    "ShardedModule",
    "Split",
    "TensorParallel",
    "all_gather",
    "class_parallel_cross_entropy",
    "copy_to_group",
    "gather_from_group",
    "one_weird_trick_plan",
    "plan",
    "recv",
    "reduce_from_group",
    "reduce_scatter",
    "send",
    "split_to_group",
    "tail_plan",
]
