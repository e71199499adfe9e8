// NVRTC's automatic precompiled headers through the NVRTC lane (nvrtc_pch.hpp), on a machine with no GPU:
// a PCH is made and then used, the binaries are the ones a compile without PCH gives, a header handed
// with other bytes never meets an old PCH, a heap too small is grown, KILN_PCH=0 turns it off, threads.
// Needs NVRTC 12.8 or later; skips with the reason otherwise.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bare_rtc.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "kiln/includes/include_home.hpp"
#include "lanes/lane.hpp"
#include "lanes/nvrtc_pch.hpp"
#include "lanes/nvrtc_pch_store.hpp"
#include "test_support.hpp"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

/// A header of `count` function templates: big enough (> pch::kMinHeaderBytes) for the lane to use PCH.
std::string heavy_header(int count, int flavour) {
  std::string text = "#pragma once\n";
  for (int i = 0; i < count; ++i) {
    text += fmt::format("template <class T> __device__ T f{}(T x) {{ return x * {} + {}; }}\n", i, i, flavour);
  }
  text += fmt::format("#define FLAVOUR {}\n", flavour);
  return text;
}

const std::string kHeavy = heavy_header(6000, 1);

/// The lane reads KILN_PCH, KILN_PCH_HEAP and TMPDIR when it is loaded.
class ScopedEnv : public test::ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : test::ScopedEnv(name, value.c_str()) {}
};

std::unique_ptr<vendor::Compiler> load(bool pch) {
  ScopedEnv setting("KILN_PCH", pch ? "1" : "0");
  return vendor::load_nvrtc();
}

struct Request {
  std::string source;
  std::vector<Header> headers;
  std::vector<std::string> flags = {"-arch=sm_90", "-default-device", "--no-source-include"};
};

vendor::CompileOutput compile(const vendor::Compiler& compiler, const Request& r) {
  const std::vector<vendor::HeaderText> texts = vendor::header_texts(r.headers);
  vendor::CompileInput input;
  input.source_name = "k.cu";
  input.source = r.source;
  input.headers = texts;
  input.flags = r.flags;
  input.target = "sm_90";
  input.prelude_end = kiln::includes::prelude_end(input.source);  // as the engine hands it over
  return compiler.compile(input);
}

Request kernel(int body, const std::string& header = kHeavy, const std::string& name = "/abs/heavy.h") {
  Request r;
  r.source = fmt::format("#include \"{}\"\n__global__ void k(int* p) {{ p[0] = f{}(p[0]) + FLAVOUR; }}\n", name, body);
  r.headers.push_back({name, header});
  return r;
}

bool nvrtc_has_pch(const vendor::Compiler& compiler) {
  return compiler.precompiled_headers().starts_with("on");
}

/// NVRTC loaded with KILN_PCH=1, or null (said as a warning) when there is no NVRTC or it has no PCH.
std::unique_ptr<vendor::Compiler> pch_compiler() {
  std::unique_ptr<vendor::Compiler> compiler;
  try {
    compiler = load(true);
  } catch (const DeviceUnavailable& e) {
    WARN("skipped: " << e.what());
    return nullptr;
  }
  if (!nvrtc_has_pch(*compiler)) {
    WARN("skipped: " << compiler->precompiled_headers());
    return nullptr;
  }
  return compiler;
}

/// The bytes of every file under `tmp`'s PCH roots.
std::uintmax_t folder_bytes(const fs::path& tmp) {
  std::uintmax_t bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(tmp)) {
    if (e.is_regular_file()) bytes += e.file_size();
  }
  return bytes;
}

/// This process's PCH roots under `tmp`.
std::vector<fs::path> roots_of(const fs::path& tmp, long pid) {
  std::vector<fs::path> out;
  const std::string prefix = fmt::format("kiln-pch-{}-{}-", ::geteuid(), pid);
  for (const auto& e : fs::directory_iterator(tmp)) {
    if (e.path().filename().string().starts_with(prefix)) out.push_back(e.path());
  }
  return out;
}

}  // namespace

