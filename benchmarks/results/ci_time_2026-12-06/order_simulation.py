"""The first lane's order under pytest-xdist's worksteal on 2 workers, simulated from one measured run
(first_lane_durations.txt: `pytest -n 2 --dist worksteal --durations=0`; first_lane_collected.txt: the collection
order): each worker takes a contiguous half, an idle one takes half of the other's queue from its end. Collection
order against the longest tests first in each half."""

import collections
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
d = collections.Counter()
for line in open(os.path.join(HERE, "first_lane_durations.txt")):
    m = re.match(r"([\d.]+)s (call|setup|teardown)\s+(\S+)", line)
    if m:
        d[m[3]] += float(m[1])
items = [line.strip() for line in open(os.path.join(HERE, "first_lane_collected.txt"))]


def dur(n):
    return d.get(n, 0.01)


def reorder(items, workers=2):
    seconds = {}
    seconds = {n: s for n, s in d.items() if s >= 2.0}
    sizes, left = [], len(items)
    for i in range(workers):
        sizes.append(left // (workers - i))
        left -= sizes[-1]
    shares = [[] for _ in range(workers)]
    loads = [0.0] * workers
    for it in sorted((i for i in items if i in seconds), key=lambda i: -seconds[i]):
        w = min((w for w in range(workers) if len(shares[w]) < sizes[w]), key=loads.__getitem__)
        shares[w].append(it)
        loads[w] += seconds[it]
    short = iter(i for i in items if i not in seconds)
    for sh, sz in zip(shares, sizes):
        sh.extend(next(short) for _ in range(sz - len(sh)))
    return [i for sh in shares for i in sh]


def sim(order, workers=2):
    n = len(order)
    qs = []
    start = 0
    for i in range(workers):
        k = (n - start) // (workers - i)
        qs.append(list(order[start : start + k]))
        start += k
    t = [0.0] * workers
    while any(qs):
        w = min(range(workers), key=lambda i: t[i])
        if not qs[w]:
            # steal half of longest queue's tail
            o = max(range(workers), key=lambda i: len(qs[i]))
            k = min(len(qs[o]) // 2, max(0, len(qs[o]) - 2))
            if k == 0:
                t[w] = float("inf")
                continue
            qs[w] = qs[o][-k:]
            qs[o] = qs[o][:-k]
        t[w] += dur(qs[w].pop(0))
    return max(x for x in t if x != float("inf")), sum(dur(i) for i in order)


print("collection order", sim(items))
print("longest first   ", sim(reorder(items)))
