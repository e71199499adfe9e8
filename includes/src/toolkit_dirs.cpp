// The include folders of a compiler's toolkit (--toolkit-includes): found from the compiler library's
// own path, so the headers a compile gets belong to the compiler the key names.
#include <system_error>

#include <fmt/format.h>

#include "paths.hpp"
#include "resolve.hpp"

namespace kiln::cache::detail {
namespace {

bool is_file(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

bool is_folder(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

/// Candidate toolkit include folders for a library folder: <root>/include for <root>/lib,
/// <root>/lib64, <root>/lib/<multiarch triple> and <root>/targets/<triple>/lib (whose own include
/// folder is tried second).
std::vector<std::filesystem::path> include_candidates(const std::filesystem::path& library_dir) {
  std::vector<std::filesystem::path> out;
  const std::string name = library_dir.filename().string();
  const std::filesystem::path parent = library_dir.parent_path();
  if (name == "lib" || name == "lib64") {
    out.push_back(parent / "include");
    if (parent.parent_path().filename() == "targets") {
      out.insert(out.begin(), parent.parent_path().parent_path() / "include");
    }
  } else if (name.find("-linux-") != std::string::npos && parent.filename() == "lib") {
    out.push_back(parent.parent_path() / "include");  // Debian multiarch: /usr/lib/x86_64-linux-gnu
  }
  return out;
}

}  // namespace

std::vector<std::filesystem::path> toolkit_include_dirs(const std::filesystem::path& compiler_library) {
  const std::string file = compiler_library.filename().string();
  const bool cuda = file.starts_with("libnvrtc");
  const bool hip = file.starts_with("libamdhip64") || file.starts_with("libhiprtc");
  if (!cuda && !hip) {
    throw IncludeError(
        fmt::format("--toolkit-includes: '{}' is not an NVRTC or HIPRTC library", compiler_library.string()));
  }
  const std::filesystem::path lexical(normalize(std::filesystem::absolute(compiler_library).string()));
  std::vector<std::filesystem::path> candidates = include_candidates(lexical.parent_path());
  // The library may be reached through a link from outside its toolkit (/usr/lib/libnvrtc.so ->
  // /opt/cuda/lib64/...): its real folder is tried after the one the path spells.
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::canonical(lexical, ec);
  if (!ec && real.parent_path() != lexical.parent_path()) {
    for (std::filesystem::path& c : include_candidates(real.parent_path())) candidates.push_back(std::move(c));
  }
  for (const std::filesystem::path& include : candidates) {
    if (cuda && (is_file(include / "cuda_runtime.h") || is_file(include / "cuda_fp16.h"))) {
      std::vector<std::filesystem::path> out = {include};
      if (is_folder(include / "cccl")) out.push_back(include / "cccl");
      return out;
    }
    if (hip && is_file(include / "hip" / "hip_runtime.h")) return {include};
  }
  if (candidates.empty()) {
    throw IncludeError(
        fmt::format("--toolkit-includes: cannot tell the toolkit folder of the compiler library '{}' "
                    "(expected it under <toolkit>/lib, lib64 or targets/<triple>/lib)",
                    compiler_library.string()));
  }
  std::string tried;
  for (const std::filesystem::path& include : candidates) {
    if (!tried.empty()) tried += ", ";
    tried += include.string();
  }
  throw IncludeError(fmt::format("--toolkit-includes: the toolkit folder of '{}' lacks its headers ({} not found in {})",
                                compiler_library.string(), cuda ? "cuda_runtime.h or cuda_fp16.h" : "hip/hip_runtime.h",
                                tried));
}

}  // namespace kiln::cache::detail
