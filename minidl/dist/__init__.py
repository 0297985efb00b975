"""Distributed minidl over MPI: communicators, allreduce, parameter servers, compression.

``comm = minidl.dist.init()`` wraps ``MPI.COMM_WORLD`` (mpi4py is imported by ``init()``,
not by ``import minidl.dist``); ``comm.allreduce(x, op="mean", algorithm="ring")`` reduces
a NumPy/CuPy array in place. ``DistributedOptimizer`` is synchronous data parallelism,
``ZeroOptimizer`` the same with sharded optimizer state, gradients and parameters (ZeRO
stages 1, 2 and 3), ``CompressedOptimizer`` with a gradient compressor; ``make_session``
runs the other consistency models (bsp, ssp:S, asp, avg:H, easgd);
``convert_sync_batchnorm(model, group)`` normalises its batch-norm layers over a group;
``verify(model, grid=...)`` compares K steps of a layout with one process, tensor by tensor.
``fit`` trains as ``minidl train --dist`` does, writing a run folder; it belongs to the
application (``minidl_app.run.dist_fit``) and is looked up there when first used.
"""

import importlib

from minidl.dist.collectives import ALLREDUCE_ALGORITHMS
from minidl.dist.comm import Communicator, Request, init
from minidl.dist.compression import CompressedOptimizer, GradientEncoder
from minidl.dist.config import DistConfig, DistMode
from minidl.dist.consistency import make_session
from minidl.dist.data_parallel import DistributedOptimizer, NonFiniteGradientError
from minidl.dist.grid import Grid, GridError, GridShape
from minidl.dist.pipeline import PipelineTrainer
from minidl.dist.sync_batchnorm import convert_sync_batchnorm
from minidl.dist.verify import Verdict, verify
from minidl.dist.zero import ZeroOptimizer

__all__ = [
    "ALLREDUCE_ALGORITHMS",
    "Communicator",
    "CompressedOptimizer",
    "DistConfig",
    "DistMode",
    "DistributedOptimizer",
    "GradientEncoder",
    "Grid",
    "GridError",
    "GridShape",
    "NonFiniteGradientError",
    "PipelineTrainer",
    "Request",
    "Verdict",
    "ZeroOptimizer",
    "convert_sync_batchnorm",
    "fit",
    "init",
    "make_session",
    "verify",
]


def __getattr__(name):
    """``fit``, an old name of the application's ``minidl_app.run.dist_fit`` (PEP 562)."""
    if name == "fit":
        return importlib.import_module("minidl_app.run").dist_fit
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
