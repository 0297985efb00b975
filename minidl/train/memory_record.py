"""``MemoryRecord``: the bytes this rank holds while it trains, measured; one ``"memory"``
record per epoch, with every rank's numbers (``perf.memory`` predicts the same four kinds).

Tracked bytes count distinct arrays by address (``perf.graph_memory.distinct_bytes``: a view
or a shared array once): the parameters (the model's and the optimizer's, whose ZeRO shards
view one flat vector), their gradients (``.grad``), the optimizer's state (the arrays of its
``state``), and the activations: the graph behind the model's output just after forward,
the output included (``graph_bytes(output, with_root=True)``). Communication buffers and
temporaries are not tracked; the peak resident memory of the process (``ru_maxrss``) is.

Only the first ``SAMPLED_STEPS`` steps of each epoch are sampled (after forward, after
backward, after the update: the state appears with the first update), each kind's peak
kept; the other steps cost one comparison. A pipeline's step runs forward and backward
inside its schedule: there the gradients are sampled as backward accumulates them, and the
activations are not measured (None).
"""

import resource
import sys

from ..perf.graph_memory import distinct_bytes, graph_bytes
from ..perf.memory import KINDS
from .callbacks import Callback

SAMPLED_STEPS = 2
PIPELINE_NOTE = "a pipeline's schedule runs forward and backward inside its step: not measured"


def peak_rss():
    """The peak resident memory of this process so far, in bytes (Linux counts KiB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


class MemoryRecord(Callback):
    """Track this rank's bytes while ``model`` trains with ``optimizer`` (either may be None: a
    pipeline rank passes no model, a stage without parameters no optimizer); ``comm`` (None:
    one process) gathers every rank's numbers into the epoch's record (collective)."""

    def __init__(self, model, optimizer, comm=None):
        self.model, self.optimizer, self.comm = model, optimizer, comm
        own = model.parameters() if model is not None else ()
        params = [*own, *getattr(optimizer, "params", ())]
        self.params = list({id(p): p for p in params}.values())
        self.peak = dict.fromkeys(KINDS, 0)
        self.sampling, self.wrapped, self.output, self.hooks = False, False, None, []

    def before_epoch(self, epoch):
        self.peak = dict.fromkeys(KINDS, 0)

    def before_step(self, step, batch_size):
        self.sampling = step < SAMPLED_STEPS
        if not self.sampling:
            return
        if self.model is None:
            self.hooks = [p.register_post_accumulate_grad_hook(self._sample) for p in self.params]
        elif "forward" not in vars(self.model):  # not wrapped by another instrument

            def forward(*args, **kwargs):
                self.output = type(self.model).forward(self.model, *args, **kwargs)
                return self.output

            object.__setattr__(self.model, "forward", forward)
            self.wrapped = True

    def after_forward(self, epoch, step, loss):
        if self.output is not None:
            held = graph_bytes(self.output, with_root=True)
            self.peak["activations"] = max(self.peak["activations"], held)
        self._restore()

    def after_backward(self, compute_seconds):
        if self.sampling:
            self._sample()
        return 0.0

    def after_step(self, where):
        if self.sampling and where != "evaluation":
            self._sample()
            self._restore()
            for hook in self.hooks:
                hook.remove()
            self.hooks, self.sampling = [], False

    def _sample(self, _=None):
        """Each kind's bytes now, into the peaks."""
        grads = [p.grad for p in self.params if p.grad is not None]
        state = [
            value
            for entry in getattr(self.optimizer, "state", ())
            for value in entry.values()
            if hasattr(value, "shape") and value.ndim
        ]
        now = {
            "params": distinct_bytes(p.data for p in self.params),
            "grads": distinct_bytes(grads),
            "state": distinct_bytes(state),
        }
        for kind, value in now.items():
            self.peak[kind] = max(self.peak[kind], value)

    def _restore(self):
        """Give the model its own forward back, and drop the output (and its graph)."""
        if self.wrapped:
            object.__delattr__(self.model, "forward")
            self.wrapped = False
        self.output = None

    def after_epoch(self, epoch, stats):
        mine = dict(self.peak, max_rss=peak_rss())
        if self.model is None:
            mine["activations"] = None
        ranks = self.comm.allgather_object(mine) if self.comm is not None else [mine]
        record = {"kind": "memory", "epoch": epoch, "sampled_steps": SAMPLED_STEPS}
        record.update({key: [r[key] for r in ranks] for key in (*KINDS, "max_rss")})
        if self.model is None:
            record["note"] = PIPELINE_NOTE
        return [record]
