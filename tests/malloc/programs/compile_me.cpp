// A file for g++ to compile (-O1) under the drop-in malloc: templates, regex, containers and
// algorithms keep cc1plus allocating.
#include <algorithm>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

template <int N>
struct Fib {
  static constexpr long value = Fib<N - 1>::value + Fib<N - 2>::value;
};
template <>
struct Fib<1> {
  static constexpr long value = 1;
};
template <>
struct Fib<0> {
  static constexpr long value = 0;
};

using Value = std::variant<int, double, std::string, std::vector<int>>;

struct Printer {
  std::ostream &os;
  void operator()(int v) const { os << "int " << v; }
  void operator()(double v) const { os << "double " << v; }
  void operator()(const std::string &v) const { os << "string " << v; }
  void operator()(const std::vector<int> &v) const {
    os << "vector " << std::accumulate(v.begin(), v.end(), 0);
  }
};

int main(int argc, char **argv) {
  std::map<std::string, std::unordered_map<int, std::set<std::string>>> m;
  std::regex word(R"((\w+)@(\w+)\.com)");
  std::string text = "alice@example.com bob@test.com carol@mail.com";
  for (std::sregex_iterator it(text.begin(), text.end(), word), end; it != end; ++it)
    m[(*it)[2]][argc].insert((*it)[1]);
  std::vector<Value> values{1, 2.5, std::string("x"), std::vector<int>{1, 2, 3}};
  for (const auto &v : values) std::visit(Printer{std::cout}, v), std::cout << '\n';
  std::vector<std::tuple<int, std::string, double>> rows;
  for (int i = 0; i < argc * 10; i++) rows.emplace_back(i, std::to_string(i), i * 0.5);
  std::sort(rows.begin(), rows.end(), std::greater<>());
  std::ostringstream os;
  for (auto &[a, b, c] : rows) os << a << b << c;
  std::function<long(int)> f = [&](int n) { return n < 2 ? n : f(n - 1) + f(n - 2); };
  std::cout << m.size() << ' ' << os.str().size() << ' ' << Fib<40>::value << ' ' << f(argc)
            << ' ' << argv[0][0] << '\n';
  auto shared = std::make_shared<std::map<int, std::string>>();
  (*shared)[1] = "one";
  return static_cast<int>(shared->size()) - 1;
}
