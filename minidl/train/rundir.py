"""Old import path of ``minidl_app.rundir`` (the run folder moved to the application)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("minidl_app.rundir")
