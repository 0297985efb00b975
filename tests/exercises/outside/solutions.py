"""Student solutions written outside the project's reference, as region bodies.

``SOLUTIONS[id]`` lists the solutions of exercise ``id``: ``(kind, bodies, verdict)`` with
``bodies`` ``{k: text}`` for the k-th region of the exercise (the others keep the
instructor's solution) and ``verdict`` None where the check must pass, else the words its
message must hold. The kinds: ``right`` (correct, in another style than the reference),
``wrong`` (plainly wrong), ``not the algorithm`` (right values by other means: another
algorithm, the tuned code in the tree, an input overwritten, an order that relies on MPI
buffering).
"""

LINEAR = {
    "right": """\
import numpy as np
dx = np.einsum("no,oi->ni", dout, w)
dw = np.einsum("no,ni->oi", dout, x)
return dx, dw, (np.ones(len(dout)) @ dout if has_bias else None)
""",
    "wrong": """\
return dout @ w, dout.T @ x, dout.sum(axis=0)
""",
    "not the algorithm": """\
import numpy as np
import minidl as md
from minidl import functional as F
xt = md.tensor(x, requires_grad=True, dtype="float64")
wt = md.tensor(w, requires_grad=True, dtype="float64")
bt = md.tensor(np.zeros(w.shape[0]), requires_grad=True, dtype="float64")
F.linear(xt, wt, bt).backward(md.tensor(dout, dtype="float64"))
return xt.grad, wt.grad, (bt.grad if has_bias else None)
""",
}

FFT = {
    "right": """\
import numpy as np
spectra = np.fft.fft2(_padded(x, geom), s=size)
kernels = np.fft.fft2(dilate_kernel(w, geom.dilation), s=size)
total = np.zeros((x.shape[0], w.shape[0]) + tuple(size), dtype=complex)
for c in range(x.shape[1]):
    total += spectra[:, None, c] * np.conj(kernels[None, :, c])
full = np.fft.ifft2(total).real
sh, sw = geom.stride
return full[:, :, : geom.out_h * sh : sh, : geom.out_w * sw : sw].astype(x.dtype), None
""",
    "wrong": """\
x_f = xp.fft.rfft2(_padded(x, geom), s=size)
w_f = xp.fft.rfft2(dilate_kernel(w, geom.dilation), s=size)
y1 = xp.fft.irfft2(xp.einsum("ncab,kcab->nkab", x_f, w_f), s=size)
return y1[:, :, :: geom.stride[0], :: geom.stride[1]][:, :, : geom.out_h, : geom.out_w], None
""",
    "not the algorithm": """\
import numpy as np
xpad = _padded(x, geom)
out = np.zeros(geom.output_shape)
for u in range(geom.kernel_h):
    for v in range(geom.kernel_w):
        rows, cols = geom.window(u, v)
        out += np.einsum("kc,nchw->nkhw", w[:, :, u, v], xpad[:, :, rows, cols])
return out.astype(x.dtype), None
""",
}

MOMENTUM_RIGHT = """\
velocity = g + momentum * state["v"] if "v" in state else g
return w - lr * velocity, dict(v=velocity)
"""
NESTEROV_RIGHT = """\
velocity = g + momentum * state["v"] if "v" in state else g
return w - lr * g - lr * momentum * velocity, dict(v=velocity)
"""
MOMENTUM = {
    "right": {0: MOMENTUM_RIGHT, 1: NESTEROV_RIGHT},
    "wrong": {0: 'v = momentum * state.get("v", 0.0) + g\nreturn w - lr * g, {"v": v}\n'},
    "not the algorithm": {  # lr folded into the velocity: the same only while lr is constant
        0: 'v = momentum * state.get("v", 0.0) + lr * g\nreturn w - v, {"v": v}\n',
        1: NESTEROV_RIGHT,
    },
    "tuned": {
        0: """\
from minidl import optim
from minidl.layers import Parameter
new, kept = w.copy(), dict(state)
optim.Momentum([Parameter(new)], lr=lr, momentum=momentum).update(new, g, kept)
return new, kept
"""
    },
}

QSGD = {
    "right": """\
import numpy as np
norm = np.linalg.norm(v.astype(np.float64)).astype(v.dtype)
p = np.abs(v) / norm * levels if norm > 0 else np.zeros_like(v)
k = np.minimum(np.floor(p + rng.uniform(size=v.shape)), levels)
return norm, (np.sign(v) * k).astype(np.int32)
""",
    "wrong": """\
import numpy as np
norm = np.linalg.norm(v.astype(np.float64)).astype(v.dtype)
p = np.abs(v) / norm * levels if norm > 0 else np.zeros_like(v)
return norm, (np.sign(v) * np.rint(p)).astype(np.int32)
""",
    "not the algorithm": """\
import numpy as np
norm = np.linalg.norm(v.astype(np.float64)).astype(v.dtype)
p = np.abs(v) / norm * levels if norm > 0 else np.zeros_like(v)
k = np.minimum(np.floor(p + np.random.random(v.shape)), levels)
return norm, (np.sign(v) * k).astype(np.int32)
""",
    "wrong norm": """\
import numpy as np
norm = np.abs(v).sum()
p = np.abs(v) / norm * levels if norm > 0 else np.zeros_like(v)
k = np.minimum(np.floor(p + rng.uniform(size=v.shape)), levels)
return norm, (np.sign(v) * k).astype(np.int32)
""",
}

TERNGRAD = {
    "right": """\
scale = abs(v).max()
keep = rng.random(v.shape) > 1 - abs(v) / scale if scale > 0 else v != v
return scale, (keep * ((v > 0) * 1 - (v < 0) * 1)).astype("int8")
""",
    "wrong": """\
scale = abs(v).max()
keep = abs(v) / scale > 0.5
return scale, (keep * ((v > 0) * 1 - (v < 0) * 1)).astype("int8")
""",
}

RING = {
    "right": """\
for step in range(size - 1):
    outgoing = blocks[(rank - step) % size].copy()
    incoming = xp.empty_like(blocks[(rank - step - 1) % size])
    request = comm.isend(outgoing, right)
    comm.recv(incoming, left)
    request.wait()
    blocks[(rank - step - 1) % size] += incoming
for step in range(size - 1):
    outgoing = blocks[(rank + 1 - step) % size].copy()
    incoming = xp.empty_like(blocks[(rank - step) % size])
    request = comm.isend(outgoing, right)
    comm.recv(incoming, left)
    request.wait()
    blocks[(rank - step) % size][...] = incoming
""",
    "wrong": """\
for step in range(size - 1):
    received = xp.empty_like(blocks[(rank - step - 1) % size])
    comm.sendrecv(blocks[(rank - step) % size], right, received, left)
    blocks[(rank - step - 1) % size][...] = received
for step in range(size - 1):
    comm.sendrecv(blocks[(rank + 1 - step) % size], right, blocks[(rank - step) % size], left)
""",
    "not the algorithm": """\
x[...] = comm.allreduce(x.copy(), "sum")
""",
}

BUTTERFLY = {
    "right": """\
if comm.rank < p2:
    for bit in range(p2.bit_length() - 1):
        partner = comm.rank ^ (1 << bit)
        theirs = xp.empty_like(x)
        comm.sendrecv(x.copy(), partner, theirs, partner)
        x += theirs
""",
    # right on a power of two only: the ranks folded in take part again
    "wrong": """\
distance = 1
while distance < comm.size:
    partner = comm.rank ^ distance
    if partner < comm.size:
        theirs = xp.empty_like(x)
        comm.sendrecv(x, partner, theirs, partner)
        x += theirs
    distance *= 2
""",
    "not the algorithm": """\
if comm.rank < p2:
    x[...] = comm.allgather(x).sum(axis=0)
""",
}