TEST_CASE("a header set's second compile makes a PCH, the third uses it, and all give the bytes of compiles without PCH",
          "[rtc][pch]") {
  test::TempDir tmp;
  ScopedEnv where("TMPDIR", tmp.path().string());
  std::unique_ptr<vendor::Compiler> with, without;
  try {
    with = load(true);
    without = load(false);
  } catch (const DeviceUnavailable& e) {
    WARN("skipped: " << e.what());
    return;
  }
  if (!nvrtc_has_pch(*with)) {
    WARN("skipped: " << with->precompiled_headers());
    return;
  }
  CHECK(without->precompiled_headers() == "off: KILN_PCH=0");

  // The header set's first compile goes without PCH, the second makes one, the third uses it.
  const vendor::CompileOutput once = compile(*with, kernel(4));
  CHECK_FALSE(once.pch_made);
  CHECK_FALSE(once.pch_used);
  CHECK(roots_of(tmp.path(), ::getpid()).empty());  // not even a folder yet
  const vendor::CompileOutput first = compile(*with, kernel(5));
  CHECK(first.pch_made);
  CHECK_FALSE(first.pch_used);
  CHECK(first.log.empty());  // the PCH messages are not the user's log
  const vendor::CompileOutput second = compile(*with, kernel(6));
  CHECK(second.pch_used);
  CHECK_FALSE(second.pch_made);
  CHECK(second.log.empty());
  CHECK(with->precompiled_headers().starts_with("on (1 made, 1 used"));
  // Where the files go and how large they may get (kiln devices prints this line).
  CHECK(with->precompiled_headers().find(tmp.path().string()) != std::string::npos);
  CHECK(with->precompiled_headers().find("at most 2048 MiB a process") != std::string::npos);

  const vendor::CompileOutput plain_first = compile(*without, kernel(5));
  const vendor::CompileOutput plain_second = compile(*without, kernel(6));
  CHECK_FALSE(plain_second.pch_used);
  CHECK_FALSE(plain_second.pch_made);
  CHECK(once.binary == compile(*without, kernel(4)).binary);
  CHECK(first.binary == plain_first.binary);
  CHECK(first.ptx == plain_first.ptx);
  CHECK(second.binary == plain_second.binary);
  CHECK(second.ptx == plain_second.ptx);
  CHECK(second.lowered == plain_second.lowered);

  // The folders are this process's, and go with the compiler.
  REQUIRE(roots_of(tmp.path(), ::getpid()).size() == 1);
  with.reset();
  CHECK(roots_of(tmp.path(), ::getpid()).empty());
}

