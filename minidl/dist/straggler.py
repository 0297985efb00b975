"""Injected slowness for experiments and tests: deterministic stragglers and seeded jitter.

``--straggler RANK:FACTOR`` makes rank RANK a FACTOR-times-slower worker: after
computing each step it sleeps (FACTOR - 1) times that step's compute time.
``--jitter SECONDS`` adds, on every worker and every step, an exponentially
distributed sleep of mean SECONDS drawn from a generator seeded by
(seed, rank), so a run's delays are reproducible. Sleeping (not spinning)
frees the core, so on a 2-core machine the ratios between consistency
models mean what they would mean on separate machines.
"""
import time

import numpy as np


def parse_straggler(text):
    """``"RANK:FACTOR"`` -> (rank, factor); FACTOR >= 1."""
    try:
        rank, factor = text.split(":")
        rank, factor = int(rank), float(factor)
    except ValueError:
        raise ValueError(f"--straggler {text!r}: expected RANK:FACTOR, e.g. 1:2 "
                         "(rank 1 runs two times slower)") from None
    if rank < 0 or not factor >= 1:
        raise ValueError(f"--straggler {text!r}: RANK must be >= 0 and FACTOR >= 1")
    return rank, factor


class Straggler:
    """The delays of one rank: ``pause(compute_seconds)`` sleeps and returns how long."""

    def __init__(self, rank, stragglers=(), jitter=0.0, seed=0, sleep=time.sleep):
        if jitter < 0:
            raise ValueError(f"--jitter must be >= 0 seconds, got {jitter}")
        factors = dict(parse_straggler(s) if isinstance(s, str) else s for s in stragglers)
        self.factor = factors.get(rank, 1.0)
        self.jitter = float(jitter)
        self.rng = np.random.default_rng([int(seed), int(rank), 0x57A6])
        self.sleep = sleep
        self.slept = 0.0

    @property
    def active(self):
        return self.factor > 1 or self.jitter > 0

    def delay(self, compute_seconds):
        """The sleep owed after a step that computed for ``compute_seconds``."""
        extra = (self.factor - 1.0) * compute_seconds
        if self.jitter > 0:
            extra += float(self.rng.exponential(self.jitter))
        return extra

    def pause(self, compute_seconds):
        """Sleep ``delay(compute_seconds)``; returns the seconds asked for."""
        extra = self.delay(compute_seconds)
        if extra > 0:
            self.sleep(extra)
            self.slept += extra
        return extra
