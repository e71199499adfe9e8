// The `kiln` CLI against a hostile newcomer's probe: an empty --cache-dir, unreadable entries under
// verify --fix, links/FIFOs/stray files in the entry directories, the running size total after clear,
// prune and verify --fix, exit codes of ls/stats/verify/show/export, FIFOs and devices as --source or
// --manifest, manifest errors that name their line, bad KILN_LOG and target values. Entries are
// synthetic (written with the library's Store); no compiler and no GPU are needed.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

#include "harness.hpp"
#include "kiln/cache/entry.hpp"
#include "kiln/cache/store.hpp"
#include "synthetic_entry.hpp"
#include "test_support.hpp"

namespace {

using namespace kiln::system_test;
using kiln::cache::Entry;
using kiln::test::make_entry;

struct Run {
  int rc = -1;  ///< -1: did not finish in time (killed)
  std::string out;
  std::string err;
  [[nodiscard]] json parsed() const { return json::parse(out); }
  [[nodiscard]] std::string describe() const {
    return "rc=" + std::to_string(rc) + "\n--- stdout:\n" + out + "\n--- stderr:\n" + err;
  }
};

/// Runs kiln with `env` applied exactly (a value of "" sets the variable empty; nullopt removes it),
/// optionally as `nobody` (when the test runs as root), for at most `timeout_s` seconds.
Run run_kiln_exact(const std::vector<std::string>& args, const std::map<std::string, std::optional<std::string>>& env,
                   const fs::path& scratch, bool unprivileged = false, double timeout_s = 60) {
  std::vector<std::string> environment;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (env.count(entry.substr(0, entry.find('='))) == 0) environment.push_back(entry);
  }
  for (const auto& [name, value] : env) {
    if (value) environment.push_back(name + "=" + *value);
  }
  std::vector<std::string> argv_storage{KILN_CLI_PATH};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : argv_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (std::string& entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  const std::string out_path = (scratch / ".out").string();
  const std::string err_path = (scratch / ".err").string();
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int in = ::open("/dev/null", O_RDONLY);
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (in < 0 || out < 0 || err < 0) ::_exit(125);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    if (unprivileged && ::geteuid() == 0) {
      if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(126);
    }
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  REQUIRE(pid > 0);
  Run run;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      run.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  run.out = read_all(out_path);
  run.err = read_all(err_path);
  return run;
}

/// A cache at `root` holding `count` synthetic entries; returns their paths.
std::vector<fs::path> fill_cache(const fs::path& root, int count, const std::string& prefix = "k") {
  kiln::cache::StoreConfig config;
  config.root = root;
  kiln::cache::Store store(config);
  REQUIRE(store.mode() == kiln::cache::StoreMode::read_write);
  std::vector<fs::path> paths;
  for (int i = 0; i < count; ++i) {
    const Entry entry = make_entry(prefix + std::to_string(i), 2000 + 100 * static_cast<std::size_t>(i));
    REQUIRE(store.put(entry));
    paths.push_back(store.entry_path(entry.key_hash));
  }
  return paths;
}

std::uint64_t bytes_on_disk(const std::vector<fs::path>& paths) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (const fs::path& path : paths) {
    const auto size = fs::file_size(path, ec);
    if (!ec) total += size;
  }
  return total;
}

std::string size_file(const fs::path& root) { return read_all(root / "lock" / "size"); }

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t count = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++count;
  return count;
}

void flip_byte(const fs::path& path, std::uintmax_t at) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  file.read(&c, 1);
  file.seekp(static_cast<std::streamoff>(at));
  c = static_cast<char>(c ^ 0x5a);
  file.write(&c, 1);
}

void chown_tree(const fs::path& root, uid_t uid, gid_t gid) {
  REQUIRE(::lchown(root.c_str(), uid, gid) == 0);
  for (const auto& item : fs::recursive_directory_iterator(root)) REQUIRE(::lchown(item.path().c_str(), uid, gid) == 0);
}

}  // namespace

// R4: `kiln cache clear --cache-dir "$UNSET"` emptied the user's default cache.
TEST_CASE("an empty --cache-dir or KILN_CACHE_DIR is an error, never the default cache") {
  TempDir dir;
  const fs::path home = dir / "home";
  const fs::path default_root = home / ".cache" / "kiln";
  const std::vector<fs::path> entries = fill_cache(default_root, 2);
  const std::map<std::string, std::optional<std::string>> base{
      {"HOME", home.string()}, {"XDG_CACHE_HOME", std::nullopt}, {"KILN_CACHE_PACKS", std::nullopt}};

  auto with = [&](std::map<std::string, std::optional<std::string>> extra) {
    for (const auto& [name, value] : base) extra.emplace(name, value);
    return extra;
  };
  const Run flag =
      run_kiln_exact({"cache", "clear", "--cache-dir", ""}, with({{"KILN_CACHE_DIR", std::nullopt}}), dir.path());
  INFO(flag.describe());
  CHECK(flag.rc == 2);
  CHECK(count_lines(flag.err) == 1);
  CHECK(flag.err.find("--cache-dir") != std::string::npos);
  CHECK(flag.out.empty());
  for (const fs::path& entry : entries) CHECK(fs::exists(entry));

  const Run variable = run_kiln_exact({"cache", "clear"}, with({{"KILN_CACHE_DIR", ""}}), dir.path());
  INFO(variable.describe());
  CHECK(variable.rc == 2);
  CHECK(count_lines(variable.err) == 1);
  CHECK(variable.err.find("KILN_CACHE_DIR") != std::string::npos);
  for (const fs::path& entry : entries) CHECK(fs::exists(entry));

  // Unset, it is the default cache (as documented).
  const Run path = run_kiln_exact({"cache", "path"}, with({{"KILN_CACHE_DIR", std::nullopt}}), dir.path());
  CHECK(path.rc == 0);
  CHECK(path.out == default_root.string() + "\n");
}

