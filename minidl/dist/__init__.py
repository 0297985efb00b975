"""Distributed minidl over MPI: communicators and allreduce algorithms.

``comm = minidl.dist.init()`` wraps ``MPI.COMM_WORLD``; ``comm.allreduce(x,
op="mean", algorithm="ring")`` reduces a NumPy/CuPy array in place. mpi4py
is imported by ``init()``, not by ``import minidl.dist``.
"""
from minidl.dist.collectives import ALLREDUCE_ALGORITHMS
from minidl.dist.comm import Communicator, Request, init
from minidl.dist.data_parallel import DistributedOptimizer

__all__ = ["ALLREDUCE_ALGORITHMS", "Communicator", "DistributedOptimizer", "Request", "init"]
