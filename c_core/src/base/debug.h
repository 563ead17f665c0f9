/* Assertions by level (the build's MTP_DEBUG, set by the CMake cache variable MTPOOL_DEBUG):
 *   0  release: nothing
 *   1  MTP_ASSERT: cheap checks on slow paths
 *   2  also the validity checkers (MTP_VALIDATE): a slab's counts and lists against its capacity
 *      and bump area, a region's bitmaps against its page descriptors, a heap's lists; run at
 *      every slow path and at trim and destroy.
 * A failed check reports the expression and aborts. Layer: base. */
#ifndef MTP_DEBUG_H
#define MTP_DEBUG_H

#ifndef MTP_DEBUG
#define MTP_DEBUG 0
#endif

#pragma GCC visibility push(hidden)
__attribute__((noreturn, cold)) void mtp__assert_fail(const char *expr, const char *file, int line);
#pragma GCC visibility pop

#if MTP_DEBUG >= 1
#define MTP_ASSERT(c) ((c) ? (void)0 : mtp__assert_fail(#c, __FILE__, __LINE__))
#else
#define MTP_ASSERT(c) ((void)sizeof((c) ? 1 : 0)) /* not evaluated; names stay used */
#endif

#if MTP_DEBUG >= 2
#define MTP_VALIDATE(call) (call)
#else
#define MTP_VALIDATE(call) ((void)0)
#endif

#endif
