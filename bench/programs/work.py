# The Python job of scripts/bench_programs.sh: dicts, strings and sorting on data made from a fixed
# seed. Usage: python3 work.py N (N tokens). Prints a digest of its results (the same on every
# allocator).
import hashlib
import random
import sys

n = int(sys.argv[1])
r = random.Random(18)
letters = "abcdefghijklmnopqrstuvwxyz"
words = ["".join(r.choices(letters, k=r.randint(3, 14))) for _ in range(30000)]
h = hashlib.sha256()

# a word count over a text of n tokens
tokens = [r.choice(words) for _ in range(n)]
counts = {}
for t in tokens:
    counts[t] = counts.get(t, 0) + 1
h.update(repr(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:50]).encode())

# records: dicts with strings and lists, sorted on two keys, grouped
recs = [{"name": r.choice(words), "v": r.randint(0, 10**9), "tags": r.sample(words, r.randint(0, 5))}
        for _ in range(n // 4)]
recs.sort(key=lambda d: (d["name"], -d["v"]))
groups = {}
for d in recs:
    groups.setdefault(d["name"][:2], []).append(d)
h.update(repr([(k, len(v), v[0]["v"]) for k, v in sorted(groups.items())]).encode())

# strings: join, split, format, replace, upper
text = " ".join(tokens)
parts = text.split("e")
lines = ["%s:%d:%s" % (w, c, w[::-1]) for w, c in sorted(counts.items())]
big = "\n".join(lines).upper().replace("A", "aa")
h.update(("%d %d %d" % (len(parts), len(big), big.count("aa"))).encode())

# churn: short-lived dicts and strings, a few kept
kept = []
for i in range(n // 8):
    d = {w: i for w in tokens[i % 1000:(i % 1000) + 12]}
    s = "-".join(sorted(d))
    if i % 97 == 0:
        kept.append(s)
kept.sort()
h.update("".join(kept).encode())

# a sort of tuples and a set algebra
pairs = sorted(((w[-2:], len(w), w) for w in tokens[: n // 2]), reverse=True)
h.update(repr(pairs[:: max(1, len(pairs) // 100)]).encode())
a, b = set(tokens[: n // 2]), set(tokens[n // 2:])
h.update(("%d %d %d" % (len(a & b), len(a | b), len(a ^ b))).encode())
print(h.hexdigest())
