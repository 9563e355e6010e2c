"""Long `iam` steps against the committer's data-file syncs, from the log of a bench run of a
binary built with instrumentation.patch (lines `PROF at T step D ...` and `PROFSYNC start T
took D`): how many steps over 100 ms overlap a sync, how many would by chance (the same steps
placed at random), and what share of each long step lies inside a sync."""
import random, re, sys

UNIT = {'ms': 1e-3, 's': 1.0, 'µs': 1e-6}
syncs, steps = [], []
lines = open(sys.argv[1]).read().splitlines()
for i, l in enumerate(lines):
    m = re.match(r'PROFSYNC start ([\d.]+) took ([\d.]+)(ms|s|µs)', l)
    if m:
        syncs.append((float(m.group(1)), float(m.group(2)) * UNIT[m.group(3)]))
    m = re.match(r'PROF at ([\d.]+) step', l)
    if m:
        m2 = re.match(r'PROF step ([\d.]+)(ms|s|µs)', lines[i + 1])
        steps.append((float(m.group(1)), float(m2.group(1)) * UNIT[m2.group(2)]))
ds = sorted(d for _, d in syncs)
t0 = min(s for s, _ in syncs)
t1 = max(s + d for s, d in syncs)
print('syncs %d: median %.0f ms, 90th %.0f ms, longest %.0f ms, %.1f s in all, %.2f of the time'
      % (len(ds), ds[len(ds) // 2] * 1e3, ds[int(len(ds) * .9)] * 1e3, ds[-1] * 1e3, sum(ds),
         sum(ds) / (t1 - t0)))
long = [s for s in steps if s[1] > 0.1]
meets = lambda t, d: any(st < t + d and st + sd > t for st, sd in syncs)
print('steps over 100 ms: %d, overlapping a sync: %d' % (len(long), sum(meets(t, d) for t, d in long)))
random.seed(1)
chance = sum(meets(random.uniform(t0, t1 - d), d) for _ in range(200) for _, d in long) / 200
print('expected by chance: %.1f' % chance)
cov = sorted(sum(max(0, min(t + d, st + sd) - max(t, st)) for st, sd in syncs) / d for t, d in long)
print('share of a long step inside a sync: median %.2f, least %.2f' % (cov[len(cov) // 2], cov[0]))
