#include <list>
#include <mtpool/allocator.hpp>
#include <string>

int main() {
  std::list<int, mtpool::allocator<int>> l;
  for (int i = 0; i < 1000; i++) l.push_back(i);
  long sum = 0;
  for (int v : l) sum += v;
  return sum == 499500 ? 0 : 1;
}
