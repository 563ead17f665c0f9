#!/usr/bin/env python3
"""Write the slapd benchmark's directory as LDIF on stdout (deterministic for a given seed).

The base entry, ou=people, then N inetOrgPerson entries uid=user0..user(N-1) whose description
runs from MIN to MAX bytes (default 100..2,000, uniform; `:log` draws the length log-uniformly,
as for a directory of large entries), plus the usual naming attributes. Input of slapadd.

usage: gen_ldif.py --base dc=bench,dc=test --entries 100000 [--seed 42] [--desc MIN:MAX[:log]]
"""
import argparse
import math
import random
import sys

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
         "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu directory "
         "entry server search index attribute value object class person organization").split()


def desc_lengths(spec):
    """MIN:MAX[:log] -> (min, max, log-uniform?); the same syntax as ldap_load's --desc."""
    parts = spec.split(":")
    lo, hi = int(parts[0]), int(parts[1])
    log = len(parts) > 2 and parts[2] == "log"
    if not 1 <= lo <= hi or len(parts) > 3 or (len(parts) == 3 and not log):
        sys.exit(f"gen_ldif: bad --desc {spec!r} (MIN:MAX or MIN:MAX:log, 1 <= MIN <= MAX)")
    return lo, hi, log


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--entries", type=int, required=True)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--desc", default="100:2000")
    a = ap.parse_args()
    lo, hi, log = desc_lengths(a.desc)
    if a.entries <= 0:
        sys.exit("gen_ldif: --entries must be positive")
    rnd = random.Random(a.seed)
    # a text pool sliced at random offsets: fast, and every description differs
    pool = " ".join(rnd.choice(WORDS) for _ in range(max(400000, hi // 3)))
    dc = a.base.split(",")[0].split("=")[1]
    out = sys.stdout
    out.write(f"dn: {a.base}\nobjectClass: top\nobjectClass: dcObject\nobjectClass: organization\n"
              f"o: benchmark\ndc: {dc}\n\n")
    out.write(f"dn: ou=people,{a.base}\nobjectClass: top\nobjectClass: organizationalUnit\n"
              f"ou: people\n\n")
    for i in range(a.entries):
        n = (min(hi, int(math.exp(rnd.uniform(math.log(lo), math.log(hi + 1)))))
             if log else rnd.randint(lo, hi))
        off = rnd.randrange(0, len(pool) - n - 2)
        d = pool[off:off + n]
        d = "x" + d[1:-1] + "x"  # no leading or trailing space (LDIF would need base64)
        first = rnd.choice(WORDS).capitalize()
        last = rnd.choice(WORDS).capitalize() + str(i)
        out.write(f"dn: uid=user{i},ou=people,{a.base}\nobjectClass: inetOrgPerson\n"
                  f"uid: user{i}\ncn: {first} {last}\nsn: {last}\ngivenName: {first}\n"
                  f"mail: user{i}@bench.test\ntelephoneNumber: +1 555 {i:07d}\n"
                  f"employeeNumber: {i}\ndescription: {d}\n\n")


if __name__ == "__main__":
    main()
