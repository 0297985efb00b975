"""Checks of the collectives exercises."""
