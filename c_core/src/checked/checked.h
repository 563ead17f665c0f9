/* Checked mode (MTPOOL_CHECK, mtp_options_t.check): a pool whose every operation runs under its
 * lock and is validated, with guards, a quarantine of freed blocks and checks of whole pools.
 * Files: checked.c (blocks: allocation, free, lookups, the C++ forms), checked_verify.c (the
 * quarantine and the checks of freed blocks, guards and whole pools). A room above the heap it
 * wraps: api/ calls in for a checked pool, and for a block the heap answers is not its own.
 * Layer: wrap (above heap). */
#ifndef MTP_CHECKED_H
#define MTP_CHECKED_H

#include "heap/heap.h"

#pragma GCC visibility push(hidden)

void *mtp__checked_alloc(mtpi_pool_t *pool, size_t size, size_t alignment);
void mtp__checked_free(mtpi_desc_t *s, void *p, size_t size, bool sized);
/* Whether p is the user's address of a live block of checked slab s; *usable: its requested
 * size. Takes the pool lock. */
bool mtp__checked_lookup(mtpi_desc_t *s, const void *p, size_t *usable);
/* Whether the n bytes from p, an address in checked slab s, lie within a live block's requested
 * bytes: 0, or an MTP_ERR_* code and *what says how they do not. Takes the pool lock. */
int mtp__checked_range(mtpi_desc_t *s, const char *p, size_t n, const char **what);
/* Pool lock held, b the start of a live block of checked slab s: the user's address and size. */
void *mtp__checked_user(mtpi_desc_t *s, void *b, size_t *usable);
/* Pool destroy: drop the quarantine's record (its blocks go with the pool). */
void mtp__checked_forget(mtpi_pool_t *pool);
/* Verify every block of pool if it is checked (trim, destroy, mtp_pool_check): live blocks'
 * guards, freed blocks' clearing, large blocks' canaries. Reports each corrupt block (its pool,
 * its size if live) and returns how many; 0 for a pool that is not checked. Takes the pool lock. */
size_t mtp__checked_verify(mtpi_pool_t *pool);
/* A free of p outside the regions, first seen here: true if checked mode handled it: p lies in
 * the range of zero-size blocks (freed, misuse reported), or is a large block that new or new[]
 * made (a free of it reported, the block left alone); false: the caller frees it. */
bool mtp__checked_free_outside(void *p, size_t size, bool sized);
/* Whether p lies in the range of checked pools' zero-size blocks and is a live one (its pool set). */
bool mtp__checked_zero_lookup(const void *p, mtpi_pool_t **pool_out);
/* The live zero-size blocks of pool (statistics: blocks in use; they count as allocations). */
size_t mtp__checked_zero_count(const mtpi_pool_t *pool);
/* The drop-in's C++ forms: which allocation function made a checked block, so that operator
 * delete of the other form, or free of a new block, is reported. mtp__checked_forms: set once the
 * default pool has handed out a checked block (relaxed reads). */
enum { MTP_FORM_MALLOC = 0, MTP_FORM_NEW = 1, MTP_FORM_NEW_ARRAY = 2 };
extern bool mtp__checked_forms;
/* Record form for p if it is a live block of a checked slab (else nothing). */
void mtp__checked_set_form(void *p, unsigned form);
/* If p lies in a checked slab: free it as a delete of form (misuse reported), true; else false
 * (the caller frees it as usual). */
bool mtp__checked_delete(void *p, size_t size, bool sized, unsigned form);

#pragma GCC visibility pop

#endif
