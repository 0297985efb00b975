"""``algo="auto"``: pick an algorithm per shape and pass, by a fixed rule or by timing.

By default the pick is a fixed rule (``rule_choice``), so a seeded run is reproducible on
every machine (the algorithms round differently): what timing found on the benchmark layers
(benchmarks/RESULTS.md), Winograd F(4x4, 3x3) where it applies and the layer has at least
``RULE_MIN_CHANNELS`` input and output channels per group, im2col elsewhere.

Timing (``configure(enabled=True)``, ``MINIDL_CONV_AUTOTUNE=1``, or ``minidl train
--no-deterministic``) times the applicable algorithms once per (geometry, dtype, device,
pass) and keeps the fastest, as cuDNN's algorithm search does (Chetlur et al. 2014): a
warm-up, then the best of ``repeats`` runs; a candidate whose first timed run is already
``give_up`` times slower than the best so far is not repeated.

Either way, algorithms whose workspace exceeds ``workspace_limit`` bytes are not candidates
(``MINIDL_CONV_WORKSPACE_MB``, default 1024 MB, so that tuning never tries, say, the FFT's
4.5 GB for AlexNet conv1 at batch 128; ``none`` removes it), and a forward pass keeps state
for backward only within it. The candidates are ``registry.AUTO_CANDIDATES``.
"""

import os
import time
from dataclasses import dataclass, field

import numpy as np

from .. import backend
from .registry import IMPLEMENTATIONS, applicable

RULE_FAST = "winograd_f4x4_3x3"
RULE_DEFAULT = "im2col"
RULE_MIN_CHANNELS = 16


@dataclass
class Choice:
    """The outcome of tuning one key: the winner and what every candidate measured."""

    algorithm: str
    seconds: dict = field(default_factory=dict)  # name -> best measured time
    excluded: dict = field(default_factory=dict)  # name -> why it was not a candidate
    layers: set = field(default_factory=set)  # labels of the layers that used it


DEFAULT_WORKSPACE_MB = 1024


def _env_limit():
    mb = os.environ.get("MINIDL_CONV_WORKSPACE_MB", str(DEFAULT_WORKSPACE_MB))
    return None if mb in ("", "none") else int(float(mb) * 2**20)


class Autotuner:
    """Per-process cache of measured algorithm choices."""

    def __init__(self):
        self.enabled = os.environ.get("MINIDL_CONV_AUTOTUNE", "0") == "1"
        self.workspace_limit = _env_limit()
        self.repeats = 3
        self.give_up = 4.0
        self.choices = {}

    def configure(self, enabled=None, workspace_limit=..., repeats=None):
        """Change settings; ``workspace_limit=None`` removes the limit. Clears the cache."""
        if enabled is not None:
            self.enabled = bool(enabled)
        if workspace_limit is not ...:
            self.workspace_limit = workspace_limit
        if repeats is not None:
            self.repeats = int(repeats)
        self.choices.clear()

    def known(self, geom, dtype, device, pass_):
        """The implementation already chosen for this key, or None."""
        choice = self.choices.get((geom, np.dtype(dtype), device, pass_))
        return None if choice is None else IMPLEMENTATIONS[choice.algorithm]

    def choose(self, geom, dtype, device, pass_, run, label=None):
        """The implementation for this key; the first call times ``run(impl)`` per candidate."""
        key = (geom, np.dtype(dtype), device, pass_)
        if key not in self.choices:
            self.choices[key] = self._tune(geom, dtype, device, pass_, run)
        choice = self.choices[key]
        if label is not None:
            choice.layers.add(label)
        return IMPLEMENTATIONS[choice.algorithm]

    def rule_pick(self, geom, dtype, device, pass_):
        """The implementation the fixed rule picks for this key (what a deterministic run
        uses), without timing or caching anything."""
        candidates, _ = self._candidates(geom, dtype, device, pass_)
        return IMPLEMENTATIONS[rule_choice(geom.per_group(), candidates)]

    def _candidates(self, geom, dtype, device, pass_):
        """The applicable algorithms whose workspace fits, and why the others do not."""
        group = geom.per_group()
        need = {
            impl: impl.workspace_bytes(group, pass_, dtype, device) for impl in applicable(group)
        }
        limit = self.workspace_limit
        fits = [impl for impl, nbytes in need.items() if limit is None or nbytes <= limit]
        if not fits:  # nothing fits: the leanest algorithm, and say so
            fits = [min(need, key=need.get)]
        excluded = {
            impl.name: f"workspace {nbytes / 2**20:.1f} MB > limit"
            for impl, nbytes in need.items()
            if impl not in fits
        }
        return fits, excluded

    def _tune(self, geom, dtype, device, pass_, run):
        """The fixed rule's pick, or the fastest candidate when timing is on."""
        candidates, excluded = self._candidates(geom, dtype, device, pass_)
        if not self.enabled:
            return Choice(rule_choice(geom.per_group(), candidates), {}, excluded)
        seconds = {}
        for impl in candidates:
            best = min(seconds.values(), default=None)
            seconds[impl.name] = self._measure(impl, run, device, best)
        return Choice(min(seconds, key=seconds.get), seconds, excluded)

    def _measure(self, impl, run, device, best):
        """Best of ``repeats`` timed runs after a warm-up (plans, caches, page faults)."""
        times = []
        for i in range(1 + self.repeats):
            start = time.perf_counter()
            run(impl)
            backend.synchronize(device)
            if i > 0:
                times.append(time.perf_counter() - start)
                if best is not None and times[0] > self.give_up * best:
                    break
        return min(times)

    def report(self, layer_names=None):
        """A table: per key, the layers, the chosen algorithm and every candidate's time;
        ``layer_names`` ({key: [name, ...]}) replaces the labels and picks and orders the keys."""
        if not self.choices:
            return "conv autotuner: no convolution has run with algo='auto' yet"
        lines = [
            f"conv autotuner ({'timing' if self.enabled else 'fixed rule, no timing'}; "
            f"workspace limit {self._limit_text()})"
        ]
        keys = (
            self.choices if layer_names is None else [k for k in layer_names if k in self.choices]
        )
        for key in keys:
            geom, dtype, device, pass_ = key
            choice = self.choices[key]
            names = choice.layers if layer_names is None else layer_names[key]
            lines.append(
                f"{geom.describe()} {dtype} {device} {pass_}: {choice.algorithm}"
                f"   [layers: {', '.join(sorted(names)) or '-'}]"
            )
            for name, sec in sorted(choice.seconds.items(), key=lambda item: item[1]):
                mark = "*" if name == choice.algorithm else " "
                lines.append(f"    {mark} {name:20s} {sec * 1e3:9.3f} ms")
            for name, why in choice.excluded.items():
                lines.append(f"      {name:20s} not a candidate: {why}")
        return "\n".join(lines)

    def _limit_text(self):
        return "none" if self.workspace_limit is None else f"{self.workspace_limit / 2**20:.1f} MB"


def rule_choice(group, candidates):
    """The fixed pick among ``candidates`` for a per-group geometry (see the module doc)."""
    names = [impl.name for impl in candidates]
    wide = min(group.in_channels, group.out_channels) >= RULE_MIN_CHANNELS
    if RULE_FAST in names and wide:
        return RULE_FAST
    return RULE_DEFAULT if RULE_DEFAULT in names else names[0]


TUNER = Autotuner()
