"""Arithmetic with NumPy broadcasting: + - * / ** neg and matrix products.

Broadcasting copies an operand along axes of size 1 (or missing leading
axes); the chain rule then sums the incoming gradient over those axes
(``unbroadcast``), so every input gets a gradient of its own shape.
"""

from ..autograd import Function, ShapeError, Tensor
from ..backend import get_array_module
from ..chunks import gemm


def unbroadcast(grad, shape):
    """Sum ``grad`` over the axes broadcasting added or stretched, giving ``shape``."""
    if grad.shape == shape:
        return grad
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and grad.shape[lead + i] != 1
    )
    return grad.sum(axis=axes, keepdims=True).reshape(shape)


def as_operand(x, like):
    """``x`` as a Tensor next to ``like``: Python numbers take ``like``'s float dtype."""
    if isinstance(x, Tensor):
        return x
    xp = get_array_module(like.data)
    if isinstance(x, (int, float)) and like.dtype.kind == "f":
        return Tensor(xp.asarray(x, dtype=like.dtype))
    return Tensor(xp.asarray(x))


def _pair(a, b):
    if not isinstance(a, Tensor):
        a = as_operand(a, b)
    elif not isinstance(b, Tensor):
        b = as_operand(b, a)
    return a, b


class _Broadcasting(Function):
    """A binary elementwise op; ``compute`` does the work, errors name both shapes."""

    name = ""

    def forward(self, a, b):
        self.a_shape, self.b_shape = a.shape, b.shape
        try:
            return self.compute(a, b)
        except ValueError:
            raise ShapeError(
                f"{self.name}: shapes {a.shape} and {b.shape} cannot be broadcast together "
                "(trailing dimensions must be equal or 1)"
            ) from None

    def reduce(self, ga, gb):
        """Unbroadcast the two raw gradients, skipping inputs that need none."""
        need_a, need_b = self.needs_input_grad
        return (
            unbroadcast(ga, self.a_shape) if need_a else None,
            unbroadcast(gb, self.b_shape) if need_b else None,
        )


class Add(_Broadcasting):
    name = "add"

    def compute(self, a, b):
        return a + b

    def backward(self, g):
        return self.reduce(g, g)


class Sub(_Broadcasting):
    name = "sub"

    def compute(self, a, b):
        return a - b

    def backward(self, g):
        return self.reduce(g, -g if self.needs_input_grad[1] else None)


class Mul(_Broadcasting):
    name = "mul"

    def compute(self, a, b):
        self.a, self.b = a, b
        return a * b

    def backward(self, g):
        need_a, need_b = self.needs_input_grad
        return self.reduce(g * self.b if need_a else None, g * self.a if need_b else None)


class Div(_Broadcasting):
    name = "div"

    def compute(self, a, b):
        self.a, self.b = a, b
        return a / b

    def backward(self, g):
        need_a, need_b = self.needs_input_grad
        ga = g / self.b if need_a else None
        gb = -g * self.a / (self.b * self.b) if need_b else None
        return self.reduce(ga, gb)


class Pow(_Broadcasting):
    """a ** b: d/da = b a^(b-1), d/db = a^b log a."""

    name = "pow"

    def compute(self, a, b):
        self.a, self.b = a, b
        self.out = a**b
        return self.out

    def backward(self, g):
        need_a, need_b = self.needs_input_grad
        xp = get_array_module(g)
        ga = g * self.b * self.a ** (self.b - 1) if need_a else None
        gb = g * self.out * xp.log(self.a) if need_b else None
        return self.reduce(ga, gb)


class PowScalar(Function):
    """x ** p for a constant p: d/dx = p x^(p-1)."""

    def forward(self, x, p):
        self.x, self.p = x, p
        return x**p

    def backward(self, g):
        return g * (self.p * self.x ** (self.p - 1))


class Neg(Function):
    def forward(self, x):
        return -x

    def backward(self, g):
        return -g


class MatMul(Function):
    """a @ b with NumPy's rules (1-D operands, batched stacks broadcast).

    For C = A B: dA = dC B^T and dB = A^T dC, summed over broadcast batch axes.
    """

    def forward(self, a, b):
        if a.ndim == 0 or b.ndim == 0 or a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
            raise ShapeError(
                f"matmul: shapes {a.shape} and {b.shape} do not align: the last dimension "
                "of the first must equal the second-to-last (or only) dimension of the second"
            )
        self.a, self.b = a, b
        if a.ndim == b.ndim == 2:
            return gemm(a, b)
        try:
            return a @ b
        except ValueError:
            raise ShapeError(
                f"matmul: batch dimensions of {a.shape} and {b.shape} cannot be broadcast together"
            ) from None

    def backward(self, g):
        a, b = self.a, self.b
        if a.ndim == 1 and b.ndim == 1:
            return g * b, g * a
        need_a, need_b = self.needs_input_grad
        if a.ndim == b.ndim == 2:
            return gemm(g, b.T) if need_a else None, gemm(a.T, g) if need_b else None
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        g2 = g
        if a.ndim == 1:
            g2 = g2[..., None, :]
        if b.ndim == 1:
            g2 = g2[..., None]
        ga = gb = None
        if need_a:
            ga = unbroadcast(g2 @ b2.swapaxes(-1, -2), a2.shape).reshape(a.shape)
        if need_b:
            gb = unbroadcast(a2.swapaxes(-1, -2) @ g2, b2.shape).reshape(b.shape)
        return ga, gb


def add(a: Tensor | float, b: Tensor | float) -> Tensor:
    """a + b with broadcasting."""
    return Add.apply(*_pair(a, b))


def sub(a: Tensor | float, b: Tensor | float) -> Tensor:
    """a - b with broadcasting."""
    return Sub.apply(*_pair(a, b))


def mul(a: Tensor | float, b: Tensor | float) -> Tensor:
    """a * b elementwise, with broadcasting."""
    return Mul.apply(*_pair(a, b))


def div(a: Tensor | float, b: Tensor | float) -> Tensor:
    """a / b elementwise, with broadcasting."""
    return Div.apply(*_pair(a, b))


def pow(a: Tensor | float, b: Tensor | float) -> Tensor:
    """a ** b; a constant Python exponent takes the cheaper ``PowScalar`` path."""
    if isinstance(a, Tensor) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return PowScalar.apply(a, p=b)
    return Pow.apply(*_pair(a, b))


def neg(x: Tensor) -> Tensor:
    return Neg.apply(x)


def matmul(a: Tensor | float, b: Tensor | float) -> Tensor:
    """Matrix product ``a @ b`` (NumPy semantics, batched)."""
    return MatMul.apply(*_pair(a, b))