HIERARCHICAL = {
    "right": """\
if comm.rank != mine[0]:
    comm.send(x, mine[0])
    comm.recv(x, mine[0])
else:
    part = xp.empty_like(x)
    for member in mine[1:]:
        comm.recv(part, member)
        x += part
    if comm.rank == leaders[0]:
        for leader in leaders[1:]:
            comm.recv(part, leader)
            x += part
        for leader in leaders[1:]:
            comm.send(x, leader)
    else:
        comm.send(x, leaders[0])
        comm.recv(x, leaders[0])
    for member in mine[1:]:
        comm.send(x, member)
""",
    "wrong": """\
if comm.rank != mine[0]:
    comm.send(x, mine[0])
    comm.recv(x, mine[0])
else:
    part = xp.empty_like(x)
    for member in mine[1:]:
        comm.recv(part, member)
        x += part
    for member in mine[1:]:
        comm.send(x, member)
""",
    "not the algorithm": """\
if comm.rank == 0:
    part = xp.empty_like(x)
    for other in range(1, comm.size):
        comm.recv(part, other)
        x += part
    for other in range(1, comm.size):
        comm.send(x, other)
else:
    comm.send(x, 0)
    comm.recv(x, 0)
""",
}

HALO = {
    "right": """\
out[:, :, halo : halo + n] = x
if halo:
    top = xp.ascontiguousarray(x[:, :, n - halo :])
    bottom = xp.ascontiguousarray(x[:, :, :halo])
    from_below, from_above = xp.empty_like(bottom), xp.empty_like(top)
    talks = [(above, top, from_above), (below, bottom, from_below)]
    if comm.rank % 2:
        talks.reverse()
    for peer, mine, theirs in talks:
        if not 0 <= peer < comm.size:
            continue
        if comm.rank % 2 == 0:
            comm.send(mine, peer)
            comm.recv(theirs, peer)
        else:
            comm.recv(theirs, peer)
            comm.send(mine, peer)
    if below >= 0:
        out[:, :, :halo] = from_below
    if above < comm.size:
        out[:, :, n + halo :] = from_above
""",
    "wrong": """\
out[:, :, halo : halo + n] = x
""",
    "not the algorithm": """\
import numpy as np
blocks = comm.allgather_object(np.asarray(x))
whole = np.pad(np.concatenate(blocks, axis=2), ((0, 0), (0, 0), (halo, halo), (0, 0)))
start = sum(b.shape[2] for b in blocks[: comm.rank])
out[...] = whole[:, :, start : start + n + 2 * halo]
""",
    "buffered": """\
out[:, :, halo : halo + n] = x
if halo:
    from_below = xp.empty_like(x[:, :, :halo])
    from_above = xp.empty_like(x[:, :, :halo])
    if above < comm.size:
        comm.send(xp.ascontiguousarray(x[:, :, n - halo :]), above)
    if below >= 0:
        comm.send(xp.ascontiguousarray(x[:, :, :halo]), below)
    if below >= 0:
        comm.recv(from_below, below)
        out[:, :, :halo] = from_below
    if above < comm.size:
        comm.recv(from_above, above)
        out[:, :, n + halo :] = from_above
""",
}

SERVER_RIGHT = """\
clock, stale = clocks.clocks[worker], version - read_version[worker]
update(weights, message[HEADER:])
version += 1
log.append((worker, clock, stale))
clocks.tick(worker)
waiting.add(worker)
for w in [w for w in sorted(waiting) if clocks.may_start(clocks.clocks[w])]:
    waiting.discard(w)
    read_version[w] = version
    comm.send(weights, w + 1)
"""
PARAMETER_SERVER = {
    "right": {0: SERVER_RIGHT},
    "wrong": {0: SERVER_RIGHT.replace("message[HEADER:]", "2 * message[HEADER:]")},
    "not the algorithm": {  # waits for every worker: bsp whatever the gate says
        0: """\
update(weights, message[HEADER:])
log.append((worker, clocks.clocks[worker], version - read_version[worker]))
version += 1
clocks.tick(worker)
waiting.add(worker)
if len(waiting) == workers:
    for w in sorted(waiting):
        comm.send(weights, w + 1)
        read_version[w] = version
    waiting.clear()
"""
    },
    "staleness 0": {
        0: SERVER_RIGHT.replace(
            "log.append((worker, clock, stale))", "log.append((worker, clock, 0))"
        )
    },
}

ZERO1 = {
    "right": """\
base, extra = divmod(weights.size, comm.size)
counts = [base + (r < extra) for r in range(comm.size)]
start = sum(counts[: comm.rank])
stop = start + counts[comm.rank]
mine = xp.zeros(counts[comm.rank], dtype=grad.dtype)
comm.reduce_scatter(grad, counts, mine, op="mean")
update(weights[start:stop], mine, state)
comm.allgatherv(weights, counts)
""",
    "wrong": """\
counts = block_sizes(weights.size, comm.size)
start, stop = block_bounds(weights.size, comm.size)[comm.rank]
mine = xp.empty(counts[comm.rank], dtype=grad.dtype)
comm.reduce_scatter(grad, counts, mine, op="sum")
update(weights[start:stop], mine, state)
comm.allgatherv(weights, counts)
""",
    "not the algorithm": """\
counts = block_sizes(weights.size, comm.size)
start, stop = block_bounds(weights.size, comm.size)[comm.rank]
mean = comm.allreduce(grad.copy(), op="mean")
update(weights[start:stop], mean[start:stop], state)
comm.allgatherv(weights, counts)
""",
}

SYNC_BN_FORWARD_RIGHT = """\
count = x.size // c
own_mean = x.mean(axis=axes)
own_m2 = ((x - per_channel(own_mean, x.ndim)) ** 2).sum(axis=axes)
rows = comm.allgather(xp.concatenate([[count], own_mean, own_m2]).astype(x.dtype))
counts, means, m2s = rows[:, :1], rows[:, 1 : 1 + c], rows[:, 1 + c :]
n = counts.sum()
mean = (counts * means).sum(axis=0) / n
var = (m2s + counts * (means - mean) ** 2).sum(axis=0) / n
running_mean *= 1 - momentum
running_mean += momentum * mean
running_var *= 1 - momentum
running_var += momentum * var * n / (n - 1)
inv_std = (var + eps) ** -0.5
x_hat = (x - per_channel(mean, x.ndim)) * per_channel(inv_std, x.ndim)
return per_channel(gamma, x.ndim) * x_hat + per_channel(beta, x.ndim), (x_hat, inv_std, gamma, n)
"""
SYNC_BN_BACKWARD_RIGHT = """\
g = dout * per_channel(gamma, dout.ndim)
both = comm.allreduce(xp.concatenate([g.sum(axis=axes), (g * x_hat).sum(axis=axes)]), op="sum")
a, b = per_channel(both[:c] / n, dout.ndim), per_channel(both[c:] / n, dout.ndim)
return per_channel(inv_std, dout.ndim) * (g - a - x_hat * b), dgamma, dbeta
"""
SYNC_BN = {  # regions: 0 join_statistics (the instructor's), 1 forward, 2 backward
    "right": {1: SYNC_BN_FORWARD_RIGHT, 2: SYNC_BN_BACKWARD_RIGHT},
    "wrong": {  # each rank normalises with its own share's statistics
        1: SYNC_BN_FORWARD_RIGHT.replace("rows = comm.allgather(", "rows = xp.stack([").replace(
            ".astype(x.dtype))", ".astype(x.dtype)])"
        ),
        2: SYNC_BN_BACKWARD_RIGHT,
    },
    "not the algorithm": {  # gathers the samples and normalises the whole batch
        1: """\
every = comm.allgather(x).reshape((-1,) + x.shape[1:])
n = every.size // c
mean, var = every.mean(axis=axes), every.var(axis=axes)
running_mean[...] = (1 - momentum) * running_mean + momentum * mean
running_var[...] = (1 - momentum) * running_var + momentum * var * n / (n - 1)
inv_std = 1 / xp.sqrt(var + eps)
x_hat = (x - per_channel(mean, x.ndim)) * per_channel(inv_std, x.ndim)
return per_channel(gamma, x.ndim) * x_hat + per_channel(beta, x.ndim), (x_hat, inv_std, gamma, n)
""",
        2: SYNC_BN_BACKWARD_RIGHT,
    },
}

