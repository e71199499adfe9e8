// resolve_bench: kiln's own #include resolution (includes/src/resolve.hpp) of one source over include
// folders, in one process, the way a burst of compiles over one tree sees it: the first resolve reads
// and scans every header; the later ones find each file in the HeaderFileCache. Each later resolve is
// timed twice over: stat'ing every path itself, and with the stat memo answering (what a burst of
// compiles less than the memo's time apart gets). No compiler, no GPU.
//   resolve_bench [--runs N] [--source FILE] DIR...
// Without --source: a CUB + libcu++ kernel over the CUDA toolkit's folders (DIRs default to
// /usr/local/cuda/include/cccl and /usr/local/cuda/include).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/includes/dep_manifest.hpp"
#include "resolve.hpp"
#include "stat_memo.hpp"

namespace {

const char* kDefaultSource =
    "#include <cub/block/block_reduce.cuh>\n"
    "#include <cuda/std/tuple>\n"
    "#include <cuda/std/complex>\n"
    "extern \"C\" __global__ void k() {}\n";

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 30;
  std::string source = kDefaultSource;
  std::vector<std::filesystem::path> folders;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--runs" || arg == "--source") && i + 1 >= argc) {
      fmt::print(stderr, "resolve_bench: {} needs a value\n", arg);
      return 2;
    }
    if (arg == "--runs") {
      runs = std::atoi(argv[++i]);
    } else if (arg == "--source") {
      std::ifstream in(argv[++i], std::ios::binary);
      if (!in) {
        fmt::print(stderr, "resolve_bench: cannot read {}\n", argv[i]);
        return 2;
      }
      std::ostringstream text;
      text << in.rdbuf();
      source = text.str();
    } else if (!arg.empty() && arg[0] == '-') {
      fmt::print(stderr, "usage: resolve_bench [--runs N] [--source FILE] DIR...\n");
      return 2;
    } else {
      folders.emplace_back(arg);
    }
  }
  if (runs < 2) {
    fmt::print(stderr, "resolve_bench: --runs >= 2\n");
    return 2;
  }
  if (folders.empty()) folders = {"/usr/local/cuda/include/cccl", "/usr/local/cuda/include"};
  try {
    namespace includes = kiln::cache::detail;
    includes::HeaderFileCache files;
    kiln::cache::ManifestConfig config;  // no root: memory-only manifests, whose stat memo serves the resolves
    const kiln::cache::DependencyManifests manifests(config);
    includes::StatMemo& memo = includes::ManifestsAccess::stat_memo(manifests);
    const auto resolve = [&](bool with_memo, includes::ResolvedIncludes* out) {
      includes::IncludeInput input;
      input.source_name = "bench.cu";
      input.source_text = source;
      input.folders = folders;
      input.file_cache = &files;
      input.stat_memo = with_memo ? &memo : nullptr;
      const auto start = std::chrono::steady_clock::now();
      *out = includes::resolve_includes(input);
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    };
    includes::ResolvedIncludes r;
    const double first = resolve(true, &r);
    std::size_t bytes = r.compiler_source.size();
    for (const includes::CompilerHeader& h : r.compiler_headers) bytes += h.text.size();
    std::vector<double> stat_each, memo_answers;
    for (int i = 0; i < runs; ++i) {
      stat_each.push_back(resolve(false, &r));
      memo_answers.push_back(resolve(true, &r));
    }
    fmt::print("resolve_bench: {} header(s), {} path(s) probed absent, {:.1f} MB handed to the compiler\n",
               r.dependencies.headers.size(), r.dependencies.absent.size(), bytes / 1e6);
    fmt::print("  first resolve (reads and scans every header): {:.2f} ms\n", first);
    fmt::print("  later resolves, median of {}: {:.2f} ms stat'ing every path, {:.2f} ms with the stat memo\n", runs,
               median(stat_each), median(memo_answers));
  } catch (const kiln::cache::detail::IncludeError& e) {
    fmt::print(stderr, "resolve_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
