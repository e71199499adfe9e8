#include "compiler_probe.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <cerrno>

#include "kiln/cache/side_file.hpp"

namespace kiln::detail {
namespace {

constexpr std::string_view kMagic = "kiln-compiler-probe 1";
constexpr std::size_t kMaxProbeBytes = 64 * 1024;

/// The file the vendor's loader would take: the first existing path of the search list, as listed.
/// Empty when that cannot be known without the dynamic loader (a bare name comes first) or nothing
/// exists.
std::string first_existing(const std::vector<std::string>& search_list, struct stat& st) {
  for (const std::string& candidate : search_list) {
    if (candidate.find('/') == std::string::npos) return {};
    if (::stat(candidate.c_str(), &st) == 0) return S_ISREG(st.st_mode) ? candidate : std::string();
    if (errno != ENOENT && errno != ENOTDIR) return {};
  }
  return {};
}

/// "dev ino size mtime ctime" (nanoseconds): what changes when the file is replaced or touched.
std::string stamp_of(const struct stat& st) {
  return fmt::format("{} {} {} {}.{:09} {}.{:09}", st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec,
                     st.st_mtim.tv_nsec, st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
}

std::string file_stamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
  return stamp_of(st);
}

std::string probe_name(Vendor vendor, const std::string& library) {
  return fmt::format("{}-{:016x}.probe", to_string(vendor), XXH3_64bits(library.data(), library.size()));
}

/// Splits off the next line (without its '\n'); false at the end.
bool next_line(std::string_view& text, std::string_view& line) {
  if (text.empty()) return false;
  const std::size_t end = text.find('\n');
  line = text.substr(0, end);
  text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
  return true;
}

}  // namespace

std::optional<CompilerFacts> find_compiler_probe(const cache::Store& store, Vendor vendor,
                                                 const std::vector<std::string>& search_list) noexcept {
  try {
    struct stat library_stat {};
    const std::string library = first_existing(search_list, library_stat);
    if (library.empty()) return std::nullopt;
    const std::optional<std::string> text = cache::read_side_file(store, probe_name(vendor, library), kMaxProbeBytes);
    if (!text) return std::nullopt;

    // Grammar (one item per line): the magic; "vendor V"; "identity I"; "targets T T ..."; then one
    // "file STAMP\tPATH" per library, the first being `library`. Anything else: no probe.
    std::string_view rest(*text), line;
    if (!next_line(rest, line) || line != kMagic) return std::nullopt;
    if (!next_line(rest, line) || line != fmt::format("vendor {}", to_string(vendor))) return std::nullopt;
    CompilerFacts facts;
    if (!next_line(rest, line) || !line.starts_with("identity ") || line.size() == 9) return std::nullopt;
    facts.identity = std::string(line.substr(9));
    if (!next_line(rest, line) || !line.starts_with("targets ")) return std::nullopt;
    for (std::string_view targets = line.substr(8); !targets.empty();) {
      const std::size_t space = targets.find(' ');
      if (space != 0) facts.targets.emplace_back(targets.substr(0, space));
      targets.remove_prefix(space == std::string_view::npos ? targets.size() : space + 1);
    }
    if (facts.targets.empty()) return std::nullopt;
    std::size_t files = 0;
    while (next_line(rest, line)) {
      const std::size_t tab = line.find('\t');
      if (!line.starts_with("file ") || tab == std::string_view::npos) return std::nullopt;
      const std::string path(line.substr(tab + 1));
      // The first file is the library itself, already stat'ed; the others (HIP's comgr) are stat'ed now.
      const std::string stamp = files == 0 ? (path == library ? stamp_of(library_stat) : std::string()) : file_stamp(path);
      if (stamp.empty() || stamp != line.substr(5, tab - 5)) return std::nullopt;  // changed since the probe
      ++files;
    }
    if (files == 0) return std::nullopt;
    return facts;
  } catch (...) {
    return std::nullopt;
  }
}

bool remember_compiler_probe(const cache::Store& store, Vendor vendor, const std::vector<std::string>& search_list,
                             const vendor::Compiler& compiler, const CompilerFacts& facts) noexcept {
  try {
    struct stat library_stat {};
    const std::string library = first_existing(search_list, library_stat);
    const std::vector<LibraryInfo> libraries = compiler.libraries();
    if (library.empty() || libraries.empty()) return false;
    // Only when the compiler was loaded from that very file (the loader may have skipped it).
    struct stat loaded {};
    if (::stat(libraries.front().path.c_str(), &loaded) != 0 || loaded.st_dev != library_stat.st_dev ||
        loaded.st_ino != library_stat.st_ino) {
      return false;
    }
    if (facts.identity.empty() || facts.identity.find('\n') != std::string::npos || facts.targets.empty()) return false;
    for (const std::string& target : facts.targets) {
      if (target.empty() || target.find_first_of(" \n\t") != std::string::npos) return false;
    }
    std::string text = fmt::format("{}\nvendor {}\nidentity {}\ntargets {}\n", kMagic, to_string(vendor), facts.identity,
                                   fmt::join(facts.targets, " "));
    for (std::size_t i = 0; i < libraries.size(); ++i) {
      const std::string& path = i == 0 ? library : libraries[i].path;
      const std::string stamp = file_stamp(path);
      if (stamp.empty() || path.find_first_of("\n\t") != std::string::npos) return false;
      text += fmt::format("file {}\t{}\n", stamp, path);
    }
    return cache::write_side_file(store, probe_name(vendor, library), text);
  } catch (...) {
    return false;
  }
}

}  // namespace kiln::detail
