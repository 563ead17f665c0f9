#!/usr/bin/env python3
"""Write the slapd benchmark's directory as LDIF on stdout (deterministic for a given seed).

The base entry, ou=people, then N inetOrgPerson entries uid=user0..user(N-1) whose description
runs from 100 to 2,000 bytes (uniform), plus the usual naming attributes. Input of slapadd.

usage: gen_ldif.py --base dc=bench,dc=test --entries 100000 [--seed 42]
"""
import argparse
import random
import sys

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
         "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu directory "
         "entry server search index attribute value object class person organization").split()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--entries", type=int, required=True)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    if a.entries <= 0:
        sys.exit("gen_ldif: --entries must be positive")
    rnd = random.Random(a.seed)
    # a text pool sliced at random offsets: fast, and every description differs
    pool = " ".join(rnd.choice(WORDS) for _ in range(400000))
    dc = a.base.split(",")[0].split("=")[1]
    out = sys.stdout
    out.write(f"dn: {a.base}\nobjectClass: top\nobjectClass: dcObject\nobjectClass: organization\n"
              f"o: benchmark\ndc: {dc}\n\n")
    out.write(f"dn: ou=people,{a.base}\nobjectClass: top\nobjectClass: organizationalUnit\n"
              f"ou: people\n\n")
    for i in range(a.entries):
        n = rnd.randint(100, 2000)
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
