/* The heap profiler's unwinder: the return addresses of the sampling thread's stack, as glibc's
 * backtrace() gives them, at a small part of its cost (bench/results/notes.md: the figures).
 *
 * backtrace() runs libgcc's unwinder, which for every frame finds the function's FDE in the
 * object's .eh_frame (its table in .eh_frame_hdr), runs the CIE's and the FDE's CFA programs up to
 * the return address, and applies the row to a context of every register. Here a frame needs
 * only three registers (x86-64: the stack pointer, rbp and the return address), and the row at a
 * given address never changes while its object is loaded, so each address's row is computed once
 * (the same way: the FDE through _dl_find_object and .eh_frame_hdr, the programs run up to the
 * address) and kept in a table shared by the threads, keyed by the address and its object. A
 * frame then costs a probe of the table, and outside the objects that are never unloaded (the
 * executable, mtpool's and libc) a _dl_find_object (no lock) to name its object, which guards
 * against a library unloaded and another one loaded at its address.
 *
 * What it does not know it leaves to libgcc: a row it cannot apply with those three registers
 * (the CFA or rbp or the return address by an expression or in another register, a signal frame,
 * an address with no FDE in a loaded object's table, an object without .eh_frame_hdr or with an
 * encoding other than the linkers' usual one) sends the whole stack to backtrace(), so the stacks
 * are backtrace()'s in every case: same frames, same end (after the frame whose return address
 * is undefined, as glibc's _start and clone3 mark the outermost frame; a null return address is
 * not kept). Elsewhere than x86-64 with glibc 2.35 or later, backtrace() alone. Layer: wrap (above heap). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "profile_records.h"

#include "base/atomic.h"

mtpi_atomic_u64 mtp__prof_unwind_slow;

/* backtrace() from mtp__prof_backtrace's caller's frame on (ret: the return address into it), as
 * mtp__prof_backtrace's own. Inlined there, so that backtrace() is called from that frame; the
 * frames before ret's are left out: mtp__prof_backtrace's, and a sanitizer's wrapper of
 * backtrace() if there is one. */
MTP_INLINE int slow_backtrace(void **pc, int max, void *ret) {
  void *raw[MTP_PROF_UNWIND_MAX + 2];
  if (max > MTP_PROF_UNWIND_MAX) max = MTP_PROF_UNWIND_MAX;
  int n = backtrace(raw, max + 2), first = 1; /* ret not found: after this frame's */
  mtp__u64_add_relaxed(&mtp__prof_unwind_slow, 1); /* a count for the tests; nothing waits on it */
  for (int i = 0; i < n && i < 3; i++)
    if (raw[i] == ret) {
      first = i;
      break;
    }
  if (n <= first) return 0;
  n = n - first > max ? max : n - first;
  memcpy(pc, raw + first, (size_t)n * sizeof(void *));
  return n;
}

void mtp__prof_exec_range(const struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi) {
  *lo = UINTPTR_MAX;
  *hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    uintptr_t a = info->dlpi_addr + ph->p_vaddr;
    if (a < *lo) *lo = a;
    if (a + ph->p_memsz > *hi) *hi = a + ph->p_memsz;
  }
}

#if !MTP_PROF_FAST_UNWIND

bool mtp__prof_unwind_init(void) { return true; }

MTP_NOINLINE int mtp__prof_backtrace(void **pc, int max) {
  return slow_backtrace(pc, max, __builtin_return_address(0));
}

#else

/* ---- a row of the CFA table, as far as three registers go ---- */

enum { RULE_STEP = 1, RULE_LAST = 2, RULE_LIBGCC = 3, RULE_KIND = 3 };
#define RULE_CFA_BP 4   /* CFA = rbp + cfa_off (else rsp + cfa_off) */
#define RULE_BP_SAVED 8 /* the caller's rbp is at CFA + bp_off (else rbp is unchanged) */

/* STEP: the caller's frame is found (return address at CFA + ra_off); LAST: the return address
 * is undefined, this frame is the outermost; LIBGCC: a row this unwinder does not apply. */
typedef struct rule {
  int32_t cfa_off;
  int16_t bp_off;
  int8_t ra_off;
  uint8_t how; /* the kind | RULE_CFA_BP | RULE_BP_SAVED */
} rule_t;

static const rule_t rule_libgcc = {0, 0, 0, RULE_LIBGCC};

/* ---- reading .eh_frame ---- */

typedef struct rd {
  const uint8_t *p, *end;
  bool bad; /* read past the end, or an encoding not handled */
} rd_t;

