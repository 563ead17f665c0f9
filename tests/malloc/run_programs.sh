#!/usr/bin/env bash
# Real programs that nobody here wrote, run under LD_PRELOAD=libmtpool-malloc.so and compared with
# the same run on glibc's malloc: same output, exit 0 both times; and under the heap debugger
# libmtpool-debug.so where it lies beside the drop-in (checked mode, copies checked): the same, so
# no false report. Prints each program's wall time with each (one run each; noisy on a shared
# machine).
#   run_programs.sh LIBMTPOOL_MALLOC_SO [WORKDIR]
# Each mtpool run sets MTPOOL_SHOW_STATS=1 and must leave a report with memory reserved on its
# stderr: proof that the program's allocations went to mtpool.
set -uo pipefail
lib=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
work=${2:-$(mktemp -d)}
mkdir -p "$work"
work=$(realpath "$work")
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
export LC_ALL=C

# Inputs, made once, on glibc.
if [ ! -s "$work/lines.txt" ]; then
  "$py" -c '
import random
r = random.Random(42)
words = ["".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(r.randint(3, 12))) for _ in range(50000)]
with open("'"$work"'/lines.txt", "w") as f:
    for i in range(600000):
        f.write("%s %d %s\n" % (r.choice(words), r.randint(0, 10**6), r.choice(words)))
'
fi

declare -A cmds
names=(python3 perl sort sqlite3 xz git g++)
cmds[python3]="$py $here/programs/threads.py"
cmds[perl]="perl -e 'my %h; for my \$i (1..100000) { \$h{\"key\$i\"} = [\$i, \"v\" x (\$i % 50)]; }
  my \$s = 0; for my \$k (sort keys %h) { \$s += length(\$h{\$k}[1]) + \$h{\$k}[0]; }
  my @a = map { join(\",\", \$_, \$_ * 2) } 1..200000; my %w; \$w{\$_}++ for split /\\s+/, join(\" \", @a[0..5000]);
  print \"\$s \", scalar(@a), \" \", length(join(\"\", @a)), \" \", scalar(keys %w), \"\\n\";'"
cmds[sort]="sort -S 64M --parallel=2 $work/lines.txt | sha256sum; sort -k2,2n -k1,1 $work/lines.txt | sha256sum; sort -u -k1,1 $work/lines.txt | wc -l"
cmds[sqlite3]="sqlite3 db.sqlite \"
  PRAGMA journal_mode=OFF;
  CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL, grp INTEGER);
  WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 200000)
    INSERT INTO t SELECT i, printf('name%08d', (i * 7919) % 200000), i * 0.25, i % 97 FROM c;
  CREATE INDEX t_name ON t(name);
  CREATE INDEX t_grp ON t(grp, v);
  SELECT grp, count(*), sum(v), min(name), max(name) FROM t GROUP BY grp ORDER BY grp LIMIT 5;
  SELECT count(*) FROM t a JOIN t b ON a.name = b.name WHERE a.id % 1000 = 0;
  SELECT group_concat(name, ',') FROM (SELECT name FROM t ORDER BY v DESC LIMIT 20);
  SELECT length(group_concat(name)) FROM t;
  PRAGMA integrity_check;\""
cmds[xz]="head -c 3000000 $work/lines.txt > in.txt && xz -T2 -6 -c in.txt > in.xz && sha256sum < in.xz && xz -d -c in.xz | sha256sum && head -c 500000 in.txt | xz -T1 -9e | xz -d | cmp - <(head -c 500000 in.txt) && echo same"
cmds[git]="export HOME=\$PWD GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@example.com GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@example.com GIT_AUTHOR_DATE='2020-01-01T00:00:00+0000' GIT_COMMITTER_DATE='2020-01-01T00:00:00+0000'
  git init -q -b main repo && cd repo &&
  head -c 300000 $work/lines.txt > big.txt && git add big.txt && git commit -q -m base &&
  for i in \$(seq 1 30); do sed -n \"\$((i * 100)),+400p\" $work/lines.txt > f\$((i % 17)).txt; echo \$i >> big.txt; git add -A; git commit -q -m \"commit \$i\"; done &&
  git gc -q && git fsck --full --strict --no-progress && git log --stat --format='%H %s' | sha256sum && git rev-list --count HEAD && git cat-file -p HEAD~15:big.txt | sha256sum"
