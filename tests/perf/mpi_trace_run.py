"""Run by every rank under mpiexec (tests/perf/test_trace_mpi.py): trace, exchange, merge."""

import sys

import numpy as np

from minidl import dist
from minidl.perf import trace

comm = dist.init()
tracer = trace.enable(comm.rank)
with trace.span("forward", cat="forward"):
    sum(range(10_000))
with trace.span("allreduce", cat="comm", bytes=32):
    comm.allreduce(np.ones(8, dtype=np.float32), op="sum")
trace.instant("ssp gate", cat="wait", clock=comm.rank)
trace.disable()
trace.write_run_trace(tracer, sys.argv[1], comm)
print(f"TRACED rank {comm.rank}", flush=True)
