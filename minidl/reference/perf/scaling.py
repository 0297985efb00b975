"""How data-parallel SGD scales on n nodes (Keuper & Pfreundt 2016), with Amdahl's serial fraction.

Keuper & Pfreundt, "Distributed Training of Deep Neural Networks: Theoretical
and Practical Limits of Parallel Scalability": the global batch of B samples
is split over n nodes, b = ceil(B / n) each (so n <= B); every node computes
on its b samples, then the gradients are combined (T_comm: an allreduce or a
parameter server, see ``allreduce_cost.py``). With T(b) the compute time of
one iteration on b samples and T_bwd(b) its backward part:

    T_comp(n) = s T(B) + (1 - s) T(b)          s: the fraction that does not scale
    T(n)      = T_comp(n) + T_comm - min(f T_comm, (1 - s) T_bwd(b))
    S(n)      = T(B) / T(n),     E(n) = S(n) / n

where f is the share of the communication that may overlap the backward
pass: gradients of the last layers can be sent while earlier ones are still
being computed, but nothing before the forward pass ends, "practically
cutting the overlay times by half" (their §II). With free communication and
T(b) proportional to b this is Amdahl's law,

    S(n) = 1 / (s + (1 - s) / n),

which caps the speedup at 1 / s; their Fig. 12 finds s of 0.1% (AlexNet) and
0.3% (GoogLeNet) enough to stall scaling beyond about 32 nodes. In practice
T(b) also stops shrinking in proportion to b once b is small (their §III:
fully connected layers become thin matrix products below b ~ 32-64), and
T_comm grows with n, so real curves flatten earlier.

An exercise region here must not call minidl's tuned cost model (``minidl.perf.predict``,
``compute_model``, ``network``): the check fails one that does, since the exercise is to
write the algorithm out.
"""

import math


def local_batch(global_batch, nodes):
    """b = ceil(B / n): the samples each node computes on; n > B leaves nodes without any."""
    if not 1 <= nodes <= global_batch:
        raise ValueError(
            f"local_batch: {nodes} nodes cannot share a global batch of "
            f"{global_batch} samples; use 1 <= n <= B"
        )
    return math.ceil(global_batch / nodes)


def iteration_time(t_full, t_local, t_local_backward, t_comm, serial_fraction=0.0, overlap=0.0):
    """T(n) from T(B) = ``t_full``, T(b) = ``t_local``, T_bwd(b), T_comm, s and f (module doc)."""
    s, f = serial_fraction, overlap
    # BEGIN EXERCISE 5.3
    t_comp = s * t_full + (1 - s) * t_local
    hidden = min(f * t_comm, (1 - s) * t_local_backward)
    return t_comp + t_comm - hidden
    # END EXERCISE 5.3


def speedup(t_full, t_nodes):
    """S(n) = T(B) / T(n): how many times faster n nodes run one iteration of the global batch."""
    return t_full / t_nodes


def efficiency(t_full, t_nodes, nodes):
    """E(n) = S(n) / n: 1 is perfect scaling."""
    return speedup(t_full, t_nodes) / nodes


def amdahl_speedup(nodes, serial_fraction):
    """Amdahl's law, 1 / (s + (1 - s) / n): the speedup when only a fraction 1 - s runs in
    parallel."""
    # BEGIN EXERCISE 5.3
    return 1 / (serial_fraction + (1 - serial_fraction) / nodes)
    # END EXERCISE 5.3
