#!/bin/sh
# libmtpool-malloc.so exports exactly the allocation functions (C and C++) and mtp_*, every one
# unversioned, with default visibility; nothing internal leaks; and it needs no library but the C
# library (loading libstdc++, libgcc_s and libm with it doubles a small program's start-up faults).
# Usage: check_exports.sh LIB [glibc|glibc-debug|musl]
# (musl: musl's own allocation functions, C23's free_sized and mtp_*; no glibc extra, no C++).
set -eu
lib=$1
libc=${2:-glibc}
syms=$(nm -D --defined-only "$lib" | awk '{print $3}')
case $libc in
  glibc) ;;
  glibc-debug) ;; # libmtpool-debug.so: the copies it checks too, and none of them tail-called
  musl) ;;
  *) echo "check_exports.sh: unknown C library '$libc' (glibc or musl)" >&2; exit 2 ;;
esac
want="malloc free calloc realloc reallocarray posix_memalign aligned_alloc memalign valloc pvalloc
malloc_usable_size free_sized free_aligned_sized cfree malloc_trim mallinfo mallinfo2 mallopt
malloc_stats malloc_info __libc_malloc __libc_free __libc_calloc __libc_realloc __libc_memalign
__libc_valloc __libc_pvalloc __posix_memalign
_Znwm _Znam _ZnwmRKSt9nothrow_t _ZnamRKSt9nothrow_t _ZnwmSt11align_val_t _ZnamSt11align_val_t
_ZnwmSt11align_val_tRKSt9nothrow_t _ZnamSt11align_val_tRKSt9nothrow_t _ZdlPv _ZdaPv _ZdlPvm
_ZdaPvm _ZdlPvRKSt9nothrow_t _ZdaPvRKSt9nothrow_t _ZdlPvSt11align_val_t _ZdaPvSt11align_val_t
_ZdlPvmSt11align_val_t _ZdaPvmSt11align_val_t _ZdlPvSt11align_val_tRKSt9nothrow_t
_ZdaPvSt11align_val_tRKSt9nothrow_t mtp_alloc mtp_free mtp_realloc mtp_pool_of"
if [ "$libc" = musl ]; then
  want="malloc free calloc realloc reallocarray posix_memalign aligned_alloc memalign valloc
malloc_usable_size free_sized free_aligned_sized mtp_alloc mtp_free mtp_realloc mtp_pool_of"
fi
fail=0
if [ "$libc" = glibc-debug ]; then
  copies="memcpy memmove memset strcpy stpcpy strcat strncpy"
  want="$want $copies $(for c in $copies; do printf '__%s_chk ' "$c"; done)"
  if objdump -d --no-show-raw-insn "$lib" |
    grep -E "jmp +[0-9a-f]+ <(_*(mem(cpy|move|set)|st(r|p)cpy|strcat|strncpy)(_chk)?)(@plt)?>"; then
    echo "a copy tail-called inside the library (checked_copy.c would check mtpool's own copy)"
    fail=1
  fi
fi
for s in $want; do
  echo "$syms" | grep -qx "$s" || { echo "not exported: $s"; fail=1; }
done
for s in $syms; do
  case " $(echo $want) " in *" $s "*) continue ;; esac
  case $s in mtp_*) continue ;; esac
  echo "exported but should not be: $s"; fail=1
done
# unversioned: no @ in the dynamic symbol table for our definitions
if nm -D --defined-only --with-symbol-versions "$lib" 2>/dev/null | grep -q '@'; then
  echo "versioned definitions:"; nm -D --defined-only --with-symbol-versions "$lib" | grep '@' | head; fail=1
fi
# default visibility, global functions
if readelf -W --dyn-syms "$lib" | awk '$7 != "UND" && $8 != "" && NR > 3 {print $5, $6}' | grep -v '^GLOBAL DEFAULT$' | grep -q .; then
  echo "non-global or non-default dynamic symbols:"; readelf -W --dyn-syms "$lib" | awk '$7 != "UND" && NR > 3' | grep -v 'GLOBAL DEFAULT' | head; fail=1
fi
# needed: the C library alone (and musl's, which is its own loader; a sanitizer build's runtime);
# no C++ runtime symbol
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
for n in $needed; do
  case $n in libc.so* | ld-linux* | libasan.so* | libtsan.so* | libubsan.so*) ;; *) echo "needs $n: only the C library may be loaded with it"; fail=1 ;; esac
done
if nm -D --undefined-only "$lib" | grep -E 'CXXABI|GLIBCXX|GCC_|__gxx_' | grep -q .; then
  echo "undefined C++ runtime symbols:"; nm -D --undefined-only "$lib" | grep -E 'CXXABI|GLIBCXX|GCC_|__gxx_'; fail=1
fi
[ $fail = 0 ] && echo "$(echo "$syms" | wc -l) symbols exported, all expected, unversioned; needs $(echo $needed)"
exit $fail
