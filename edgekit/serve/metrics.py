"""Server metrics in the Prometheus text exposition format (version 0.0.4).

Requests by route and status, a request-latency histogram, a batch-size histogram, queue depth,
and the process's peak resident memory. Standalone: the standard library only.
"""

from __future__ import annotations

import bisect
import collections
import resource
import sys
import threading

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Histogram:
    def __init__(self, bounds: tuple):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str, labels: str = "") -> list[str]:
        out, running = [], 0
        sep = "," if labels else ""
        for bound, count in zip(self.bounds, self.counts):
            running += count
            out.append(f'{name}_bucket{{{labels}{sep}le="{bound:g}"}} {running}')
        out.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.count}')
        suffix = f"{{{labels}}}" if labels else ""
        out.append(f"{name}_sum{suffix} {self.sum:.6f}")
        out.append(f"{name}_count{suffix} {self.count}")
        return out


class Metrics:
    def __init__(self):
        self._lock = threading.Lock()
        self.requests: collections.Counter = collections.Counter()  # (route, status) -> count
        self.latency: dict[str, Histogram] = {}
        self.batch = Histogram(BATCH_BUCKETS)
        self.queue_depth = lambda: 0

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(route, int(status))] += 1
            self.latency.setdefault(route, Histogram(LATENCY_BUCKETS_S)).observe(seconds)

    def observe_batch(self, rows: int) -> None:
        with self._lock:
            self.batch.observe(rows)

    def render(self) -> str:
        with self._lock:
            lines = ["# HELP edgekit_requests_total Requests answered, by route and HTTP status.",
                     "# TYPE edgekit_requests_total counter"]
            for (route, status), count in sorted(self.requests.items()):
                lines.append(f'edgekit_requests_total{{route="{route}",status="{status}"}} {count}')
            lines += ["# HELP edgekit_request_seconds Time from a request's arrival to its answer.",
                      "# TYPE edgekit_request_seconds histogram"]
            for route, hist in sorted(self.latency.items()):
                lines += hist.lines("edgekit_request_seconds", f'route="{route}"')
            lines += ["# HELP edgekit_batch_size Rows per model call (micro-batching).",
                      "# TYPE edgekit_batch_size histogram"]
            lines += self.batch.lines("edgekit_batch_size")
            lines += ["# HELP edgekit_queue_depth Requests accepted and not yet answered.",
                      "# TYPE edgekit_queue_depth gauge", f"edgekit_queue_depth {self.queue_depth()}",
                      "# HELP edgekit_peak_rss_bytes Peak resident memory of the server process.",
                      "# TYPE edgekit_peak_rss_bytes gauge", f"edgekit_peak_rss_bytes {peak_rss_bytes()}"]
        return "\n".join(lines) + "\n"


def peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)
