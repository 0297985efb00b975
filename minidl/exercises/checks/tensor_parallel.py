"""Checks of the tensor-parallelism exercises (11.x): the column/row pair and the grid's groups.

Oracles that run no exercise region: the serial pair of layers in float64 on
every rank (minidl's ``Linear`` and autograd), minidl's tuned
``ColumnParallelLinear``/``RowParallelLinear``, and minidl's ``Grid``, whose
groups the student's must equal. The pair is checked on 3 ranks with 7 hidden
units (blocks of 3, 2, 2), and must send exactly one allreduce each way.
"""

import numpy as np

import minidl as md
from minidl import dist
from minidl import functional as F
from minidl import layers as L
from minidl.dist import grid as tuned_grid
from minidl.dist import tensor as tp
from minidl.dist.tensor import functions as tuned_functions
from minidl.dist.tensor import layers as tuned_layers
from minidl.exercises import exercise, expect_close, expect_equal
from minidl.exercises.checks.collectives import expect_on_every_rank
from minidl.exercises.checks.tuned import call_watching, expect_left_alone, forbids
from minidl.exercises.strict_comm import StrictComm
from minidl.reference.dist import tensor_parallel as reference

PATH = "minidl/reference/dist/tensor_parallel.py"
N, C_IN, HIDDEN, C_OUT = 4, 5, 7, 3
TOL = 1e-12
TUNED_TP = forbids(tuned_functions, tuned_layers, name="minidl's tuned tensor parallelism")
WHY = "x, the weights and the saved activation h stay the layer's, and dy is shared"


def serial_pair():
    """The two float64 layers, the input and dL/dy, the same on every rank."""
    md.manual_seed(11)
    first, second = L.Linear(C_IN, HIDDEN).to("float64"), L.Linear(HIDDEN, C_OUT).to("float64")
    rng = np.random.default_rng(11)
    return first, second, rng.standard_normal((N, C_IN)), rng.standard_normal((N, C_OUT))


def blocks(comm, first, second):
    """This rank's W1_r, b1_r and W2_r, cut as the tuned layers cut them."""
    column, row = tp.ColumnParallelLinear(first, comm), tp.RowParallelLinear(second, comm)
    return column, row, column.weight.data, column.bias.data, row.weight.data


def expect_one_allreduce(counting, way):
    expect_equal(f"allreduces in the {way} pass of the pair", counting.allreduces, 1)


@exercise(
    "11.1",
    "Megatron's column/row pair: forward with one allreduce",
    path=PATH,
    ranks=3,
    hint="compute this rank's block of the hidden layer with no message; multiply it by "
    "this rank's columns of W2 and sum the partial outputs over the ranks once; add b2 after",
)
@TUNED_TP
def check_column_row_forward(comm):
    first, second, x, _ = serial_pair()
    column, row, w1, b1, w2 = blocks(comm, first, second)
    counting = StrictComm(comm)
    y, h = reference.column_row_forward(counting, x, w1, b1, w2, second.bias.data)
    want = second(F.tanh(first(md.Tensor(x)))).data
    tuned_h = F.tanh(column(md.Tensor(x)))
    tuned = row(tuned_h).data

    def verify():
        expect_one_allreduce(counting, "forward")
        expect_close("y against the serial layers", y, want, rtol=0, atol=TOL)
        expect_close("y against minidl's tuned pair", y, tuned, rtol=0, atol=TOL)
        expect_close("this rank's block of h", h, tuned_h.data, rtol=0, atol=TOL)

    expect_on_every_rank(comm, verify)


@exercise(
    "11.2",
    "Megatron's column/row pair: backward with one allreduce",
    path=PATH,
    ranks=3,
    hint="the weight gradients of this rank's blocks need no message; only dx sums "
    "every rank's da_r W1_r, in one allreduce",
)
@TUNED_TP
def check_column_row_backward(comm):
    first, second, x, g = serial_pair()
    _, _, w1, b1, w2 = blocks(comm, first, second)
    xt = md.Tensor(x.copy(), requires_grad=True)
    second(F.tanh(first(xt))).backward(g)
    h = np.tanh(x @ w1.T + b1)
    counting = StrictComm(comm)
    inputs = {"comm": counting, "x": x, "w1": w1, "w2": w2, "h": h, "dy": g}
    grads, changed = call_watching(reference.column_row_backward, inputs, free=("comm",))
    dx, dw1, db1, dw2, db2 = grads
    rows = tp.Split(HIDDEN, comm.size).slice(comm.rank)

    def verify():
        expect_left_alone("the pair's backward", changed, WHY)
        expect_one_allreduce(counting, "backward")
        expect_close("dx", dx, xt.grad, rtol=0, atol=TOL)
        expect_close("dW1, this rank's rows", dw1, first.weight.grad[rows], rtol=0, atol=TOL)
        expect_close("db1, this rank's block", db1, first.bias.grad[rows], rtol=0, atol=TOL)
        expect_close("dW2, this rank's columns", dw2, second.weight.grad[:, rows], 0, TOL)
        expect_close("db2", db2, second.bias.grad, rtol=0, atol=TOL)

    expect_on_every_rank(comm, verify)


@exercise(
    "11.3",
    "The grid's communicators: a data-parallel and a tensor-parallel group by Split",
    path=PATH,
    ranks=4,
    hint="rank = d*T + t: the ranks with the same d form the tensor-parallel group, "
    "those with the same t the data-parallel one; split by that colour, keyed by the other",
)
@forbids(tuned_grid.Grid, name="minidl's tuned Grid")
def check_grid_groups(comm):
    results = []
    for dp, size in ((2, 2), (1, 4), (4, 1)):
        dp_group, tp_group = reference.grid_groups(comm, dp, size)
        grid = dist.Grid(comm, dp=dp, tp=size)
        for axis, mine in (("dp", dp_group), ("tp", tp_group)):
            theirs = grid.group(axis)
            what = f"dp={dp},tp={size}: the world ranks of this rank's {axis} group, in order"
            got, expected = mine.allgather_object(comm.rank), theirs.allgather_object(comm.rank)
            results.append((what, got, expected))

    def verify():
        for what, got, expected in results:
            expect_equal(what, got, expected)

    expect_on_every_rank(comm, verify)
