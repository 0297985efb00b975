"""Softmax cross-entropy of (N, C) logits z against N integer labels y, averaged over the batch.

    p_n = softmax(z_n),  softmax(z)_c = exp(z_c - max z) / sum_k exp(z_k - max z)
    L   = -(1/N) sum_n log p_n[y_n]
    dL/dz_n = (p_n - onehot(y_n)) / N

Subtracting max z changes nothing mathematically and keeps exp from
overflowing. (Bridle 1990 for the softmax output with cross-entropy; Ben-Nun
& Hoefler 2019, Demystifying Parallel and Distributed Deep Learning, §2.1.)

An exercise region here must not call minidl's autograd (``Tensor.backward`` of the tuned
ops): the check fails one that does, since the exercise is to write the algorithm out.
"""

from ...backend import get_array_module


def softmax_cross_entropy_forward(logits, labels):
    """The mean loss (a 0-d array) and the cache (softmax probabilities, labels)."""
    xp = get_array_module(logits)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))
    loss = -log_p[xp.arange(len(labels)), labels].mean()
    return loss, (xp.exp(log_p), labels)


def softmax_cross_entropy_backward(dout, cache):
    """dL/dlogits for the upstream gradient dout (1 when the loss is the final output)."""
    p, labels = cache
    # BEGIN EXERCISE 2.2
    xp = get_array_module(p)
    n = p.shape[0]
    dlogits = p.copy()
    dlogits[xp.arange(n), labels] -= 1
    return dlogits * (dout / n)
    # END EXERCISE 2.2