// D2: verify --fix removed a valid entry it could not open, and exited 0.
TEST_CASE("verify --fix never removes an entry it cannot read; ls and verify report it") {
  TempDir dir;
  const fs::path root = dir / "cache";
  const std::vector<fs::path> entries = fill_cache(root, 3);
  const bool root_user = ::geteuid() == 0;
  if (root_user) {
    if (const auto closed = kiln::test::closed_to_others(KILN_CLI_PATH)) {
      WARN("left out: nobody cannot run " << KILN_CLI_PATH << " (" << *closed
                                          << " lets no others in); clone into a folder others can enter");
      return;
    }
    // The cache belongs to nobody, who runs kiln: the entry at mode 000 is then unreadable to its owner.
    ::chmod(dir.path().c_str(), 0755);
    chown_tree(root, 65534, 65534);
  }
  REQUIRE(::chmod(entries[1].c_str(), 0) == 0);
  const std::map<std::string, std::optional<std::string>> env{{"KILN_CACHE_DIR", root.string()},
                                                              {"KILN_CACHE_PACKS", std::nullopt}};

  const Run fix = run_kiln_exact({"cache", "verify", "--fix"}, env, dir.path(), true);
  INFO(fix.describe());
  CHECK(fix.rc == 1);
  CHECK(fs::exists(entries[1]));
  CHECK(fix.out.find("unreadable") != std::string::npos);
  CHECK(fix.out.find("(removed)") == std::string::npos);
  CHECK(fix.out.find("0 removed") != std::string::npos);

  const Run ls = run_kiln_exact({"cache", "ls"}, env, dir.path(), true);
  INFO(ls.describe());
  CHECK(ls.rc == 1);
  CHECK(ls.out.find("UNREADABLE") != std::string::npos);

  // Readable again: everything is fine, nothing was lost.
  REQUIRE(::chmod(entries[1].c_str(), 0600) == 0);
  const Run verify = run_kiln_exact({"cache", "verify"}, env, dir.path(), true);
  INFO(verify.describe());
  CHECK(verify.rc == 0);
  CHECK(verify.out.find("3 entries: 3 ok, 0 bad") != std::string::npos);
}

// R5: links, FIFOs and stray files were invisible to ls, stats and verify, and verify --fix left them.
TEST_CASE("links, FIFOs and stray files in the entry directories are reported; verify --fix removes them") {
  TempDir dir;
  const fs::path root = dir / "cache";
  const std::vector<fs::path> entries = fill_cache(root, 1);
  const fs::path shard = entries[0].parent_path();
  const std::string shard_hex = shard.filename().string();
  const fs::path link = shard / "11111111111111111111111111111a.kiln";
  const fs::path fifo = shard / "22222222222222222222222222222b.kiln";
  const fs::path stray = shard / "notes.txt";
  const fs::path subdir = shard / "33333333333333333333333333333c.kiln";
  fs::create_symlink(entries[0], link);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::ofstream(stray) << "not an entry\n";
  fs::create_directory(subdir);
  const std::map<std::string, std::optional<std::string>> env{{"KILN_CACHE_DIR", root.string()},
                                                              {"KILN_CACHE_PACKS", std::nullopt}};

  const Run ls = run_kiln_exact({"cache", "ls"}, env, dir.path(), false, 30);
  INFO(ls.describe());
  CHECK(ls.rc == 1);
  CHECK(ls.out.find(shard_hex + "11111111111111") != std::string::npos);
  CHECK(ls.out.find("symbolic link at an entry path") != std::string::npos);
  CHECK(ls.out.find("FIFO at an entry path") != std::string::npos);
  CHECK(ls.out.find("1 other file in the entry directories") != std::string::npos);

  const Run stats = run_kiln_exact({"cache", "stats", "--json"}, env, dir.path(), false, 30);
  INFO(stats.describe());
  CHECK(stats.rc == 1);
  CHECK(stats.parsed().at("not_entries") == 4);
  CHECK(stats.parsed().at("entries") == 1);

  const Run verify = run_kiln_exact({"cache", "verify"}, env, dir.path(), false, 30);
  INFO(verify.describe());
  CHECK(verify.rc == 1);
  for (const fs::path& path : {link, fifo, stray, subdir}) CHECK(verify.out.find(path.string()) != std::string::npos);

  const Run fix = run_kiln_exact({"cache", "verify", "--fix"}, env, dir.path(), false, 30);
  INFO(fix.describe());
  CHECK(fix.rc == 1);  // the directory is left for its owner
  CHECK_FALSE(fs::exists(fs::symlink_status(link)));
  CHECK_FALSE(fs::exists(fs::symlink_status(fifo)));
  CHECK_FALSE(fs::exists(stray));
  CHECK(fs::is_directory(subdir));
  CHECK(fs::exists(entries[0]));
  fs::remove(subdir);
  const Run clean = run_kiln_exact({"cache", "verify"}, env, dir.path(), false, 30);
  INFO(clean.describe());
  CHECK(clean.rc == 0);
}

// R6: clear, prune and verify --fix left lock/size stale.
TEST_CASE("clear, prune and verify --fix leave the running size total right") {
  TempDir dir;
  const fs::path root = dir / "cache";
  std::vector<fs::path> entries = fill_cache(root, 6);
  REQUIRE(size_file(root) == std::to_string(bytes_on_disk(entries)) + "\n");
  const std::map<std::string, std::optional<std::string>> env{{"KILN_CACHE_DIR", root.string()},
                                                              {"KILN_CACHE_PACKS", std::nullopt}};

  flip_byte(entries[0], fs::file_size(entries[0]) / 2);
  const Run fix = run_kiln_exact({"cache", "verify", "--fix"}, env, dir.path());
  INFO(fix.describe());
  CHECK(fix.rc == 0);
  CHECK_FALSE(fs::exists(entries[0]));
  CHECK(size_file(root) == std::to_string(bytes_on_disk(entries)) + "\n");

  const Run prune = run_kiln_exact({"cache", "prune", "--max-size", "5K"}, env, dir.path());
  INFO(prune.describe());
  CHECK(prune.rc == 0);
  CHECK(size_file(root) == std::to_string(bytes_on_disk(entries)) + "\n");

  const Run clear = run_kiln_exact({"cache", "clear"}, env, dir.path());
  INFO(clear.describe());
  CHECK(clear.rc == 0);
  CHECK(size_file(root) == "0\n");
}

