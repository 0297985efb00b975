"""The run application: the ``minidl`` command and what only it needs: run folders, their
locks and records, resuming, the hang watchdog, starting ranks (``run``, ``rundir``,
``metrics``, ``resume``, ``watchdog``, ``launch``) and the convolution benchmark.

It sits above the library (``minidl``), which it uses through the library's public names and
never the reverse: ``import minidl`` loads nothing of it.
"""
