"""The command line's spellings of library objects: ``--compress qsgd:4`` -> ``QSGD(levels=4)``."""

from minidl.dist.compression import QSGD, Compressor, Float16, Sign, TernGrad, TopK

SPEC_HELP = (
    "none, fp16, qsgd:LEVELS[:BUCKET], terngrad[:BUCKET], topk:RATIO or "
    "sign[:BUCKET] (e.g. qsgd:4, topk:0.01)"
)


def parse_compression(text):
    """The compressor that ``text`` spells (see ``SPEC_HELP``); "none" is ``Compressor()``."""
    name, *fields = str(text).split(":")
    try:
        if name == "none" and not fields:
            return Compressor()
        if name == "fp16" and not fields:
            return Float16()
        if name == "qsgd" and 1 <= len(fields) <= 2:
            return QSGD(*map(int, fields))
        if name == "terngrad" and len(fields) <= 1:
            return TernGrad(*map(int, fields))
        if name == "sign" and len(fields) <= 1:
            return Sign(*map(int, fields))
        if name == "topk" and len(fields) == 1:
            return TopK(float(fields[0]))
    except ValueError as exc:
        raise ValueError(f"compression {text!r}: {exc}; use {SPEC_HELP}") from None
    raise ValueError(f"unknown compression {text!r}; use {SPEC_HELP}")
