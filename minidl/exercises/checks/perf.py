"""Checks of the perf exercises."""
