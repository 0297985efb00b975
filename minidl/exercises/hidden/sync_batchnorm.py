"""Hidden checks of the synchronised batch-norm exercise: uneven shares, a mean far from the
spread, and the messages.

The visible check gives every rank the same number of samples, where the plain average of
the shares' means is the batch's; these give the ranks 3, 1 and 2 samples (and 1 and 4), so
only means weighed by their counts and Chan et al.'s join of the M2s (1979) pass. A mean of
1e5 beside a spread of 1 fails a variance from sums of squares, sum x^2 - n mean^2, which
loses those digits. And the ranks must talk as the textbook does: the forward one allgather
of a few numbers per channel (not the samples), the backward one allreduce of the two sums
per channel (Ioffe & Szegedy 2015's two means over the whole batch), and no other message.
"""

from .. import hidden_check
from ..checks.collectives import expect_on_every_rank
from ..checks.sync_batchnorm import Case, expect_messages, expect_results, sync_bn_runs

UNEVEN = (Case((4,), (3, 1, 2)), Case((3, 2, 2), (1, 4)))
FAR = (Case((2,), (3, 1, 2), offset=1e5),)
FAR_TOL = 1e-8  # the joined and the serial mean of values near 1e5 differ by ~1e-11 each way


@hidden_check("16.1", "uneven shares 3, 1, 2 and 1, 4: weighed means, Chan's join", ranks=3)
def uneven_shares(comm):
    runs = sync_bn_runs(comm, UNEVEN, seed=1611)
    expect_on_every_rank(comm, lambda: expect_results(runs))


@hidden_check("16.1", "mean 1e5, spread 1: no sums of squares", ranks=3)
def far_mean(comm):
    runs = sync_bn_runs(comm, FAR, seed=1612)
    expect_on_every_rank(comm, lambda: expect_results(runs, tol=FAR_TOL))


@hidden_check("16.1", "one allgather in the forward, one allreduce in the backward", ranks=3)
def messages(comm):
    runs = sync_bn_runs(comm, UNEVEN, seed=1613)

    def expect_all():
        expect_results(runs)
        for run in runs:
            expect_messages(run)

    expect_on_every_rank(comm, expect_all)
