"""A stand-in for a student's file: the code the fake checks of ``fake_checks.py`` call."""

from minidl.exercises import Unimplemented


def divide(a, b):
    return a / b


def assert_positive(x):
    assert x > 0


def spin():
    while True:
        pass


def stub(exercise_id):
    raise Unimplemented(exercise_id, "a stubbed region")
