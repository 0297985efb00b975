"""``verify`` checks, run under ``mpiexec -n N python verify_checks.py CHECK``.

Layouts the suite proves exact pass with every tensor compared (outputs, gradients, weights
and optimizer states: counted from the model); each mistake injected into a layout is named
by its first difference: the step, what it is, and the tensor the mistake touches first.
"""

import sys

from mpi_checks import run_named_checks

from minidl import functional as F
from minidl import layers as L
from minidl.dist import DistributedOptimizer
from minidl.dist.pipeline.executor import PipelineExecutor
from minidl.dist.tensor import TensorParallel
from minidl.dist.tensor.layers import RowParallelLinear
from minidl.dist.verify import verify
from minidl.layers import leaves
from minidl.models import build

SMALL = dict(steps=2, batch_size=8, subset=128)


def lenet():
    return build("lenet5", num_classes=10, in_channels=1)


def batch_normed():
    """A small network with batch norm after its first convolution."""
    return L.Sequential(
        L.Conv2d(1, 4, 5, stride=2),
        L.BatchNorm2d(4),
        L.ReLU(),
        L.Flatten(),
        L.Linear(4 * 12 * 12, 10),
    )


def tensors_a_step(model, states_per_parameter):
    """Outputs of every layer, every gradient, weight and buffer, and the update rule's state."""
    params = len(list(model.parameters()))
    return len(leaves(model)) + len(model.state_dict()) + params * (1 + states_per_parameter)


def assert_equal(verdict, model, states=1):
    assert verdict.equal, "\n".join(map(str, verdict.differences[:5]))
    assert verdict.compared == tensors_a_step(model, states), verdict.compared
    assert verdict.worst < 1e-12, verdict.worst


def assert_first(verdict, step, kind, name):
    assert not verdict.equal, "the injected mistake went unnoticed"
    first = verdict.differences[0]
    assert (first.step, first.kind, first.name) == (step, kind, name), str(first)


def check_layouts_on_two_ranks_equal_one_process(comm):
    for fields in (
        {},
        {"grid": "tp=2"},
        {"grid": "spatial=2"},
        {"grid": "pp=2", "micro_batches": 2},
        {"grid": "pp=2", "micro_batches": 4, "schedule": "gpipe"},
        {"grid": "pp=2", "micro_batches": 2, "schedule": "naive"},
        {"grid": "pp=2", "micro_batches": 4, "schedule": "interleaved"},
        {"zero": 2},
        {"zero": 3},
        {"recompute": 2},
    ):
        assert_equal(verify("lenet5", **SMALL, **fields), lenet())
    assert_equal(verify("lenet5", **SMALL, zero=1, optimizer="adam"), lenet(), states=2)


def check_grids_on_four_ranks_equal_one_process(comm):
    for grid in ("dp=2,tp=2", "spatial=2,tp=2"):
        assert_equal(verify("lenet5", **SMALL, grid=grid), lenet())
    for grid in ("dp=2,pp=2", "pp=2,tp=2"):
        assert_equal(verify("lenet5", **SMALL, grid=grid, micro_batches=2), lenet())


def check_batch_norm_without_sync_is_named(comm):
    """Each replica normalises its shard alone: the batch norm's output is the first to differ;
    with ``sync_bn`` the statistics are the whole batch's and everything matches."""
    assert_first(verify(batch_normed, **SMALL), 0, "output", "1")
    assert_equal(verify(batch_normed, **SMALL, sync_bn=True), batch_normed())


def image_normed():
    """Batch norm on image blocks: after a convolution, and after the second one's."""
    return L.Sequential(
        L.Conv2d(1, 4, 3, padding=1),
        L.BatchNorm2d(4),
        L.ReLU(),
        L.MaxPool2d(2),
        L.Conv2d(4, 4, 3),
        L.BatchNorm2d(4),
        L.ReLU(),
        L.Flatten(),
        L.Linear(4 * 12 * 12, 10),
    )


def check_batch_norm_on_image_blocks_equals_one_process(comm):
    """Spatial ranks hold rows of the same images: their statistics (and with ``sync_bn`` the
    replicas') are joined, and gamma's and beta's gradients summed over the blocks."""
    grids = {2: ["spatial=2"], 4: ["spatial=2,tp=2", "dp=2,spatial=2"]}[comm.size]
    for grid in grids:
        sync = grid.startswith("dp")
        assert_equal(verify(image_normed, **SMALL, grid=grid, sync_bn=sync), image_normed())


def dropped():
    """Two dropout layers (p 0.5 and 0.3) between fully connected ones."""
    return L.Sequential(
        L.Flatten(),
        L.Linear(784, 32),
        L.ReLU(),
        L.Dropout(0.5),
        L.Linear(32, 32),
        L.ReLU(),
        L.Dropout(0.3),
        L.Linear(32, 10),
    )


def check_dropout_equals_one_process_on_every_layout(comm):
    """Masks keyed by sample, step and layer: replicas, micro-batches, tp blocks and
    one-weird-trick's half batches draw one process's masks."""
    layouts = {
        2: [
            {},
            {"grid": "tp=2"},
            {"grid": "pp=2", "micro_batches": 2},
            {"grid": "pp=2", "micro_batches": 4, "schedule": "interleaved"},
            {"zero": 3},
        ],
        4: [{"grid": "dp=2,pp=2", "micro_batches": 2}, {"grid": "dp=2,tp=2"}],
    }[comm.size]
    for fields in layouts:
        assert_equal(verify(dropped, **SMALL, **fields), dropped())
    if comm.size == 2:
        owt = verify("alexnet-small", **SMALL, grid="tp=2", tp_layout="one-weird-trick")
        alexnet = build("alexnet-small", num_classes=10, in_channels=1)
        assert_equal(owt, alexnet)


def check_a_row_parallel_layer_without_its_allreduce_is_named(comm):
    forward = RowParallelLinear.forward
    RowParallelLinear.forward = lambda self, x: F.linear(x, self.weight, self.bias)  # partial
    try:
        verdict = verify("lenet5", **SMALL, grid="tp=2")
    finally:
        RowParallelLinear.forward = forward
    placed = leaves(TensorParallel(lenet(), comm).module)
    row = next(name for name, layer in placed if isinstance(layer, RowParallelLinear))
    assert_first(verdict, 0, "output", row)


def check_a_gradient_averaged_twice_is_named(comm):
    weigh = DistributedOptimizer.set_batch_weight

    def twice(self, local_count, global_count):
        weigh(self, local_count, global_count)
        self._weight /= self.comm.size

    DistributedOptimizer.set_batch_weight = twice
    try:
        verdict = verify("lenet5", **SMALL)
    finally:
        DistributedOptimizer.set_batch_weight = weigh
    last = list(lenet().named_parameters())[-1][0]  # backward meets the last parameter first
    assert_first(verdict, 0, "gradient", last)


def check_a_pipeline_that_drops_a_micro_batch_gradient_is_named(comm):
    backward = PipelineExecutor._backward

    def dropping(self, m, c):
        params = list(self.chunks[c].parameters())
        kept = [p.grad for p in params]
        backward(self, m, c)
        if m == 1:  # the micro-batch's input gradient goes on; its weight gradients are lost
            for p, grad in zip(params, kept):
                p.grad = grad

    PipelineExecutor._backward = dropping
    try:
        verdict = verify("lenet5", **SMALL, grid="pp=2", micro_batches=2)
    finally:
        PipelineExecutor._backward = backward
    last = list(lenet().named_parameters())[-1][0]
    assert_first(verdict, 0, "gradient", last)


if __name__ == "__main__":
    run_named_checks(globals(), sys.argv[1:])
