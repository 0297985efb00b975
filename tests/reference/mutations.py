"""Helpers of the checks that grade wrong solutions: a check's verdict, and a check run with
one function of a reference module swapped for a wrong one."""

from minidl.exercises import ExerciseFailure


def verdict(check, comm):
    """None when ``check`` passes on ``comm``, else its failure's text."""
    try:
        check(comm)
    except ExerciseFailure as failure:
        return str(failure)
    return None


def in_place_of(module, name, wrong):
    """Decorate a check: ``module.<name>`` (a dotted path below it) is ``wrong`` while it runs."""
    owner_name, _, attribute = name.rpartition(".")
    owner = getattr(module, owner_name) if owner_name else module

    def decorate(check):
        def run(comm):
            original = getattr(owner, attribute)
            setattr(owner, attribute, wrong)
            try:
                check(comm)
            finally:
                setattr(owner, attribute, original)

        return run

    return decorate
