"""Performance models and tools: counting, profiling, tracing and scalability prediction.

* ``count_model`` / ``minidl summary``: per-layer shapes, parameters, MACs,
  FLOPs, memory, and Ben-Nun & Hoefler's work and depth.
* ``minidl profile``: measured per-layer forward and backward times.
* ``trace``: Chrome-trace timelines of runs (``minidl train --trace``).
* ``minidl predict``: time per iteration, speedup and efficiency of
  data-parallel training on n nodes, and why scaling stalls.
* ``telemetry``: what distributed training measures (staleness, waiting, bytes
  on the wire), summed per epoch.
"""

from . import counters  # noqa: F401  (registers the per-layer counters)
from .costs import CONVENTIONS, COUNTERS, Counter, LayerCost, register
from .model_costs import ModelCosts, count_model

__all__ = [
    "CONVENTIONS",
    "COUNTERS",
    "Counter",
    "LayerCost",
    "register",
    "ModelCosts",
    "count_model",
]
