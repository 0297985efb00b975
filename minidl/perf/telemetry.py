"""What distributed training measures: staleness, waiting, throughput, bytes on the wire.

Every rank keeps a plain dict of counters per epoch (``RankCounters``); at
the end of the epoch rank 0 gathers them and ``summarize_epoch`` turns them
into one JSON record (``"kind": "dist"``) of the run's metrics. Staleness of
an applied update is the server's version when it applies the update minus
the version of the weights the worker computed it from (Ben-Nun & Hoefler
2019, §6.1: "t - tau is called the staleness").
"""

from collections import Counter


class StalenessHistogram:
    """Counts of staleness values; mean and max."""

    def __init__(self, counts=None):
        self.counts = Counter({int(k): int(v) for k, v in (counts or {}).items()})

    def add(self, staleness, times=1):
        if staleness < 0:
            raise ValueError(f"negative staleness {staleness}: an update older than its weights")
        self.counts[int(staleness)] += times

    def merge(self, other):
        self.counts.update(other.counts)
        return self

    @property
    def count(self):
        return sum(self.counts.values())

    @property
    def mean(self):
        return sum(k * v for k, v in self.counts.items()) / self.count if self.count else 0.0

    @property
    def max(self):
        return max(self.counts) if self.counts else 0

    def to_dict(self):
        """{"histogram": {"0": n0, ...}, "count", "mean", "max"} (JSON keys are strings)."""
        return {
            "histogram": {str(k): self.counts[k] for k in sorted(self.counts)},
            "count": self.count,
            "mean": self.mean,
            "max": self.max,
        }


class RankCounters(dict):
    """One rank's counters for one epoch: ``add(name, value)`` sums, plain keys set."""

    def add(self, name, value):
        self[name] = self.get(name, 0) + value


def summarize_epoch(mode, records, images):
    """One ``"dist"`` record from every rank's counters of an epoch.

    ``records``: the gathered dicts, each with ``role`` ("server" or
    "worker") and ``rank``; ``images``: training images in the epoch. The
    epoch's time is the slowest worker's; staleness is shard 0's histogram
    (every shard applies the same pushes), its max the largest over shards.
    """
    workers = sorted((r for r in records if r["role"] == "worker"), key=lambda r: r["rank"])
    servers = sorted((r for r in records if r["role"] == "server"), key=lambda r: r["rank"])
    seconds = max((w.get("seconds", 0.0) for w in workers), default=0.0)
    gradients = sum(w.get("gradients", 0) for w in workers)

    def per_second(count):
        return count / seconds if seconds else 0.0

    summary = {
        "kind": "dist",
        "mode": mode,
        "workers": len(workers),
        "servers": len(servers),
        "seconds": seconds,
        "images": images,
        "images_per_s": per_second(images),
        "gradients": gradients,
        "gradients_per_s": per_second(gradients),
        "bytes_sent": sum(r.get("bytes_sent", 0) for r in records),
        "worker_bytes_sent": sum(w.get("bytes_sent", 0) for w in workers),
        "per_worker": {
            name: [w.get(name, 0.0) for w in workers]
            for name in ("compute_s", "wait_s", "slept_s", "cpu_s", "gradients")
        },
    }
    summary["bytes_per_gradient"] = summary["worker_bytes_sent"] / gradients if gradients else 0.0
    if servers:
        histograms = [StalenessHistogram(s["staleness"]) for s in servers]
        updates = servers[0].get("updates", 0)
        summary.update(
            staleness=histograms[0].to_dict() | {"max": max(h.max for h in histograms)},
            updates=updates,
            updates_per_s=per_second(updates),
            applied_gradients=servers[0].get("applied", 0),
            version=servers[0].get("version", 0),
            server_cpu_s=[s.get("cpu_s", 0.0) for s in servers],
            gate_wait_s=[
                sum(s.get("gate_wait_s", [0.0] * len(workers))[i] for s in servers)
                for i in range(len(workers))
            ],
        )
    else:
        updates = max((w.get("updates", 0) for w in workers), default=0)
        summary.update(updates=updates, updates_per_s=per_second(updates))
    return summary


def format_table(rows, columns):
    """Rows of dicts as an aligned text table; ``columns``: [(header, key, format), ...]."""
    cells = [[header for header, _, _ in columns]]
    for row in rows:
        cells.append(
            [("-" if row.get(key) is None else fmt.format(row[key])) for _, key, fmt in columns]
        )
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(line, widths)) for line in cells]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths)] + lines[1:])


def describe_session(summary):
    """One console line of a consistency session's ``"dist"`` record."""
    line = (
        f"  {summary['mode']}: {summary['gradients_per_s']:.1f} gradients/s, "
        f"{summary['updates_per_s']:.1f} updates/s, "
        f"{summary['worker_bytes_sent'] / 2**20:.1f} MiB pushed"
    )
    if "staleness" in summary:
        st = summary["staleness"]
        line += (
            f", staleness mean {st['mean']:.2f} max {st['max']}, gate wait "
            + " ".join(f"{w:.1f}" for w in summary["gate_wait_s"])
            + " s"
        )
    waits = " ".join(f"{w:.1f}" for w in summary["per_worker"]["wait_s"])
    return line + ", waiting " + waits + " s"


def describe_staleness(summary):
    """One console line of a PipeDream epoch's staleness."""
    stale = summary["staleness"]
    stages = " ".join(f"{mean:.2f}" for mean in summary["stage_staleness_mean"])
    return (
        f"  {summary['mode']}: {summary['updates']} updates, staleness mean "
        f"{stale['mean']:.2f} max {stale['max']} (per stage {stages})"
    )