MEGATRON_BACKWARD = {
    "right": """\
import numpy as np
dw2, db2 = np.einsum("no,nh->oh", g, h), np.einsum("no->o", g)
da = np.einsum("no,oh->nh", g, w2) * (1 - np.square(h))
dw1, db1 = np.einsum("nh,ni->hi", da, x), np.einsum("nh->h", da)
dx = comm.allreduce(np.einsum("nh,hi->ni", da, w1), op="sum")
""",
    "wrong": """\
dw2, db2 = g.T @ h, g.sum(axis=0)
da = (g @ w2) * (1 - h * h)
dw1, db1 = da.T @ x, da.sum(axis=0)
dx = da @ w1
""",
    "not the algorithm": """\
dw2, db2 = g.T @ h, g.sum(axis=0)
h *= h
da = (g @ w2) * (1 - h)
dw1, db1 = da.T @ x, da.sum(axis=0)
dx = comm.allreduce(da @ w1, op="sum")
""",
}


UNBROADCAST = {
    "right": """\
extra = grad.ndim - len(shape)
stretched = [extra + i for i, n in enumerate(shape) if n == 1 and grad.shape[extra + i] != 1]
axes = tuple(range(extra)) + tuple(stretched)
return grad.sum(axis=axes).reshape(shape) if axes else grad
""",
    "wrong": """\
return grad.sum(axis=tuple(range(grad.ndim - len(shape))))
""",
    "not the algorithm": """\
from minidl.functional import unbroadcast as tuned
return tuned(grad, shape)
""",
}

SOFTMAX_CROSS_ENTROPY = {
    "right": """\
import numpy as np
return (p - np.eye(p.shape[1])[labels]) * dout / len(labels)
""",
    "wrong": """\
import numpy as np
return (p - np.eye(p.shape[1])[labels]) * dout
""",
    "not the algorithm": """\
import numpy as np
import minidl as md
from minidl import functional as F
z = md.tensor(np.log(p), requires_grad=True, dtype="float64")
F.cross_entropy(z, labels).backward(md.tensor(dout, dtype="float64"))
return z.grad
""",
}

ACTIVATIONS = {  # regions: 0 ReLU, 1 sigmoid, 2 tanh
    "right": {
        0: "import numpy as np\nreturn np.where(x > 0, dout, 0.0)\n",
        1: "return dout * (y - y**2)\n",
        2: "return dout - dout * y**2\n",
    },
    "wrong": {1: "return dout * y\n"},
    "not the algorithm": {
        2: """\
import numpy as np
import minidl as md
from minidl import functional as F
t = md.tensor(np.arctanh(y), requires_grad=True, dtype="float64")
F.tanh(t).backward(md.tensor(dout, dtype="float64"))
return t.grad
"""
    },
}

ADAPTIVE = {  # regions: 0 AdaGrad, 1 RMSProp
    "right": {
        0: """\
total = g**2 + state["G"] if "G" in state else g**2
return w - lr * g / (xp.sqrt(total) + eps), dict(G=total)
""",
        1: """\
average = (1 - alpha) * g**2 + (alpha * state["E"] if "E" in state else 0.0)
return w - lr * g / (xp.sqrt(average) + eps), dict(E=average)
""",
    },
    "wrong": {0: "total = g**2\nreturn w - lr * g / (xp.sqrt(total) + eps), dict(G=total)\n"},
    "not the algorithm": {
        0: """\
from minidl import optim
from minidl.layers import Parameter
new, kept = w.copy(), dict(state)
optim.AdaGrad([Parameter(new)], lr=lr, eps=eps).update(new, g, kept)
return new, kept
"""
    },
}

ADAM = {
    "right": """\
t = state.get("t", 0) + 1
m = g * (1 - b1) + (state["m"] * b1 if t > 1 else 0.0)
v = g * g * (1 - b2) + (state["v"] * b2 if t > 1 else 0.0)
step = (m / (1 - b1**t)) / (xp.sqrt(v / (1 - b2**t)) + eps)
return w - lr * step, dict(t=t, m=m, v=v)
""",
    "wrong": """\
m = b1 * state.get("m", 0.0) + (1 - b1) * g
v = b2 * state.get("v", 0.0) + (1 - b2) * g * g
return w - lr * m / (xp.sqrt(v) + eps), {"m": m, "v": v}
""",
    "not the algorithm": """\
from minidl import optim
from minidl.layers import Parameter
new, kept = w.copy(), dict(state)
optim.Adam([Parameter(new)], lr=lr, betas=(b1, b2), eps=eps).update(new, g, kept)
return new, kept
""",
}

SSP_GATE = {
    "right": """\
return self.staleness is None or all(c + self.staleness >= clock for c in self.clocks)
""",
    "wrong": """\
return self.staleness is None or min(self.clocks) > clock - self.staleness
""",
    "not the algorithm": """\
from minidl.dist.consistency.ssp import ClockTable
table = ClockTable(len(self.clocks), self.staleness)
table.clocks = list(self.clocks)
return table.may_start(clock)
""",
}

SCALED_SIGN = {
    "right": """\
import numpy as np
return np.mean(np.abs(v)), np.where(v < 0, -1, 1).astype(np.int8)
""",
    "wrong": """\
import numpy as np
return np.mean(np.abs(v)), np.sign(v).astype(np.int8)
""",
}

TOP_K_ERROR = {
    "right": """\
import numpy as np
scores = np.asarray(scores)
above = (scores > scores[np.arange(len(labels)), labels][:, None]).sum(axis=1)
return float(np.mean(above >= k))
""",
    "wrong": """\
import numpy as np
best = np.argsort(scores, axis=1)[:, :k]
return float(np.mean([label not in row for row, label in zip(best, labels)]))
""",
    "not the algorithm": """\
from minidl.train.loop import top_k_hits
return 1 - top_k_hits(scores, labels, k) / len(labels)
""",
}


