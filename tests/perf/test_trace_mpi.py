"""A timeline of a real multi-rank run: every rank's events in one trace.json."""
import json
import os
import pathlib

import pytest

launch = pytest.importorskip("minidl.dist.launch")

SCRIPT = pathlib.Path(__file__).with_name("mpi_trace_run.py")
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.mpi
def test_ranks_write_one_merged_trace(tmp_path):
    reason = launch.mpi_unavailable_reason()
    if reason:
        pytest.skip(reason)
    path = os.environ.get("PYTHONPATH")
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT),
           "OPENBLAS_NUM_THREADS": "1"}
    run = launch.run_mpi(3, [str(SCRIPT), str(tmp_path)], timeout=60, env=env)
    assert not run.timed_out and run.returncode == 0, run.output
    assert sorted(os.listdir(tmp_path)) == ["trace.json"]          # the parts are merged away
    with open(tmp_path / "trace.json") as f:
        events = json.load(f)["traceEvents"]
    for cat in ("forward", "comm", "wait"):
        assert {e["pid"] for e in events if e.get("cat") == cat} == {0, 1, 2}
    assert min(e["ts"] for e in events if "ts" in e) == 0
