"""A series that never holds more than `budget` points: raw points are averaged into buckets, and when the
buckets fill the budget, neighbours merge and the bucket size doubles. Long runs stay cheap to draw; the full
series lives in the job's metrics.jsonl. Each point also carries a time `t` (averaged like x and y), so a
comparison can draw the same points against seconds."""


class DownsampledSeries:
    def __init__(self, budget: int = 2000):
        if budget < 2 or budget % 2:
            raise ValueError("budget must be an even number >= 2")
        self.budget = budget
        self.bucket = 1  # raw points per stored point
        self.count = 0  # raw points seen
        self._xs: list = []
        self._ys: list = []
        self._ts: list = []
        self._sum_x = self._sum_y = self._sum_t = 0.0
        self._n = 0

    def add(self, x: float, y: float, t: float = 0.0):
        self.count += 1
        self._sum_x += x
        self._sum_y += y
        self._sum_t += t
        self._n += 1
        if self._n == self.bucket:
            self._xs.append(self._sum_x / self._n)
            self._ys.append(self._sum_y / self._n)
            self._ts.append(self._sum_t / self._n)
            self._sum_x = self._sum_y = self._sum_t = 0.0
            self._n = 0
            if len(self._xs) >= self.budget:  # keep one slot free for the bucket being filled
                self._halve()

    def _halve(self):
        self._xs, self._ys, self._ts = (
            [(v[i] + v[i + 1]) / 2 for i in range(0, len(v) - 1, 2)] for v in self._columns()
        )
        self.bucket *= 2

    def _columns(self):
        return self._xs, self._ys, self._ts

    def truncate(self, x_max: float):
        """Forget the points after x_max (a restart goes back to its checkpoint). The bucket being filled is
        dropped too: it may hold points from after x_max."""
        kept = [i for i, x in enumerate(self._xs) if x <= x_max]
        self._xs, self._ys, self._ts = ([v[i] for i in kept] for v in self._columns())
        self._sum_x = self._sum_y = self._sum_t = 0.0
        self._n = 0
        self.count = len(self._xs) * self.bucket

    def points(self):
        """(xs, ys) to draw, at most `budget` long; the bucket being filled shows as its running mean."""
        if self._n:
            return self._xs + [self._sum_x / self._n], self._ys + [self._sum_y / self._n]
        return list(self._xs), list(self._ys)

    def times(self):
        """The `t` of each point `points()` returns, in the same order."""
        return self._ts + [self._sum_t / self._n] if self._n else list(self._ts)

    def __len__(self):
        return len(self._xs) + (1 if self._n else 0)


def thinned(xs: list, ys: list, limit: int):
    """(xs, ys) averaged in runs of consecutive points to at most `limit` points: what a live figure redrawn every
    second needs (a few hundred points draw the same curve as 2,000 at a quarter of the data and path)."""
    if len(xs) <= limit:
        return xs, ys
    run = -(-len(xs) // limit)  # ceil
    return _means(xs, run), _means(ys, run)


def _means(values: list, run: int) -> list:
    return [sum(chunk) / len(chunk) for chunk in (values[i : i + run] for i in range(0, len(values), run))]
