# A threaded Python workload for the drop-in malloc: 8 threads build, serialise, hash and count
# large dicts of lists and strings; the output is deterministic.
import collections
import hashlib
import json
import threading

def work(i, out):
    d = {}
    for j in range(15000):
        d["k%d-%d" % (i, j)] = [j, str(j) * 3, {"x": j % 7, "y": [j] * (j % 5)}]
    s = json.dumps(d, sort_keys=True)
    back = json.loads(s)
    c = collections.Counter(s)
    words = sorted(set(s.split('"')))[:5]
    out[i] = "%s %d %s %s" % (hashlib.sha256(s.encode()).hexdigest()[:16], len(back),
                              c.most_common(2), words)

out = {}
threads = [threading.Thread(target=work, args=(i, out)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for i in sorted(out):
    print(i, out[i])
