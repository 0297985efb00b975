"""Which exercise regions ran, and under which exercise's check.

``minidl exercise student DIR --trace`` writes a tree in which every region
starts with ``record_region("x.y", "path:line")``. When the environment
variable ``MINIDL_EXERCISE_TRACE`` names a file, each region appends one line
to it the first time it runs under a check: ``check id, region id, region
location``, tab-separated. The grader says which check is running
(``running``), in process and on every MPI rank. A check that ran only its
own exercise's regions cannot be changed by stubbing any other exercise:
that is how the tests prove "stubbing one exercise fails exactly its check".
"""

import os
from contextlib import contextmanager

ENV = "MINIDL_EXERCISE_TRACE"

_running = None  # id of the check now running in this process
_recorded = set()  # (check, region location) pairs already written


@contextmanager
def running(exercise_id):
    """Attribute the regions that run inside this block to the check of ``exercise_id``."""
    global _running
    previous, _running = _running, exercise_id
    try:
        yield
    finally:
        _running = previous


def record_region(exercise_id, where):
    """Append ``check, region, where`` to the trace file (once per check and region)."""
    path = os.environ.get(ENV)
    if not path or (_running, where) in _recorded:
        return
    _recorded.add((_running, where))
    with open(path, "a") as out:
        out.write(f"{_running}\t{exercise_id}\t{where}\n")


def read_trace(path):
    """``{check id: {(region id, where), ...}}`` from a trace file.

    Checks that ran no region are absent.
    """
    ran = {}
    if os.path.exists(path):
        with open(path) as lines:
            for line in lines:
                check, region, where = line.rstrip("\n").split("\t")
                ran.setdefault(check, set()).add((region, where))
    return ran