// R8: the exit codes docs/cli.md gives: 1 when a command finds something wrong.
TEST_CASE("ls, stats, verify, show and export exit 1 when they find a bad entry or a refused cache") {
  TempDir dir;
  const fs::path root = dir / "cache";
  const std::vector<fs::path> entries = fill_cache(root, 2);
  const std::map<std::string, std::optional<std::string>> env{{"KILN_CACHE_DIR", root.string()},
                                                              {"KILN_CACHE_PACKS", std::nullopt}};
  for (const char* command : {"ls", "stats", "verify"}) {
    const Run clean = run_kiln_exact({"cache", command}, env, dir.path());
    INFO(clean.describe());
    CHECK(clean.rc == 0);
  }
  // A damaged header (ls and stats read headers; verify whole entries).
  flip_byte(entries[0], 1);
  const std::string key = fs::path(entries[0]).parent_path().filename().string() + entries[0].stem().string();
  for (const char* command : {"ls", "stats", "verify"}) {
    const Run found = run_kiln_exact({"cache", command}, env, dir.path());
    INFO(found.describe());
    CHECK(found.rc == 1);
  }
  const Run show = run_kiln_exact({"cache", "show", key.substr(0, 12)}, env, dir.path());
  INFO(show.describe());
  CHECK(show.rc == 1);
  CHECK(show.out.find("damaged") != std::string::npos);
  const Run exported = run_kiln_exact({"cache", "export", (dir / "out.kpack").string()}, env, dir.path());
  INFO(exported.describe());
  CHECK(exported.rc == 1);
  CHECK(exported.out.find("skipped 1 damaged") != std::string::npos);

  // A cache the engine refuses: verify does not call its entries ok.
  fs::remove(entries[0]);
  REQUIRE(::chmod(root.c_str(), 0777) == 0);
  const Run refused = run_kiln_exact({"cache", "verify"}, env, dir.path());
  INFO(refused.describe());
  CHECK(refused.rc == 1);
  CHECK(refused.out.find("world-writable") != std::string::npos);
  const Run refused_ls = run_kiln_exact({"cache", "ls"}, env, dir.path());
  CHECK(refused_ls.rc == 1);
  REQUIRE(::chmod(root.c_str(), 0700) == 0);
}

// R10: a FIFO as --source blocked forever; /dev/zero grew to 1 GB.
TEST_CASE("--source, --header and --manifest read regular files only, up to the key limit") {
  TempDir dir;
  const fs::path fifo = dir / "source.fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const fs::path huge = dir / "huge.cu";
  {
    std::ofstream out(huge);
    out << "// kernel\n";
  }
  fs::resize_file(huge, std::uintmax_t{kiln::cache::Limits{}.max_canonical_bytes} + 1);  // sparse
  const std::map<std::string, std::optional<std::string>> env{{"KILN_CACHE_DIR", (dir / "cache").string()},
                                                              {"KILN_CACHE_PACKS", std::nullopt}};
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"prewarm", "--source", fifo.string(), "--kernel", "k", "--target", "sm_90"}, "not a regular file"},
      {{"prewarm", "--source", "/dev/zero", "--kernel", "k", "--target", "sm_90"}, "not a regular file"},
      {{"prewarm", "--source", huge.string(), "--kernel", "k", "--target", "sm_90"}, "over the limit"},
      {{"prewarm", "--manifest", fifo.string()}, "not a regular file"},
      {{"prewarm", "--manifest", "/dev/zero"}, "not a regular file"},
      {{"cache", "why-miss", "--source", fifo.string(), "--kernel", "k", "--target", "sm_90"}, "not a regular file"},
  };
  for (const Case& c : cases) {
    std::string command = "kiln";
    for (const std::string& arg : c.args) command += " " + arg;
    const auto start = std::chrono::steady_clock::now();
    const Run run = run_kiln_exact(c.args, env, dir.path(), false, 20);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO(command << "\n" << run.describe() << "\n(" << seconds << " s)");
    CHECK(run.rc == 2);
    CHECK(count_lines(run.err) == 1);
    CHECK(run.err.find(c.says) != std::string::npos);
    CHECK(seconds < 10);
  }
}

// R11: KILN_LOG=bogus was ignored; manifest errors in options and targets named no line; a target with a
// feature given twice exited 1 (a failed request) instead of 2 (bad input).
TEST_CASE("bad KILN_LOG, manifest options and targets, and a doubled target feature are bad input") {
  TempDir dir;
  const std::map<std::string, std::optional<std::string>> env{{"KILN_CACHE_DIR", (dir / "cache").string()},
                                                              {"KILN_CACHE_PACKS", std::nullopt}};
  auto with = [&](std::map<std::string, std::optional<std::string>> extra) {
    for (const auto& [name, value] : env) extra.emplace(name, value);
    return extra;
  };
  const Run log = run_kiln_exact({"cache", "ls"}, with({{"KILN_LOG", "bogus"}}), dir.path());
  INFO(log.describe());
  CHECK(log.rc == 2);
  CHECK(count_lines(log.err) == 1);
  CHECK(log.err.find("KILN_LOG='bogus'") != std::string::npos);
  const Run devices = run_kiln_exact({"devices"}, with({{"KILN_LOG", "bogus"}}), dir.path());
  INFO(devices.describe());
  CHECK(devices.rc == 2);
  CHECK(devices.err.find("KILN_LOG") != std::string::npos);

  const std::string good =
      R"({"v":1,"source":"saxpy.cu","builtin":true,"source_hash":"0123456789abcdef0123456789abcdef",)"
      R"("names":[],"options":[],"target":"sm_90"})";
  const std::string bad_option =
      R"({"v":1,"source":"saxpy.cu","builtin":true,"source_hash":"0123456789abcdef0123456789abcdef",)"
      R"("names":[],"options":["--no-such-option"],"target":"sm_90"})";
  const std::string bad_target =
      R"({"v":1,"source":"saxpy.cu","builtin":true,"source_hash":"0123456789abcdef0123456789abcdef",)"
      R"("names":[],"options":[],"target":"gfx90a:xnack+:xnack-"})";
  const fs::path options_manifest = dir / "options.jsonl";
  std::ofstream(options_manifest) << good << "\n" << bad_option << "\n";
  const fs::path target_manifest = dir / "target.jsonl";
  std::ofstream(target_manifest) << good << "\n\n" << bad_target << "\n";
  // Each bad line fails alone (reported with the other requests), naming its line.
  const Run options = run_kiln_exact({"prewarm", "--manifest", options_manifest.string()}, env, dir.path(), false, 120);
  INFO(options.describe());
  CHECK(options.rc == 2);
  CHECK(options.out.find("line 2") != std::string::npos);
  CHECK(options.out.find("--no-such-option") != std::string::npos);
  const Run target = run_kiln_exact({"prewarm", "--manifest", target_manifest.string()}, env, dir.path(), false, 120);
  INFO(target.describe());
  CHECK(target.rc == 2);
  CHECK(target.out.find("line 3") != std::string::npos);
  CHECK(target.out.find("xnack") != std::string::npos);

  const Run doubled =
      run_kiln_exact({"prewarm", "--all-builtin", "--target", "gfx90a:xnack+:xnack-"}, env, dir.path(), false, 120);
  INFO(doubled.describe());
  CHECK(doubled.rc == 2);
  CHECK(count_lines(doubled.err) == 1);
  CHECK(doubled.err.find("xnack") != std::string::npos);
}

