"""The run application: the ``minidl`` command and what only it needs.

It sits above the library (``minidl``), which it uses through the library's public names and
never the reverse: ``import minidl`` loads nothing of it.
"""