RECOMPUTE_FORWARD_RIGHT = """\
inputs = x
with no_grad():
    for start, stop in bounds:
        saved.append((inputs, random.snapshot()))
        for index in range(start, stop):
            inputs = layers[index](Tensor(inputs)).data
x = inputs
"""
RECOMPUTE_BACKWARD_RIGHT = """\
for segment in range(len(bounds) - 1, -1, -1):
    start, stop = bounds[segment]
    kept, draws = saved[segment]
    state = {id(b): b.data.copy() for layer in layers[start:stop] for _, b in layer.named_buffers()}
    now = random.snapshot()
    random.restore(draws)
    first = Tensor(kept, requires_grad=True)
    out = first
    for index in range(start, stop):
        out = layers[index](out)
    random.restore(now)
    for layer in layers[start:stop]:
        for _, b in layer.named_buffers():
            b.data[...] = state[id(b)]
    out.backward(grad)
    grad = first.grad
"""
RECOMPUTE = {  # regions: 0 forward, 1 backward
    "right": {0: RECOMPUTE_FORWARD_RIGHT, 1: RECOMPUTE_BACKWARD_RIGHT},
    "wrong": {1: RECOMPUTE_BACKWARD_RIGHT.replace("random.restore(draws)", "pass")},
    "not the algorithm": {  # frees each saved input once used: the caller's x among them
        1: RECOMPUTE_BACKWARD_RIGHT + "    kept[...] = 0\n"
    },
}

HALO_ADJOINT = {
    "right": """\
if halo:
    mine = {below: xp.ascontiguousarray(g[:, :, :halo])}
    mine[above] = xp.ascontiguousarray(g[:, :, n + halo :])
    theirs = {peer: xp.empty_like(part) for peer, part in mine.items()}
    peers = [p for p in (below, above) if 0 <= p < comm.size]
    for peer in peers if comm.rank % 2 == 0 else peers[::-1]:
        if comm.rank % 2 == 0:
            comm.send(mine[peer], peer)
            comm.recv(theirs[peer], peer)
        else:
            comm.recv(theirs[peer], peer)
            comm.send(mine[peer], peer)
    if below >= 0:
        gx[:, :, :halo] += theirs[below]
    if above < comm.size:
        gx[:, :, n - halo :] += theirs[above]
""",
    "wrong": """\
if halo:
    lower = xp.ascontiguousarray(g[:, :, :halo])
    upper = xp.ascontiguousarray(g[:, :, n + halo :])
    for_first, for_last = xp.empty_like(lower), xp.empty_like(upper)
    shift(comm, lower, below, for_last, above)
    shift(comm, upper, above, for_first, below)
    if above < comm.size:
        gx[:, :, :halo] += for_last
    if below >= 0:
        gx[:, :, n - halo :] += for_first
""",
    "not the algorithm": """\
import numpy as np
every = comm.allgather_object(np.asarray(g))
if halo and below >= 0:
    gx[:, :, :halo] += every[below][:, :, -halo:]
if halo and above < comm.size:
    gx[:, :, n - halo :] += every[above][:, :, :halo]
""",
}

ZERO3 = {  # regions: 0 gather, 1 forward, 2 backward
    "right": {
        1: "weight, bias = self.unflatten(self.gather())\nreturn x.dot(weight.T) + bias\n",
        2: """\
import numpy as np
weight, _ = self.unflatten(self.gather())
local = np.concatenate([np.einsum("no,ni->oi", dy, x).ravel(), np.einsum("no->o", dy)])
self.grad = np.zeros(self.shard.shape, dtype=self.shard.dtype)
self.comm.reduce_scatter(local, self.counts, self.grad, op="mean")
return np.einsum("no,oi->ni", dy, weight)
""",
    },
    "wrong": {
        2: """\
weight, _ = self.unflatten(self.gather())
local = xp.concatenate([(dy.T @ x).reshape(-1), dy.sum(axis=0)])
self.grad = xp.empty_like(self.shard)
self.comm.reduce_scatter(local, self.counts, self.grad, op="sum")
return dy @ weight
"""
    },
    "not the algorithm": {  # keeps the gathered parameters for the backward
        1: """\
self.full = self.gather()
weight, bias = self.unflatten(self.full)
return x @ weight.T + bias
"""
    },
}


TOPOLOGICAL = {  # regions: 0 backward, 1 topological_order
    "right": {
        0: """\
import numpy as np
self.grad = np.ones_like(self.data)
for v in list(topological_order(self))[::-1]:
    v._backward()
""",
        1: """\
visited.add(root)
stack = [(root, iter(root.parents))]
while stack:
    node, parents = stack[-1]
    for parent in parents:
        if parent not in visited:
            visited.add(parent)
            stack.append((parent, iter(parent.parents)))
            break
    else:
        stack.pop()
        order.append(node)
return order
""",
    },
    "wrong": {  # the leaves first: each _backward runs before its output's gradient is in
        0: """\
import numpy as np
self.grad = np.ones_like(self.data)
for v in topological_order(self):
    v._backward()
"""
    },
}

MATMUL = {
    "right": """\
import numpy as np
self.grad += np.einsum("ik,jk->ij", out.grad, other.data)
other.grad += np.einsum("ki,kj->ij", self.data, out.grad)
""",
    "wrong": """\
self.grad = out.grad @ other.data.T
other.grad = self.data.T @ out.grad
""",
    "not the algorithm": """\
import minidl as md
a = md.tensor(self.data, requires_grad=True, dtype="float64")
b = md.tensor(other.data, requires_grad=True, dtype="float64")
(a @ b).backward(md.tensor(out.grad, dtype="float64"))
self.grad += a.grad
other.grad += b.grad
""",
}

MAX_POOL = {
    "right": """\
taps = [(u, v) for u in range(kh) for v in range(kw)]
spans = [
    (slice(u, u + sh * (oh - 1) + 1, sh), slice(v, v + sw * (ow - 1) + 1, sw)) for u, v in taps
]
best = xp.full(dout.shape, -xp.inf, dtype=xpad.dtype)
first = xp.zeros(dout.shape, dtype=int)
for t, (rows, cols) in enumerate(spans):
    seen = xpad[:, :, rows, cols]
    first = xp.where(seen > best, t, first)
    best = xp.maximum(seen, best)
dxpad = xp.zeros_like(xpad)
for t, (rows, cols) in enumerate(spans):
    dxpad[:, :, rows, cols] += xp.where(first == t, dout, 0)
return unpad(dxpad, geometry, shape)
""",
    "wrong": """\
dxpad = xp.zeros_like(xpad)
for i in range(oh):
    for j in range(ow):
        win = window(xpad, i, j, geometry)
        top = win == win.max(axis=(2, 3), keepdims=True)
        window(dxpad, i, j, geometry)[...] += top * dout[:, :, i, j][:, :, None, None]
return unpad(dxpad, geometry, shape)
""",
    "not the algorithm": """\
import minidl as md
from minidl import functional as F
t = md.tensor(unpad(xpad, geometry, shape), requires_grad=True, dtype="float64")
F.max_pool2d(t, (kh, kw), (sh, sw), geometry[2]).backward(md.tensor(dout, dtype="float64"))
return t.grad
""",
}

BATCH_NORM = {
    "right": """\
m = dout.size // dout.shape[1]
total = dx_hat.sum(axis=axes, keepdims=True)
along = (dx_hat * x_hat).sum(axis=axes, keepdims=True)
return inv_std / m * (m * dx_hat - total - x_hat * along), dgamma, dbeta
""",
    "wrong": """\
return dx_hat * inv_std, dgamma, dbeta
""",
    "not the algorithm": """\
m = dout.size // dout.shape[1]
total = dx_hat.sum(axis=axes, keepdims=True)
x_hat *= (dx_hat * x_hat).sum(axis=axes, keepdims=True)
return inv_std / m * (m * dx_hat - total - x_hat), dgamma, dbeta
""",
}

