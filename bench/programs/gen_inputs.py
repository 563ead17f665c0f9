#!/usr/bin/env python3
"""Inputs of scripts/bench_programs.sh, made from a fixed seed (the same bytes on every machine
with the same Python): gen_inputs.py DIR --lines L --xz-bytes X --commits C --templates T --rows R --jobs J

  lines.txt     L lines "word number word" (GNU sort's input)
  xz.in         X bytes of such text, every 8th line base64 of random bytes (xz's input)
  history.fi    a git fast-import stream: C commits over 40 files (a few lines changed each)
  templates.cpp T template-heavy functions for g++ -O2 (variants, tuples, maps, lambdas, ranges)
  join.sql      sqlite3's job on :memory: (R rows built, indexed, joined, grouped)
  mk/           a Makefile of J small jobs (a shell and sort each) and their inputs
"""
import argparse
import base64
import os
import random

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("--lines", type=int, default=1200000)
ap.add_argument("--xz-bytes", type=int, default=2000000)
ap.add_argument("--commits", type=int, default=1500)
ap.add_argument("--templates", type=int, default=60)
ap.add_argument("--rows", type=int, default=300000)
ap.add_argument("--jobs", type=int, default=400)
a = ap.parse_args()
os.makedirs(a.dir, exist_ok=True)
r = random.Random(18)
letters = "abcdefghijklmnopqrstuvwxyz"
words = ["".join(r.choices(letters, k=r.randint(3, 12))) for _ in range(50000)]


def path(name):
    return os.path.join(a.dir, name)


with open(path("lines.txt"), "w") as f:
    for _ in range(a.lines):
        f.write("%s %d %s\n" % (r.choice(words), r.randint(0, 10**6), r.choice(words)))

with open(path("xz.in"), "wb") as f:
    size, i = 0, 0
    while size < a.xz_bytes:
        if i % 8 == 7:
            line = base64.b64encode(r.randbytes(45)) + b"\n"
        else:
            line = ("%s %d %s\n" % (r.choice(words), r.randint(0, 10**6), r.choice(words))).encode()
        line = line[:a.xz_bytes - size]
        f.write(line)
        size += len(line)
        i += 1

# git: a history of C commits; each changes 1-3 of 40 files (a few lines replaced, a few added)
files = {"src/f%02d.txt" % i: ["%s %d" % (r.choice(words), j) for j in range(200)] for i in range(40)}
with open(path("history.fi"), "w") as f:
    for c in range(a.commits):
        changed = r.sample(sorted(files), r.randint(1, 3)) if c else sorted(files)
        f.write("commit refs/heads/main\nmark :%d\n" % (c + 1))
        f.write("author A U Thor <author@example.com> %d +0000\n" % (1577836800 + c * 3600))
        f.write("committer A U Thor <author@example.com> %d +0000\n" % (1577836800 + c * 3600))
        msg = "change %d: %s %s\n" % (c, r.choice(words), r.choice(words))
        f.write("data %d\n%s" % (len(msg), msg))
        if c:
            f.write("from :%d\n" % c)
        for name in changed:
            lines = files[name]
            for _ in range(r.randint(1, 6)):
                lines[r.randrange(len(lines))] = "%s %s %d" % (r.choice(words), r.choice(words), c)
            for _ in range(r.randint(0, 3)):
                lines.insert(r.randrange(len(lines) + 1), "%s added %d" % (r.choice(words), c))
            body = "\n".join(lines) + "\n"
            f.write("M 100644 inline %s\ndata %d\n%s" % (name, len(body.encode()), body))
        f.write("\n")

