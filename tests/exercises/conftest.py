"""Fixtures of the exercise-mode tests: fake exercises registered for one test, then removed."""

import importlib
import sys

import pytest

from minidl import exercises

FAKE_MODULE = "tests.exercises.fake_checks"


@pytest.fixture
def fake_exercises(monkeypatch):
    """``{id: Exercise}`` of ``fake_checks.py``, registered for this test only."""
    exercises.catalogue()  # the real checks register first, into the registry that is kept
    monkeypatch.setattr(exercises, "_CATALOGUE", dict(exercises._CATALOGUE))
    sys.modules.pop(FAKE_MODULE, None)
    importlib.import_module(FAKE_MODULE)
    yield {e.id: e for e in exercises._CATALOGUE.values() if e.check.__module__ == FAKE_MODULE}
    sys.modules.pop(FAKE_MODULE, None)
