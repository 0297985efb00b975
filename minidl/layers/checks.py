"""Checks of layer constructor arguments, so that a bad size fails where it is written.

Without them, ``Conv2d(0, 2, 3)`` would fail in the initialiser with a bare
ZeroDivisionError, and a negative stride only at the first forward pass.
Each error names the layer, the argument, its value and what to pass instead.
"""

import math
import numbers


def is_int(value):
    """An integer that is not a bool (NumPy integers count)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _requirement(minimum):
    return "a positive int" if minimum == 1 else f"an int >= {minimum}"


def int_arg(layer, name, value, minimum=1, hint=""):
    """``value`` as a Python int, checked to be >= ``minimum``; ``hint`` says what it counts."""
    if is_int(value) and value >= minimum:
        return int(value)
    error = ValueError if is_int(value) else TypeError
    hint = f" ({hint})" if hint else ""
    raise error(f"{layer}: {name}={value!r} is invalid; pass {_requirement(minimum)}{hint}")


def size_arg(layer, name, value, minimum=1):
    """An int or an (height, width) pair of ints, each >= ``minimum``, in the form given."""
    pair = isinstance(value, (tuple, list))
    items = tuple(value) if pair else (value,)
    if len(items) == (2 if pair else 1) and all(is_int(v) for v in items):
        if min(items) >= minimum:
            return tuple(int(v) for v in items) if pair else int(value)
        error = ValueError
    else:
        error = TypeError
    raise error(
        f"{layer}: {name}={value!r} is invalid; pass {_requirement(minimum)} "
        "or a (height, width) pair of them"
    )


def number_arg(layer, name, value, accept, requirement):
    """``value`` (unchanged) when it is a finite real number for which ``accept`` holds.

    ``requirement`` is said in the error, e.g. ``"a probability in [0, 1)"``.
    """
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if real and math.isfinite(value) and accept(value):
        return value
    error = ValueError if real else TypeError
    raise error(f"{layer}: {name}={value!r} is invalid; pass {requirement}")


def groups_arg(layer, groups, in_channels, out_channels):
    """``groups`` (a positive int) that divides both channel counts; the error lists the choices."""
    groups = int_arg(layer, "groups", groups)
    if in_channels % groups or out_channels % groups:
        common = math.gcd(in_channels, out_channels)
        choices = [d for d in range(1, common + 1) if common % d == 0]
        raise ValueError(
            f"{layer}: groups={groups} must divide in_channels={in_channels} and "
            f"out_channels={out_channels}; pass one of {choices}"
        )
    return groups
