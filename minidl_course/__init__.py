"""The course tooling: the ``minidl exercise`` command, the grader, student trees, release,
submissions and the privacy search.

It sits above the library and the run application and uses both; neither imports it. The
exercise regions and their checks stay in the library (``minidl/reference``,
``minidl/exercises``), beside the code they grade.
"""
