"""minidl's one source of randomness: initialisation, dropout, shuffling helpers.

``manual_seed(n)`` makes every later random draw reproducible. The state of
the CPU generator can be saved and restored as a JSON string (checkpoints
store data, never pickled objects).
"""

import json

import numpy as np

from . import backend

_generators = {"cpu": np.random.default_rng()}


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


def get_state():
    """The CPU generator's state as a JSON string."""
    return json.dumps(_generators["cpu"].bit_generator.state)


def set_state(state):
    """Restore a state returned by ``get_state``."""
    rng = np.random.default_rng()
    rng.bit_generator.state = json.loads(state)
    _generators.pop("cuda", None)
    _generators["cpu"] = rng
