"""minidl's one source of randomness: initialisation, dropout, shuffling helpers.

``manual_seed(n)`` makes every later random draw reproducible. The state of
the CPU generator can be saved and restored as a JSON string (checkpoints
store data, never pickled objects); where every stream stands can be saved and
restored in memory (``snapshot``, ``restore``: a recomputed forward draws again).
"""

import contextlib
import json

import numpy as np

from . import backend

_generators = {"cpu": np.random.default_rng()}
_samples = {"keys": None, "draws": 0}  # the current batch's per-sample keys (set_sample_keys)


def manual_seed(seed):
    """Seed the generators of every device (CPU now, the GPU's on first use)."""
    _generators.clear()
    _generators["cpu"] = np.random.default_rng(seed)
    _generators["seed"] = seed


def get_rng(xp=np):
    """The generator for arrays of module ``xp`` (NumPy's or CuPy's Generator)."""
    if xp is np:
        return _generators["cpu"]
    if "cuda" not in _generators:
        seed = int(_generators["cpu"].integers(2**63))
        _generators["cuda"] = backend.xp_for("cuda").random.default_rng(seed)
    return _generators["cuda"]


def set_sample_keys(keys):
    """Draw the per-sample random numbers of the next step (dropout masks) from one stream per
    row, seeded by the row's key (e.g. ``(seed, epoch, dataset index)``) and the draw's number
    within the step; ``None``: from the shared generator again. Keyed by sample, the masks do
    not depend on how a global batch is split over ranks."""
    _samples.update(keys=None if keys is None else key_array(keys), draws=0)


def key_array(keys):
    """``keys`` (one sequence of whole numbers per row) as an int64 (rows, k) array."""
    keys = np.asarray(keys, dtype=np.int64)
    return keys.reshape(len(keys), -1 if len(keys) else 0)


def batch_keys(seed, epoch, indices):
    """The keys ``(seed, epoch, index)`` of a batch's samples (``indices``: dataset indices)."""
    return np.column_stack(np.broadcast_arrays(seed, epoch, np.asarray(indices, np.int64)))


def sample_draws(rows, stream=None):
    """The ``SampleDraws`` of the next draw when keys of ``rows`` samples are set
    (``set_sample_keys``), each key extended by ``stream``; None otherwise (a batch of another
    size). ``stream``: the drawing layer's number in the serial model (``number_streams``),
    so a stage or a segment run alone draws what the whole forward draws there; None: the
    step's draws are counted."""
    keys = _samples["keys"]
    if keys is None or len(keys) != rows:
        return None
    if stream is None:
        stream, _samples["draws"] = _samples["draws"], _samples["draws"] + 1
    return SampleDraws(np.column_stack((keys, np.full(len(keys), stream, np.int64))))


GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio, splitmix64's increment


