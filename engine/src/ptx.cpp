#include "ptx.hpp"
#include "kiln/base/hot_path.hpp"

#include <string.h>  // memmem (a GNU extension; glibc's is much faster than a first-character scan)

#include <charconv>
#include <string>

namespace kiln::ptx {
namespace {

constexpr std::size_t kMaxParams = 4096;   // far above what any driver accepts (4 KiB of parameters)
constexpr std::size_t kMaxArray = 1 << 20;  // elements of one `.b8 name[N]` parameter

KILN_HOT bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

KILN_HOT std::string_view skip_space(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  return s;
}

/// Bytes of a PTX fundamental type (".u32", ".f64", ".b8", ".f16x2", ...); 0 when not a sized type.
KILN_HOT std::size_t type_bytes(std::string_view type) {
  if (type == ".f16x2" || type == ".bf16x2") return 4;
  if (type == ".bf16") return 2;
  if (type.size() < 3 || type.front() != '.') return 0;
  const char kind = type[1];
  if (kind != 'b' && kind != 'u' && kind != 's' && kind != 'f') return 0;
  unsigned bits = 0;
  const char* end = type.data() + type.size();
  const auto [ptr, ec] = std::from_chars(type.data() + 2, end, bits);
  if (ec != std::errc() || ptr != end) return 0;
  if (bits != 8 && bits != 16 && bits != 32 && bits != 64 && bits != 128) return 0;
  if (kind == 'f' && bits == 8) return 0;
  return bits / 8;
}

/// One declaration ".param <attributes and type> <name>[N]?": its size in bytes, or 0 if not understood.
KILN_HOT std::size_t param_bytes(std::string_view decl) {
  std::vector<std::string_view> tokens;
  for (decl = skip_space(decl); !decl.empty(); decl = skip_space(decl)) {
    std::size_t end = 0;
    while (end < decl.size() && !is_space(decl[end])) ++end;
    tokens.push_back(decl.substr(0, end));
    decl.remove_prefix(end);
  }
  if (tokens.size() < 3 || tokens.front() != ".param") return 0;
  std::size_t element = 0;
  for (std::size_t i = 1; i + 1 < tokens.size(); ++i) {
    const std::string_view t = tokens[i];
    if (t == ".align") {
      // its number, which must come before the name
      if (i + 2 >= tokens.size() || tokens[i + 1].empty() ||
          tokens[i + 1].find_first_not_of("0123456789") != std::string_view::npos) {
        return 0;
      }
      ++i;
    } else if (t == ".ptr" || t == ".global" || t == ".const" || t == ".shared" || t == ".local") {
      // pointer attributes: the parameter is still its declared type
    } else if (const std::size_t bytes = type_bytes(t); bytes != 0 && element == 0) {
      element = bytes;
    } else {
      return 0;  // an attribute or a second type this reader does not know
    }
  }
  if (element == 0) return 0;
  std::string_view name = tokens.back();
  const std::size_t open = name.find('[');
  if (open == std::string_view::npos) return name.find(']') == std::string_view::npos ? element : 0;
  if (open == 0 || name.back() != ']') return 0;
  std::size_t count = 0;
  const char* first = name.data() + open + 1;
  const char* last = name.data() + name.size() - 1;
  const auto [ptr, ec] = std::from_chars(first, last, count);
  if (ec != std::errc() || ptr != last || count == 0 || count > kMaxArray) return 0;
  return element * count;
}

}  // namespace

KILN_HOT std::optional<std::vector<std::size_t>> entry_param_sizes(std::string_view ptx, std::string_view name) {
  while (!ptx.empty() && ptx.back() == '\0') ptx.remove_suffix(1);
  if (name.empty()) return std::nullopt;
  // NVRTC writes ".entry <name>(" with nothing between; a name is never a prefix of another here
  // because the '(' must follow it.
  std::string needle = ".entry ";
  needle.append(name);
  needle.push_back('(');
  const void* found = ::memmem(ptx.data(), ptx.size(), needle.data(), needle.size());
  if (found == nullptr) return std::nullopt;
  std::string_view rest = ptx.substr(static_cast<std::size_t>(static_cast<const char*>(found) - ptx.data()) + needle.size());
  const std::size_t close = rest.find(')');
  if (close == std::string_view::npos) return std::nullopt;
  std::string_view list = rest.substr(0, close);
  std::vector<std::size_t> sizes;
  if (skip_space(list).empty()) return sizes;
  while (true) {
    const std::size_t comma = list.find(',');
    const std::size_t bytes = param_bytes(list.substr(0, comma));
    if (bytes == 0 || sizes.size() == kMaxParams) return std::nullopt;
    sizes.push_back(bytes);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return sizes;
}

}  // namespace kiln::ptx
