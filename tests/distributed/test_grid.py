"""The process grid: parsing, refusals and coordinates here; the groups under mpiexec."""

import itertools

import pytest

from minidl.dist.grid import AXES, GridError, GridShape


def test_parse_fills_omitted_axes_with_one():
    shape = GridShape.parse("dp=2,tp=3")
    assert (shape.dp, shape.pp, shape.spatial, shape.tp) == (2, 1, 1, 3)
    assert shape.size == 6


@pytest.mark.parametrize(
    "text, words",
    [
        ("dp=2,xx=2", "'xx=2' is not AXIS=N"),
        ("dp2", "'dp2' is not AXIS=N"),
        ("dp=2,dp=3", "dp is given twice"),
        ("dp=two", "'two' is not a whole number"),
        ("dp=0", "whole number >= 1"),
        ("", "names no axis"),
    ],
)
def test_bad_grid_strings_are_refused_with_the_fix(text, words):
    with pytest.raises(GridError) as error:
        GridShape.parse(text)
    assert words in str(error.value)


def test_a_grid_that_does_not_fit_the_job_says_what_would():
    with pytest.raises(GridError) as error:
        GridShape(dp=2, tp=2).check_fits(6)
    message = str(error.value)
    assert "needs 4 ranks but the job has 6" in message and "dp=6" in message


def test_coordinates_are_row_major_with_tp_fastest_and_invert_rank_of():
    shape = GridShape(dp=2, pp=3, spatial=2, tp=2)
    ranks = [
        shape.rank_of(**dict(zip(AXES, index)))
        for index in itertools.product(*(range(e) for e in shape.extents))
    ]
    assert ranks == list(range(shape.size))
    assert all(shape.rank_of(**shape.coords(rank)) == rank for rank in range(shape.size))
    assert shape.coords(1) == {"dp": 0, "pp": 0, "spatial": 0, "tp": 1}


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("nprocs", (4, 6))
def test_every_grid_groups_the_ranks_the_formula_names(run_checks, nprocs):
    run_checks(nprocs, "grid")
