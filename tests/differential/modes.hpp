#pragma once
// The ways the differential runner compiles a case through kiln (every speed feature on and off), each
// giving one Outcome per compile it makes, to be compared with the bare compiler's bytes.
//   fresh            a new empty cache at each step (first, so that the others can be told apart from it).
//   warm-pch-lean, warm-pch-full, warm-nopch-lean, warm-nopch-full
//                    KILN_PCH and KILN_LEAN_HEADERS on/off; one cache per mode kept across the case's steps,
//                    a new engine (a new process's view) at each step: after an edit the cache is warm and
//                    must not serve the old binary. (HIP cases: warm-lean and warm-full; PCH is NVRTC's.)
//   second-process   this program run again on the case (--child) over the first warm mode's cache: the
//                    dependency manifest and the disk entry as another process finds them.
//   siblings-first   NVIDIA cases with sibling kernels (a header set past the PCH threshold): the siblings
//                    and then the case in one engine over a new cache, PCH on, so that the lane makes the PCH
//                    (and hoists a prefix that ends in includes) with the siblings and uses it for the case.
//   stored-pch       NVIDIA cases with sibling kernels: the siblings in one process over a new cache (the second
//                    makes the set's PCH and the cache keeps it), then the case in another process, which uses that
//                    stored PCH (engine/src/lanes/nvrtc_pch_store.hpp): a PCH made by one process, another's bytes.
//   fetched          a Redis remote: an engine over an empty cache compiles and publishes (the manifest and
//                    the entry), then another over another empty cache fetches both; both compared. The remote
//                    is kept across steps and cases, so after an edit the remote is warm too.
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bare_rtc.hpp"
#include "corpus.hpp"

namespace kiln::differential {

/// A kernel source of a case: the case's own or a sibling.
struct Kernel {
  std::string name;
  std::string text;
};

/// One compile through kiln.
struct Outcome {
  enum Kind { compiled, refused, failed } kind = failed;  ///< refused: a ConfigError (kiln's own refusal)
  std::size_t kernel = 0;                                 ///< into the request's kernels
  std::vector<std::byte> bytes;
  std::string origin;   ///< where kiln says the binary came from
  std::string key;      ///< the entry's key
  std::string message;  ///< refused/failed: the error
};

/// A local Redis for the fetched mode (url empty, `missing` saying why, when there is none).
struct Remote {
  std::string url;
  std::string missing;
  std::shared_ptr<void> server;
};

/// The bare compilers and the remote the runner shares among cases.
struct Bare {
  std::unique_ptr<test::BareCompiler> nvrtc;
  std::unique_ptr<test::BareCompiler> hiprtc;
  std::string hip_missing;  ///< why the AMD cases are skipped
  Remote remote;
};

struct ModeSpec {
  enum Kind { warm, fresh, second_process, siblings_first, stored_pch, fetched };
  std::string name;
  Kind kind = warm;
  bool pch = true;
  bool lean = true;
  std::string cache;  ///< warm and second-process: the cache folder's name under the case's home
};

/// What a mode compiles at one step.
struct Request {
  const Case& c;
  const std::vector<std::string>& options;  ///< placed
  const std::vector<Kernel>& kernels;       ///< [0] the case, then its siblings
  std::filesystem::path home;               ///< the case's folder (caches live here)
  std::size_t step = 0;
};

/// The modes for a case, in the order they run (second-process after the warm mode whose cache it reads).
std::vector<ModeSpec> modes_for(const Case& c, const Remote& remote);
/// The modes a mode needs to run before it in a step (fresh; and for second-process, its warm mode).
std::vector<std::string> mode_needs(const std::string& mode);
/// One line saying what a mode is.
std::string mode_description(const std::string& mode);

std::vector<Outcome> run_mode(const ModeSpec& mode, const Request& request, const Remote& remote);

/// Starts a redis-server under `dir` when the build has hiredis and the machine has the server.
Remote start_remote(const std::filesystem::path& dir);

/// The second process's side: `--child <request.json> <result prefix>`.
int child_main(int argc, char** argv);

}  // namespace kiln::differential