// R11 (rest): `KILN_CACHE_DISABLE=1 kiln prewarm` compiled everything, then reported each request failed.
TEST_CASE("prewarm without a disk cache (disabled or refused) is refused at once, saying why, in one line") {
  TempDir dir;
  const fs::path root = dir / "cache";
  const std::map<std::string, std::optional<std::string>> env{{"KILN_CACHE_DIR", root.string()},
                                                              {"KILN_CACHE_PACKS", std::nullopt}};
  auto with = [&](std::map<std::string, std::optional<std::string>> extra) {
    for (const auto& [name, value] : env) extra.emplace(name, value);
    return extra;
  };
  const std::vector<std::string> args = {"prewarm", "--builtin", "saxpy", "--target", "sm_90", "--target", "gfx90a"};
  const Run disabled = run_kiln_exact(args, with({{"KILN_CACHE_DISABLE", "1"}}), dir.path(), false, 120);
  INFO(disabled.describe());
  CHECK(disabled.rc == 2);
  CHECK(count_lines(disabled.err) == 1);
  CHECK(disabled.err.find("KILN_CACHE_DISABLE") != std::string::npos);
  CHECK(disabled.out.empty());

  fs::create_directories(root);
  REQUIRE(::chmod(root.c_str(), 0777) == 0);
  const Run refused = run_kiln_exact(args, env, dir.path(), false, 120);
  INFO(refused.describe());
  CHECK(refused.rc == 2);
  CHECK(count_lines(refused.err) == 1);
  CHECK(refused.err.find("world-writable") != std::string::npos);
  CHECK(refused.out.empty());
  REQUIRE(::chmod(root.c_str(), 0700) == 0);
}

// R11 (rest): errors found while replaying a manifest's request (an unknown built-in, a target the
// compiler does not support, an option its compiler cannot spell) named no file and line. Third probe:
// such a line stopped the whole replay; it now fails alone (bad input, 2) and the other lines compile.
TEST_CASE("prewarm --manifest: errors found when a request is replayed name the manifest's line") {
  TempDir dir;
  const std::map<std::string, std::optional<std::string>> env{{"KILN_CACHE_DIR", (dir / "cache").string()},
                                                              {"KILN_CACHE_PACKS", std::nullopt}};
  const auto line = [](const std::string& source, const std::string& options, const std::string& target) {
    return R"({"v":1,"source":")" + source + R"(","builtin":true,"source_hash":"0123456789abcdef0123456789abcdef",)" +
           R"("names":[],"options":[)" + options + R"(],"target":")" + target + R"("})";
  };
  const std::string good = line("saxpy.cu", "", "sm_90");
  struct Case {
    std::string bad;
    std::string says;
  };
  const std::vector<Case> cases = {
      {line("no_such_builtin.cu", "", "sm_90"), "no_such_builtin"},
      {line("saxpy.cu", "", "sm_35"), "sm_35"},
      {line("saxpy.cu", R"("--max-registers=32")", "gfx90a"), "--max-registers"},
  };
  for (const Case& c : cases) {
    const fs::path manifest = dir / "m.jsonl";
    std::ofstream(manifest) << good << "\n\n" << c.bad << "\n";
    // -q: no note that saxpy changed since this (hand-written) manifest was recorded.
    const Run run = run_kiln_exact({"prewarm", "-q", "--manifest", manifest.string()}, env, dir.path(), false, 120);
    INFO(c.bad << "\n" << run.describe());
    CHECK(run.rc == 2);
    const std::size_t failed = run.out.find("failed: ");
    REQUIRE(failed != std::string::npos);
    const std::string reported = run.out.substr(failed, run.out.find('\n', failed) - failed);
    CHECK(reported.find("manifest " + manifest.string() + " line 3: ") != std::string::npos);
    CHECK(reported.find(c.says) != std::string::npos);
    CHECK(run.out.find("1 failed") != std::string::npos);  // the good line was prewarmed, not stopped
    CHECK(fs::exists(dir / "cache" / "v1"));
  }
}

