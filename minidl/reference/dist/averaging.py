"""Model consolidation: periodic model averaging (local SGD) and elastic averaging SGD (EASGD).

Written for n replicas held in one process (lists of arrays), so the sums
over workers read as in the papers; ``minidl.dist.consistency.averaging`` runs the same
rules across MPI ranks.

**Model averaging every H steps** (McDonald, Hall & Mann 2010, "Distributed
Training Strategies for the Structured Perceptron", iterative parameter
mixing; Zhang, De Sa, Mitliagkas & Re 2016, "Parallel SGD: When does
averaging help?"; Lin, Stich, Patel & Jaggi 2020, "Don't Use Large
Mini-Batches, Use Local SGD"): every replica takes plain SGD steps on its
own data, w_i <- w_i - lr g_i(w_i), and after every H-th step all replicas
are replaced by their average

    w_i <- (1/n) sum_j w_j.

With H = 1 this is synchronous SGD: the mean of w - lr g_i is w - lr mean_i g_i.

**EASGD** (Zhang, Choromanska & LeCun 2015, "Deep learning with Elastic
Averaging SGD"). A center variable x~ is tied to the n workers x_i by an
elastic force of strength rho. The synchronous update, with every right-hand
side taken at step t:

    x_i <- x_i - lr (g_i(x_i) + rho (x_i - x~))
    x~  <- x~ + lr rho sum_i (x_i - x~)

With the moving rate alpha = lr rho and beta = n alpha the center update is
x~ <- (1 - beta) x~ + beta mean_i x_i; the paper suggests beta = 0.9. With
zero gradients sum_i x_i + x~ is conserved: the force is symmetric.
The asynchronous form (the paper's Algorithm 1) lets each worker take tau
local SGD steps, then exchange with the center alone:

    d = alpha (x_i - x~);   x_i <- x_i - d;   x~ <- x~ + d.

An exercise region here must not call the tuned averaging
(``minidl.dist.consistency.averaging``): the check fails one that does, since the exercise
is to write the algorithm out.
"""


def local_sgd(replicas, gradient, lr, period, steps):
    """``steps`` SGD steps on each replica, averaging all replicas after every ``period``-th step.

    ``gradient(i, w, t)`` is replica i's gradient at weights w in step t
    (0-based). Returns the n replicas after the last step (new arrays).
    """
    if int(period) < 1:
        raise ValueError(f"model averaging: the period H must be >= 1, got {period}")
    # BEGIN EXERCISE 8.4
    replicas = [w.copy() for w in replicas]
    for t in range(steps):
        replicas = [w - lr * gradient(i, w, t) for i, w in enumerate(replicas)]
        if (t + 1) % period == 0:
            mean = sum(replicas) / len(replicas)
            replicas = [mean.copy() for _ in replicas]
    return replicas
    # END EXERCISE 8.4


def easgd_step(workers, center, gradients, lr, rho):
    """One synchronous EASGD step: returns (the n new workers, the new center)."""
    # BEGIN EXERCISE 8.3
    new_workers = [x - lr * (g + rho * (x - center)) for x, g in zip(workers, gradients)]
    new_center = center + lr * rho * sum(x - center for x in workers)
    return new_workers, new_center
    # END EXERCISE 8.3


def elastic_exchange(local, center, alpha):
    """Asynchronous EASGD's exchange of one worker with the center: returns (new x_i, new x~)."""
    # BEGIN EXERCISE 8.3
    d = alpha * (local - center)
    return local - d, center + d
    # END EXERCISE 8.3