LRN = {
    "right": """\
t = dout * x * s ** (-beta - 1)
running = xp.concatenate([xp.zeros_like(t[:, :1]), xp.cumsum(t, axis=1)], axis=1)
i = xp.arange(channels)
hi, lo = xp.minimum(i + size // 2 + 1, channels), xp.maximum(i - (size - 1) // 2, 0)
return dout * s**-beta - 2 * alpha * beta / size * x * (running[:, hi] - running[:, lo])
""",
    "wrong": """\
return dout * s**-beta
""",
    "not the algorithm": """\
s **= -beta
t = dout * x * s / (s ** (1 / beta))
running = xp.concatenate([xp.zeros_like(t[:, :1]), xp.cumsum(t, axis=1)], axis=1)
i = xp.arange(channels)
hi, lo = xp.minimum(i + size // 2 + 1, channels), xp.maximum(i - (size - 1) // 2, 0)
return dout * s - 2 * alpha * beta / size * x * (running[:, hi] - running[:, lo])
""",
}

IM2COL = {
    "right": """\
import numpy as np
(sh, sw), (dh, dw) = geom.stride, geom.dilation
xpad = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
out = np.zeros((c, geom.kernel_h, geom.kernel_w, n, geom.out_h, geom.out_w), dtype=x.dtype)
for i in range(geom.out_h):
    for j in range(geom.out_w):
        patch = xpad[:, :, i * sh :: dh][:, :, : geom.kernel_h, j * sw :: dw][..., : geom.kernel_w]
        out[:, :, :, :, i, j] = patch.transpose(1, 2, 3, 0)
return out.reshape(-1, n * geom.out_h * geom.out_w)
""",
    "wrong": """\
xpad = xp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))  # rows (u, v, c)
cols = [xpad[:, :, r, s] for u in range(geom.kernel_h) for v in range(geom.kernel_w)
        for r, s in [geom.window(u, v)]]
return xp.stack(cols).transpose(0, 2, 1, 3, 4).reshape(-1, n * geom.out_h * geom.out_w)
""",
    "not the algorithm": """\
import numpy as np
from minidl.conv.im2col import columns
buffer = np.empty(c * geom.kernel_h * geom.kernel_w * n * geom.out_h * geom.out_w, x.dtype)
a = columns(x, geom, buffer, False).reshape(geom.kernel_h, geom.kernel_w, c, -1)
return a.transpose(2, 0, 1, 3).reshape(c * geom.kernel_h * geom.kernel_w, -1)
""",
}

COL2IM = {
    "right": """\
import numpy as np
(sh, sw), (dh, dw) = geom.stride, geom.dilation
parts = cols.reshape(c, geom.kernel_h, geom.kernel_w, n, geom.out_h, geom.out_w)
grad = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=cols.dtype)
for i in range(geom.out_h):
    for j in range(geom.out_w):
        for u in range(geom.kernel_h):
            grad[:, :, i * sh + u * dh, j * sw : j * sw + dw * geom.kernel_w : dw] += parts[
                :, u, :, :, i, j
            ].transpose(2, 0, 1)
return grad[:, :, ph : h + ph, pw : w + pw]
""",
    "wrong": """\
blocks = cols.reshape(c, geom.kernel_h, geom.kernel_w, n, geom.out_h, geom.out_w)
dxpad = xp.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=cols.dtype)
for u in range(geom.kernel_h):
    for v in range(geom.kernel_w):
        rows, columns = geom.window(u, v)
        dxpad[:, :, rows, columns] = blocks[:, u, v].transpose(1, 0, 2, 3)
return dxpad[:, :, ph : ph + h, pw : pw + w]
""",
    "not the algorithm": """\
from minidl.conv.im2col import col2im as tuned, crop_padding
blocks = cols.reshape(c, geom.kernel_h, geom.kernel_w, n, geom.out_h, geom.out_w)
padded = tuned(blocks.transpose(1, 2, 3, 4, 5, 0), geom)
return crop_padding(padded, geom).transpose(0, 3, 1, 2)
""",
}

DIRECT = {
    "right": """\
import numpy as np
(sh, sw), (dh, dw) = geom.stride, geom.dilation
reach_h, reach_w = dh * (geom.kernel_h - 1) + 1, dw * (geom.kernel_w - 1) + 1
y = np.empty(geom.output_shape, dtype=x.dtype)
for i in range(geom.out_h):
    for j in range(geom.out_w):
        patch = xpad[:, :, i * sh : i * sh + reach_h : dh, j * sw : j * sw + reach_w : dw]
        y[:, :, i, j] = np.einsum("kcuv,cnuv->nk", w, patch)
return y, None
""",
    "wrong": """\
y = xp.zeros((geom.out_channels, geom.batch * geom.out_h * geom.out_w), dtype=x.dtype)
for u in range(geom.kernel_h):
    for v in range(geom.kernel_w):
        y += w[:, :, u, v] @ shifted(xpad, geom, geom.kernel_h - 1 - u, geom.kernel_w - 1 - v)
return batch_first(y, geom.out_h, geom.out_w), None
""",
    "not the algorithm": """\
from minidl.conv.direct import DIRECT
return DIRECT.forward(x, w, geom)
""",
}

WINOGRAD = {  # regions: 0 transform_tiles, 1 transform_kernels, 2 the products and A^T m A
    "right": {
        0: 'return np.einsum("ia,...ab,jb->...ij", b_t, d, b_t)\n',
        1: 'return np.einsum("ia,kcab,jb->kcij", g, w, g)\n',
        2: """\
m = (u[None, :, :, None, None] * v[:, None]).sum(axis=2)
y = xp.einsum("ia,nktsab,jb->nktsij", a_t, m, a_t)
n, k, th, tw = y.shape[:4]
out = xp.empty((n, k, 2 * th, 2 * tw), dtype=y.dtype)
for i in range(2):
    for j in range(2):
        out[:, :, i::2, j::2] = y[..., i, j]
return out[:, :, :out_h, :out_w]
""",
    },
    "wrong": {0: "return b_t.T @ d @ b_t\n"},
    "not the algorithm": {  # the definition on the padded input: the transforms unused
        2: """\
(ph, pw) = padding
xpad = xp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
y = xp.zeros((x.shape[0], w.shape[0], out_h, out_w), dtype=x.dtype)
for a in range(3):
    for b in range(3):
        y += xp.einsum("kc,nchw->nkhw", w[:, :, a, b], xpad[:, :, a : a + out_h, b : b + out_w])
return y
"""
    },
}


CONV_WORK_DEPTH = {
    "right": """\
import math
rows, cols = (h + 2 * py - ky) // sy + 1, (w + 2 * px - kx) // sx + 1
sums = (c_in // groups, ky, kx)  # the three sums of each output
return n * out_channels * rows * cols * math.prod(sums), sum((s - 1).bit_length() for s in sums)
""",
    "wrong": """\
h_out, w_out = output_size(h, ky, sy, py), output_size(w, kx, sx, px)
work = n * out_channels * h_out * w_out * c_in * ky * kx
return work, tree_depth(c_in) + tree_depth(ky) + tree_depth(kx)
""",
    "not the algorithm": """\
from minidl import layers as L
from minidl.perf import count_model
conv = L.Conv2d(c_in, out_channels, (ky, kx), stride=(sy, sx), padding=(py, px), groups=groups)
layer = count_model(conv, x_shape[1:], batch=n).layers[0]
return layer.work, layer.depth
""",
}

