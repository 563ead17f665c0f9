// A C++ adapter pool is visitable: blocks a std::vector and a std::map took through
// mtpool::pool_allocator are reported by mtp_pool_visit on the pool's handle, and none after
// the containers are gone.
#include <mtpool/allocator.hpp>

#include <cstdio>
#include <map>
#include <vector>

namespace {
struct tally {
  std::size_t blocks = 0, bytes = 0;
  const void *vec = nullptr;
  bool vec_seen = false;
};
int count(void *arg, void *block, std::size_t usable, unsigned) {
  tally *t = static_cast<tally *>(arg);
  t->blocks++;
  t->bytes += usable;
  if (block == t->vec) t->vec_seen = true;
  return 0;
}
}  // namespace

int main() {
  int fails = 0;
  mtpool::pool pool("cxx-visit");
  {
    std::vector<int, mtpool::pool_allocator<int>> v{mtpool::pool_allocator<int>(pool)};
    v.resize(1000);
    typedef std::pair<const int, int> kv;
    std::map<int, int, std::less<int>, mtpool::pool_allocator<kv>> m{
        std::less<int>(), mtpool::pool_allocator<kv>(pool)};
    for (int i = 0; i < 50; i++) m[i] = i;
    tally t;
    t.vec = v.data();
    if (mtp_pool_visit(pool.get(), count, &t) != 0) fails++;
    if (!t.vec_seen) {
      std::fprintf(stderr, "the vector's block was not visited\n");
      fails++;
    }
    if (t.blocks != 51) {  // the vector's block and one node per map entry
      std::fprintf(stderr, "visited %zu blocks, want 51\n", t.blocks);
      fails++;
    }
  }
  tally t;
  if (mtp_pool_visit(pool.get(), count, &t) != 0 || t.blocks != 0) {
    std::fprintf(stderr, "visited %zu blocks after the containers went\n", t.blocks);
    fails++;
  }
  std::printf("%s\n", fails ? "FAIL" : "ok");
  return fails ? 1 : 0;
}
