"""Checks of the layers exercises."""