ALLREDUCE_COST = {  # regions: 0 recursive doubling, 1 ring
    "right": {
        0: """\
p2 = 1 << (p.bit_length() - 1)
folding = 0.0 if p2 == p else 2 * (alpha + m * beta) + m * gamma
return (p2.bit_length() - 1) * (alpha + m * (beta + gamma)) + folding
""",
        1: "return (p - 1) * (2 * alpha + m / p * (2 * beta + gamma))\n",
    },
    "wrong": {1: "return 2 * (p - 1) * (alpha + m * beta) + (p - 1) * m * gamma\n"},
    "not the algorithm": {
        1: """\
from minidl.perf.allreduce_cost import CostParams, predict
return predict("ring", m, p, CostParams(alpha, beta, gamma))
"""
    },
}

SCALING = {  # regions: 0 iteration_time, 1 amdahl_speedup
    "right": {
        0: """\
parallel = (1 - s) * t_local
behind = min(f * t_comm, (1 - s) * t_local_backward)  # hidden behind the backward pass
return s * t_full + parallel + (t_comm - behind)
""",
        1: "return nodes / (serial_fraction * nodes + 1 - serial_fraction)\n",
    },
    "wrong": {0: "return s * t_full + (1 - s) * t_local + (1 - f) * t_comm\n"},
}

EASGD = {  # regions: 0 easgd_step, 1 elastic_exchange
    "right": {
        0: """\
import numpy as np
x = np.stack(workers)
pull = rho * (x - center)
return list(x - lr * (np.stack(gradients) + pull)), center + lr * pull.sum(axis=0)
""",
        1: "pull = alpha * (center - local)\nreturn local + pull, center - pull\n",
    },
    "wrong": {  # the center moves towards the new workers
        0: """\
new_workers = [x - lr * (g + rho * (x - center)) for x, g in zip(workers, gradients)]
return new_workers, center + lr * rho * sum(x - center for x in new_workers)
"""
    },
    "not the algorithm": {
        1: """\
from minidl.dist.consistency.averaging import elastic_difference
d = elastic_difference(local, center, alpha)
return local - d, center + d
"""
    },
}

LOCAL_SGD = {
    "right": """\
import numpy as np
w = np.array(replicas)
for t in range(steps):
    w = w - lr * np.stack([gradient(i, r, t) for i, r in enumerate(w)])
    if (t + 1) % period == 0:
        w[...] = w.mean(axis=0)
return list(w)
""",
    "wrong": """\
replicas = [w.copy() for w in replicas]
for t in range(steps):
    replicas = [w - lr * gradient(i, w, t) for i, w in enumerate(replicas)]
mean = sum(replicas) / len(replicas)
return [mean.copy() for _ in replicas]
""",
    "not the algorithm": """\
for t in range(steps):
    for i, w in enumerate(replicas):
        w -= lr * gradient(i, w, t)
    if (t + 1) % period == 0:
        mean = sum(replicas) / len(replicas)
        for w in replicas:
            w[...] = mean
return [w.copy() for w in replicas]
""",
}

TOP_K_FEEDBACK = {  # regions: 0 topk_encode, 1 error_feedback
    "right": {
        0: """\
kept = xp.argpartition(xp.abs(v), v.size - k)[v.size - k :]
return kept, v[kept]
""",
        1: "total = residual + gradient\nkept = compress(total)\nreturn kept, total - kept\n",
    },
    "wrong": {0: "indices = xp.argsort(-v)[:k]\nreturn indices, v[indices]\n"},
    "not the algorithm": {
        1: """\
residual += gradient
sent = compress(residual)
residual -= sent
return sent, residual.copy()
"""
    },
    "tuned": {
        0: """\
import numpy as np
from minidl.dist.compression import TopK
payload = TopK((k - 0.5) / v.size).encode(v)  # k values: ceil(k - 0.5)
indices = payload[: 4 * k].view(np.uint32).astype(np.int64)
return indices, v[indices]
"""
    },
}

GPIPE = {
    "right": "order = [step(m) for step in (forward, backward) for m in range(micro_batches)]\n",
    "wrong": "order = [i for m in range(micro_batches) for i in (forward(m), backward(m))]\n",
    "not the algorithm": """\
from minidl.dist.pipeline.schedules import gpipe as tuned
order = [i for i in tuned(stages, micro_batches)[stage] if i.op in ("forward", "backward")]
""",
}

ONE_F_ONE_B = {
    "right": """\
warm = min(stages - 1 - stage, micro_batches)
ahead, behind = iter(range(micro_batches)), iter(range(micro_batches))
order = [forward(next(ahead)) for _ in range(warm)]
for m in ahead:
    order += [forward(m), backward(next(behind))]
order += [backward(m) for m in behind]
""",
    "wrong": """\
warmup = min(stages - stage, micro_batches)
order = [forward(m) for m in range(warmup)]
for i in range(micro_batches - warmup):
    order += [forward(warmup + i), backward(i)]
order += [backward(m) for m in range(micro_batches - warmup, micro_batches)]
""",
    "not the algorithm": """\
from minidl.dist.pipeline.schedules import one_f_one_b as tuned
order = [i for i in tuned(stages, micro_batches)[stage] if i.op in ("forward", "backward")]
""",
}

BUBBLE = {
    "right": """\
fill_and_drain = stages - 1
return fill_and_drain / (fill_and_drain + chunks * micro_batches)
""",
    "wrong": "return (stages - 1) / (micro_batches + stages - 1)\n",
    "not the algorithm": """\
from minidl.perf.pipeline_simulate import ideal_bubble
return ideal_bubble(stages, micro_batches, chunks)
""",
}

COLOUR_PCA = {  # regions: 0 colour_pca, 1 pca_lighting
    "right": {
        0: """\
mean = pixels.mean(axis=0)
_, singular, rows = np.linalg.svd(pixels - mean, full_matrices=False)
return mean, singular**2 / len(pixels), rows.T
""",
        1: "return out + (eigenvectors @ (alpha * np.sqrt(eigenvalues)))[:, None, None]\n",
    },
    "wrong": {  # the unbiased covariance
        0: """\
mean = pixels.mean(axis=0)
values, vectors = np.linalg.eigh(np.cov(pixels.T))
return mean, values[::-1], vectors[:, ::-1]
"""
    },
    "not the algorithm": {
        0: """\
from minidl.data.colour import pixel_moments, stats_from_moments
moments = [pixel_moments(image) for image in images]
stats = stats_from_moments(*(sum(m[i] for m in moments) for i in range(3)), len(images))
return stats.mean, stats.eigenvalues, stats.eigenvectors
"""
    },
}


TREE = {
    "right": """\
rounds = (size - 1).bit_length()
up = (rank & -rank).bit_length() - 1 if rank else rounds  # the round rank sends to its parent
children = [rank + (1 << k) for k in range(min(up, rounds)) if rank + (1 << k) < size]
for child in children:
    comm.recv(received, child)
    x += received
if rank:
    parent = rank - (1 << up)
    comm.send(x, parent)
    comm.recv(x, parent)
for child in reversed(children):
    comm.send(x, child)
""",
    "wrong": """\
rounds = (size - 1).bit_length()
up = (rank & -rank).bit_length() - 1 if rank else rounds
for k in range(min(up, rounds)):  # the sums go up the tree, and nothing comes back down
    if rank + (1 << k) < size:
        comm.recv(received, rank + (1 << k))
        x += received
if rank:
    comm.send(x, rank - (1 << up))
""",
    "not the algorithm": """\
if rank == 0:
    for other in range(1, size):
        comm.recv(received, other)
        x += received
    for other in range(1, size):
        comm.send(x, other)
else:
    comm.send(x, 0)
    comm.recv(x, 0)
""",
}

