"""The optimizer template: ``step()`` = hooks (clipping, weight decay) + one rule per parameter.

Every rule of Ben-Nun & Hoefler's Table 3 has the form w <- w + u(g, state, t)
(Alg. 1, line 4). Subclasses implement ``update(w, g, state)`` in place on
the parameter's array; state arrays are created lazily with ``zeros_like``,
so one optimizer runs on NumPy and CuPy parameters alike.

Hooks, in PyTorch's order: clipping by the global norm (Pascanu et al. 2013;
Ben-Nun & Hoefler 2019, §3.2: g <- g * thres / ||g|| when ||g|| > thres) runs on the raw
gradients; then weight decay adds lambda * w to each gradient (L2 /
Tikhonov regularisation, Ben-Nun & Hoefler 2019, §3.2).
"""

import math
import numbers

import numpy as np

from ..autograd import Tensor, checked_state_value, no_grad
from ..backend import empty_like, get_array_module
from ..chunks import chunk_threads
from ..parallel import parallel_for


def clip_grad_norm_(params, max_norm: float) -> float:
    """Scale all gradients by max_norm / (||g|| + 1e-6) when the global norm ||g|| exceeds max_norm.

    Returns the norm before clipping. Gradients are replaced, not modified in
    place (a gradient array may be shared).
    """
    params = [p for p in params if p.grad is not None]
    total = math.sqrt(sum(float((p.grad.astype(np.float64) ** 2).sum()) for p in params))
    if total > max_norm:
        scale = max_norm / (total + 1e-6)
        for p in params:
            p.grad = p.grad * p.grad.dtype.type(scale)
    return total


