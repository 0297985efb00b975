"""Injected slowness for experiments and tests: deterministic stragglers and seeded jitter.

A straggler factor F for rank R makes R an F-times-slower worker: after
computing each step it sleeps (F - 1) times that step's compute time. A
jitter of S seconds adds, on every worker and step, an exponential sleep of
mean S seeded by (seed, rank), so a run's delays are reproducible. Sleeping
(not spinning) frees the core, as separate machines would.
"""

import time

import numpy as np

from ..train.callbacks import Callback
from ..train.config import ConfigError, option


class Straggler(Callback):
    """The delays of one rank: ``pause(compute_seconds)`` sleeps and returns how long.

    ``stragglers`` maps ranks to factors (>= 1); as a loop callback it pauses after backward.
    """

    def __init__(self, rank, stragglers=None, jitter=0.0, seed=0, sleep=time.sleep):
        if jitter < 0:
            raise ConfigError(f"{option('jitter')} must be >= 0 seconds, got {jitter}")
        self.factor = float(dict(stragglers or {}).get(rank, 1.0))
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

    def after_backward(self, compute_seconds):
        return self.pause(compute_seconds)