static uint64_t rd_fixed(rd_t *r, unsigned size) {
  uint64_t v = 0;
  if (r->p > r->end || (size_t)(r->end - r->p) < size) {
    r->bad = true;
    return 0;
  }
  memcpy(&v, r->p, size); /* little-endian: x86-64 */
  r->p += size;
  return v;
}

static uint64_t rd_uleb(rd_t *r) {
  uint64_t v = 0;
  for (unsigned shift = 0; r->p < r->end && shift < 64; shift += 7) {
    uint8_t b = *r->p++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  r->bad = true;
  return 0;
}

static int64_t rd_sleb(rd_t *r) {
  uint64_t v = 0;
  for (unsigned shift = 0; r->p < r->end && shift < 64;) {
    uint8_t b = *r->p++;
    v |= (uint64_t)(b & 0x7f) << shift;
    shift += 7;
    if (!(b & 0x80)) {
      if (shift < 64 && (b & 0x40)) v |= ~(uint64_t)0 << shift;
      return (int64_t)v;
    }
  }
  r->bad = true;
  return 0;
}

/* A block of n bytes passed over (an expression). */
static void rd_skip(rd_t *r, uint64_t n) {
  if (r->p > r->end || (uint64_t)(r->end - r->p) < n) r->bad = true;
  else r->p += n;
}

/* A pointer in DW_EH_PE encoding enc: absolute or relative to its own address (the encodings
 * linkers and compilers write into .eh_frame for code addresses); anything else is bad. */
static uintptr_t rd_ptr(rd_t *r, uint8_t enc) {
  uintptr_t at = (uintptr_t)r->p, v;
  switch (enc & 0x0f) {
  case 0x00: case 0x04: v = (uintptr_t)rd_fixed(r, 8); break;              /* absptr, udata8 */
  case 0x0c: v = (uintptr_t)(int64_t)rd_fixed(r, 8); break;                /* sdata8 */
  case 0x02: v = (uintptr_t)rd_fixed(r, 2); break;                         /* udata2 */
  case 0x0a: v = (uintptr_t)(int64_t)(int16_t)rd_fixed(r, 2); break;      /* sdata2 */
  case 0x03: v = (uintptr_t)rd_fixed(r, 4); break;                         /* udata4 */
  case 0x0b: v = (uintptr_t)(int64_t)(int32_t)rd_fixed(r, 4); break;       /* sdata4 */
  case 0x01: v = (uintptr_t)rd_uleb(r); break;                             /* uleb128 */
  case 0x09: v = (uintptr_t)rd_sleb(r); break;                             /* sleb128 */
  default: r->bad = true; return 0;
  }
  switch (enc & 0xf0) {
  case 0x00: return v;       /* absolute */
  case 0x10: return v + at;  /* pc-relative */
  default: r->bad = true; return 0;
  }
}

/* ---- the CFA programs ---- */

enum { REG_SAME, REG_OFFSET, REG_UNDEF, REG_OTHER };
enum { DW_RBP = 6, DW_RSP = 7, DW_RA = 16 };

typedef struct cfi_row {
  int64_t cfa_off, bp_off, ra_off;
  int cfa_reg; /* DWARF register; -1: by an expression */
  uint8_t bp_how, ra_how;
} cfi_row_t;

typedef struct cie {
  uint64_t code_align;
  int64_t data_align;
  uint8_t ptr_enc;        /* the FDEs' pointers ('R'; absolute by default) */
  bool has_z;             /* the FDEs carry augmentation data */
  const uint8_t *insn, *end; /* its initial instructions */
  cfi_row_t init;         /* the row they make (DW_CFA_restore's) */
} cie_t;

static bool row_set(cfi_row_t *s, uint64_t reg, uint8_t how, int64_t off) {
  if (reg == DW_RBP) {
    s->bp_how = how;
    s->bp_off = off;
  } else if (reg == DW_RA) {
    s->ra_how = how;
    s->ra_off = off;
  } else if (reg == DW_RSP && how != REG_SAME) {
    return false; /* the caller's rsp is the CFA */
  }
  return true; /* other registers: not needed to find the frames */
}

static bool row_restore(cfi_row_t *s, const cfi_row_t *init, uint64_t reg) {
  if (reg == DW_RBP) return row_set(s, reg, init->bp_how, init->bp_off);
  if (reg == DW_RA) return row_set(s, reg, init->ra_how, init->ra_off);
  return true;
}

#define STATE_STACK 8 /* DW_CFA_remember_state nesting */

/* Runs the instructions in r from location loc while loc < limit, as libgcc's
 * execute_cfa_program does (remember/restore_state keep the CFA with the registers, as libgcc's
 * do). false: an instruction this unwinder does not handle. */
static bool cfi_run(rd_t *r, const cie_t *c, cfi_row_t *s, uintptr_t loc, uintptr_t limit) {
  cfi_row_t saved[STATE_STACK];
  unsigned depth = 0;
  while (r->p < r->end && loc < limit && !r->bad) {
    uint8_t op = *r->p++;
    uint64_t reg;
    bool ok = true;
    switch (op & 0xc0) {
    case 0x40: loc += (op & 0x3f) * c->code_align; continue; /* advance_loc */
    case 0x80: ok = row_set(s, op & 0x3f, REG_OFFSET, (int64_t)rd_uleb(r) * c->data_align); break;
    case 0xc0: ok = row_restore(s, &c->init, op & 0x3f); break;
    default:
      switch (op) {
      case 0x00: break; /* nop */
      case 0x01: loc = rd_ptr(r, c->ptr_enc); break;
      case 0x02: loc += rd_fixed(r, 1) * c->code_align; break;
      case 0x03: loc += rd_fixed(r, 2) * c->code_align; break;
      case 0x04: loc += rd_fixed(r, 4) * c->code_align; break;
      case 0x05: /* offset_extended */
        reg = rd_uleb(r);
        ok = row_set(s, reg, REG_OFFSET, (int64_t)rd_uleb(r) * c->data_align);
        break;
      case 0x06: ok = row_restore(s, &c->init, rd_uleb(r)); break;
      case 0x07: ok = row_set(s, rd_uleb(r), REG_UNDEF, 0); break;
      case 0x08: ok = row_set(s, rd_uleb(r), REG_SAME, 0); break;
      case 0x09: /* register: saved in another register */
        reg = rd_uleb(r);
        (void)rd_uleb(r);
        ok = row_set(s, reg, REG_OTHER, 0);
        break;
      case 0x0a:
        if (depth == STATE_STACK) return false;
        saved[depth++] = *s;
        break;
      case 0x0b:
        if (depth == 0) return false;
        *s = saved[--depth];
        break;
      case 0x0c: /* def_cfa */
        s->cfa_reg = (int)rd_uleb(r);
        s->cfa_off = (int64_t)rd_uleb(r);
        break;
      case 0x0d: s->cfa_reg = (int)rd_uleb(r); break;
      case 0x0e: s->cfa_off = (int64_t)rd_uleb(r); break;
      case 0x0f: /* def_cfa_expression */
        s->cfa_reg = -1;
        rd_skip(r, rd_uleb(r));
        break;
      case 0x10: /* expression */
        reg = rd_uleb(r);
        rd_skip(r, rd_uleb(r));
        ok = row_set(s, reg, REG_OTHER, 0);
        break;
      case 0x11: /* offset_extended_sf */
        reg = rd_uleb(r);
        ok = row_set(s, reg, REG_OFFSET, rd_sleb(r) * c->data_align);
        break;
      case 0x12: /* def_cfa_sf */
        s->cfa_reg = (int)rd_uleb(r);
        s->cfa_off = rd_sleb(r) * c->data_align;
        break;
      case 0x13: s->cfa_off = rd_sleb(r) * c->data_align; break; /* def_cfa_offset_sf */
      case 0x14: case 0x15: /* val_offset(_sf): the caller's value is an address, not a load */
        reg = rd_uleb(r);
        (void)rd_uleb(r);
        ok = row_set(s, reg, REG_OTHER, 0);
        break;
      case 0x16: /* val_expression */
        reg = rd_uleb(r);
        rd_skip(r, rd_uleb(r));
        ok = row_set(s, reg, REG_OTHER, 0);
        break;
      case 0x2e: (void)rd_uleb(r); break; /* GNU_args_size */
      case 0x2f: /* GNU_negative_offset_extended */
        reg = rd_uleb(r);
        ok = row_set(s, reg, REG_OFFSET, -(int64_t)rd_uleb(r) * c->data_align);
        break;
      default: return false;
      }
    }
    if (!ok) return false;
  }
  return !r->bad;
}

/* The CIE at p: its alignment factors, the FDEs' pointer encoding, its initial row. */
static bool cie_read(const uint8_t *p, cie_t *c) {
  rd_t r = {p, p + 8, false};
  uint32_t len = (uint32_t)rd_fixed(&r, 4);
  if (len == 0 || len == 0xffffffffu || rd_fixed(&r, 4) != 0) return false; /* 32-bit CIE only */
  r.end = p + 4 + len;
  uint8_t version = (uint8_t)rd_fixed(&r, 1);
  if (version != 1 && version != 3) return false;
  const char *aug = (const char *)r.p;
  size_t alen = strnlen(aug, (size_t)(r.end - r.p));
  rd_skip(&r, alen + 1);
  c->code_align = rd_uleb(&r);
  c->data_align = rd_sleb(&r);
  uint64_t ra_col = version == 1 ? rd_fixed(&r, 1) : rd_uleb(&r);
  if (ra_col != DW_RA) return false;
  c->ptr_enc = 0;
  c->has_z = aug[0] == 'z';
  if (c->has_z) {
    uint64_t zlen = rd_uleb(&r);
    if (r.bad || (uint64_t)(r.end - r.p) < zlen) return false;
    const uint8_t *zend = r.p + zlen;
    for (size_t i = 1; i < alen && !r.bad; i++) {
      if (aug[i] == 'R') {
        c->ptr_enc = (uint8_t)rd_fixed(&r, 1);
      } else if (aug[i] == 'P') {
        uint8_t enc = (uint8_t)rd_fixed(&r, 1);
        (void)rd_ptr(&r, enc & 0x0f); /* the personality routine: skipped, not applied */
      } else if (aug[i] == 'L') {
        (void)rd_fixed(&r, 1);
      } else {
        return false; /* 'S' (a signal frame) and anything newer: libgcc's */
      }
    }
    r.p = zend;
  } else if (alen != 0) {
    return false;
  }
  if (r.bad) return false;
  c->insn = r.p;
  c->end = r.end;
  /* before the CIE's instructions: no CFA, every register unchanged (libgcc's state) */
  cfi_row_t s = {.cfa_reg = -1, .bp_how = REG_SAME, .ra_how = REG_SAME};
  c->init = s; /* DW_CFA_restore inside the CIE's own program (never seen) restores this */
  rd_t ir = {c->insn, c->end, false};
  if (!cfi_run(&ir, c, &s, 0, UINTPTR_MAX)) return false;
  c->init = s;
  return true;
}

/* The FDE of address a in object o, from .eh_frame_hdr's sorted table; NULL: none (or a table in
 * an encoding other than the one linkers write). */
static const uint8_t *fde_find(const struct dl_find_object *o, uintptr_t a) {
  const uint8_t *h = o->dlfo_eh_frame;
  /* version 1, the count in udata4, the table in datarel sdata4 */
  if (h == NULL || h[0] != 1 || h[2] != 0x03 || h[3] != 0x3b) return NULL;
  unsigned enc = h[1] & 0x0f; /* the .eh_frame pointer's, passed over */
  unsigned ptr_size = enc == 0x03 || enc == 0x0b ? 4 : 8;
  if (ptr_size == 8 && enc != 0x00 && enc != 0x04 && enc != 0x0c) return NULL;
  uint32_t count;
  memcpy(&count, h + 4 + ptr_size, 4);
  const uint8_t *table = h + 8 + ptr_size;
  /* the last entry whose start is at or below a */
  uint32_t lo = 0, hi = count;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    int32_t start;
    memcpy(&start, table + 8 * (size_t)mid, 4);
    if ((uintptr_t)h + (intptr_t)start <= a) lo = mid + 1;
    else hi = mid;
  }
  if (lo == 0) return NULL;
  int32_t fde;
  memcpy(&fde, table + 8 * (size_t)(lo - 1) + 4, 4);
  return h + fde;
}