class Optimizer:
    """Base class: holds the parameters, the hyper-parameters and per-parameter state."""

    hyper_names = ("lr", "weight_decay")

    def __init__(
        self,
        params,
        lr: float,
        weight_decay: float = 0.0,
        clip_grad_norm: float | None = None,
        **hyper,
    ):
        """``hyper``: the rule's own hyper-parameters (momentum, betas...), kept as attributes;
        every name in ``hyper_names`` is then checked (``check_hyper``)."""
        self.params = list(params)
        if not self.params:
            raise ValueError(
                f"{type(self).__name__}: got an empty parameter list; pass model.parameters()"
            )
        for i, p in enumerate(self.params):
            if not isinstance(p, Tensor) or not p.requires_grad:
                raise TypeError(
                    f"{type(self).__name__}: parameter {i} is not a Tensor with requires_grad=True"
                )
        if len({id(p) for p in self.params}) != len(self.params):
            raise ValueError(f"{type(self).__name__}: a parameter appears twice in the list")
        self.lr, self.weight_decay = lr, weight_decay
        for name, value in hyper.items():
            setattr(self, name, value)
        self.check_hyper()
        if clip_grad_norm is not None and clip_grad_norm <= 0:
            raise ValueError(f"{type(self).__name__}: clip_grad_norm must be positive")
        self.clip_grad_norm = clip_grad_norm
        self.state = [{} for _ in self.params]

    def zero_grad(self):
        """Forget the gradients (set them to None) before the next backward."""
        for p in self.params:
            p.grad = None

    def step(self):
        """Apply one update to every parameter that has a gradient; when the parameters are
        large (``chunks.chunk_threads``), several at once on ``parallel_for``'s threads,
        largest first (each parameter's update is independent: the same bits)."""
        with no_grad():
            if self.clip_grad_norm is not None:
                clip_grad_norm_(self.params, self.clip_grad_norm)
            pairs = [(p, state) for p, state in zip(self.params, self.state) if p.grad is not None]
            nbytes = sum(p.data.nbytes for p, _ in pairs)
            if pairs and get_array_module(pairs[0][0].data) is np:
                pairs.sort(key=lambda pair: -pair[0].data.nbytes)
                parallel_for(self._update_one, pairs, chunk_threads(1, nbytes))
            else:
                for pair in pairs:
                    self._update_one(pair)

    def _update_one(self, pair):
        p, state = pair
        g = p.grad
        if self.weight_decay:  # g + wd * w in scratch memory (+ commutes: same bits)
            decayed = get_array_module(g).multiply(p.data, self.weight_decay, out=self.scratch(g))
            decayed += g
            g = decayed
        self.update(p.data, g, state)

    def update(self, w, g, state):
        raise NotImplementedError(f"{type(self).__name__}.update")

    @staticmethod
    def scratch(like):
        """A temporary shaped and laid out like ``like``, from the buffer pool: an update's
        intermediate products reuse the last step's memory (``minidl/pool.py``)."""
        return empty_like(like, op="optimizer update")

    @staticmethod
    def buffer(state, name, like):
        """The state array ``name``, created as zeros shaped like ``like`` on first use."""
        if name not in state:
            state[name] = get_array_module(like).zeros_like(like)
        return state[name]

    # -------------------------------------------------------------- state
    def state_dict(self):
        """{"hyper": {name: value}, "state": [ {name: array or number} per parameter ]}."""
        return {
            "hyper": {name: getattr(self, name) for name in self.hyper_names},
            "state": [dict(s) for s in self.state],
        }

    def load_state_dict(self, state_dict):
        """Restore hyper-parameters and per-parameter state saved by ``state_dict``.

        Everything is checked before anything changes: the parameter count,
        the names, hyper-parameters that are finite numbers >= 0, state
        arrays of the parameters' shapes and kinds of number (the check
        ``Module.load_state_dict`` uses too) holding finite values.
        """
        name = type(self).__name__
        states = state_dict["state"]
        if len(states) != len(self.params):
            raise ValueError(
                f"{name}.load_state_dict: the state holds {len(states)} parameters, "
                f"the optimizer has {len(self.params)}"
            )
        hyper = {}
        for key, value in state_dict["hyper"].items():
            if key not in self.hyper_names:
                raise KeyError(
                    f"{name}.load_state_dict: unknown hyper-parameter {key!r}; is "
                    "this another optimizer's state?"
                )
            # plain Python numbers, as the constructor had them: a NumPy float64 scalar
            # would promote float32 arithmetic and break bit-identical resumes
            hyper[key] = tuple(np.asarray(value).tolist()) if np.ndim(value) else _item(value)
        loaded = [
            self._loaded_state(i, p, saved) for i, (p, saved) in enumerate(zip(self.params, states))
        ]
        before = {key: getattr(self, key) for key in hyper}
        self.__dict__.update(hyper)
        try:
            self.check_hyper()
        except ValueError:
            self.__dict__.update(before)
            raise
        self.state = loaded

    def _loaded_state(self, i, p, saved):
        """Parameter ``i``'s saved state as arrays on its device and dtype, checked."""
        own, xp = {}, get_array_module(p.data)
        for key, value in saved.items():
            if np.ndim(value) == 0:
                own[key] = _item(value)
                continue
            value = checked_state_value(
                value,
                p,
                f"{type(self).__name__}.load_state_dict: state {key!r} of parameter {i}",
                "parameter",
                "build the optimizer over the parameters it had when the state "
                "was saved, in the same order",
            )
            if not np.isfinite(value).all():
                raise ValueError(
                    f"{type(self).__name__}.load_state_dict: state {key!r} of "
                    f"parameter {i} holds NaN or inf; the run had diverged"
                )
            own[key] = xp.array(value, dtype=p.dtype)
        return own

    def check_hyper(self):
        """Raise ValueError naming any hyper-parameter that is not a finite number >= 0."""
        for name in self.hyper_names:
            value = getattr(self, name)
            for v in value if isinstance(value, tuple) else (value,):
                _check_nonnegative(self, **{name: v})

    def __repr__(self):
        hyper = ", ".join(f"{n}={getattr(self, n)}" for n in self.hyper_names)
        return f"{type(self).__name__}({len(self.params)} parameters, {hyper})"


def _item(value):
    """A Python number for a NumPy scalar (the value itself otherwise)."""
    return value.item() if hasattr(value, "item") else value


def _check_nonnegative(opt, **values):
    for name, v in values.items():
        if not (isinstance(v, numbers.Real) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{type(opt).__name__}: {name}={v!r} must be a finite number >= 0")