# g++: each function instantiates containers and algorithms over its own types
with open(path("templates.cpp"), "w") as f:
    f.write("""#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>
template <int N> struct Tag { int v = N; bool operator<(const Tag &o) const { return v < o.v; } };
template <int N> struct Fib { static constexpr long value = Fib<N - 1>::value + Fib<N - 2>::value; };
template <> struct Fib<1> { static constexpr long value = 1; };
template <> struct Fib<0> { static constexpr long value = 0; };
template <class... T> struct Visit : T... { using T::operator()...; };
template <class... T> Visit(T...) -> Visit<T...>;
""")
    for i in range(a.templates):
        f.write(f"""
long work{i}(int n) {{
  using K = std::tuple<Tag<{i}>, std::string, int>;
  using V = std::variant<int, double, std::string, std::vector<Tag<{i}>>, std::optional<long>>;
  std::map<K, std::vector<V>> m;
  std::unordered_map<std::string, std::set<std::pair<int, Tag<{i}>>>> u;
  for (int k = 0; k < n; k++) {{
    m[K{{Tag<{i}>{{}}, std::to_string(k % {i + 3}), k}}].push_back(V{{k * {i}.5}});
    u[std::to_string(k)].insert({{k, Tag<{i}>{{}}}});
  }}
  long s = Fib<{20 + i % 20}>::value;
  for (auto &[key, vs] : m)
    for (auto &v : vs)
      s += std::visit(Visit{{[](int x) -> long {{ return x; }}, [](double x) -> long {{ return (long)x; }},
                            [](const std::string &x) -> long {{ return (long)x.size(); }},
                            [](const std::vector<Tag<{i}>> &x) -> long {{ return (long)x.size(); }},
                            [](const std::optional<long> &x) -> long {{ return x.value_or({i}); }}}}, v);
  std::vector<std::function<long(long)>> fs;
  for (int k = 0; k < {i % 7 + 2}; k++) fs.push_back([k, &u](long x) {{ return x * k + (long)u.size(); }});
  std::vector<long> xs(n);
  std::iota(xs.begin(), xs.end(), {i});
  std::sort(xs.begin(), xs.end(), [](long x, long y) {{ return (x % {i + 5}) < (y % {i + 5}) || ((x % {i + 5}) == (y % {i + 5}) && x < y); }});
  std::ostringstream os;
  for (auto x : xs) os << std::accumulate(fs.begin(), fs.end(), x, [](long acc, auto &g) {{ return g(acc); }}) << ',';
  auto p = std::make_shared<std::map<std::string, std::tuple<int, std::string, V>>>();
  (*p)[os.str().substr(0, 8)] = {{n, os.str(), V{{std::string("t{i}")}}}};
  return s + (long)os.str().size() + (long)p->size();
}}
""")
    f.write("long (*const table[])(int) = {" + ", ".join(f"work{i}" for i in range(a.templates)) + "};\n")

with open(path("join.sql"), "w") as f:
    f.write(f"""PRAGMA cache_size = -65536;
CREATE TABLE person(id INTEGER PRIMARY KEY, name TEXT, city INTEGER, score REAL);
CREATE TABLE orders(id INTEGER PRIMARY KEY, person INTEGER, item TEXT, amount INTEGER);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {a.rows})
  INSERT INTO person SELECT i, printf('name%08d', (i * 7919) % {a.rows}), i % 113, (i * 37 % 1000) / 10.0 FROM c;
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {a.rows * 2})
  INSERT INTO orders SELECT i, (i * 104729) % {a.rows} + 1, printf('item-%05d-%s', i % 5003, hex(i * 31)), i % 997 FROM c;
CREATE INDEX orders_person ON orders(person);
CREATE INDEX person_name ON person(name);
SELECT count(*), sum(o.amount), min(p.name), max(o.item) FROM person p JOIN orders o ON o.person = p.id;
SELECT p.city, count(*), sum(o.amount), group_concat(DISTINCT substr(o.item, 1, 8)) IS NOT NULL
  FROM person p JOIN orders o ON o.person = p.id GROUP BY p.city ORDER BY 3 DESC LIMIT 10;
SELECT p.name, count(o.id) AS n FROM person p LEFT JOIN orders o ON o.person = p.id
  GROUP BY p.id ORDER BY n DESC, p.name LIMIT 10;
SELECT count(*) FROM (SELECT DISTINCT item FROM orders);
SELECT length(group_concat(name, ',')) FROM (SELECT name FROM person ORDER BY score DESC, name);
""")

mk = path("mk")
os.makedirs(os.path.join(mk, "in"), exist_ok=True)
for j in range(a.jobs):
    with open(os.path.join(mk, "in", "j%04d.txt" % j), "w") as f:
        for _ in range(50):
            f.write("%s %d\n" % (r.choice(words), r.randint(0, 999)))
with open(os.path.join(mk, "Makefile"), "w") as f:
    f.write(f"""# {a.jobs} small jobs, each a shell running sort on a small file, then one that joins them.
JOBS := $(foreach j,$(shell seq -f %04g 0 {a.jobs - 1}),out/j$(j).txt)
all.sum: $(JOBS)
\tcat $(JOBS) | cksum > $@
out/%.txt: in/%.txt | out
\tsort -k2,2n -k1,1 $< > $@
out:
\tmkdir -p $@
""")
