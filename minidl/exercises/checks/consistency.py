"""Checks of the consistency exercises."""