/* The row at address a (a return address less one, or an exact address) of object o. */
static MTP_NOINLINE rule_t rule_compute(const struct dl_find_object *o, uintptr_t a) {
  const uint8_t *f = fde_find(o, a);
  if (f == NULL) return rule_libgcc;
  rd_t r = {f, f + 8, false};
  uint32_t len = (uint32_t)rd_fixed(&r, 4);
  uint32_t cie_off = (uint32_t)rd_fixed(&r, 4);
  if (len == 0 || len == 0xffffffffu || cie_off == 0) return rule_libgcc;
  r.end = f + 4 + len;
  cie_t c;
  if (!cie_read(f + 4 - cie_off, &c)) return rule_libgcc;
  uintptr_t begin = rd_ptr(&r, c.ptr_enc);
  uintptr_t range = rd_ptr(&r, c.ptr_enc & 0x0f);
  if (r.bad || a < begin || a - begin >= range) return rule_libgcc; /* no FDE covers a */
  if (c.has_z) rd_skip(&r, rd_uleb(&r));
  cfi_row_t s = c.init;
  if (!cfi_run(&r, &c, &s, begin, a + 1)) return rule_libgcc;
  if (s.ra_how == REG_UNDEF) return (rule_t){0, 0, 0, RULE_LAST};
  if (s.ra_how != REG_OFFSET || (s.cfa_reg != DW_RSP && s.cfa_reg != DW_RBP) ||
      (s.bp_how != REG_SAME && s.bp_how != REG_OFFSET) || s.cfa_off < INT32_MIN ||
      s.cfa_off > INT32_MAX || s.bp_off < INT16_MIN || s.bp_off > INT16_MAX ||
      s.ra_off < INT8_MIN || s.ra_off > INT8_MAX)
    return rule_libgcc;
  rule_t ru = {(int32_t)s.cfa_off, (int16_t)s.bp_off, (int8_t)s.ra_off, RULE_STEP};
  if (s.cfa_reg == DW_RBP) ru.how |= RULE_CFA_BP;
  if (s.bp_how == REG_OFFSET) ru.how |= RULE_BP_SAVED;
  return ru;
}

