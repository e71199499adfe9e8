#pragma once
// The differential corpus as the runner reads it (tests/differential/generate.py writes it; its docstring
// gives the format): cases, their trees and edit steps, '@ROOT@' placed, and the flags a user gives the
// bare compiler for the request kiln gets.
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::differential {

/// One file operation of a case's tree: write (with `pad` bytes of comment lines appended), remove, mkdir.
struct FileOp {
  std::string op;
  std::string path;  ///< under the case's tree
  std::string text;
  std::size_t pad = 0;
};

struct Case {
  nlohmann::json json;  ///< as the corpus holds it (a failure's repro writes it back)
  std::string id;
  int index = 0;
  int seed = 0;
  std::vector<std::string> features;
  std::string vendor;  ///< "cuda" or "hip"
  std::string target;
  std::string source_name;
  std::string source;
  std::vector<std::string> siblings;  ///< kernels after the same includes (compiled first in one process)
  std::vector<std::string> options;   ///< kiln's portable options
  std::vector<FileOp> files;
  std::vector<std::vector<FileOp>> steps;  ///< the edits, applied one step at a time
};

/// Reads a corpus file. Throws std::runtime_error naming what is wrong.
std::vector<Case> load_corpus(const std::filesystem::path& path);

/// Runs the generator (/usr/bin/python3 generate.py) with `arguments`, writing to `out`. Throws with its
/// output when it fails.
void generate(const std::filesystem::path& out, const std::string& arguments);

/// `text` with every '@ROOT@' replaced by `root`.
std::string placed(std::string_view text, const std::filesystem::path& root);

/// Applies `ops` to the tree at `root`.
void apply(const std::vector<FileOp>& ops, const std::filesystem::path& root);

/// One line naming what a step's operations do ("write inc/a/f_v.h, remove inc/b/x.h").
std::string describe(const std::vector<FileOp>& ops);

/// The flags a user gives the bare compiler for the request kiln compiles: the same language flags and
/// macros kiln's request adds (engine/src/requests.cpp: -std, the -D/-U, the arch, NVRTC's -default-device,
/// -DKILN_WARP_SIZE), and the include folders as -I, which the bare compiler reads from the disk itself.
std::vector<std::string> bare_flags(const Case& c, const std::filesystem::path& root);

/// Writes `bytes` to `path` (creating its folder).
void write_file(const std::filesystem::path& path, std::string_view bytes);

}  // namespace kiln::differential