RABENSEIFNER = {
    "right": """\
if comm.rank < p2:
    done, lo, hi, bit = [], 0, x.size, p2 >> 1
    while bit:
        mid, partner = (lo + hi) // 2, comm.rank ^ bit
        halves = [slice(lo, mid), slice(mid, hi)]
        kept, given = halves[::-1] if comm.rank & bit else halves
        incoming = xp.empty_like(x[kept])
        comm.sendrecv(xp.ascontiguousarray(x[given]), partner, incoming, partner)
        x[kept] += incoming
        done.append((partner, kept, given))
        lo, hi, bit = kept.start, kept.stop, bit >> 1
    while done:
        partner, kept, given = done.pop()
        incoming = xp.empty_like(x[given])
        comm.sendrecv(xp.ascontiguousarray(x[kept]), partner, incoming, partner)
        x[given] = incoming
""",
    "wrong": """\
if comm.rank < p2:
    start, stop, step = 0, x.size, p2
    while step > 1:  # halving: keep one half of the range, hand over the other
        step //= 2
        partner, middle = comm.rank ^ step, (start + stop) // 2
        if comm.rank & step:
            mine, theirs = slice(middle, stop), slice(start, middle)
        else:
            mine, theirs = slice(start, middle), slice(middle, stop)
        got = xp.empty_like(x[mine])
        comm.sendrecv(xp.ascontiguousarray(x[theirs]), partner, got, partner)
        x[mine] += got
        start, stop = mine.start, mine.stop
# the doubling that hands the reduced pieces back around is missing
""",
    "not the algorithm": """\
if comm.rank < p2:
    bit = 1
    while bit < p2:
        theirs = xp.empty_like(x)
        comm.sendrecv(x.copy(), comm.rank ^ bit, theirs, comm.rank ^ bit)
        x += theirs
        bit <<= 1
""",
}

BUCKETS = {  # regions: 0 assign_buckets, 1 average_gradients
    "right": {
        0: """\
grouped = []
for p in params[::-1]:
    if grouped and sum(q.data.nbytes for q in grouped[-1]) + p.data.nbytes <= bucket_bytes:
        grouped[-1].append(p)
    else:
        grouped.append([p])
return grouped
""",
        1: """\
import itertools
for group in buckets:
    xp = get_array_module(group[0].data)
    flat = xp.zeros(sum(p.size for p in group), dtype=group[0].data.dtype)
    ends = list(itertools.accumulate(p.size for p in group))
    for p, end in zip(group, ends):
        if p.grad is not None:
            flat[end - p.size : end] = p.grad.ravel()
    comm.allreduce(flat, op="mean", algorithm=algorithm)
    for p, piece in zip(group, xp.split(flat, ends[:-1])):
        p.grad = piece.reshape(p.shape)
""",
    },
    "wrong": {
        1: """\
for bucket in buckets:
    xp = get_array_module(bucket[0].data)
    flat = xp.concatenate(
        [xp.zeros(p.size, p.data.dtype) if p.grad is None else p.grad.ravel() for p in bucket]
    )
    comm.allreduce(flat, op="sum", algorithm=algorithm)  # the sum, never divided by the ranks
    start = 0
    for p in bucket:
        p.grad, start = flat[start : start + p.size].reshape(p.shape), start + p.size
"""
    },
    "not the algorithm": {  # one allreduce per parameter, the buckets unused
        1: """\
for bucket in buckets:
    for p in bucket:
        xp = get_array_module(p.data)
        g = xp.zeros_like(p.data) if p.grad is None else p.grad.copy()
        comm.allreduce(g, op="mean", algorithm=algorithm)
        p.grad = g
"""
    },
}

COLUMN_ROW_FORWARD = {
    "right": """\
h = np.tanh(np.einsum("ni,hi->nh", x, w1) + b1)
y = b2 + comm.allreduce(np.einsum("nh,oh->no", h, w2), op="sum")
""",
    "wrong": """\
h = np.tanh(x @ w1.T + b1)
y = comm.allreduce(h @ w2.T + b2, op="sum")
""",
    "not the algorithm": """\
h = np.tanh(x @ w1.T + b1)
y = comm.allgather(h @ w2.T).sum(axis=0) + b2
""",
}

GRID_GROUPS = {
    "right": """\
grid = comm.mpi.Create_cart([dp, tp], reorder=False)
tp_group, dp_group = grid.Sub([False, True]), grid.Sub([True, False])
""",
    "wrong": """\
d, t = divmod(comm.rank, tp)
tp_group = comm.mpi.Split(color=t, key=d)
dp_group = comm.mpi.Split(color=d, key=t)
""",
    "not the algorithm": """\
from minidl.dist import Grid
grid = Grid(comm, dp=dp, tp=tp)
dp_group, tp_group = grid.group("dp").mpi, grid.group("tp").mpi
""",
}

WEIGHT_STASHING = {  # regions: 0 the stash after a forward, 1 the backward on it
    "right": {
        0: "import copy\nstash[m, s] = copy.deepcopy([p.data for p in params])\n",
        1: """\
live = [p.data.copy() for p in params]
for p, w in zip(params, stash.pop((m, s))):
    p.data[...] = w
out = stage(x)
if s < last:
    out.backward(grads.pop((m, s)))
else:
    loss(out, targets[m]).backward()
for p, w in zip(params, live):
    p.data[...] = w
""",
    },
    "wrong": {  # the live weights, updated since the forward
        1: """\
stash.pop((m, s))
out = stage(x)
if s == last:
    loss(out, targets[m]).backward()
else:
    out.backward(grads.pop((m, s)))
"""
    },
}


def by_region(bodies):
    """``{k: text}`` from a text (the exercise's only region) or a dict."""
    return bodies if isinstance(bodies, dict) else {0: bodies}


TUNED = "the code called minidl's"


def graded(path, bodies, wrong, rule=None, *more):
    """``(path, [(kind, bodies, verdict)])`` of an exercise: ``bodies["right"]`` passes,
    ``bodies["wrong"]`` fails saying ``wrong``, ``bodies["not the algorithm"]`` (with ``rule``)
    fails saying ``rule``; ``more``: ``(kind, key, words)`` of further solutions in ``bodies``."""
    solutions = [("right", bodies["right"], None), ("wrong", bodies["wrong"], wrong)]
    if rule is not None:
        solutions.append(("not the algorithm", bodies["not the algorithm"], rule))
    return path, solutions + [(kind, bodies[key], words) for kind, key, words in more]