/* ---- the rows known so far ---- */

/* An open-addressed table, filled and never emptied, shared by every thread without a lock.
 * Invariant: an entry's base, eh and rule are written once, by the thread that claimed it, before
 * its key is published, and never again. Claim: a CAS of the key from 0 to the address with
 * KEY_BUSY set (no reader takes a busy key for its own, so the claim publishes nothing). Publish:
 * a release store of the address; a reader's acquire load that sees it sees the fields. A reader
 * that meets a busy entry of its own address reads past it and may add a second entry for the
 * same row: harmless, the rows are equal. A table too full for an address (a run of PROBES) only
 * means that address's row is computed at each of its frames. */
#define CACHE_SLOTS (1u << 14)
#define PROBES 32
#define KEY_BUSY ((uintptr_t)1 << 63) /* user-space addresses have bit 63 clear */

typedef struct cache_entry {
  mtpi_atomic_uptr key; /* the address (a return address less one); 0: unused */
  uintptr_t base;       /* its object: where it is mapped (0: a permanent one), its .eh_frame_hdr */
  const void *eh;
  rule_t rule;
} cache_entry_t;

static cache_entry_t *cache; /* mapped at start-up */

/* Objects that are never unloaded, whose frames need no _dl_find_object to name their object: the
 * executable, mtpool's own and libc, found at start-up. Written once before sampling starts, read
 * only after. */
