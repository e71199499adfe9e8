#include "kiln/options.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <span>

#include "kiln/base/hot_path.hpp"
#include "kiln/error.hpp"
#include "kiln/tooling/targets.hpp"
#include "vendor_table.hpp"

namespace kiln {
namespace {

using detail::Spelling;

constexpr std::array<std::string_view, 6> kTargetFlags = {"-arch", "--gpu-architecture", "--offload-arch", "-march",
                                                          "-mcpu", "--cuda-gpu-arch"};

const Spelling* find_spelling(std::span<const Spelling> table, std::string_view option) {
  for (const Spelling& s : table) {
    if (s.prefix ? option.starts_with(s.flag) : option == s.flag) return &s;
  }
  return nullptr;
}

std::string_view compiler_name(Vendor v) { return detail::vendor_row(v).compiler_name; }

/// Throws ConfigError when `bare` (a flag without its leading dashes) asks a compiler for another kind
/// of output than the target's (LTO-IR, relocatable code, offload bitcode): kiln stores what kind a
/// binary is, so it must be the one asking. `option` is the option as given, for the message.
void refuse_output_flag(std::string_view option, std::string_view bare) {
  using Names = std::initializer_list<std::string_view>;
  const auto named = [&](Names exact, Names prefixes) {
    return std::any_of(exact.begin(), exact.end(), [&](std::string_view e) { return bare == e; }) ||
           std::any_of(prefixes.begin(), prefixes.end(), [&](std::string_view p) { return bare.starts_with(p); });
  };
  if (named({"dc", "device-c", "dlto", "dlink-time-opt", "gen-opt-lto"},
            {"rdc", "relocatable-device-code", "dlto="})) {
    throw ConfigError(fmt::format(
        "bad option '{}': it changes what kind of output NVRTC gives, which kiln must know to cache and describe "
        "the binary; ask for LTO-IR with an lto_XY target (e.g. \"lto_90\") and for relocatable code with "
        "--relocatable-device-code",
        option));
  }
  if (named({"fgpu-rdc", "emit-llvm"}, {"flto", "foffload-lto"})) {
    throw ConfigError(detail::hip_relocatable_refusal(fmt::format("bad option '{}'", option)));
  }
}

bool valid_macro_name(std::string_view name) {
  if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

}  // namespace

Options::Options(std::initializer_list<std::string_view> options) {
  for (std::string_view option : options) parse_one(option);
  refresh();
}

Options::Options(const std::vector<std::string>& options) {
  for (const std::string& option : options) parse_one(option);
  refresh();
}

Options& Options::define(std::string_view name, std::string_view value) {
  if (!valid_macro_name(name)) throw ConfigError(fmt::format("invalid macro name '{}'", name));
  m_defines[std::string(name)] = std::string(value);
  refresh();
  return *this;
}

void Options::parse_one(std::string_view option) {
  if (option.empty()) throw ConfigError("empty compile option");
  if (option == "--fast-math") { m_fast_math = true; return; }
  if (option == "--line-info") { m_line_info = true; return; }
  if (option == "--device-debug") { m_device_debug = true; return; }
  if (option == "--no-fma") { m_no_fma = true; return; }
  if (option == "--relocatable-device-code" || option == "-rdc" || option == "--relocatable-device-code=true" ||
      option == "-rdc=true") {
    m_relocatable = true;
    return;
  }
  if (option == "--relocatable-device-code=false" || option == "-rdc=false") {
    m_relocatable = false;
    return;
  }
  if (option.starts_with("--max-registers=")) {
    const std::string_view digits = option.substr(16);
    int value = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (ec != std::errc() || end != digits.data() + digits.size() || value < 16 || value > 255) {
      throw ConfigError(fmt::format("bad option '{}': --max-registers takes a number from 16 to 255", option));
    }
    m_max_registers = value;
    return;
  }
  if (option.starts_with("-std=")) {
    const std::string_view standard = option.substr(5);
    if (standard != "c++17" && standard != "c++20") {
      throw ConfigError(fmt::format("bad option '{}': kiln supports -std=c++17 and -std=c++20", option));
    }
    m_std = std::string(standard);
    return;
  }
  if (option.starts_with("-D") || option.starts_with("-U")) {
    const bool undefine = option[1] == 'U';
    std::string_view body = option.substr(2);
    const std::size_t equals = body.find('=');
    const std::string_view name = body.substr(0, equals);
    if (!valid_macro_name(name) || (undefine && equals != std::string_view::npos)) {
      throw ConfigError(fmt::format("bad option '{}': expected -DNAME, -DNAME=VALUE or -UNAME", option));
    }
    if (undefine) {
      m_defines[std::string(name)] = std::nullopt;
    } else {
      m_defines[std::string(name)] = equals == std::string_view::npos ? std::string() : std::string(body.substr(equals + 1));
    }
    return;
  }
  for (const detail::VendorRow& row : detail::vendor_rows()) {
    const std::string_view prefix = row.options.only_prefix;
    const Vendor vendor = row.vendor;
    if (option.starts_with(prefix)) {
      const std::string_view flag = option.substr(prefix.size());
      if (flag.empty()) throw ConfigError(fmt::format("bad option '{}': nothing after '='", option));
      // Include folders go through kiln's resolver, which knows what a compile read; a folder or file
      // handed to the compiler directly would let it read headers the cache key does not name. Matched
      // with the leading dashes dropped: the compilers take most of these with one dash or two.
      const std::string_view bare = flag.substr(std::min(flag.find_first_not_of('-'), flag.size()));
      refuse_output_flag(option, bare);
      // NVRTC checks a precompiled header against the flags and the source's leading directives, not
      // against the bytes of the headers handed in memory: a PCH it made from other bytes under the same
      // header name would give a stale binary. kiln runs NVRTC's PCH itself, one folder per header set.
      if (bare == "pch" || bare.starts_with("pch-") || bare.starts_with("use-pch") ||
          bare.starts_with("create-pch") || bare.starts_with("instantiate-templates-in-pch")) {
        throw ConfigError(fmt::format(
            "bad option '{}': kiln runs NVRTC's precompiled headers itself, so that no compile can reuse a "
            "precompiled header made from other bytes of a header (on by default for header-heavy requests, "
            "KILN_PCH=0 turns it off); drop the flag",
            option));
      }
      for (const std::string_view reading_flag :
           {"I", "include", "pre-include", "isystem", "system-include", "idirafter", "iquote", "imacros", "iprefix",
            "iwithprefix", "isysroot", "sysroot", "resource-dir", "Xclang",
            "cuda-path", "hip-path", "rocm-path", "rocm-device-lib-path", "hip-device-lib"}) {
        if (bare.starts_with(reading_flag)) {
          throw ConfigError(fmt::format(
              "bad option '{}': kiln resolves includes itself and hands the compiler the headers in memory, so the "
              "compiler may open no file of its own; give include folders to kiln as -I DIR (and #include a forced "
              "header in the source)",
              option));
        }
      }
      m_raw.push_back({vendor, std::string(flag), true});
      return;
    }
  }
  for (std::string_view target_flag : kTargetFlags) {
    if (option.starts_with(target_flag)) {
      throw ConfigError(fmt::format(
          "option '{}' names a target; pass the target separately (e.g. \"sm_90\" or \"gfx90a\"), not as an option",
          option));
    }
  }
  if (option == "--toolkit-includes") { m_toolkit_includes = true; return; }
  if (option == "--no-default-device") { m_no_default_device = true; return; }
  if (option.starts_with("-I") || option.starts_with("--include-path")) {
    std::string_view dir;
    if (option.starts_with("--include-path=")) {
      dir = option.substr(15);
    } else if (option.starts_with("-I")) {
      // "-IDIR" or "-I DIR" (the CLI's two argv items joined): blanks between -I and DIR are not
      // part of the folder name.
      dir = option.substr(2);
      dir.remove_prefix(std::min(dir.find_first_not_of(" \t"), dir.size()));
    } else {
      throw ConfigError(fmt::format("bad option '{}': expected --include-path=DIR", option));
    }
    if (dir.empty()) throw ConfigError(fmt::format("bad option '{}': the include folder is empty", option));
    // One option per line in the canonical text: a line break inside a folder name could make two
    // different option lists read the same.
    if (dir.find_first_of(std::string_view("\n\r\0", 3)) != std::string_view::npos) {
      throw ConfigError(fmt::format("bad option '{}': the include folder contains a line break or NUL", option));
    }
    m_include_dirs.emplace_back(dir);
    return;
  }
  refuse_output_flag(option, option.substr(std::min(option.find_first_not_of('-'), option.size())));
  if (option == "-default-device" || option == "--device-as-default-execution-space") {
    throw ConfigError(fmt::format("option '{}' is added by kiln itself (--no-default-device leaves it out)", option));
  }
  for (const detail::VendorRow& row : detail::vendor_rows()) {
    if (find_spelling(row.options.own, option) != nullptr) {
      m_raw.push_back({row.vendor, std::string(option), false});
      return;
    }
  }
  throw ConfigError(
      fmt::format("unknown option '{}': use a portable option (--fast-math, --line-info, --device-debug, --no-fma, "
                  "--max-registers=N, --relocatable-device-code, -std=, -D, -U, -I, --toolkit-includes, "
                  "--no-default-device) or pass a compiler's own flag with -Xcuda=FLAG / -Xhip=FLAG",
                  option));
}

std::vector<std::string> Options::portable() const {
  std::vector<std::string> out;
  if (m_fast_math) out.emplace_back("--fast-math");
  if (m_line_info) out.emplace_back("--line-info");
  if (m_device_debug) out.emplace_back("--device-debug");
  if (m_no_fma) out.emplace_back("--no-fma");
  if (m_max_registers) out.push_back(fmt::format("--max-registers={}", *m_max_registers));
  if (m_relocatable) out.emplace_back("--relocatable-device-code");
  if (m_std != "c++17") out.push_back("-std=" + m_std);
  for (const auto& [name, value] : m_defines) {
    if (!value) out.push_back("-U" + name);
    else if (value->empty()) out.push_back("-D" + name);
    else out.push_back(fmt::format("-D{}={}", name, *value));
  }
  for (const RawFlag& raw : m_raw) {
    if (raw.explicit_prefix) out.push_back(fmt::format("-X{}={}", to_string(raw.vendor), raw.flag));
    else out.push_back(raw.flag);
  }
  // Last, so option sets without include folders keep the canonical text they always had.
  for (const std::string& dir : m_include_dirs) {
    // "-I DIR" drops the blanks before DIR: a folder starting with one keeps the spelling that keeps them.
    if (dir.front() == ' ' || dir.front() == '\t') out.push_back("--include-path=" + dir);
    else out.push_back("-I" + dir);
  }
  if (m_toolkit_includes) out.emplace_back("--toolkit-includes");
  if (m_no_default_device) out.emplace_back("--no-default-device");
  return out;
}

void Options::refresh() {
  std::string text = "options/1\n";
  for (const std::string& option : portable()) {
    text += option;
    text += '\n';
  }
  m_canonical = std::move(text);
  m_canonical_hash = detail::fnv1a64(m_canonical);
}

KILN_HOT const std::string& Options::canonical() const { return m_canonical; }

KILN_HOT std::vector<std::string> Options::vendor_flags(Vendor vendor) const {
  const detail::VendorRow* row = detail::find_vendor_row(vendor);
  if (row == nullptr) throw ConfigError("options: no vendor to translate for");
  const detail::OptionSpellings& spelled = row->options;  // the vendor table's (vendor_table.cpp)
  std::vector<std::string> flags;
  flags.push_back("-std=" + m_std);
  if (m_fast_math) flags.emplace_back(spelled.fast_math);
  if (m_line_info) flags.emplace_back(spelled.line_info);
  if (m_device_debug) flags.emplace_back(spelled.device_debug);
  if (m_no_fma) flags.emplace_back(spelled.no_fma);
  if (m_max_registers) {
    if (spelled.max_registers.empty()) {
      throw ConfigError(
          fmt::format("option --max-registers has no {} equivalent (use it for CUDA targets only, or "
                      "-Xcuda=-maxrregcount=N)",
                      row->compiler_name));
    }
    flags.push_back(fmt::format("{}{}", spelled.max_registers, *m_max_registers));
  }
  if (m_relocatable) {
    if (spelled.relocatable.empty()) {
      throw ConfigError(spelled.relocatable_refusal != nullptr
                            ? spelled.relocatable_refusal("option --relocatable-device-code")
                            : fmt::format("option --relocatable-device-code has no {} equivalent", row->compiler_name));
    }
    flags.emplace_back(spelled.relocatable);  // requests.cpp drops it again for LTO-IR, which is relocatable anyway
  }
  for (const auto& [name, value] : m_defines) {
    if (!value) flags.push_back("-U" + name);
    else if (value->empty()) flags.push_back("-D" + name);
    else flags.push_back(fmt::format("-D{}={}", name, *value));
  }
  for (const RawFlag& raw : m_raw) {
    if (raw.vendor == vendor) {
      flags.push_back(raw.flag);
    } else if (!raw.explicit_prefix) {
      const Spelling* s = find_spelling(detail::vendor_row(raw.vendor).options.own, raw.flag);
      std::string hint = (s != nullptr && !s->portable.empty()) ? fmt::format("write {} (portable)", s->portable)
                                                               : std::string("there is no portable spelling");
      throw ConfigError(fmt::format("option '{}' is a {} flag and this request compiles with {}: {}, or pass it as "
                                    "-X{}={} to give it to {} only",
                                    raw.flag, compiler_name(raw.vendor), compiler_name(vendor), hint,
                                    to_string(raw.vendor), raw.flag, compiler_name(raw.vendor)));
    }
  }
  return flags;
}

}  // namespace kiln
