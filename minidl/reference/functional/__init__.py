"""Layer formulas, forward and backward, one op family per file.

Every op is a pair of functions on arrays (NumPy or CuPy):

    out, cache = <op>_forward(inputs..., **options)
    grads = <op>_backward(dout, cache)     # dL/d(each input), given dout = dL/d(out)

with the formula and its source in the module's docstring:

    linear.py        fully connected layer y = x W^T + b
    activations.py   relu, sigmoid, tanh
    loss.py          softmax cross-entropy with integer labels
    pooling.py       max and average pooling
    batch_norm.py    batch normalisation (training and evaluation)
    lrn.py           local response normalisation across channels
    dropout.py       inverted dropout

``tensor_ops.py`` turns each pair into a differentiable op on Tensors
(``tensor_ops.linear(x, w, b)``), so a model can run on these formulas and be
compared with the same model on ``minidl.functional``.
"""
