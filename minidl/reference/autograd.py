"""Reverse-mode automatic differentiation in its shortest form: ``Value`` and ``backward``.

A ``Value`` wraps an array (NumPy or CuPy) and remembers the Values it was
computed from (its parents) and a local rule, ``_backward``. The rule reads
the Value's gradient dL/dv and adds each parent's share to the parent's
gradient, by the chain rule

    dL/dp += (dv/dp)^T dL/dv       (summed over every Value v that uses p).

``backward()`` on a scalar L sets dL/dL = 1, orders the graph topologically
(every Value after its parents) and runs the rules in the reverse order, so
a Value's gradient is complete, all its users having contributed, before its
own rule passes it on. This is backpropagation (Rumelhart, Hinton &
Williams 1986, Learning representations by back-propagating errors) as the
reverse mode of automatic differentiation (Griewank & Walther 2008,
Evaluating Derivatives, ch. 3; Baydin et al. 2018, Automatic Differentiation
in Machine Learning: a Survey, §3.2).

Local rules, for out = f(a, b) and its gradient g = dL/d(out):

    a + b:   da = g,                 db = g
    a * b:   da = g * b,             db = g * a
    a @ b:   da = g b^T,             db = a^T g           (2-D matrices)
    -a:      da = -g
    sum(a):  da = g copied back over the summed axes
    relu(a): da = g * [a > 0]
    exp(a):  da = g * exp(a)
    log(a):  da = g / a

With broadcasting (an operand of shape (4,) added to one of shape (3, 4)),
every element of the small operand is used once per copy, so its gradient
is g summed over the broadcast axes (``unbroadcast``).

The tuned engine (``minidl.autograd``) computes the same derivatives; it also
frees the graph as it goes, skips unneeded gradients and fires hooks.

An exercise region here must not call minidl's own autograd (``Tensor.backward``): the check
fails one that does, since the exercise is to write the algorithm out.
"""

from ..backend import get_array_module


class Value:
    """An array in a computation graph: ``data``, ``grad`` (same shape, starts at 0) and parents."""

    def __init__(self, data, parents=(), op=""):
        xp = get_array_module(data)
        data = xp.asarray(data)
        self.data = data if data.dtype.kind == "f" else data.astype(xp.float64)
        self.grad = xp.zeros_like(self.data)
        self.parents = parents
        self.op = op
        self._backward = lambda: None  # leaves have no parents to pass gradients to

    def __repr__(self):
        return f"Value(shape={self.data.shape}, op={self.op!r})"

    def _lift(self, other):
        """``other`` as a Value; numbers take this Value's dtype and device."""
        if isinstance(other, Value):
            return other
        return Value(get_array_module(self.data).asarray(other, dtype=self.data.dtype))

    def __add__(self, other):
        other = self._lift(other)
        out = Value(self.data + other.data, (self, other), "+")

        def _backward():
            self.grad += unbroadcast(out.grad, self.data.shape)
            other.grad += unbroadcast(out.grad, other.data.shape)

        out._backward = _backward
        return out

    def __mul__(self, other):
        other = self._lift(other)
        out = Value(self.data * other.data, (self, other), "*")

        def _backward():
            self.grad += unbroadcast(out.grad * other.data, self.data.shape)
            other.grad += unbroadcast(out.grad * self.data, other.data.shape)

        out._backward = _backward
        return out

    def __matmul__(self, other):
        other = self._lift(other)
        if self.data.ndim != 2 or other.data.ndim != 2:
            raise ValueError(
                f"Value @ Value takes two matrices, got shapes {self.data.shape} "
                f"and {other.data.shape}; reshape vectors to (1, n) or (n, 1)"
            )
        out = Value(self.data @ other.data, (self, other), "@")

        def _backward():
            # BEGIN EXERCISE 1.3
            self.grad += out.grad @ other.data.T
            other.grad += self.data.T @ out.grad
            # END EXERCISE 1.3

        out._backward = _backward
        return out

    def __neg__(self):
        out = Value(-self.data, (self,), "neg")

        def _backward():
            self.grad += -out.grad

        out._backward = _backward
        return out

    def __sub__(self, other):
        return self + (-self._lift(other))

    def __radd__(self, other):
        return self + other

    def __rmul__(self, other):
        return self * other

    def __rsub__(self, other):
        return self._lift(other) - self

    def sum(self, axis=None, keepdims=False):
        """Sum over ``axis`` (an int, a tuple, or None for all)."""
        out = Value(self.data.sum(axis=axis, keepdims=keepdims), (self,), "sum")

        def _backward():
            xp = get_array_module(out.grad)
            g = out.grad if keepdims or axis is None else xp.expand_dims(out.grad, axis)
            self.grad += xp.broadcast_to(g, self.data.shape)

        out._backward = _backward
        return out

    def mean(self, axis=None, keepdims=False):
        """The sum divided by the number of elements summed (no rule of its own)."""
        total = self.sum(axis, keepdims)
        return total * (total.data.size / self.data.size)

    def relu(self):
        out = Value(get_array_module(self.data).maximum(self.data, 0), (self,), "relu")

        def _backward():
            self.grad += out.grad * (self.data > 0)

        out._backward = _backward
        return out

    def exp(self):
        out = Value(get_array_module(self.data).exp(self.data), (self,), "exp")

        def _backward():
            self.grad += out.grad * out.data

        out._backward = _backward
        return out

    def log(self):
        out = Value(get_array_module(self.data).log(self.data), (self,), "log")

        def _backward():
            self.grad += out.grad / self.data

        out._backward = _backward
        return out

    def backward(self):
        """Fill ``grad`` of every Value this scalar depends on with d(self)/d(that Value).

        Gradients add up: call it once per graph (build a new graph to differentiate again).
        """
        if self.data.size != 1:
            raise ValueError(
                f"backward() starts from a scalar, got shape {self.data.shape}; "
                "reduce the output first, e.g. with .sum() or .mean()"
            )
        # BEGIN EXERCISE 1.1
        self.grad = get_array_module(self.data).ones_like(self.data)
        for v in reversed(topological_order(self)):
            v._backward()
        # END EXERCISE 1.1


def topological_order(root):
    """Every Value ``root`` depends on, each once, each after all of its parents (root last)."""
    order, visited = [], set()
    # BEGIN EXERCISE 1.1

    def visit(v):  # depth-first: a Value is appended once all its parents are
        if v not in visited:
            visited.add(v)
            for parent in v.parents:
                visit(parent)
            order.append(v)

    visit(root)
    return order
    # END EXERCISE 1.1


def unbroadcast(grad, shape):
    """``grad`` summed over the axes that broadcasting added or stretched, so it has ``shape``."""
    if grad.shape == shape:
        return grad
    # BEGIN EXERCISE 1.2
    while grad.ndim > len(shape):  # leading axes broadcasting added
        grad = grad.sum(axis=0)
    for axis, n in enumerate(shape):  # axes of size 1 it stretched
        if n == 1 and grad.shape[axis] != 1:
            grad = grad.sum(axis=axis, keepdims=True)
    return grad
    # END EXERCISE 1.2
