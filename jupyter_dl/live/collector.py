"""Pull the records ranks published (ipyparallel data publication) out of their AsyncResults, in order, once."""

import time


class MetricsCollector:
    def __init__(self, results_by_rank: dict):
        self._results = results_by_rank
        self._seen: set = set()

    def poll(self):
        """New records since the last poll, each stamped with when the kernel saw it (`seen`)."""
        now = time.time()
        fresh = []
        for rank, result in self._results.items():
            data = result.data if hasattr(result, "data") else {}
            for key in sorted(k for k in list(data) if k.startswith("jdl.") and k not in self._seen):
                self._seen.add(key)
                for record in data[key]:
                    record.setdefault("rank", rank)
                    record["seen"] = now
                    fresh.append(record)
        fresh.sort(key=lambda r: r.get("t", 0.0))
        return fresh