cmds[g++]="g++ -std=c++17 -O1 -frandom-seed=mtpool -o compile_me $here/programs/compile_me.cpp && ./compile_me; echo rc=\$?; objdump -d --no-show-raw-insn compile_me | tail -n +4 | sha256sum"

fail=0
modes=(glibc mtpool)
debug_lib=$(dirname "$lib")/libmtpool-debug.so
[ -r "$debug_lib" ] && modes+=(debug)
printf '%-8s %10s %10s %8s %10s  %s\n' program glibc_s mtpool_s ratio debug_s result
for name in "${names[@]}"; do
  t_debug=0
  for mode in "${modes[@]}"; do
    d="$work/$name.$mode"
    rm -rf "$d" && mkdir -p "$d"
    t0=$(date +%s.%N)
    if [ $mode = mtpool ]; then
      (cd "$d" && LD_PRELOAD="$lib" MTPOOL_SHOW_STATS=1 bash -c "${cmds[$name]}" >out 2>err)
    elif [ $mode = debug ]; then
      (cd "$d" && LD_PRELOAD="$debug_lib" MTPOOL_SHOW_STATS=1 bash -c "${cmds[$name]}" >out 2>err)
    else
      (cd "$d" && bash -c "${cmds[$name]}" >out 2>err)
    fi
    rc=$?
    t1=$(date +%s.%N)
    eval "rc_$mode=$rc; t_$mode=$(echo "$t1 - $t0" | bc)"
  done
  result=ok
  [ "$rc_glibc" = 0 ] || result="glibc run failed ($rc_glibc)"
  [ "$rc_mtpool" = 0 ] || result="mtpool run failed ($rc_mtpool)"
  if [ "$result" = ok ] && ! cmp -s "$work/$name.glibc/out" "$work/$name.mtpool/out"; then
    result="outputs differ"
  fi
  # the report of at least one process of the run: "total <blocks> <bytes> <per> <reserved> <free>"
  if [ "$result" = ok ] && ! awk '$1 == "total" && $5 > 0 {found = 1} END {exit !found}' "$work/$name.mtpool/err"; then
    result="no mtpool report: malloc was not replaced"
  fi
  bad=mtpool
  if [ "$result" = ok ] && [ -d "$work/$name.debug" ]; then
    bad=debug
    if [ "$rc_debug" != 0 ]; then
      result="debugger run failed ($rc_debug)"
    elif ! cmp -s "$work/$name.glibc/out" "$work/$name.debug/out"; then
      result="debugger outputs differ"
    elif grep -q '^mtpool: ' "$work/$name.debug/err"; then
      result="debugger reported an error"
    elif ! awk '$1 == "total" && $5 > 0 {found = 1} END {exit !found}' "$work/$name.debug/err"; then
      result="no report from the debugger: malloc was not replaced"
    fi
  fi
  printf '%-8s %10.2f %10.2f %8.2f %10.2f  %s\n' "$name" "$t_glibc" "$t_mtpool" \
    "$(echo "$t_mtpool / $t_glibc" | bc -l)" "$t_debug" "$result"
  if [ "$result" != ok ]; then
    fail=1
    echo "--- $name: $bad stderr (tail)"; grep -v -E '^(pool|total|default) ' "$work/$name.$bad/err" | tail -5
    echo "--- diff glibc $bad (head)"; diff "$work/$name.glibc/out" "$work/$name.$bad/out" | head -5
  fi
done
exit $fail
