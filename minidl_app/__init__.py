"""The run application: the ``minidl`` command and what only it needs: run folders, their
locks and records, resuming, the hang watchdog, starting ranks (``run``, ``rundir``,
``metrics``, ``resume``, ``watchdog``, ``launch``) and the convolution benchmark.

It sits above the library (``minidl``), which it uses through the library's public names;
``import minidl`` loads nothing of it, and the library names it only where the two ``fit``
functions that moved here keep their old names (``minidl.train.fit``, ``minidl.dist.fit``).
"""