def _mix(z):
    """splitmix64's finaliser (Steele, Lea & Flood 2014) on uint64 arrays: a bijection whose
    outputs of consecutive inputs pass as independent uniform 64-bit words."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class SampleDraws:
    """A ``numpy.random.Generator`` stand-in for a batch's transforms: a draw of ``size``
    (n, ...) gives row i numbers of its own stream, keyed by ``keys[i]`` (e.g. ``(seed,
    epoch, dataset index)``) and the draw's number, so a sample is augmented alike on any
    rank. Word j of draw c of row i is mix(h_i + (2^32 c + j + 1) G), h_i the mixed key
    (a counter-based generator: the whole batch in a few array operations)."""

    def __init__(self, keys):
        keys = key_array(keys).astype(np.uint64)
        self.rows = np.zeros(len(keys), np.uint64)
        with np.errstate(over="ignore"):
            for column in keys.T:
                self.rows = _mix(self.rows ^ (column + GOLDEN))
        self.draws = 0

    def _uniform(self, size, words=1):
        """Uniform floats in [0, 1), shape ``size`` = (rows, ...), ``words`` per number."""
        shape = (size,) if isinstance(size, int) else tuple(size or ())
        if not shape or shape[0] != len(self.rows):
            raise ValueError(
                f"per-sample draws take size=(rows, ...) with rows = {len(self.rows)}, "
                f"got size={size!r}"
            )
        count = words * int(np.prod(shape[1:], dtype=np.int64))
        counters = (np.uint64(self.draws) << np.uint64(32)) + np.arange(
            1, count + 1, dtype=np.uint64
        )
        self.draws += 1
        with np.errstate(over="ignore"):
            bits = _mix(self.rows[:, None] + counters[None, :] * GOLDEN)
        uniform = (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53
        return uniform.reshape(shape[0], words, *shape[1:])

    def random(self, size=None, dtype=np.float64):
        return self._uniform(size)[:, 0].astype(dtype, copy=False)

    def integers(self, low, high=None, size=None, dtype=np.int64):
        low, high = (0, low) if high is None else (low, high)
        return (low + np.floor(self._uniform(size)[:, 0] * (high - low))).astype(dtype)

    def uniform(self, low=0.0, high=1.0, size=None):
        return low + (high - low) * self._uniform(size)[:, 0]

    def standard_normal(self, size=None, dtype=np.float64):
        """Box-Muller: sqrt(-2 ln(1 - u1)) cos(2 pi u2)."""
        u = self._uniform(size, words=2)
        normal = np.sqrt(-2.0 * np.log1p(-u[:, 0])) * np.cos(2.0 * np.pi * u[:, 1])
        return normal.astype(dtype, copy=False)

    def normal(self, loc=0.0, scale=1.0, size=None):
        return loc + scale * self.standard_normal(size)


@contextlib.contextmanager
def sample_rows(start, stop):
    """Within the block, the keys of rows ``start:stop`` of the batch only (a micro-batch)."""
    keys = _samples["keys"]
    _samples["keys"] = None if keys is None else keys[start:stop]
    try:
        yield
    finally:
        _samples["keys"] = keys


def number_streams(model):
    """Give each random layer of ``model`` (its ``Dropout``s, in order) its own ``stream``
    number: a sample's draws then depend on the layer, not on what ran before it."""
    layers = [m for m in model.modules() if hasattr(m, "stream")]
    for number, layer in enumerate(layers):
        layer.stream = number
    return model


class Snapshot:
    """Where every stream stood (``snapshot``): each generator and its state, the sample keys
    and their draw count. Not a tuple, so a graph that keeps one (a recomputed segment's) does
    not count its keys and generator states as activations (``perf.graph_memory``)."""

    __slots__ = ("streams", "samples")

    def __init__(self, streams, samples):
        self.streams, self.samples = streams, samples


def snapshot():
    """Where every stream stands, for ``restore``: activation recomputation draws a forward's
    numbers again."""
    streams = {
        name: (generator, _copied_state(generator))
        for name, generator in _generators.items()
        if name in ("cpu", "cuda")
    }
    return Snapshot(streams, dict(_samples))


def restore(saved):
    """Put every stream back where ``snapshot`` found it: the next draws repeat the ones made
    after it (a GPU generator made since is dropped, to be seeded from the CPU stream again)."""
    streams, samples = saved.streams, saved.samples
    _generators.pop("cuda", None)
    for name, (generator, state) in streams.items():
        if isinstance(generator, np.random.Generator):
            generator.bit_generator.state = state
        else:
            generator.bit_generator._state[...] = state
        _generators[name] = generator
    _samples.update(samples)


def _copied_state(generator):
    """A copy of ``generator``'s state: NumPy's as a dict, CuPy's as its device array."""
    if isinstance(generator, np.random.Generator):
        return generator.bit_generator.state
    return generator.bit_generator._state.copy()


def get_state():
    """The CPU generator's state as a JSON string."""
    return json.dumps(_generators["cpu"].bit_generator.state)


def set_state(state):
    """Restore a state returned by ``get_state``."""
    rng = np.random.default_rng()
    rng.bit_generator.state = json.loads(state)
    _generators.pop("cuda", None)
    _generators["cpu"] = rng
