/* Unit test of the heap profiler's stack table (profile/profile_records.c): stacks whose hashes share
 * a home slot each get a slot of their own (linear probing over every slot but the last), the same
 * stack finds its slot again, and only a full table sends a stack to the "other" slot. A probe
 * that skipped slots once sent a colliding call site's samples to "other", which no profile
 * shows. */
#include <sys/mman.h>

#include "profile/profile_records.h"
#include "testhelper.h"

#define SLOTS MTP_PROF_STACK_SLOTS
#define OTHER (SLOTS - 1)

static uint32_t slot_of(uintptr_t pc) {
  void *frames[1] = {(void *)pc};
  return mtp__prof_stack_slot(frames, 1);
}

/* The slot a stack takes in an empty table (its home), the table left empty again. */
static uint32_t home_of(uintptr_t pc) {
  uint32_t s = slot_of(pc);
  memset(&mtp__prof_stacks[s], 0, sizeof(prof_stack_t));
  return s;
}

static void test_collisions_and_full_table(void) {
  /* four stacks with one home slot */
  uint32_t first = home_of(1), got = 1;
  CHECK(first != OTHER);
  uintptr_t same[4] = {1, 0, 0, 0};
  for (uintptr_t pc = 2; got < 4 && pc < 100000000; pc++)
    if (home_of(pc) == first) same[got++] = pc;
  REQUIRE(got == 4, "four stacks with one home slot");
  uint32_t at[4];
  for (int i = 0; i < 4; i++) {
    at[i] = slot_of(same[i]);
    CHECK(at[i] != OTHER);
    for (int j = 0; j < i; j++) CHECK(at[i] != at[j]);
  }
  for (int i = 0; i < 4; i++) CHECK_EQ_SZ(slot_of(same[i]), at[i]); /* found again */
  /* every slot but the last takes a stack before any goes to "other" */
  uint32_t used = 4, other = 0;
  for (uintptr_t pc = 1000000000; used < SLOTS - 1 + 16; pc++) {
    if (slot_of(pc) == OTHER) other++;
    used++;
  }
  CHECK_EQ_SZ(other, 16);
  for (uint32_t i = 0; i < SLOTS - 1; i++) CHECK(mtp__prof_stacks[i].hash != 0);
  CHECK(mtp__prof_stacks[OTHER].hash == 0);
}

int main(void) {
  void *t = mmap(NULL, SLOTS * sizeof(prof_stack_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(t != MAP_FAILED, "the table");
  mtp__prof_stacks = t; /* the profiler is off here (no MTPOOL_PROFILE): the table is this test's */
  RUN(test_collisions_and_full_table);
  DONE();
}
