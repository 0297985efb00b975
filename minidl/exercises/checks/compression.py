"""Checks of the compression exercises."""