// Second probe: show and export treated an entry the engine refuses (world-writable, or in a
// world-writable shard) as fine (exit 0), and export copied it, or a whole refused cache, into a pack,
// which every machine that mounts it trusts.
TEST_CASE("show and export report entries the engine refuses; export carries none of them, nor a refused cache") {
  TempDir dir;
  const fs::path root = dir / "cache";
  const std::vector<fs::path> entries = fill_cache(root, 3);
  const std::map<std::string, std::optional<std::string>> env{{"KILN_CACHE_DIR", root.string()},
                                                              {"KILN_CACHE_PACKS", std::nullopt}};
  const auto key_of = [](const fs::path& entry) {
    return entry.parent_path().filename().string() + entry.stem().string();
  };
  REQUIRE(::chmod(entries[0].c_str(), 0666) == 0);
  const Run show = run_kiln_exact({"cache", "show", key_of(entries[0])}, env, dir.path());
  INFO(show.describe());
  CHECK(show.rc == 1);
  CHECK(show.out.find("REFUSED") != std::string::npos);
  CHECK(show.out.find("world-writable") != std::string::npos);
  const Run show_json = run_kiln_exact({"cache", "show", key_of(entries[0]), "--json"}, env, dir.path());
  INFO(show_json.describe());
  CHECK(show_json.rc == 1);
  CHECK_THAT(show_json.parsed().at("refused").get<std::string>(), Catch::Contains("world-writable"));
  const Run fine = run_kiln_exact({"cache", "show", key_of(entries[1])}, env, dir.path());
  INFO(fine.describe());
  CHECK(fine.rc == 0);
  CHECK(fine.out.find("REFUSED") == std::string::npos);

  const fs::path pack = dir / "out.kpack";
  const Run exported = run_kiln_exact({"cache", "export", pack.string()}, env, dir.path());
  INFO(exported.describe());
  CHECK(exported.rc == 1);
  CHECK(exported.out.find("export: 2 entries") != std::string::npos);
  CHECK(exported.out.find("skipped 1 refused") != std::string::npos);
  CHECK(exported.err.find(key_of(entries[0])) != std::string::npos);
  REQUIRE(::chmod(entries[0].c_str(), 0600) == 0);

  // A refused cache root: nothing leaves it.
  fs::remove(pack);
  REQUIRE(::chmod(root.c_str(), 0777) == 0);
  const Run refused = run_kiln_exact({"cache", "export", pack.string()}, env, dir.path());
  INFO(refused.describe());
  CHECK(refused.rc == 2);
  CHECK(refused.err.find("world-writable") != std::string::npos);
  CHECK_FALSE(fs::exists(pack));
  const Run refused_show = run_kiln_exact({"cache", "show", key_of(entries[1])}, env, dir.path());
  INFO(refused_show.describe());
  CHECK(refused_show.rc == 1);
  CHECK(refused_show.out.find("REFUSED") != std::string::npos);
  REQUIRE(::chmod(root.c_str(), 0700) == 0);
}

// Third probe, defect 2: a link in place of a shard directory was entered by verify (its target's
// entry counted as ok) and verify --fix removed files and a FIFO from the link's target. Every walker
// now treats such a link as the engine does: refused, not entered; --fix removes the link itself.
TEST_CASE("walkers never enter a link in place of a cache folder; verify --fix removes only paths inside the cache") {
  TempDir dir;
  const fs::path root = dir / "cache";
  const std::vector<fs::path> entries = fill_cache(root, 8);
  const fs::path entry_shard = entries[0].parent_path();
  // The foreign folders, each holding what a walker would take for its own: an entry, a damaged
  // entry-named file, a manifest-named file, a stray file and a FIFO.
  const auto foreign = [&](const std::string& name) {
    const fs::path folder = dir / name;
    fs::create_directories(folder);
    std::ofstream(folder / "precious.txt") << "not the cache's\n";
    REQUIRE(::mkfifo((folder / "pipe").c_str(), 0600) == 0);
    std::ofstream(folder / "000000000000000000000000000000.kiln") << "garbage at an entry name\n";
    std::ofstream(folder / "000000000000000000000000000000.kman") << "garbage at a manifest name\n";
    return folder;
  };
  const fs::path moved = dir / "moved-shard";  // the real shard's files, now behind a link
  fs::rename(entry_shard, moved);
  std::ofstream(moved / "precious.txt") << "not the cache's\n";
  REQUIRE(::mkfifo((moved / "pipe").c_str(), 0600) == 0);
  std::ofstream(moved / "000000000000000000000000000000.kiln") << "garbage at an entry name\n";
  fs::create_directory_symlink(moved, entry_shard);
  const fs::path manifests = root / "manifests";
  fs::create_directories(manifests);
  const fs::path manifest_target = foreign("manifest-shard");
  const fs::path manifest_link = manifests / "00";
  fs::create_directory_symlink(manifest_target, manifest_link);
  const auto foreign_files = [](const fs::path& folder) {
    std::vector<std::string> names;
    for (const auto& item : fs::directory_iterator(folder)) names.push_back(item.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  const std::vector<std::string> moved_before = foreign_files(moved);
  const std::vector<std::string> manifest_before = foreign_files(manifest_target);
  const std::map<std::string, std::optional<std::string>> env{{"KILN_CACHE_DIR", root.string()},
                                                              {"KILN_CACHE_PACKS", std::nullopt}};
  const auto untouched = [&] {
    CHECK(foreign_files(moved) == moved_before);
    CHECK(foreign_files(manifest_target) == manifest_before);
  };
  const std::size_t inside = static_cast<std::size_t>(std::count_if(
      entries.begin(), entries.end(), [&](const fs::path& e) { return e.parent_path() != entry_shard; }));

  const Run ls = run_kiln_exact({"cache", "ls", "--json"}, env, dir.path(), false, 30);
  INFO(ls.describe());
  CHECK(ls.rc == 1);
  const Run stats = run_kiln_exact({"cache", "stats", "--json"}, env, dir.path(), false, 30);
  INFO(stats.describe());
  CHECK(stats.parsed().at("entries") == inside);  // the linked shard's entry is not this cache's
  CHECK(stats.parsed().at("not_entries") == 1);   // the link itself

  const Run verify = run_kiln_exact({"cache", "verify", "--json"}, env, dir.path(), false, 30);
  INFO(verify.describe());
  CHECK(verify.rc == 1);
  CHECK(verify.parsed().at("entries") == inside);
  CHECK(verify.parsed().at("ok") == inside);
  untouched();

  const Run exported = run_kiln_exact({"cache", "export", (dir / "p.kpack").string()}, env, dir.path(), false, 30);
  INFO(exported.describe());
  CHECK(exported.out.find("export: " + std::to_string(inside) + " entries") != std::string::npos);
  untouched();

  const Run fix = run_kiln_exact({"cache", "verify", "--fix"}, env, dir.path(), false, 30);
  INFO(fix.describe());
  CHECK(fix.rc == 0);
  CHECK_FALSE(fs::exists(fs::symlink_status(entry_shard)));
  CHECK_FALSE(fs::exists(fs::symlink_status(manifest_link)));
  untouched();

  // The whole manifests folder as a link, and the links back for clear and prune.
  fs::remove_all(manifests);
  const fs::path manifests_target = dir / "manifests-elsewhere";
  fs::create_directories(manifests_target);
  fs::create_directory_symlink(manifest_target, manifests_target / "00");
  fs::create_directory_symlink(manifests_target, manifests);
  fs::create_directory_symlink(moved, entry_shard);
  const Run linked = run_kiln_exact({"cache", "verify", "--fix"}, env, dir.path(), false, 30);
  INFO(linked.describe());
  CHECK(linked.out.find("symbolic link") != std::string::npos);
  CHECK_FALSE(fs::exists(fs::symlink_status(manifests)));
  CHECK(fs::is_symlink(manifests_target / "00"));
  untouched();
  fs::create_directory_symlink(moved, entry_shard);
  fs::create_directory_symlink(manifests_target, manifests);
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"cache", "prune", "--max-size", "1"}, {"cache", "clear"}}) {
    const Run run = run_kiln_exact(command, env, dir.path(), false, 30);
    INFO(run.describe());
    CHECK(run.rc != 2);
    untouched();
    CHECK(fs::is_symlink(manifests_target / "00"));
  }
}