#define PERMANENT_MAX 3
static struct {
  uintptr_t lo, hi; /* its executable segments' range */
} permanent[PERMANENT_MAX];
static unsigned permanent_n;

static int permanent_add(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  const uintptr_t *want = arg; /* addresses in the objects wanted; 0: the executable */
  uintptr_t lo, hi;
  mtp__prof_exec_range(info, &lo, &hi);
  bool keep = info->dlpi_name == NULL || info->dlpi_name[0] == 0; /* the executable */
  for (unsigned k = 0; k < 2 && !keep; k++) keep = want[k] >= lo && want[k] < hi;
  if (keep && lo < hi && permanent_n < PERMANENT_MAX) {
    permanent[permanent_n].lo = lo;
    permanent[permanent_n].hi = hi;
    permanent_n++;
  }
  return 0;
}

static bool in_permanent(uintptr_t a) {
  for (unsigned k = 0; k < permanent_n; k++)
    if (a - permanent[k].lo < permanent[k].hi - permanent[k].lo) return true;
  return false;
}

/* rule_for's miss: a's row computed and added to the table (found: o already names a's object). */
static MTP_NOINLINE rule_t rule_add(uintptr_t a, uint32_t home, struct dl_find_object *o,
                                    bool found) {
  if (!found && _dl_find_object((void *)a, o) != 0) return rule_libgcc; /* not in a loaded object */
  rule_t ru = rule_compute(o, a);
  for (unsigned k = 0, i = home; k < PROBES; k++, i = (i + 1) & (CACHE_SLOTS - 1)) {
    cache_entry_t *e = &cache[i];
    uintptr_t expected = 0;
    /* the claim: ordering is the publishing store's job below */
    if (!mtp__cas_strong_acq_rel(&e->key, &expected, a | KEY_BUSY)) continue;
    e->base = in_permanent(a) ? 0 : (uintptr_t)o->dlfo_map_start;
    e->eh = o->dlfo_eh_frame;
    e->rule = ru;
    mtp__store_release(&e->key, a); /* publishes the fields above */
    break;
  }
  return ru;
}

