"""The pipeline options of a training run, checked before any work.

``--grid ...,pp=P --micro-batches M --schedule NAME [--chunks V]`` fits when the
model has a layer for each of the P*V stages, M >= 1, the batch makes M
micro-batches, and the schedule can be built for P, M and V (interleaved: M a
multiple of P). Each refusal says what would fit.
"""

from ...train.config import ConfigError, option
from .schedules import SCHEDULES, build


def default_chunks(schedule):
    """Model chunks per rank when none are given: 2 for interleaved, else 1."""
    return 2 if schedule == "interleaved" else 1


def check_pipeline(layers, ranks, micro_batches, schedule, chunks, batch_size):
    """Refuse a pipeline that cannot run; returns the chunks per rank it will use."""
    if schedule not in SCHEDULES:
        raise ConfigError(
            f"{option('schedule')} {schedule!r} does not exist; choose one of "
            f"{', '.join(SCHEDULES)}"
        )
    if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or micro_batches < 1:
        raise ConfigError(
            f"{option('micro_batches')} {micro_batches!r}: a batch is cut into M >= 1 "
            "micro-batches (1: no micro-batching)"
        )
    chunks = default_chunks(schedule) if chunks is None else chunks
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise ConfigError(f"{option('chunks')} {chunks!r}: each rank holds V >= 1 model chunks")
    if ranks > layers:
        raise ConfigError(
            f"pp={ranks} cuts the model's {layers} layers into {ranks} stages, one layer at "
            f"least each: use pp={layers} or fewer"
        )
    if ranks * chunks > layers:
        raise ConfigError(
            f"{option('chunks')} {chunks} on pp={ranks} needs {ranks * chunks} stages but the "
            f"model has {layers} layers: use {option('chunks')} {layers // ranks} or fewer"
        )
    if batch_size < micro_batches:
        raise ConfigError(
            f"{option('batch_size')} {batch_size} cannot make {micro_batches} micro-batches: "
            f"use {option('micro_batches')} {batch_size} or fewer, or a larger batch"
        )
    try:
        build(schedule, ranks, micro_batches, chunks)
    except ValueError as exc:
        raise ConfigError(f"{option('schedule')} {schedule}: {exc}") from None
    return chunks
