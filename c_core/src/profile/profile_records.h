/* What profile_records.c gives profile.c: the tables of call stacks and of live samples, the state
 * that start-up writes, the dumps on a signal; and the unwinder both call. Included by those two
 * files only. Layer: wrap (inside the room). */
#ifndef MTP_HEAP_PROFILE_RECORDS_H
#define MTP_HEAP_PROFILE_RECORDS_H

#include <signal.h>

#include "profile/profile.h"

#include "base/unwind.h"

#pragma GCC visibility push(hidden)

/* distinct stacks (a power of two); beyond them, one "other" entry */
#define MTP_PROF_STACK_SLOTS 16384
/* live samples: the table's slots at most (a power of two), and the samples it holds at most; it
 * starts at MTP_PROF_LIVE_FIRST slots and doubles when half full, so that a program with few
 * live samples keeps it in a few cache lines */
#define MTP_PROF_LIVE_SLOTS (1u << 20)
#define MTP_PROF_LIVE_MAX (MTP_PROF_LIVE_SLOTS / 2)
#define MTP_PROF_LIVE_FIRST 1024u

/* A stack's counts, in shards of a cache line each: a thread adds to its own shard
 * (mtp__prof_shard), so that threads sampling the same stacks do not pass its line back and
 * forth; a shard's live counts may go below zero (a block freed on another thread than the one
 * that sampled it), their sums do not. */
#define MTP_PROF_SHARDS 4
typedef struct prof_counts {
  int64_t live_count, live_bytes, alloc_count, alloc_bytes;
} __attribute__((aligned(64))) prof_counts_t;

typedef struct prof_stack {
  uint64_t hash;  /* 0: slot unused */
  uint64_t live_sum, est_bytes; /* the leak list's live samples and their bytes' estimate (exit) */
  uint32_t depth;
  void *pc[MTP_PROF_MAX_DEPTH];
  prof_counts_t counts[MTP_PROF_SHARDS];
} prof_stack_t;

typedef struct prof_live {
  uintptr_t ptr; /* 0: empty (deletion shifts the cluster back: no tombstones) */
  uint32_t stack;
  uint64_t bytes; /* what was charged */
} prof_live_t;

/* Defined in profile_records.c, where each one's comment says who writes it, under which lock. */
extern pthread_mutex_t mtp__prof_lock;
extern prof_stack_t *mtp__prof_stacks;
extern prof_live_t *mtp__prof_live, *mtp__prof_live_spare;
extern uint32_t mtp__prof_live_n;
extern uint64_t mtp__prof_rate;
extern char mtp__prof_path[4096];
extern volatile sig_atomic_t mtp__prof_dump_pending;
extern MTP_TLS bool mtp__tl_prof_busy;

/* mtp__prof_lock held: stack pc's slot in the table, made if new (the "other" slot when full). */
uint32_t mtp__prof_stack_slot(void *const *pc, uint32_t depth);
/* mtp__prof_lock held: p is a live sample of stack slot `stack`, charged `bytes` (the table grown
 * first if half full). false: the table is full (MTP_PROF_LIVE_MAX). */
bool mtp__prof_live_insert(uintptr_t p, uint32_t stack, uint64_t bytes);
/* The calling thread's shard of the stacks' counts. */
unsigned mtp__prof_shard(void);
/* A stack's counts, its shards summed. */
prof_counts_t mtp__prof_counts(const prof_stack_t *s);
/* The dump a signal left for later (mtp__prof_dump_pending), now if the tables are free. */
void mtp__prof_dump_on_signal_pending(void);
/* MTPOOL_PROFILE_SIGNAL's handler: a numbered dump, now or left to the next sample. */
void mtp__prof_on_signal(int sig);

/* ---- profile_unwind.c: the unwinder ---- */
#define MTP_PROF_UNWIND_MAX 64 /* frames an unwind gives at most, mtpool's own included */
/* 1: its own unwinder (x86-64, glibc 2.35 or later: _dl_find_object); 0: backtrace() alone */
#if MTP_HAVE_UNWINDER && defined(__x86_64__) && \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
#define MTP_PROF_FAST_UNWIND 1
#else
#define MTP_PROF_FAST_UNWIND 0
#endif
/* Start-up, before sampling: the unwinder's table mapped. false: no memory for it. */
bool mtp__prof_unwind_init(void);
/* The return addresses of the calling thread's stack, innermost first, from the caller's frame
 * on: what backtrace() called in its place gives. At most max (<= MTP_PROF_UNWIND_MAX); their
 * number. */
int mtp__prof_backtrace(void **pc, int max);
/* The range of a loaded object's executable segments (lo > hi: none), for dl_iterate_phdr's
 * callbacks. */
struct dl_phdr_info;
void mtp__prof_exec_range(const struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi);
/* Stacks unwound by backtrace() (the fast unwinder could not), for the tests. */
extern mtpi_atomic_u64 mtp__prof_unwind_slow;

#pragma GCC visibility pop

#endif