TEST_CASE("a source that includes after code compiles with its prefix hoisted: the PCH is used, the bytes are the same",
          "[rtc][pch]") {
  test::TempDir tmp;
  ScopedEnv where("TMPDIR", tmp.path().string());
  std::unique_ptr<vendor::Compiler> with = pch_compiler();
  if (!with) return;
  const std::unique_ptr<vendor::Compiler> without = load(false);
  // CuPy's scipy-style shape: a typedef, then the includes; __LINE__, __FILE__ and an assert after them, and one
  // in the prefix, show the hoisted source keeps its lines and name.
  const auto source = [](int body) {
    Request r;
    r.source = fmt::format(
        "typedef int T;\n"
        "__device__ const int early = __LINE__;\n"
        "#include \"/abs/heavy.h\"\n"
        "#include \"/abs/light.h\"\n"
        "__global__ void k(T* p) {{\n"
        "  p[0] = f{}(p[0]) + FLAVOUR + LIGHT + __LINE__ + early;\n"
        "  const char* file = __FILE__;\n"
        "  p[1] = file[0] + file[1];\n"
        "  assert(p[2] > 0);\n"
        "}}\n",
        body);
    r.headers.push_back({"/abs/heavy.h", kHeavy});
    r.headers.push_back({"/abs/light.h", "#pragma once\n#define LIGHT 3\n"});
    return r;
  };
  const vendor::CompileOutput once = compile(*with, source(4));
  const vendor::CompileOutput made = compile(*with, source(5));
  const vendor::CompileOutput used = compile(*with, source(6));
  CHECK_FALSE(once.pch_made);
  CHECK(made.pch_made);
  CHECK(used.pch_used);  // the PCH covers heavy.h, which follows code in the source
  CHECK(used.log.empty());
  // The PCH holds heavy.h: it is as large as the one made for the same headers included first (made without
  // the hoist, NVRTC's PCH would stop at the typedef and hold none of them: several times smaller).
  const std::uintmax_t hoisted_bytes = folder_bytes(tmp.path());
  Request leading = source(8);
  leading.source = "#include \"/abs/heavy.h\"\n#include \"/abs/light.h\"\ntypedef int T;\n"
                   "__global__ void k(T* p) { p[0] = f8(p[0]) + FLAVOUR + LIGHT; }\n";
  compile(*with, leading);
  CHECK(compile(*with, leading).pch_made);
  const std::uintmax_t leading_bytes = folder_bytes(tmp.path()) - hoisted_bytes;
  CHECK(hoisted_bytes * 10 >= leading_bytes * 9);
  for (const auto& [body, out] : {std::pair{4, &once}, std::pair{5, &made}, std::pair{6, &used}}) {
    const vendor::CompileOutput plain = compile(*without, source(body));
    CHECK(out->binary == plain.binary);
    CHECK(out->ptx == plain.ptx);
  }
  // An error after the prefix names the source and its own line, as without PCH.
  Request broken = source(7);
  broken.source += "int broken = ;\n";
  compile(*with, source(7));  // the set is known: the next compile of it plans a PCH
  const auto error_text = [&](const vendor::Compiler& compiler) {
    try {
      compile(compiler, broken);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string with_error = error_text(*with);
  CHECK(with_error.find("k.cu(11)") != std::string::npos);
  CHECK(with_error.find("__kiln_prelude") == std::string::npos);
  CHECK(error_text(*without).find("k.cu(11)") != std::string::npos);
}

TEST_CASE("the hoist keeps the translation unit: a header reading __INCLUDE_LEVEL__, a GNU line marker before the last "
          "include and a byte order mark give the bytes of compiles without PCH",
          "[rtc][pch]") {
  test::TempDir tmp;
  ScopedEnv where("TMPDIR", tmp.path().string());
  std::unique_ptr<vendor::Compiler> with = pch_compiler();
  if (!with) return;
  const std::unique_ptr<vendor::Compiler> without = load(false);
  struct Shape {
    const char* what;
    std::string prefix;  ///< code, then the includes (heavy.h last)
    std::string level_header;
  };
  const std::vector<Shape> shapes = {
      // Every header the prefix includes would be one level deeper in the prelude header.
      {"__INCLUDE_LEVEL__ in a header", "typedef int T;\n#include \"/abs/level.h\"\n",
       "#pragma once\n#define LEVEL __INCLUDE_LEVEL__\n__device__ const int level = LEVEL;\n"},
      // The marker sets the presumed line: the #line the hoist writes after the prefix would undo it.
      {"a GNU line marker", "typedef int T;\n# 100 \"other.cu\"\n#include \"/abs/level.h\"\n",
       "#pragma once\n__device__ const int level = 1;\n"},
      {"a GNU line marker with flags", "typedef int T;\n# 100 \"other.cu\" 1\n#include \"/abs/level.h\"\n",
       "#pragma once\n__device__ const int level = 1;\n"},
      {"the digraph of #line", "typedef int T;\n%:line 100\n#include \"/abs/level.h\"\n",
       "#pragma once\n__device__ const int level = 1;\n"},
      // NVRTC takes a byte order mark for a stray token anywhere but at the start of a text.
      {"a byte order mark", "\xEF\xBB\xBFtypedef int T;\n#include \"/abs/level.h\"\n",
       "#pragma once\n__device__ const int level = 1;\n"},
  };
  for (const Shape& shape : shapes) {
    INFO(shape.what);
    const auto source = [&](int body) {
      Request r;
      r.source = shape.prefix + fmt::format("#include \"/abs/heavy.h\"\n__global__ void k(T* p) {{ p[0] = f{}(p[0]) + "
                                            "level + __LINE__; p[1] = __FILE__[0]; }}\n",
                                            body);
      r.headers.push_back({"/abs/heavy.h", kHeavy});
      r.headers.push_back({"/abs/level.h", shape.level_header});
      return r;
    };
    // The set's first compile goes without PCH, the second makes one, the third would use it.
    for (int body = 1; body <= 3; ++body) {
      const vendor::CompileOutput pch = compile(*with, source(body));
      const vendor::CompileOutput plain = compile(*without, source(body));
      CHECK(pch.binary == plain.binary);
      CHECK(pch.ptx == plain.ptx);
    }
  }
}

namespace {

/// Runs `body` in a child process (a SIGBUS there ends only the child) and says how it ended.
std::string in_child(const std::function<int()>& body) {
  const pid_t child = ::fork();
  if (child == 0) {
    int code = 3;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return fmt::format("exit {}", WEXITSTATUS(status));
}

/// A tmpfs of `mib` MiB mounted on a new folder for the scope (root only), or none.
class SmallDisk {
 public:
  explicit SmallDisk(int mib) {
    if (::geteuid() != 0) return;
    const std::string options = fmt::format("size={}m,mode=0700", mib);
    if (::mount("kiln-pch-test", m_dir.path().c_str(), "tmpfs", 0, options.c_str()) == 0) m_mounted = true;
  }
  ~SmallDisk() {
    if (m_mounted) ::umount2(m_dir.path().c_str(), MNT_DETACH);
  }
  SmallDisk(const SmallDisk&) = delete;
  SmallDisk& operator=(const SmallDisk&) = delete;
  [[nodiscard]] bool mounted() const noexcept { return m_mounted; }
  [[nodiscard]] const fs::path& path() const noexcept { return m_dir.path(); }

 private:
  test::TempDir m_dir;
  bool m_mounted = false;
};

}  // namespace

TEST_CASE("a TMPDIR too small for a PCH: compiles go without one, never a SIGBUS or a failed compile", "[rtc][pch]") {
  for (const int mib : {10, 20}) {
    INFO(mib << " MiB");
    SmallDisk disk(mib);
    if (!disk.mounted()) {
      WARN("skipped: mounting a small tmpfs needs root and a system that allows it");
      return;
    }
    ScopedEnv where("TMPDIR", disk.path().string());
    // The heavy header makes a PCH of about 26 MB: more than either disk holds.
    const std::string ended = in_child([] {
      std::unique_ptr<vendor::Compiler> with = pch_compiler();
      if (!with) return 0;
      const std::unique_ptr<vendor::Compiler> without = load(false);
      for (int body = 1; body <= 4; ++body) {
        if (compile(*with, kernel(body)).binary != compile(*without, kernel(body)).binary) return 1;
      }
      // It stays on: the folder may have room later.
      return with->precompiled_headers().starts_with("on (0 made") ? 0 : 2;
    });
    CHECK(ended == "exit 0");
  }
}

TEST_CASE("a PCH file cut short or garbled by someone else: never a SIGBUS or another binary", "[rtc][pch]") {
  // Cut short: NVRTC would read past the end of the mapped file (a SIGBUS): the lane sees the size first and
  // turns PCH off for the process. Garbled with its size and time kept: NVRTC checks the file, takes it for
  // another prelude's and makes a new one.
  for (const bool cut : {true, false}) {
    INFO((cut ? "cut short" : "garbled"));
    test::TempDir tmp;
    ScopedEnv where("TMPDIR", tmp.path().string());
    const std::string ended = in_child([&] {
      std::unique_ptr<vendor::Compiler> with = pch_compiler();
      if (!with) return 0;
      const std::unique_ptr<vendor::Compiler> without = load(false);
      (void)compile(*with, kernel(1));
      if (!compile(*with, kernel(2)).pch_made) return 1;
      std::size_t changed = 0;
      for (const auto& e : fs::recursive_directory_iterator(tmp.path())) {
        if (!e.is_regular_file()) continue;
        if (cut) {
          fs::resize_file(e.path(), e.file_size() / 2);
        } else {
          struct stat before {};
          ::stat(e.path().c_str(), &before);
          std::fstream file(e.path(), std::ios::in | std::ios::out | std::ios::binary);
          const std::string zeros(4096, '\0');
          file.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
          file.close();
          const struct timespec times[2] = {before.st_atim, before.st_mtim};
          ::utimensat(AT_FDCWD, e.path().c_str(), times, 0);
        }
        ++changed;
      }
      if (changed == 0) return 2;
      for (int body = 3; body <= 5; ++body) {
        if (compile(*with, kernel(body)).binary != compile(*without, kernel(body)).binary) return 3;
      }
      const std::string state = with->precompiled_headers();
      std::fprintf(stderr, "child: %s\n", state.c_str());
      return state.starts_with(cut ? "off: a precompiled header file was cut short" : "on (2 made") ? 0 : 4;
    });
    CHECK(ended == "exit 0");
  }
}

TEST_CASE("a header handed again under its name with other bytes never meets the PCH of the old bytes", "[rtc][pch]") {
  // NVRTC checks a PCH against the leading directives and the flags, not against in-memory headers'
  // bytes: without the lane's folder per header set, the second compile would give the first's binary.
  test::TempDir tmp;
  ScopedEnv where("TMPDIR", tmp.path().string());
  const std::unique_ptr<vendor::Compiler> with = pch_compiler();
  if (!with) return;
  const std::unique_ptr<vendor::Compiler> without = load(false);
  const std::string edited = heavy_header(6000, 7);

  (void)compile(*with, kernel(4));  // the old bytes' first compile: no PCH yet
  const vendor::CompileOutput old_bytes = compile(*with, kernel(5));
  CHECK(old_bytes.pch_made);
  (void)compile(*with, kernel(4, edited));  // the new bytes' first compile
  const vendor::CompileOutput new_bytes = compile(*with, kernel(5, edited));
  CHECK_FALSE(new_bytes.pch_used);
  CHECK(new_bytes.pch_made);  // its own PCH, in its own folder
  CHECK(new_bytes.binary == compile(*without, kernel(5, edited)).binary);
  CHECK(new_bytes.binary != old_bytes.binary);
  // And each header set keeps its own PCH: both are used from now on.
  CHECK(compile(*with, kernel(9)).pch_used);
  CHECK(compile(*with, kernel(9, edited)).pch_used);
}

TEST_CASE("a PCH that does not fit the heap grows the heap and is made by a second compile", "[rtc][pch]") {
  test::TempDir tmp;
  ScopedEnv where("TMPDIR", tmp.path().string());
  std::unique_ptr<vendor::Compiler> with;
  {
    ScopedEnv heap("KILN_PCH_HEAP", std::to_string(1 << 20));  // 1 MiB: far too small
    try {
      with = load(true);
    } catch (const DeviceUnavailable& e) {
      WARN("skipped: " << e.what());
      return;
    }
  }
  if (!nvrtc_has_pch(*with)) return;
  CHECK(with->precompiled_headers().find("PCH heap 1 MiB") != std::string::npos);
  (void)compile(*with, kernel(4));  // the header set's first compile: no PCH
  const vendor::CompileOutput out = compile(*with, kernel(5));
  CHECK(out.pch_made);
  CHECK(out.log.empty());  // the first compile's "insufficient preallocated memory" warning is not kept
  CHECK(with->precompiled_headers().find("PCH heap 1 MiB") == std::string::npos);
  CHECK(out.binary == compile(*load(false), kernel(5)).binary);
  CHECK(compile(*with, kernel(6)).pch_used);
}

TEST_CASE("threads compiling with PCH at once get the binaries of compiles without PCH", "[rtc][pch]") {
  test::TempDir tmp;
  ScopedEnv where("TMPDIR", tmp.path().string());
  const std::unique_ptr<vendor::Compiler> with = pch_compiler();
  if (!with) return;
  const std::unique_ptr<vendor::Compiler> without = load(false);
  const std::vector<std::string> headers = {kHeavy, heavy_header(6000, 2)};
  constexpr int kThreads = 4, kEach = 3;
  std::vector<std::vector<std::vector<std::byte>>> got(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < kEach; ++i) got[t].push_back(compile(*with, kernel(10 * t + i, headers[t % 2])).binary);
      } catch (...) {
        ++failures;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  REQUIRE(failures == 0);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kEach; ++i) {
      INFO("thread " << t << " kernel " << i);
      CHECK(got[t][i] == compile(*without, kernel(10 * t + i, headers[t % 2])).binary);
    }
  }
  CHECK(with->precompiled_headers().find(" used") != std::string::npos);
}

TEST_CASE("small header sets and requests with PCH flags of their own compile without the lane's PCH", "[rtc][pch]") {
  test::TempDir tmp;
  ScopedEnv where("TMPDIR", tmp.path().string());
  const std::unique_ptr<vendor::Compiler> with = pch_compiler();
  if (!with) return;
  const vendor::CompileOutput small = compile(*with, kernel(5, heavy_header(50, 1)));
  CHECK_FALSE(small.pch_made);
  CHECK(roots_of(tmp.path(), ::getpid()).empty());  // no folder is made for it either

  vendor::CompileInput input;
  Request own = kernel(5);
  own.flags.push_back("--pch-dir=" + tmp.path().string());
  const std::vector<vendor::HeaderText> texts = vendor::header_texts(own.headers);
  input.source_name = "k.cu";
  input.source = own.source;
  input.headers = texts;
  input.flags = own.flags;
  input.target = "sm_90";
  vendor::pch::Folders folders("", nullptr);
  CHECK_FALSE(folders.plan(input, 256ULL << 20));
}

TEST_CASE("the PCH flags are recognised and their messages leave the log", "[rtc][pch][unit]") {
  using vendor::pch::is_pch_flag;
  for (const char* flag : {"-pch", "--pch", "--pch-dir=/x", "-pch-dir=/x", "--create-pch=a.pch", "-use-pch=a.pch",
                           "--pch-verbose=true", "--pch-messages=false", "--instantiate-templates-in-pch=true"}) {
    INFO(flag);
    CHECK(is_pch_flag(flag));
  }
  for (const char* flag : {"-arch=sm_90", "--std=c++17", "-DPCH=1", "-I/pch", "--pchx"}) {
    INFO(flag);
    CHECK_FALSE(is_pch_flag(flag));
  }
  vendor::pch::Plan plan;
  plan.folder = "/tmp/kiln-pch-1-2-abc/0123";
  plan.marker = "\"/tmp/kiln-pch-1-2-abc/0123/";
  std::string log =
      "\"k.cu\": creating precompiled header file \"/tmp/kiln-pch-1-2-abc/0123/k_0.pch\"\n"
      "k.cu(3): warning #177-D: variable \"x\" was declared but never referenced\n"
      "\"k.cu\": using precompiled header file \"/tmp/kiln-pch-1-2-abc/0123/k_0.pch\"\n"
      "\"k.cu\": using precompiled header file \"/elsewhere/k_0.pch\"";
  const vendor::pch::LogNotes notes = vendor::pch::strip_pch_messages(log, plan);
  CHECK(notes.created);
  CHECK(notes.used);
  CHECK(log ==
        "k.cu(3): warning #177-D: variable \"x\" was declared but never referenced\n"
        "\"k.cu\": using precompiled header file \"/elsewhere/k_0.pch\"");

  // A stored PCH NVRTC did not take: its warning leaves the log, and the remark after it when no other warning is
  // left; the reason is kept for the record.
  vendor::pch::Plan stored;
  stored.marker = "\"/proc/self/fd/7\"";
  const std::string refused =
      "Warning #630-D: the initial sequence of preprocessing directives is not compatible with those of precompiled "
      "header file \"/proc/self/fd/7\"\n\nRemark: The warnings can be suppressed with \"-diag-suppress "
      "<warning-number>\"\n\n";
  std::string alone = refused;
  const vendor::pch::LogNotes refusal = vendor::pch::strip_pch_messages(alone, stored);
  CHECK_FALSE(refusal.used);
  CHECK(refusal.refusal.find("#630-D") != std::string::npos);
  CHECK(alone.empty());
  std::string with_own = "k.cu(3): warning #177-D: variable \"x\" was declared but never referenced\n" + refused;
  (void)vendor::pch::strip_pch_messages(with_own, stored);
  CHECK(with_own ==
        "k.cu(3): warning #177-D: variable \"x\" was declared but never referenced\n\nRemark: The warnings can be "
        "suppressed with \"-diag-suppress <warning-number>\"");
}

TEST_CASE("a PCH root left by a process that died is removed by the next process that makes one", "[rtc][pch]") {
  test::TempDir tmp;
  ScopedEnv where("TMPDIR", tmp.path().string());
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  ::waitpid(child, nullptr, 0);
  const fs::path dead = tmp.path() / fmt::format("kiln-pch-{}-{}-AbCdEf", ::geteuid(), child);
  fs::create_directories(dead / "0123");
  { std::ofstream(dead / "0123" / "k_0.pch") << "old"; }
  const fs::path alive = tmp.path() / fmt::format("kiln-pch-{}-{}-AbCdEf", ::geteuid(), ::getppid());
  fs::create_directories(alive);  // a live process's root (the test's parent): kept
  const std::unique_ptr<vendor::Compiler> with = pch_compiler();
  if (!with) return;
  CHECK(fs::exists(dead));  // nothing is swept before PCH is first used
  (void)compile(*with, kernel(4));
  CHECK(fs::exists(dead));  // a header set's first compile uses no PCH
  (void)compile(*with, kernel(5));
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(alive));
}

