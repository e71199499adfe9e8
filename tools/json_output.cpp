#include "json_output.hpp"

#include <unistd.h>

#include <algorithm>
#include <iostream>

namespace kiln::cli {

void append_json_string(std::string& out, std::string_view text) {
  const bool plain = std::all_of(text.begin(), text.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x80 && c != '"' && c != '\\';
  });
  if (plain) {
    out += '"';
    out += text;
    out += '"';
    return;
  }
  // Rare: let the JSON library escape it (it validates UTF-8 and replaces what is invalid).
  out += json(std::string(text)).dump(-1, ' ', false, json::error_handler_t::replace);
}

void print_json(const json& document) {
  const bool pretty = ::isatty(STDOUT_FILENO) != 0;
  std::cout << document.dump(pretty ? 2 : -1, ' ', false, json::error_handler_t::replace) << '\n';
}

}  // namespace kiln::cli
