"""Distributed minidl over MPI: communicators, allreduce, parameter servers, compression.

``comm = minidl.dist.init()`` wraps ``MPI.COMM_WORLD``; ``comm.allreduce(x,
op="mean", algorithm="ring")`` reduces a NumPy/CuPy array in place. mpi4py
is imported by ``init()``, not by ``import minidl.dist``.
``DistributedOptimizer`` is synchronous data parallelism (``--dist sync``);
``make_session`` runs the other consistency models (bsp, ssp:S, asp, avg:H,
easgd; see ``consistency.py``); ``make_compressor`` builds the gradient
compressors of ``compression.py``.
"""
from minidl.dist.collectives import ALLREDUCE_ALGORITHMS
from minidl.dist.comm import Communicator, Request, init
from minidl.dist.compression import GradientEncoder, make_compressor
from minidl.dist.config import DistConfig, DistMode
from minidl.dist.consistency import make_session
from minidl.dist.data_parallel import DistributedOptimizer
from minidl.dist.fit import fit

__all__ = ["ALLREDUCE_ALGORITHMS", "Communicator", "DistConfig", "DistMode",
           "DistributedOptimizer", "GradientEncoder", "Request", "fit", "init", "make_compressor",
           "make_session"]
