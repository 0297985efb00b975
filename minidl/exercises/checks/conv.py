"""Checks of the conv exercises."""