# id: (path, [(kind, bodies, verdict)]); verdict None: passes, else words of its message
IN_PROCESS = {
    "2.1": graded(
        "minidl/reference/functional/linear.py",
        LINEAR,
        "linear without a bias: db is None",
        f"{TUNED} autograd",
    ),
    "3.4": graded(
        "minidl/reference/conv/fft.py", FFT, "FFT convolution of", "not a loop over the kernel taps"
    ),
    "4.1": graded(
        "minidl/reference/optim/momentum.py",
        MOMENTUM,
        "w after step 2",
        "step by step: w after step",
        ("not the algorithm", "tuned", f"{TUNED} tuned optimizers"),
    ),
    "9.2": graded(
        "minidl/reference/dist/compression.py",
        QSGD,
        "E[Q(v)] = v",
        "the same seed",
        ("wrong", "wrong norm", "QSGD s=1: the norm sent"),
    ),
    "9.3": graded("minidl/reference/dist/compression.py", TERNGRAD, "E[Q(v)] = v"),
    "1.2": graded("minidl/reference/autograd.py", UNBROADCAST, "unbroadcast", f"{TUNED} autograd"),
    "2.2": graded(
        "minidl/reference/functional/loss.py",
        SOFTMAX_CROSS_ENTROPY,
        "d/dlogits",
        f"{TUNED} autograd",
    ),
    "2.6": graded(
        "minidl/reference/functional/activations.py",
        ACTIVATIONS,
        "sigmoid of a (4, 5) input",
        f"{TUNED} autograd",
    ),
    "4.2": graded(
        "minidl/reference/optim/adaptive.py",
        ADAPTIVE,
        "w after step 2",
        f"{TUNED} tuned optimizers",
    ),
    "4.3": graded(
        "minidl/reference/optim/adam.py", ADAM, "w after step 1", f"{TUNED} tuned optimizers"
    ),
    "8.1": graded(
        "minidl/reference/dist/ssp.py", SSP_GATE, "may_start", f"{TUNED} tuned ClockTable"
    ),
    "14.1": graded(
        "minidl/reference/recompute.py",
        RECOMPUTE,
        "draws the first run's dropout masks",
        "the chain's input x after",
    ),
    "9.4": graded(
        "minidl/reference/dist/compression.py", SCALED_SIGN, "the signs (+1 for v_i >= 0)"
    ),
    "13.2": graded(
        "minidl/reference/data/colour.py", TOP_K_ERROR, "top-1 error", f"{TUNED} tuned top_k_hits"
    ),
    "1.1": graded("minidl/reference/autograd.py", TOPOLOGICAL, "after backward()"),
    "1.3": graded(
        "minidl/reference/autograd.py", MATMUL, "s is both operands", f"{TUNED} autograd"
    ),
    "2.3": graded(
        "minidl/reference/functional/pooling.py",
        MAX_POOL,
        "the first maximum gets it all",
        f"{TUNED} autograd",
    ),
    "2.4": graded(
        "minidl/reference/functional/batch_norm.py", BATCH_NORM, "d/dx", "changed its input cache"
    ),
    "2.5": graded("minidl/reference/functional/lrn.py", LRN, "d/dx", "changed its input cache"),
    "3.1": graded(
        "minidl/reference/conv/im2col.py",
        IM2COL,
        "indexed (c, u, v, n, i, j)",
        f"{TUNED} tuned convolutions",
    ),
    "3.2": graded(
        "minidl/reference/conv/im2col.py", COL2IM, "col2im(dA)", f"{TUNED} tuned convolutions"
    ),
    "3.3": graded(
        "minidl/reference/conv/direct.py",
        DIRECT,
        "direct convolution of",
        f"{TUNED} tuned convolutions",
    ),
    "3.5": graded(
        "minidl/reference/conv/winograd.py", WINOGRAD, "transform_tiles", "A^T [sum_c U o V] A"
    ),
    "5.1": graded(
        "minidl/reference/perf/work_depth.py",
        CONV_WORK_DEPTH,
        "groups 2",
        f"{TUNED} tuned cost model",
    ),
    "5.2": graded(
        "minidl/reference/perf/allreduce_cost.py",
        ALLREDUCE_COST,
        "ring allreduce time",
        f"{TUNED} tuned cost model",
    ),
    "5.3": graded("minidl/reference/perf/scaling.py", SCALING, "time per iteration"),
    "8.3": graded(
        "minidl/reference/dist/averaging.py", EASGD, "the center", f"{TUNED} tuned averaging"
    ),
    "8.4": graded(
        "minidl/reference/dist/averaging.py",
        LOCAL_SGD,
        "averaged every 3",
        "changed its input replicas",
    ),
    "9.1": graded(
        "minidl/reference/dist/compression.py",
        TOP_K_FEEDBACK,
        "every kept magnitude",
        "changed its input residual",
        ("not the algorithm", "tuned", f"{TUNED} tuned compressors"),
    ),
    "10.1": graded(
        "minidl/reference/dist/pipeline.py", GPIPE, "GPipe, P=", f"{TUNED} tuned schedules"
    ),
    "10.2": graded(
        "minidl/reference/dist/pipeline.py", ONE_F_ONE_B, "1F1B, P=", f"{TUNED} tuned schedules"
    ),
    "10.3": graded(
        "minidl/reference/dist/pipeline.py",
        BUBBLE,
        "interleaved 1F1B",
        f"{TUNED} tuned pipeline simulator",
    ),
    "13.1": graded(
        "minidl/reference/data/colour.py",
        COLOUR_PCA,
        "eigenvalues, largest first",
        f"{TUNED} tuned colour statistics",
    ),
}

MPI = {
    "6.3": graded(
        "minidl/reference/dist/allreduce.py", TREE, "the sum is P(P-1)/2", "in a binomial tree"
    ),
    "6.4": graded(
        "minidl/reference/dist/allreduce.py",
        RABENSEIFNER,
        "sends 2 log2 P",
        "halving then doubling",
    ),
    "7.1": graded(
        "minidl/reference/dist/buckets.py", BUCKETS, "mean over 3 ranks", "one per bucket"
    ),
    "10.4": graded(
        "minidl/reference/dist/pipeline.py", WEIGHT_STASHING, "against minidl's executor"
    ),
    "11.1": graded(
        "minidl/reference/dist/tensor_parallel.py",
        COLUMN_ROW_FORWARD,
        "y against the serial layers",
        "allreduces in the forward pass",
    ),
    "11.3": graded(
        "minidl/reference/dist/tensor_parallel.py",
        GRID_GROUPS,
        "the world ranks of this rank's",
        f"{TUNED} tuned Grid",
    ),
    "6.1": graded(
        "minidl/reference/dist/allreduce.py", RING, "P(P-1)/2", "no collective of the library"
    ),
    "6.2": graded(
        "minidl/reference/dist/allreduce.py", BUTTERFLY, "rank 0 of 3", "used comm.allgather"
    ),
    "6.5": graded(
        "minidl/reference/dist/allreduce.py",
        HIERARCHICAL,
        "must be exchanged among the leaders",
        "only the leaders",
    ),
    "8.2": graded(
        "minidl/reference/dist/parameter_server.py",
        PARAMETER_SERVER,
        "against synchronous SGD",
        "runs ahead",
        ("not the algorithm", "staleness 0", "the logged staleness"),
    ),
    "11.2": graded(
        "minidl/reference/dist/tensor_parallel.py",
        MEGATRON_BACKWARD,
        "allreduces in the backward pass",
        "its input h in place",
    ),
    "12.1": graded(
        "minidl/reference/dist/halo.py",
        HALO,
        "boundary rows to each neighbour",
        "used comm.allgather_object",
        ("not the algorithm", "buffered", "comm.send("),
    ),
    "12.2": graded(
        "minidl/reference/dist/halo.py", HALO_ADJOINT, "E* y on rank", "used comm.allgather_object"
    ),
    "15.2": graded(
        "minidl/reference/dist/zero.py",
        ZERO3,
        "this rank's shard of the mean gradient",
        "holds its shard",
    ),
    "15.1": graded("minidl/reference/dist/zero.py", ZERO1, "weights after step 1", "no allreduce"),
    "16.1": graded(
        "minidl/reference/dist/sync_batchnorm.py",
        SYNC_BN,
        "y of this rank's share",
        "not the samples",
    ),
}
