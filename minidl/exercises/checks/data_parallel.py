"""Checks of the data_parallel exercises."""
