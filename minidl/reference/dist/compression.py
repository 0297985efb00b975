"""Gradient compression, textbook forms: fp16, QSGD, TernGrad, top-k, scaled sign, error feedback.

Each scheme is an ``*_encode`` function (what a worker puts on the wire) and
a ``*_decode`` function (the vector the receiver rebuilds); the random ones
take an explicit generator ``rng`` (``np.random.default_rng(seed)`` or
CuPy's), whose uniform draws u_i in [0, 1) have v's precision. The whole
vector is one bucket here; ``minidl.dist.compression`` also cuts it into
buckets, packs the codes into bits and counts the bytes.

* fp16: IEEE half precision, round to nearest.
* QSGD (Alistarh, Grubic, Li, Tomioka & Vojnovic 2017, "QSGD:
  Communication-Efficient SGD via Gradient Quantization and Encoding"), s
  levels: Q(v)_i = ||v||_2 sgn(v_i) xi_i / s where, with
  p_i = s |v_i| / ||v||_2 and l_i = floor(p_i), xi_i = l_i + 1 with probability
  p_i - l_i and l_i otherwise. So E[Q(v)] = v (unbiased), and every value
  lies on one of the levels ||v|| k / s, k = -s..s.
* TernGrad (Wen, Xu, Yan, Wu, Wang, Chen & Li 2017, "TernGrad: Ternary
  Gradients to Reduce Communication in Distributed Deep Learning"):
  Q(v)_i = s sgn(v_i) b_i with s = max_j |v_j| and b_i ~ Bernoulli(|v_i| / s);
  unbiased, values in {-s, 0, s}.
* top-k (Aji & Heafield 2017, "Sparse Communication for Distributed
  Gradient Descent"; Stich, Cordonnier & Jaggi 2018, "Sparsified SGD with
  Memory"): send the k entries of largest |v_i| as (index, value) pairs.
* scaled sign (Bernstein, Wang, Azizzadenesheli & Anandkumar 2018,
  "signSGD: Compressed Optimisation for Non-Convex Problems"; Karimireddy,
  Rebjock, Stich & Jaggi 2019, "Error Feedback Fixes SignSGD and other
  Gradient Compression Schemes"): C(v) = (||v||_1 / d) sign(v), one bit per
  value (sign(0) = +1 here) and one scale. It satisfies
  ||C(v) - v||^2 = ||v||^2 - ||v||_1^2 / d.
* error feedback (Stich et al. 2018; Karimireddy et al. 2019): the biased
  schemes (top-k, sign) compress the gradient plus what earlier steps did
  not send, and keep the rest:

      sent = C(g + e);   e <- (g + e) - sent

  so that over any run of steps sum(sent) + e = sum(g).

An exercise region here must not call the tuned compressors (``minidl.dist.compression``):
the check fails one that does, since the exercise is to write the algorithm out.
"""

from minidl.backend import get_array_module


def fp16_encode(v):
    """The IEEE half-precision values nearest to ``v``."""
    return v.astype(get_array_module(v).float16)


def fp16_decode(halves, dtype="float32"):
    """Half-precision values back in ``dtype`` (exactly: every half is a float32)."""
    return halves.astype(dtype)


def qsgd_encode(v, levels, rng):
    """QSGD with ``levels`` = s: returns (||v||_2, signed levels k_i in -s..s as int32).

    Any rounding of p_i to floor(p_i) or floor(p_i) + 1 with mean p_i is right (l + (u < p - l)
    here, floor(p + u) as well), drawn from ``rng``: the check tests those properties over many
    draws, not one rule's bits.
    """
    xp = get_array_module(v)
    # BEGIN EXERCISE 9.2
    norm = xp.sqrt(xp.sum(v.astype(xp.float64) ** 2)).astype(v.dtype)
    scaled = xp.abs(v) / norm * levels if norm > 0 else xp.zeros_like(v)  # p_i in [0, s]
    lower = xp.floor(scaled)
    level = lower + (rng.random(v.shape, dtype=v.dtype) < scaled - lower)
    level = xp.minimum(level, levels)  # rounding may put p_i a hair above s when |v_i| = ||v||
    return norm, (xp.sign(v) * level).astype(xp.int32)
    # END EXERCISE 9.2


def qsgd_decode(norm, signed_levels, levels):
    """Q(v)_i = ||v|| k_i / s."""
    return signed_levels.astype(norm.dtype) * (norm / levels)


def terngrad_encode(v, rng):
    """TernGrad: returns (s = max |v_i|, t_i = sgn(v_i) b_i in {-1, 0, 1} as int8); any
    Bernoulli(|v_i| / s) draw from ``rng`` is right (the check tests the mean of many)."""
    xp = get_array_module(v)
    # BEGIN EXERCISE 9.3
    scale = xp.abs(v).max()
    probability = xp.abs(v) / scale if scale > 0 else xp.zeros_like(v)
    keep = rng.random(v.shape, dtype=v.dtype) < probability
    return scale, (xp.sign(v) * keep).astype(xp.int8)
    # END EXERCISE 9.3


def terngrad_decode(scale, ternary):
    """Q(v)_i = s t_i."""
    return ternary.astype(scale.dtype) * scale


def topk_encode(v, k):
    """The ``k`` entries of largest magnitude: returns (indices, values)."""
    xp = get_array_module(v)
    # BEGIN EXERCISE 9.1
    indices = xp.argsort(-xp.abs(v))[:k]
    return indices, v[indices]
    # END EXERCISE 9.1


def topk_decode(indices, values, n):
    """A dense vector of ``n`` zeros with ``values`` at ``indices``."""
    dense = get_array_module(values).zeros(n, dtype=values.dtype)
    dense[indices] = values
    return dense


def scaled_sign_encode(v):
    """Scaled sign: returns (||v||_1 / d, sign(v_i) as int8 in {-1, 1}, +1 for v_i >= 0)."""
    xp = get_array_module(v)
    # BEGIN EXERCISE 9.4
    scale = xp.abs(v).sum() / v.size
    return scale, xp.where(v >= 0, 1, -1).astype(xp.int8)
    # END EXERCISE 9.4


def scaled_sign_decode(scale, signs):
    """C(v)_i = scale sign_i."""
    return signs.astype(scale.dtype) * scale


def error_feedback(compress, gradient, residual):
    """One step of error feedback: returns (sent, new residual) with sent = C(g + e).

    ``compress(v)`` is the round trip of a scheme: the vector the receiver
    decodes from v's encoding, e.g. ``lambda v: topk_decode(*topk_encode(v, k), v.size)``.
    """
    # BEGIN EXERCISE 9.1
    corrected = gradient + residual
    sent = compress(corrected)
    return sent, corrected - sent
    # END EXERCISE 9.1
