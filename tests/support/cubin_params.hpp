#pragma once
// The parameters a CUBIN declares for a kernel, read from its .nv.info.<name> section: the
// EIATTR_KPARAM_INFO records (attribute 0x17) give each parameter's ordinal, offset, and its size in
// bits 18-31 of the last word. An independent reading of what the driver loads, for tests that check
// kiln's view of a kernel's parameters (PTX declarations, HIP metadata) against the CUBIN's.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "elf.hpp"
#include "kiln/engine.hpp"

namespace kiln::test {

/// nullopt when the CUBIN does not parse or has no .nv.info section for `kernel`.
inline std::optional<std::vector<ParamInfo>> cubin_params(std::span<const std::byte> cubin, const std::string& kernel) {
  auto parsed = elf::parse(cubin);
  if (!std::holds_alternative<elf::Image>(parsed)) return std::nullopt;
  const elf::Section* info = elf::find_section(std::get<elf::Image>(parsed), ".nv.info." + kernel);
  if (info == nullptr) return std::nullopt;
  std::map<std::uint16_t, ParamInfo> by_ordinal;
  const std::span<const std::byte> d = info->data;
  for (std::size_t at = 0; at + 4 <= d.size();) {
    const auto format = std::to_integer<std::uint8_t>(d[at]);
    const auto attribute = std::to_integer<std::uint8_t>(d[at + 1]);
    std::uint16_t value = 0;
    std::memcpy(&value, d.data() + at + 2, 2);
    at += 4;
    if (format != 0x04) continue;  // only EIFMT_SVAL records carry a payload of `value` bytes
    if (attribute == 0x17 && value >= 12 && at + 12 <= d.size()) {
      std::uint16_t ordinal = 0, offset = 0;
      std::uint32_t flags = 0;
      std::memcpy(&ordinal, d.data() + at + 4, 2);
      std::memcpy(&offset, d.data() + at + 6, 2);
      std::memcpy(&flags, d.data() + at + 8, 4);
      by_ordinal[ordinal] = {offset, (flags >> 18) & 0x3fff};
    }
    at += value;
  }
  std::vector<ParamInfo> out;
  for (const auto& [ordinal, p] : by_ordinal) out.push_back(p);
  return out;
}

}  // namespace kiln::test
