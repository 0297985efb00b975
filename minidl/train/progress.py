"""Progress of an epoch on stderr: a redrawn bar on a terminal, a plain line every few seconds
otherwise (a batch job's log file would keep every redraw of a bar)."""

import sys
import time

LINE_INTERVAL_S = 10.0


class ProgressLines:
    """Iterate over ``iterable``, writing one line to ``stream`` every ``interval`` seconds:
    ``epoch 2: 300/938 batches (32%), loss=0.4123 acc=0.851 img_s=9512``."""

    def __init__(self, iterable, description, stream, interval=LINE_INTERVAL_S, clock=None):
        self.iterable, self.description, self.stream = iterable, description, stream
        self.interval, self.clock = interval, clock or time.monotonic
        self.fields = {}

    def set_postfix(self, **fields):
        """The numbers the next line shows (the bar's ``set_postfix``)."""
        self.fields = fields

    def _line(self, done):
        total = len(self.iterable) if hasattr(self.iterable, "__len__") else None
        count = (
            f"{done}/{total} batches ({100 * done // max(total, 1)}%)"
            if total
            else f"{done} batches"
        )
        numbers = " ".join(f"{k}={v}" for k, v in self.fields.items())
        self.stream.write(f"{self.description}: {count}{', ' + numbers if numbers else ''}\n")
        self.stream.flush()

    def __iter__(self):
        last = self.clock()
        for done, item in enumerate(self.iterable, start=1):
            yield item
            now = self.clock()
            if now - last >= self.interval:
                self._line(done)
                last = now


def progress(loader, description, enabled, stream=None):
    """``loader`` itself (``enabled`` false), a tqdm bar on a terminal, else ``ProgressLines``."""
    if not enabled:
        return loader
    stream = stream or sys.stderr
    if not stream.isatty():
        return ProgressLines(loader, description, stream)
    from tqdm import tqdm

    return tqdm(loader, desc=description, leave=False, mininterval=0.5, unit="batch", file=stream)
