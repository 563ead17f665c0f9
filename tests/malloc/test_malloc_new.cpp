// The 20 replaceable operator new/delete forms of the drop-in malloc: each returns (or frees) a
// block of mtpool's default pool; new runs the new-handler loop and throws std::bad_alloc; the
// nothrow forms return nullptr.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "malloc_util.h"

namespace {

int handler_calls;
void give_up_handler() {  // the second call gives up: no handler left
  if (++handler_calls >= 2) std::set_new_handler(nullptr);
}
void throwing_handler() {
  ++handler_calls;
  throw std::bad_alloc();
}

std::size_t huge() {
  volatile std::size_t v = std::size_t(1) << 62;
  return v;
}

void test_forms() {
  const std::align_val_t al{256};
  // The purge thread starts once enough waits to be purged (a large mapping of 1 MiB does); its
  // creation allocates (the thread's TLS array) and would be counted below: start it first.
  ::operator delete(::operator new(8 << 20));
  std::size_t before = mu_blocks_in_use();
  void *p[8];
  p[0] = ::operator new(24);
  p[1] = ::operator new[](100);
  p[2] = ::operator new(33, std::nothrow);
  p[3] = ::operator new[](0, std::nothrow);
  p[4] = ::operator new(50, al);
  p[5] = ::operator new[](5000, al);
  p[6] = ::operator new(70, al, std::nothrow);
  p[7] = ::operator new[](1 << 20, al, std::nothrow);
  for (int i = 0; i < 8; i++) CHECK(mu_owned(p[i]));
  for (int i = 4; i < 8; i++) CHECK(reinterpret_cast<std::uintptr_t>(p[i]) % 256 == 0);
  std::size_t with = mu_blocks_in_use();
  CHECK(with >= before + 8);
  ::operator delete(p[0], std::size_t(24));
  ::operator delete[](p[1], std::size_t(100));
  ::operator delete(p[2], std::nothrow);
  ::operator delete[](p[3], std::nothrow);
  ::operator delete(p[4], std::size_t(50), al);
  ::operator delete[](p[5], std::size_t(5000), al);
  ::operator delete(p[6], al, std::nothrow);
  ::operator delete[](p[7], al, std::nothrow);
  CHECK(mu_blocks_in_use() == with - 8);
  before = mu_blocks_in_use();
  // the unsized forms
  void *a = ::operator new(10), *b = ::operator new[](10), *c = ::operator new(10, al),
       *d = ::operator new[](10, al);
  CHECK(mu_owned(a) && mu_owned(b) && mu_owned(c) && mu_owned(d));
  ::operator delete(a);
  ::operator delete[](b);
  ::operator delete(c, al);
  ::operator delete[](d, al);
  CHECK(mu_blocks_in_use() == before);
  // new(0) gives distinct blocks
  void *z1 = ::operator new(0), *z2 = ::operator new(0);
  CHECK(mu_owned(z1) && mu_owned(z2) && z1 != z2);
  ::operator delete(z1);
  ::operator delete(z2);
  // the expressions the compiler emits
  struct alignas(64) Over {
    char c[100];
  };
  Over *o = new Over[3];
  CHECK(mu_owned(o) && reinterpret_cast<std::uintptr_t>(o) % 64 == 0);
  delete[] o;
  auto *i = new int(5);
  CHECK(mu_owned(i));
  delete i;
  CHECK(mu_blocks_in_use() == before);
}

void test_out_of_memory() {
  // throwing forms: the handler runs until it gives up, then std::bad_alloc
  bool threw = false;
  handler_calls = 0;
  std::set_new_handler(give_up_handler);
  try {
    void *p = ::operator new(huge());
    ::operator delete(p);
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  CHECK(threw && handler_calls == 2);
  threw = false;
  try {
    void *p = ::operator new[](huge(), std::align_val_t{64});
    ::operator delete[](p);
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  CHECK(threw);
  // nothrow forms: nullptr, also when the handler throws
  handler_calls = 0;
  std::set_new_handler(throwing_handler);
  CHECK(::operator new(huge(), std::nothrow) == nullptr && handler_calls == 1);
  CHECK(::operator new[](huge(), std::nothrow) == nullptr);
  CHECK(::operator new(huge(), std::align_val_t{128}, std::nothrow) == nullptr);
  CHECK(::operator new[](huge(), std::align_val_t{128}, std::nothrow) == nullptr);
  CHECK(handler_calls == 4);
  std::set_new_handler(nullptr);
  CHECK(::operator new(huge(), std::nothrow) == nullptr);
}

}  // namespace

int main() {
  mu_init();
  RUN(test_forms);
  RUN(test_out_of_memory);
  DONE();
}
