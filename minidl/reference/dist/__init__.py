"""Textbook distributed training: one concept per file (see ``minidl.reference``)."""