// Third probe: `export --target gfx9999` wrote an empty pack and exited 0.
TEST_CASE("export --target that matches no entry writes no pack and names the targets the cache holds") {
  TempDir dir;
  const fs::path root = dir / "cache";
  (void)fill_cache(root, 2);
  const fs::path pack = dir / "p.kpack";
  const std::map<std::string, std::optional<std::string>> env{{"KILN_CACHE_DIR", root.string()},
                                                              {"KILN_CACHE_PACKS", std::nullopt}};
  const Run run = run_kiln_exact({"cache", "export", pack.string(), "--target", "gfx9999"}, env, dir.path(), false, 30);
  INFO(run.describe());
  CHECK(run.rc == 2);
  CHECK(count_lines(run.err) == 1);
  CHECK(run.err.find("gfx9999") != std::string::npos);
  CHECK(run.err.find("nothing written") != std::string::npos);
  CHECK_FALSE(fs::exists(pack));
}

// Third probe: `kiln prewarm --bogus` said "see kiln --help" (the top level's), not the command's.
TEST_CASE("an unknown option names the command it was given to and that command's --help") {
  TempDir dir;
  const std::map<std::string, std::optional<std::string>> env{{"KILN_CACHE_DIR", (dir / "cache").string()}};
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"prewarm", "--bogus"}, {"cache", "ls", "--bogus"}}) {
    const Run run = run_kiln_exact(args, env, dir.path(), false, 30);
    INFO(run.describe());
    const std::string command = args.size() == 2 ? "kiln " + args[0] : "kiln " + args[0] + " " + args[1];
    CHECK(run.rc == 2);
    CHECK(count_lines(run.err) == 1);
    CHECK(run.err.find("--bogus") != std::string::npos);
    CHECK(run.err.find("see " + command + " --help") != std::string::npos);
  }
}

// Hardening issue, 4: `KILN_CACHE_READONLY=1 kiln prewarm` compiled every request, then failed each
// store; the error for KILN_CACHE_DISABLE=yes said "KILN_CACHE_DISABLE=1".
TEST_CASE("prewarm into a read-only cache is refused at once; the refusal names the variable's own value") {
  TempDir dir;
  const fs::path root = dir / "cache";
  fill_cache(root, 1);
  const std::map<std::string, std::optional<std::string>> env{{"KILN_CACHE_DIR", root.string()},
                                                              {"KILN_CACHE_PACKS", std::nullopt}};
  auto with = [&](std::map<std::string, std::optional<std::string>> extra) {
    for (const auto& [name, value] : env) extra.emplace(name, value);
    return extra;
  };
  const std::vector<std::string> args = {"prewarm", "--builtin", "saxpy", "--target", "sm_90"};
  const Run read_only = run_kiln_exact(args, with({{"KILN_CACHE_READONLY", "1"}}), dir.path(), false, 120);
  INFO(read_only.describe());
  CHECK(read_only.rc == 2);
  CHECK(count_lines(read_only.err) == 1);
  CHECK(read_only.err.find("KILN_CACHE_READONLY=1") != std::string::npos);
  CHECK(read_only.out.empty());

  const Run disabled = run_kiln_exact(args, with({{"KILN_CACHE_DISABLE", "yes"}}), dir.path(), false, 120);
  INFO(disabled.describe());
  CHECK(disabled.rc == 2);
  CHECK(count_lines(disabled.err) == 1);
  CHECK(disabled.err.find("KILN_CACHE_DISABLE=yes") != std::string::npos);
  CHECK(disabled.err.find("KILN_CACHE_DISABLE=1") == std::string::npos);
}

