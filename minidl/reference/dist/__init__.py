"""Distributed training in textbook form: allreduce algorithms, gradient buckets, and more.

Importing it registers the allreduce algorithms of ``allreduce.py`` with
minidl's tuned ones, as ``"ring_reference"``, ``"butterfly_reference"``,
``"tree_reference"``, ``"rabenseifner_reference"`` and ``"hierarchical_reference"``:
``comm.allreduce(x, algorithm="ring_reference")``.
"""

from minidl.dist.collectives import register_reference
from minidl.reference.dist import allreduce

for _name in ("ring", "butterfly", "tree", "rabenseifner", "hierarchical"):
    register_reference(f"{_name}_reference", getattr(allreduce, _name))
