"""Old import path of ``minidl_app.launch`` (starting ranks moved to the application)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("minidl_app.launch")