// Hardening issue, 5: a manifest with one unparsable line (a recorder killed mid-append) or one unknown
// option compiled nothing (rc 2, 0 entries); that line now fails alone, as an unknown target does.
TEST_CASE("prewarm --manifest: an unparsable line or an unknown option fails that line only") {
  TempDir dir;
  const std::map<std::string, std::optional<std::string>> env{{"KILN_CACHE_DIR", (dir / "cache").string()},
                                                              {"KILN_CACHE_PACKS", std::nullopt}};
  const std::string good =
      R"({"v":1,"source":"saxpy.cu","builtin":true,"source_hash":"0123456789abcdef0123456789abcdef",)"
      R"("names":[],"options":[],"target":"sm_90"})";
  const std::string bad_option =
      R"({"v":1,"source":"saxpy.cu","builtin":true,"source_hash":"0123456789abcdef0123456789abcdef",)"
      R"("names":[],"options":["--no-such-option"],"target":"sm_90"})";
  const fs::path manifest = dir / "m.jsonl";
  // Line 2 is a record cut short by a recorder killed mid-append; line 3 asks for an unknown option.
  std::ofstream(manifest) << good << "\n" << good.substr(0, 40) << "\n" << bad_option << "\n";
  const Run run =
      run_kiln_exact({"prewarm", "-q", "--manifest", manifest.string(), "--json"}, env, dir.path(), false, 120);
  INFO(run.describe());
  CHECK(run.rc == 2);
  const json report = run.parsed();
  CHECK(report.at("summary").at("requests") == 3);
  CHECK(report.at("summary").at("failed").get<int>() >= 2);
  std::vector<std::string> errors;
  for (const json& request : report.at("requests")) {
    if (request.at("status") == "failed") errors.push_back(request.at("error").get<std::string>());
  }
  const auto said = [&](const std::string& what) {
    return std::any_of(errors.begin(), errors.end(),
                       [&](const std::string& error) { return error.find(what) != std::string::npos; });
  };
  CHECK(said("manifest " + manifest.string() + " line 2: not valid JSON"));
  CHECK(said("manifest " + manifest.string() + " line 3: \"options\""));
  CHECK(said("--no-such-option"));
  CHECK(report.at("summary").at("targets") == json::array({"sm_90"}));

  // A file none of whose lines is a request is no manifest: refused whole, in one line, as before.
  const fs::path garbage = dir / "garbage.jsonl";
  std::ofstream(garbage) << "this is not\na manifest\n";
  const Run refused = run_kiln_exact({"prewarm", "--manifest", garbage.string()}, env, dir.path(), false, 60);
  INFO(refused.describe());
  CHECK(refused.rc == 2);
  CHECK(count_lines(refused.err) == 1);
  CHECK(refused.err.find("line 1") != std::string::npos);
  CHECK(refused.out.empty());
}

// Hardening issue, 6: a --source or --header holding a NUL byte was accepted (a compiler reads C strings:
// the text after the NUL would be lost); the Python API refuses it.
TEST_CASE("prewarm refuses a --source or --header that holds a NUL byte") {
  TempDir dir;
  const std::map<std::string, std::optional<std::string>> env{{"KILN_CACHE_DIR", (dir / "cache").string()},
                                                              {"KILN_CACHE_PACKS", std::nullopt}};
  const std::string kernel = "extern \"C\" __global__ void k(float* x) { x[0] = 1; }\n";
  std::ofstream(dir / "nul.cu", std::ios::binary) << kernel << std::string("// \0 after\n", 11);
  std::ofstream(dir / "plain.cu", std::ios::binary) << "#include \"h.h\"\n" << kernel;
  std::ofstream(dir / "nul.h", std::ios::binary) << std::string("#define A 1\0\n", 13);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"prewarm", "--source", (dir / "nul.cu").string(), "--kernel", "k", "--target",
                                 "sm_90"},
        {"prewarm", "--source", (dir / "plain.cu").string(), "--header", "h.h=" + (dir / "nul.h").string(), "--kernel",
         "k", "--target", "sm_90"}}) {
    const Run run = run_kiln_exact(args, env, dir.path(), false, 60);
    INFO(run.describe());
    CHECK(run.rc == 2);
    CHECK(count_lines(run.err) == 1);
    CHECK(run.err.find("NUL byte") != std::string::npos);
    CHECK(run.out.empty());
  }
}

// Hardening issue, 7: an entry's kind was not checked against its target: an lto_90 entry relabelled
// PTX was served as PTX and passed verify.
TEST_CASE("verify reports an entry whose kind is not the one its target makes") {
  TempDir dir;
  const fs::path root = dir / "cache";
  kiln::cache::StoreConfig config;
  config.root = root;
  kiln::cache::Store store(config);
  Entry entry = make_entry("relabelled", 100, "lto_90");
  entry.aux.clear();
  entry.payload.assign(256, std::byte{0x11});
  std::memcpy(entry.payload.data(), kiln::cache::kLtoIrMagic, sizeof(kiln::cache::kLtoIrMagic));
  entry.payload_kind = kiln::PayloadKind::ptx;  // relabelled: every byte else is an LTO-IR entry's
  const std::vector<std::byte> bytes = kiln::cache::serialize(entry);
  const fs::path path = store.entry_path(entry.key_hash);
  fs::create_directories(path.parent_path());
  fs::permissions(path.parent_path(), fs::perms::owner_all, fs::perm_options::replace);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
  const std::map<std::string, std::optional<std::string>> env{{"KILN_CACHE_DIR", root.string()},
                                                              {"KILN_CACHE_PACKS", std::nullopt}};
  const Run verify = run_kiln_exact({"cache", "verify"}, env, dir.path());
  INFO(verify.describe());
  CHECK(verify.rc == 1);
  CHECK(verify.out.find("verify: 1 entry: 0 ok, 1 bad") != std::string::npos);
  CHECK(verify.out.find("lto_90") != std::string::npos);
  const Run fix = run_kiln_exact({"cache", "verify", "--fix"}, env, dir.path());
  INFO(fix.describe());
  CHECK(fix.rc == 0);
  CHECK_FALSE(fs::exists(path));
}

// Hardening issue, 10: KILN_RECORD= (set, empty) was silently ignored while KILN_CACHE_DIR= is refused.
// Both name a path, and an empty one is almost always an unset shell variable: both are refused.
TEST_CASE("an empty KILN_RECORD is refused, as an empty KILN_CACHE_DIR is") {
  TempDir dir;
  const std::map<std::string, std::optional<std::string>> env{
      {"KILN_CACHE_DIR", (dir / "cache").string()}, {"KILN_CACHE_PACKS", std::nullopt}, {"KILN_RECORD", ""}};
  const Run run = run_kiln_exact({"prewarm", "--builtin", "saxpy", "--target", "sm_90"}, env, dir.path(), false, 120);
  INFO(run.describe());
  CHECK(run.rc == 2);
  CHECK(count_lines(run.err) == 1);
  CHECK(run.err.find("KILN_RECORD") != std::string::npos);
  CHECK(run.out.empty());
}

