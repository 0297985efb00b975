"""Did a run finish? Read from its folder, for batch scripts and for after a lost node.

A launcher does not always say that a job failed: Open MPI's exits 0 when it
loses a node's daemon, and a node that dies takes its ranks' messages with
it, while the surviving ranks are killed by the launcher at once (within
50 ms on the emulated cluster, ``benchmarks/RESULTS.md``), before they can
write anything (unless launched to keep them: ``docs/cluster.md``, When a node
fails). The run folder says it instead:

- **finished**: its last epoch record is the ``epochs`` of its ``config.json``;
- **aborted**: its last record is ``"kind": "aborted"``, written by rank 0
  when minidl itself ended the run, with the reason (the hang watchdog:
  which ranks and hosts stopped answering; a diverged run: which epoch);
- **stopped**: neither; its processes were killed from outside (a lost node
  taken down by the launcher, the batch system, a kill signal).

``minidl report --check RUN`` prints one line per run and exits 1 unless
every run finished.
"""

import json
import os

from .config import option
from .metrics import read_metrics


def run_status(path):
    """(finished, line): whether the run in folder ``path`` finished, and one line saying so."""
    try:
        with open(os.path.join(path, "config.json")) as f:
            epochs = json.load(f).get("epochs")
        records = read_metrics(os.path.join(path, "metrics.jsonl"), drop_torn_tail=True)
    except FileNotFoundError:
        return False, f"{path}: no run here (no config.json or metrics.jsonl)"
    done = [r["epoch"] for r in records if r.get("kind") == "epoch"]
    last = done[-1] if done else 0
    checkpoint = os.path.join(path, "checkpoint.npz")
    resume = (
        f"; once the nodes are fixed, continue with {option('resume')} {checkpoint}"
        if os.path.exists(checkpoint)
        else "; no checkpoint was written: start it again"
    )
    if records and records[-1].get("kind") == "aborted":
        return False, f"{path}: aborted after epoch {last} of {epochs}: {records[-1]['reason']}"
    if last == epochs:
        return True, f"{path}: finished, {last} epochs"
    return False, (
        f"{path}: did not finish: stopped after epoch {last} of {epochs} with no record of why "
        f"(its processes were killed: by the launcher after it lost a node, which its output "
        f"names, by the batch system, or by a signal){resume}"
    )


_when_aborted = []


def when_aborted(record):
    """Have ``record(reason)`` called when this process ends the job (``job_aborted``);
    returns a function that undoes it. Rank 0 records the reason in its run folder."""
    _when_aborted.append(record)
    return lambda: _when_aborted.remove(record)


def job_aborted(reason):
    """This process is about to end the job for ``reason``: record it where asked."""
    for record in list(_when_aborted):
        try:
            record(reason)
        except Exception:  # an abort must go on, whatever the disk says
            pass
