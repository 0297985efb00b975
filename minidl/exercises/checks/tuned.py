"""What a check holds every solution to besides its values: the tuned twin is not called, and
the inputs are left alone.

A region could pass its check by calling minidl's own tuned implementation of the algorithm
(the optimizer class, the compressor, autograd's backward): the student tree holds it, since
training uses it. ``forbids`` wraps a check so that, while it runs, a profile hook notes each
call of the twin made (directly or not) from the reference tier, where the exercises' regions
are, and the check fails naming the function and the line. Calls from the check itself (its
oracles) are not noted.
"""

import copy
import functools
import inspect
import os
import sys

from .. import ExerciseFailure, changed_in_place, expect_true


def code_objects(things):
    """The code objects of ``things``: functions, the methods of classes, and the functions
    and methods that modules define themselves."""
    codes = set()
    for thing in things:
        if inspect.ismodule(thing):
            own = [
                v for v in vars(thing).values() if getattr(v, "__module__", None) == thing.__name__
            ]
            codes |= code_objects(own)
        elif inspect.isclass(thing):
            for value in vars(thing).values():
                value = getattr(value, "__func__", value)  # staticmethod, classmethod
                value = getattr(value, "fget", value)  # property
                if inspect.isfunction(value):
                    codes.add(value.__code__)
        elif inspect.isfunction(thing):
            codes.add(thing.__code__)
    return codes


REFERENCE = os.sep + os.path.join("minidl", "reference") + os.sep


def forbids(*things, name="minidl's tuned implementation"):
    """Decorator of a check: it fails when code of the reference tier calls any of ``things``
    (see ``code_objects``), ``name`` in the message."""
    codes = code_objects(things)

    def decorate(check):
        @functools.wraps(check)
        def guarded(*args, **keywords):
            calls = []

            def hook(frame, event, _arg):
                if event != "call" or frame.f_code not in codes or calls:
                    return
                caller = frame.f_back
                while caller is not None:
                    where = caller.f_code.co_filename
                    if REFERENCE in where:
                        path = "minidl/reference" + where.rsplit(REFERENCE[:-1], 1)[1]
                        calls.append((frame.f_code.co_qualname, path, caller.f_lineno))
                        return
                    caller = caller.f_back

            previous = sys.getprofile()
            sys.setprofile(hook)
            try:
                check(*args, **keywords)
            finally:
                sys.setprofile(previous)
            if calls:
                function, path, line = calls[0]
                raise ExerciseFailure(
                    f"the code called {name} ({function}, from {path}, line {line})",
                    detail="the exercise is to write the algorithm out; the tuned code in the "
                    "tree is what the check compares with, not part of the answer",
                )

        return guarded

    return decorate


def call_watching(function, inputs, free=(), **keywords):
    """``(function(*inputs.values(), **keywords), the name of the first input it changed in
    place or None)``; the inputs named in ``free`` may change."""
    saved = {name: copy.deepcopy(v) for name, v in inputs.items() if name not in free}
    out = function(*inputs.values(), **keywords)
    changed = (changed_in_place(saved[name], inputs[name], name) for name in saved)
    return out, next((found for found in changed if found), None)


def expect_left_alone(what, changed, why):
    """Fail naming the input ``changed`` in place (from ``call_watching``), and ``why`` the
    caller still needs it."""
    expect_true(
        f"{what}: the code changed its input {changed} in place" if changed else what,
        not changed,
        detail=f"the caller still needs it ({why}): write the result into a new array",
    )


def call_leaving(what, function, inputs, why, free=(), **keywords):
    """``function(*inputs.values(), **keywords)``; fails naming the input (other than those in
    ``free``) it changed in place, and ``why`` the caller still needs it."""
    out, changed = call_watching(function, inputs, free, **keywords)
    expect_left_alone(what, changed, why)
    return out
