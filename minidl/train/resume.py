"""Old import path of ``minidl_app.resume`` (resuming moved to the application)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("minidl_app.resume")
