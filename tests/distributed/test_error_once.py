"""An error under mpiexec is printed once for the job, by rank 0, unless ranks differ."""

import pytest

pytestmark = pytest.mark.mpi

REPORT = """
import sys
from minidl.dist import init
from minidl.dist.job import report_once
comm = init()
lines = sys.argv[1].split(",")
if lines[comm.rank]:
    report_once(lines[comm.rank])
"""


def lines_of(output):
    return output.splitlines()


def test_a_flag_or_grid_wrong_for_every_rank_is_printed_once(mpi_run):
    grid = mpi_run(3, "-m", "minidl", "train", "--grid", "pp=13", "--subset", "64", timeout=60)
    assert grid.output.count("pp=13 cuts the model's 12 layers into 13 stages") == 1, grid.output
    flag = mpi_run(2, "-m", "minidl", "train", "--dist", "sync", "--lr", "-1", timeout=60)
    assert flag.returncode == 2 and flag.output.count("is not a finite number > 0") == 1


def test_lines_that_differ_by_rank_name_their_ranks(mpi_run):
    result = mpi_run(3, "-c", REPORT, "same,same,other", timeout=60)
    assert result.returncode == 0, result.output
    assert sorted(lines_of(result.output)) == ["rank 2: other", "ranks 0, 1: same"], result.output


def test_a_rank_failing_alone_names_itself_after_the_wait(mpi_run):
    result = mpi_run(2, "-c", REPORT, ",alone", timeout=60)
    assert result.returncode == 0, result.output
    assert lines_of(result.output) == ["rank 1: alone"], result.output