/* a's row: from the table, or computed and added to it. An entry made for an address in a
 * permanent object names none (base 0): its key alone is enough. Any other entry must name a's
 * object as _dl_find_object does now, so that an object loaded where an unloaded one was finds
 * none of the other's rows. */
MTP_INLINE rule_t rule_for(uintptr_t a) {
  struct dl_find_object o;
  bool found = false;
  uint32_t home = (uint32_t)((a * 0x9E3779B97F4A7C15ull) >> 50), i = home;
  for (unsigned k = 0; k < PROBES; k++, i = (i + 1) & (CACHE_SLOTS - 1)) {
    cache_entry_t *e = &cache[i];
    uintptr_t key = mtp__load_acquire(&e->key); /* pairs with the release that published it */
    if (key == 0) break;
    if (key != a) continue;
    if (MTP_LIKELY(e->base == 0)) return e->rule;
    if (!found) {
      if (_dl_find_object((void *)a, &o) != 0) return rule_libgcc; /* not in a loaded object */
      found = true;
    }
    if (e->base == (uintptr_t)o.dlfo_map_start && e->eh == o.dlfo_eh_frame) return e->rule;
  }
  return rule_add(a, home, &o, found);
}

bool mtp__prof_unwind_init(void) {
  void *p = mmap(NULL, CACHE_SLOTS * sizeof(cache_entry_t), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  cache = p;
  /* Objects loaded at start-up are never unloaded (glibc unloads only what dlopen loaded); of
   * those, the ones in nearly every stack: the executable, this code's and libc's (getpid's). */
  uintptr_t want[2] = {(uintptr_t)&mtp__prof_backtrace, (uintptr_t)&getpid};
  permanent_n = 0;
  (void)dl_iterate_phdr(permanent_add, want);
  return true;
}

/* A frame whose CFA would not lie above the frame below it is not one: libgcc decides. */
#define FRAME_MAX ((uintptr_t)1 << 32)

/* A word saved in a frame above this one on this thread's stack (a return address, rbp), where
 * its CFA row says: valid for as long as that frame exists, longer than this call. Read in
 * assembly, out of the sanitizers' sight: it is no object of this code's. */
static inline uintptr_t stack_word(uintptr_t at) {
  uintptr_t v;
  __asm__ volatile("movq (%1), %0" : "=r"(v) : "r"(at));
  return v;
}

MTP_NOINLINE int mtp__prof_backtrace(void **out, int max) {
  if (MTP_UNLIKELY(cache == NULL)) /* not started */
    return slow_backtrace(out, max, __builtin_return_address(0));
  uintptr_t pc, sp, bp;
  /* This frame, at an exact address (its row is the one at that address); rbp is read first, in
   * case the compiler picks rbp's register for another output. */
  __asm__ volatile("movq %%rbp, %2\n\tmovq %%rsp, %1\n\tleaq 0(%%rip), %0"
                   : "=r"(pc), "=r"(sp), "=r"(bp));
  uintptr_t a = pc; /* the address whose row applies: exact here, a return address less one above */
  int n = 0;
  bool own = true; /* this function's frame: not kept (backtrace() starts at its caller's) */
  for (;;) {
    rule_t ru = rule_for(a);
    unsigned kind = ru.how & RULE_KIND;
    if (kind == RULE_LIBGCC) goto slow;
    if (!own) out[n++] = (void *)pc;
    own = false;
    if (kind == RULE_LAST || n >= max) break;
    uintptr_t cfa = ((ru.how & RULE_CFA_BP) ? bp : sp) + (uintptr_t)(intptr_t)ru.cfa_off;
    if (cfa <= sp || cfa - sp >= FRAME_MAX) goto slow;
    uintptr_t ra = stack_word(cfa + (uintptr_t)(intptr_t)ru.ra_off);
    if (ru.how & RULE_BP_SAVED) bp = stack_word(cfa + (uintptr_t)(intptr_t)ru.bp_off);
    sp = cfa;
    pc = ra;
    if (pc == 0) break; /* backtrace() drops a trailing null */
    a = pc - 1;
  }
  return n;
slow:
  return slow_backtrace(out, max, __builtin_return_address(0));
}

#endif