// Hardening issue, 11: verify walked through a v1/ that is a link ("1 entries: 1 ok" beside "the cache
// is refused"); verify --fix there warned twice and stopped with rc 2.
TEST_CASE("verify never walks through a linked v1/, and --fix there reports the refusal once") {
  TempDir dir;
  const fs::path elsewhere = dir / "elsewhere";
  const std::vector<fs::path> foreign = fill_cache(elsewhere, 1);
  const fs::path root = dir / "cache";
  fs::create_directories(root);
  fs::permissions(root, fs::perms::owner_all, fs::perm_options::replace);
  fs::create_directory_symlink(elsewhere / "v1", root / "v1");
  const std::map<std::string, std::optional<std::string>> env{{"KILN_CACHE_DIR", root.string()},
                                                              {"KILN_CACHE_PACKS", std::nullopt}};
  const Run verify = run_kiln_exact({"cache", "verify"}, env, dir.path());
  INFO(verify.describe());
  CHECK(verify.rc == 1);
  CHECK(verify.out.find("0 entries") != std::string::npos);
  CHECK(verify.out.find("v1 is not a directory") != std::string::npos);
  const Run fix = run_kiln_exact({"cache", "verify", "--fix"}, env, dir.path());
  INFO(fix.describe());
  CHECK(fix.rc == 1);
  CHECK(count_of(fix.out + fix.err, "v1 is not a directory") == 1);
  CHECK(fs::exists(foreign[0]));
}

TEST_CASE("counts of one are singular in the CLI's summaries") {
  TempDir dir;
  const fs::path root = dir / "cache";
  fill_cache(root, 1);
  const std::map<std::string, std::optional<std::string>> env{{"KILN_CACHE_DIR", root.string()},
                                                              {"KILN_CACHE_PACKS", std::nullopt}};
  const Run verify = run_kiln_exact({"cache", "verify"}, env, dir.path());
  INFO(verify.describe());
  CHECK(verify.out.find("verify: 1 entry: 1 ok, 0 bad") != std::string::npos);
  const Run ls = run_kiln_exact({"cache", "ls"}, env, dir.path());
  INFO(ls.describe());
  CHECK(ls.out.find("1 entry, ") != std::string::npos);
  const Run exported = run_kiln_exact({"cache", "export", (dir / "one.kpack").string()}, env, dir.path());
  INFO(exported.describe());
  CHECK(exported.out.find("export: 1 entry (") != std::string::npos);
  // A pack of one entry, as kiln devices lists it.
  auto with_pack = env;
  with_pack["KILN_CACHE_PACKS"] = (dir / "one.kpack").string();
  const Run devices = run_kiln_exact({"devices"}, with_pack, dir.path(), false, 60);
  INFO(devices.describe());
  CHECK(devices.out.find("one.kpack (1 entry)") != std::string::npos);
  const Run cleared = run_kiln_exact({"cache", "clear"}, env, dir.path());
  INFO(cleared.describe());
  CHECK(cleared.out.find("clear: removed 1 entry (") != std::string::npos);
}

// KILN_DEVICE naming a device the machine lacks stopped `kiln devices` itself ("device 3 requested ... but there is
// no device"): the one command that says what the machine has. It lists everything and names the problem (exit 1).
TEST_CASE("kiln devices diagnoses a KILN_DEVICE the machine does not have") {
  TempDir dir;
  std::map<std::string, std::optional<std::string>> env{{"KILN_CACHE_DIR", (dir / "cache").string()},
                                                        {"KILN_DEVICE", "3"}};
  const Run listed = run_kiln_exact({"devices", "--json"}, env, dir.path(), false, 60);
  INFO(listed.describe());
  const auto document = nlohmann::json::parse(listed.out);
  std::size_t devices = 0;
  for (const auto& lane : document.at("lanes")) {
    if (lane.at("vendor") == document.at("active_vendor")) devices = lane.at("devices").size();
  }
  if (devices > 3) return;  // a machine with a fourth device: nothing to diagnose
  CHECK(listed.rc == 1);
  CHECK(document.at("requested_device") == 3);
  CHECK(document.at("device_problem").get<std::string>().find("KILN_DEVICE=3 names no device here") == 0);
  const Run text = run_kiln_exact({"devices"}, env, dir.path(), false, 60);
  INFO(text.describe());
  CHECK(text.rc == 1);
  CHECK(text.err.find("kiln: error") == std::string::npos);
  CHECK(text.out.find("kernels run on: ") != std::string::npos);
  CHECK(text.out.find("device: KILN_DEVICE=3 names no device here (") != std::string::npos);
  CHECK(text.out.find("cache: ") != std::string::npos);
  env["KILN_DEVICE"] = "0";  // every engine's default: never a problem
  CHECK(run_kiln_exact({"devices"}, env, dir.path(), false, 60).rc == 0);
}

// A lane's status joined its problems with ';' and no space ("... KILN_CUDA_PATH;no CUDA driver ...").
TEST_CASE("kiln devices separates a lane's problems with \"; \"") {
  TempDir dir;
  const std::map<std::string, std::optional<std::string>> env{{"KILN_CACHE_DIR", (dir / "cache").string()},
                                                              {"KILN_CUDA_PATH", (dir / "no-toolkit").string()}};
  const Run run = run_kiln_exact({"devices"}, env, dir.path(), false, 60);
  INFO(run.describe());
  CHECK(run.out.find("no NVRTC found") != std::string::npos);
  for (std::size_t at = run.out.find(';'); at != std::string::npos; at = run.out.find(';', at + 1)) {
    INFO("at " << at);
    CHECK((at + 1 == run.out.size() || run.out[at + 1] == ' ' || run.out[at + 1] == '\n'));
  }
}
