"""Old import path of ``minidl_course.grader`` (the course tooling moved out of the library)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("minidl_course.grader")
