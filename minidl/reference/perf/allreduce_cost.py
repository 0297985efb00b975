"""The alpha-beta-gamma time of allreduce algorithms (Thakur, Rabenseifner & Gropp 2005).

A message of m bytes between two processes takes alpha + m beta (latency
alpha in s, inverse bandwidth beta in s/byte); adding m received bytes into
one's own costs m gamma. For P processes each holding m bytes, P = 2^k:

    binomial tree (reduce to one process, then broadcast):
        T_tree = 2 k (alpha + m beta) + k m gamma
    recursive doubling (butterfly: k exchanges of the whole vector):
        T_bfly = k (alpha + m beta + m gamma)
    ring (reduce-scatter, then allgather, P - 1 steps of m/P bytes each):
        T_ring = 2 (P - 1) (alpha + m beta / P) + (P - 1) m gamma / P
    Rabenseifner (recursive-halving reduce-scatter, recursive-doubling allgather):
        T_rabe = 2 k alpha + 2 m beta (P - 1) / P + m gamma (P - 1) / P

Ben-Nun & Hoefler 2019, §2.5, give the same formulas without gamma (their
L = alpha, G = beta, and gamma m = bytes; the pipelined ring is their
T_pipe), and the lower bound

    T >= alpha log2 P + 2 m beta (P - 1) / P

for algorithms without redundant computation (Chan et al. 2007).
Rabenseifner's algorithm attains its bandwidth term with twice its latency
term; the ring attains the bandwidth term with 2 (P - 1) latencies.

For P not a power of two, the tree takes ceil(log2 P) rounds and the ring
works as written. Recursive doubling and Rabenseifner run on the p' = 2^k
processes of the largest power of two below P, after each of the P - p'
others has sent its vector to a partner (which adds it in) and before they
get the result back: 2 (alpha + m beta) + m gamma more, k = floor(log2 P).
(Thakur et al. describe cheaper ways to fold for long messages.)

``minidl/perf/allreduce_cost.py``, which ``algorithm="auto"`` and ``minidl
predict`` use, computes the same times from counts of messages and bytes;
the tests hold the two equal.

An exercise region here must not call minidl's tuned cost model
(``minidl.perf.allreduce_cost``): the check fails one that does, since the exercise is to
write the algorithm out.
"""

import math

from minidl.intmath import ceil_log2, largest_power_of_two


def fold(m, p, alpha, beta, gamma):
    """(p', seconds): the largest power of two p' <= p, and the time to fold the other
    p - p' in and out."""
    p2 = largest_power_of_two(p)
    extra = 0.0 if p2 == p else 2 * (alpha + m * beta) + m * gamma
    return p2, extra


def tree_allreduce_time(m, p, alpha, beta, gamma=0.0):
    """Binomial-tree reduce, then binomial-tree broadcast: ceil(log2 p) rounds each."""
    rounds = ceil_log2(p)
    return 2 * rounds * (alpha + m * beta) + rounds * m * gamma


def butterfly_allreduce_time(m, p, alpha, beta, gamma=0.0):
    """Recursive doubling: log2 p' exchanges of all m bytes, each followed by an addition."""
    # BEGIN EXERCISE 5.2
    p2, extra = fold(m, p, alpha, beta, gamma)
    k = p2.bit_length() - 1
    return k * (alpha + m * beta + m * gamma) + extra
    # END EXERCISE 5.2


def ring_allreduce_time(m, p, alpha, beta, gamma=0.0):
    """Ring reduce-scatter then ring allgather: 2 (p - 1) messages of m / p bytes."""
    # BEGIN EXERCISE 5.2
    block = m / p
    return 2 * (p - 1) * (alpha + block * beta) + (p - 1) * block * gamma
    # END EXERCISE 5.2


def rabenseifner_allreduce_time(m, p, alpha, beta, gamma=0.0):
    """Recursive halving then recursive doubling: log2 p' messages each way, m (p'-1)/p'
    bytes in all."""
    p2, extra = fold(m, p, alpha, beta, gamma)
    k = p2.bit_length() - 1
    share = m * (p2 - 1) / p2
    return 2 * k * alpha + 2 * share * beta + share * gamma + extra


def allreduce_lower_bound(m, p, alpha, beta):
    """alpha log2 p + 2 m beta (p - 1) / p: no allreduce without redundant computation is faster."""
    return alpha * math.log2(p) + 2 * m * beta * (p - 1) / p


ALLREDUCE_TIME = {
    "ring": ring_allreduce_time,
    "butterfly": butterfly_allreduce_time,
    "tree": tree_allreduce_time,
    "rabenseifner": rabenseifner_allreduce_time,
}
