"""``minidl bench allreduce`` under mpiexec: the table it prints is consistent with itself."""

import re

import pytest

import minidl.dist as dist

pytestmark = pytest.mark.mpi


def test_bench_allreduce_table(mpi_run):
    result = mpi_run(2, "-m", "minidl", "bench", "allreduce", "--sizes", "1K,64K", "--repeats", "3")
    assert not result.timed_out and result.returncode == 0, result.output
    assert re.search(r"alpha = [\d.]+ us, beta = [\d.]+ ns/B", result.output), result.output
    rows = [
        line.split() for line in result.output.splitlines() if re.match(r"(1 KiB|64 KiB)\s", line)
    ]
    assert [row[:2] for row in rows] == [["1", "KiB"], ["64", "KiB"]], result.output
    for row in rows:
        measured = [float(row[2 + 2 * i]) for i in range(len(dist.ALLREDUCE_ALGORITHMS))]
        assert all(t > 0 for t in measured), row
        fastest, pick = row[-2], row[-1]
        assert measured[dist.ALLREDUCE_ALGORITHMS.index(fastest)] == min(measured), row
        assert pick in dist.ALLREDUCE_ALGORITHMS[1:], row
