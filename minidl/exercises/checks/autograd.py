"""Checks of the autograd exercises."""
