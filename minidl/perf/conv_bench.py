"""Old import path of ``minidl_app.conv_bench`` (``minidl bench conv``, now in the application)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("minidl_app.conv_bench")
