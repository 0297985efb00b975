"""Tensor (model) parallelism: layers whose weights are split over the ranks of a group.

``functions.py`` holds the differentiable collectives (each backward is its
forward's adjoint), ``layers.py`` the column/row-parallel ``Linear`` and the
filter/input-channel-parallel ``Conv2d``, ``loss.py`` the class-parallel
cross-entropy, ``partition.py`` how a dimension is split (uneven sizes allowed),
``placement.py`` the rule that places a model's layers (``TensorParallel``).
"""

from .functions import (
    TRAFFIC,
    all_gather,
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
from .loss import class_parallel_cross_entropy
from .partition import Partition
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
    "Partition",
    "PlacementError",
    "RowParallelLinear",
    "ShardedModule",
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