using test::blank_internal_tags;

TEST_CASE("an engine compiling CUB kernels over the toolkit's folders with PCH gives the binaries it gives without",
          "[rtc][pch]") {
  test::TempDir tmp;
  ScopedEnv where("TMPDIR", tmp.path().string());
  const auto source = [](int i) {
    return Source::from_text(fmt::format("k{}.cu", i), fmt::format(R"(#include <cub/block/block_reduce.cuh>
#include <cuda/std/tuple>
extern "C" __global__ void k{0}(const float* in, float* out) {{
  using R = cub::BlockReduce<float, 128>;
  __shared__ typename R::TempStorage t;
  cuda::std::tuple<float, float> p{{in[threadIdx.x], {0}.0f}};
  float v = R(t).Sum(cuda::std::get<0>(p) * cuda::std::get<1>(p));
  if (threadIdx.x == 0) *out = v;
}})",
                                                                   i));
  };
  std::vector<std::string> with, without;
  for (const bool pch : {true, false}) {
    ScopedEnv setting("KILN_PCH", pch ? "1" : "0");
    EngineConfig config;
    config.cache.disabled = true;  // every request compiles
    Engine engine(config);
    std::vector<std::string>& out = pch ? with : without;
    try {
      for (int i = 0; i < 4; ++i) {
        const CompiledBinary binary = engine.compile(source(i), Options{"--toolkit-includes"}, {}, "sm_90");
        out.push_back(blank_internal_tags(binary.bytes()));
      }
    } catch (const DeviceUnavailable& e) {
      WARN("skipped: " << e.what());
      return;
    }
    const cache::Counters stats = engine.stats();
    if (pch && engine.lanes().front().precompiled_headers.starts_with("on")) {
      // A CUB header set is heavy (pch::kMakeAtFirstBytes): its first compile makes the PCH, the others use it.
      CHECK(stats.pch_made == 1);
      CHECK(stats.pch_used == 3);
    } else {
      CHECK(stats.pch_made == 0);
      CHECK(stats.pch_used == 0);
    }
  }
  CHECK(with == without);
}
