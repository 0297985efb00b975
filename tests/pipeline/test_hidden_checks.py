"""The hidden checks of the pipeline exercises (10.1-10.4): registered, passed by the
reference, and failed by a wrong answer that only their sizes reveal."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from minidl.dist.pipeline import schedules as tuned
from minidl.exercises import ExerciseFailure, hidden_catalogue
from minidl.exercises.hidden import pipeline as hidden
from minidl.reference.dist import pipeline as reference
from minidl_app.launch import mpi_unavailable_reason

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_pipeline_exercise_has_a_hidden_check():
    ids = [check.id for check in hidden_catalogue()]
    assert all(ids.count(f"10.{n}") == 1 for n in (1, 2, 3, 4))


def test_the_reference_passes_the_hidden_schedule_checks():
    hidden.gpipe_deep()
    hidden.one_f_one_b_deep()
    hidden.bubble_fraction_deep()


def test_a_gpipe_right_only_for_the_visible_sizes_fails_the_hidden_check(monkeypatch):
    """Stages 6 and up get the 1F1B order: the visible P <= 5 cannot see it, P = 7 does."""
    gpipe = reference.gpipe

    def gpipe_up_to_six_stages(s, p, m):
        return tuned.one_f_one_b(p, m)[s] if s >= 6 else gpipe(s, p, m)

    monkeypatch.setattr(reference, "gpipe", gpipe_up_to_six_stages)
    with pytest.raises(ExerciseFailure, match="GPipe, P=7, M=4, stage 6"):
        hidden.gpipe_deep()


def test_a_bubble_ignoring_chunks_beyond_three_fails_the_hidden_check(monkeypatch):
    """(P-1)/(vM+P-1) with v capped at 3: right for every visible case, wrong at V = 4."""
    formula = reference.bubble_fraction

    def capped(p, m, v=1):
        return formula(p, m, min(v, 3))

    monkeypatch.setattr(reference, "bubble_fraction", capped)
    with pytest.raises(ExerciseFailure, match="v=4 chunks"):
        hidden.bubble_fraction_deep()


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_the_reference_passes_the_hidden_weight_stashing_check_on_three_ranks():
    reason = mpi_unavailable_reason()
    if reason:
        pytest.skip(reason)
    done = subprocess.run(
        [sys.executable, "-m", "minidl", "exercise", "check", "10.4", "--hidden", "--json"],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=140,
        check=False,
    )
    results = json.loads(done.stdout)["results"]
    assert [(r["id"], bool(r["test"]), r["status"]) for r in results] == [
        ("10.4", False, "passed"),
        ("10.4", True, "passed"),
    ], done.stderr[-2000:]
