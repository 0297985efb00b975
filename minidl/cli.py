"""Old import path of the ``minidl`` command, which moved to ``minidl_app.cli`` (the run
application, above the library): ``minidl.cli`` and ``minidl.cli.<module>`` are its modules."""

import importlib
import pkgutil
import sys

_cli = importlib.import_module("minidl_app.cli")
sys.modules[__name__] = _cli
for _module in pkgutil.iter_modules(_cli.__path__):
    _name = _module.name
    sys.modules[f"{__name__}.{_name}"] = importlib.import_module(f"minidl_app.cli.{_name}")
