"""``Module``, ``Parameter`` and ``Sequential``: the containers models are made of; ``leaves``.

A Module registers the Parameters, sub-Modules and buffers (non-trained state
such as batch-norm running statistics) assigned to its attributes, in
assignment order, and names them by their path (``"features.0.weight"``, as
PyTorch does, so state dicts line up with PyTorch's).
"""

from collections import OrderedDict

import numpy as np

from ..autograd import Tensor, as_dtype, checked_state_value
from ..backend import DEVICES, to_device


class Parameter(Tensor):
    """A Tensor that a Module trains: it always requires grad."""

    __slots__ = ()

    def __init__(self, data):
        super().__init__(data.data if isinstance(data, Tensor) else data, requires_grad=True)

    def __repr__(self):
        return "Parameter " + super().__repr__()


class Module:
    """Base class of layers and models: subclasses set attributes and define ``forward``."""

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(
                f"{type(self).__name__}.__init__ must call super().__init__() "
                "before assigning attributes"
            )
        for registry in (self._parameters, self._modules):
            registry.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        elif name in self._buffers:
            self._buffers[name] = value
        object.__setattr__(self, name, value)

    def register_buffer(self, name, value):
        """Keep ``value`` (a Tensor) in the state dict without training it."""
        self._buffers[name] = value
        object.__setattr__(self, name, value)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ------------------------------------------------------------ traversal
    def named_modules(self, prefix=""):
        """(path, module) for this module and every module below it."""
        yield prefix, self
        for name, m in self._modules.items():
            yield from m.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self):
        return (m for _, m in self.named_modules())

    def children(self):
        return iter(self._modules.values())

    def _named(self, kind):
        seen = set()
        for path, m in self.named_modules():
            for name, t in getattr(m, kind).items():
                if t is not None and id(t) not in seen:
                    seen.add(id(t))
                    yield (f"{path}.{name}" if path else name), t

    def named_parameters(self):
        """(path, Parameter) pairs, each parameter once, in registration order."""
        return self._named("_parameters")

    def parameters(self):
        return (p for _, p in self.named_parameters())

    def named_buffers(self):
        return self._named("_buffers")

    # ------------------------------------------------------------- state
    def state_dict(self):
        """Ordered name -> array of every parameter and buffer (the arrays themselves)."""
        state = OrderedDict((name, p.data) for name, p in self.named_parameters())
        state.update((name, b.data) for name, b in self.named_buffers())
        return state

    def load_state_dict(self, state, strict=True):
        """Copy arrays from ``state`` into this module's parameters and buffers, in place.

        All or nothing, as ``Optimizer.load_state_dict``: every key, shape and
        dtype is checked (``checked_state_value``) before any value is written,
        so a bad entry leaves the module as it was. With ``strict`` the keys
        must match exactly. Values are converted to each tensor's device and
        dtype (float64 into float32 is fine; a float into an integer buffer is
        an error).
        """
        own = OrderedDict(self.named_parameters())
        own.update(self.named_buffers())
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        if strict and (missing or unexpected):
            raise KeyError(
                f"load_state_dict: missing keys {missing}, unexpected keys "
                f"{unexpected}; is this the state of another model? (strict=False "
                "loads only the keys both have)"
            )
        checked = [
            (
                t,
                checked_state_value(
                    state[name],
                    t,
                    f"load_state_dict: {name}",
                    "model",
                    "build the model with the layer sizes it had when the state was saved",
                ),
            )
            for name, t in own.items()
            if name in state
        ]
        for t, value in checked:
            t.data[...] = to_device(value, t.device)
        return self

    # ------------------------------------------------------------- modes
    def train(self, mode=True):
        """Training mode (dropout active, batch statistics); returns self."""
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        """Evaluation mode (dropout off, running statistics); returns self."""
        return self.train(False)

    def to(self, target):
        """Move parameters and buffers to a device or cast them to a float dtype, in place."""
        if str(target).split(":")[0] in DEVICES:
            convert = lambda a: to_device(a, target)  # noqa: E731
        else:
            dtype = as_dtype(target)
            if dtype.kind != "f":
                raise TypeError(f"Module.to: {dtype} is not a floating-point dtype")
            convert = lambda a: a.astype(dtype) if a.dtype.kind == "f" else a  # noqa: E731
        for _, t in list(self.named_parameters()) + list(self.named_buffers()):
            t.data = convert(t.data)
            if t.grad is not None:
                t.grad = convert(t.grad)
        return self

    def zero_grad(self):
        """Forget accumulated gradients (sets every parameter's ``.grad`` to None)."""
        for p in self.parameters():
            p.grad = None

    def num_parameters(self):
        """The number of trained scalars."""
        return int(sum(np.prod(p.shape, dtype=np.int64) for p in self.parameters()))

    # ------------------------------------------------------------- display
    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [
            f"  ({name}): " + repr(m).replace("\n", "\n  ") for name, m in self._modules.items()
        ]
        head = f"{type(self).__name__}({self.extra_repr()}"
        return head + ("\n" + "\n".join(lines) + "\n)" if lines else ")")


def leaves(model):
    """(path, layer) of the modules below ``model`` that hold no others, in order (for a
    ``Sequential``, the order they run in)."""
    return [(path, m) for path, m in model.named_modules() if not m._modules]


class Sequential(Module):
    """Modules applied one after another; indexable, iterable, named "0", "1", ..."""

    def __init__(self, *modules: "Module"):
        super().__init__()
        for i, m in enumerate(modules):
            if not isinstance(m, Module):
                raise TypeError(f"Sequential: item {i} is a {type(m).__name__}, not a Module")
            setattr(self, str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())
