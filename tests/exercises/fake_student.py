"""A stand-in for a student's file: the code the fake checks of ``fake_checks.py`` call."""

import os

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


def chatty():
    print("printed by the solution")
    os.write(1, b"written to file descriptor 1\n")
    return 1.0
