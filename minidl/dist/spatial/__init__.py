"""Spatial parallelism: convolution and pooling split over image blocks, with halo exchange.

``spatial_parallel(model, group, height)`` runs a Sequential on ``group``'s ranks, each
holding a block of every image (``local_rows(x, group)``); ``plan_rows`` checks a split
before any work. The halo arithmetic and its byte count are in ``minidl.perf.halo_cost``.
"""

from minidl.dist.spatial.exchange import GatherRows, HaloExchange, SumOverGroup
from minidl.dist.spatial.layers import (
    SpatialParallel,
    local_rows,
    plan_rows,
    spatial_parallel,
    step_bytes,
)
from minidl.perf.halo_cost import SplitError, split_rows

__all__ = [
    "GatherRows",
    "HaloExchange",
    "SpatialParallel",
    "SplitError",
    "SumOverGroup",
    "local_rows",
    "plan_rows",
    "spatial_parallel",
    "split_rows",
    "step_bytes",
]
