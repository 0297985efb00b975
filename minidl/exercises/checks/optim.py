"""Checks of the optim exercises."""
