#include "common.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <mutex>
#include <system_error>
#include <unordered_map>

#include <fmt/format.h>

#include "kiln/base/hash.hpp"
#include "kiln/embedded.hpp"
#include "kiln/engine.hpp"

namespace kiln::cli {

std::string format_bytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return value < 10.0 ? fmt::format("{:.2f} {}", value, kUnits[unit]) : fmt::format("{:.1f} {}", value, kUnits[unit]);
}

std::int64_t to_unix(std::chrono::system_clock::time_point when) {
  return std::chrono::duration_cast<std::chrono::seconds>(when.time_since_epoch()).count();
}

std::string format_age(std::chrono::system_clock::time_point when) {
  const auto now = std::chrono::system_clock::now();
  if (when > now + std::chrono::seconds(60)) return "in the future";
  const std::int64_t seconds = std::max<std::int64_t>(0, to_unix(now) - to_unix(when));
  if (seconds < 120) return fmt::format("{} s", seconds);
  if (seconds < 2 * 3600) return fmt::format("{} min", seconds / 60);
  if (seconds < 2 * 86400) return fmt::format("{} h", seconds / 3600);
  return fmt::format("{} d", seconds / 86400);
}

std::string format_time(std::int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  if (gmtime_r(&t, &tm) == nullptr) return std::to_string(unix_seconds);
  char text[64];
  if (std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0) return std::to_string(unix_seconds);
  return text;
}

std::string format_seconds(double seconds) {
  if (seconds < 10.0) return fmt::format("{:.2f} s", seconds);
  if (seconds < 120.0) return fmt::format("{:.1f} s", seconds);
  const auto whole = static_cast<std::int64_t>(seconds);
  return fmt::format("{} min {} s", whole / 60, whole % 60);
}

std::string one_line(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '\n') {
      out += "; ";
    } else if (c != '\r') {
      out += c;
    }
  }
  return out;
}

std::chrono::seconds parse_age(std::string_view text, std::string_view flag) {
  const auto bad = [&] {
    return UsageError(
        fmt::format("invalid age '{}' for {} (expected a number with s, m, h, d or w, e.g. 30d, 12h)", text, flag));
  };
  if (text.empty()) throw bad();
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data()) throw bad();
  const std::string_view unit(end, static_cast<std::size_t>(text.data() + text.size() - end));
  std::uint64_t scale = 0;
  if (unit.empty() || unit == "s") {
    scale = 1;
  } else if (unit == "m" || unit == "min") {
    scale = 60;
  } else if (unit == "h") {
    scale = 3600;
  } else if (unit == "d") {
    scale = 86400;
  } else if (unit == "w") {
    scale = 7 * 86400;
  } else {
    throw bad();
  }
  if (value > static_cast<std::uint64_t>(INT64_MAX) / scale / 2) throw bad();
  return std::chrono::seconds(static_cast<std::int64_t>(value * scale));
}

std::uint64_t parse_size_flag(std::string_view text, std::string_view flag) {
  const auto size = cache::parse_size(text);
  if (!size) {
    throw UsageError(
        fmt::format("invalid size '{}' for {} (expected bytes or a number with K, M, G, e.g. 500M, 2G)", text, flag));
  }
  return *size;
}

std::unique_ptr<cache::Store> open_store() {
  cache::StoreConfig config;
  try {
    config = cache::StoreConfig::from_environment();
  } catch (const std::exception& error) {
    throw UsageError(error.what());
  }
  return std::make_unique<cache::Store>(std::move(config));
}

void require_writable(const cache::Store& store, std::string_view command) {
  if (store.mode() == cache::StoreMode::read_write) return;
  throw std::runtime_error(fmt::format("{}: the cache at {} is {}: {}", command, store.config().root.string(),
                                       cache::to_string(store.mode()), store.mode_reason()));
}

unsigned default_threads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return std::clamp(cores, 1U, 32U);
}

unsigned io_threads() { return std::clamp(2 * std::thread::hardware_concurrency(), 4U, 32U); }

std::vector<bool> remove_files(const std::vector<const cache::EntryFile*>& files, bool only_if_unchanged) {
  std::vector<char> removed(files.size(), 0);
  parallel_for(files.size(), 16, [&](std::size_t i) {
    const cache::EntryFile& file = *files[i];
    if (only_if_unchanged) {
      struct stat now {};
      if (::lstat(file.path.c_str(), &now) != 0) return;
      const auto mtime =
          std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
              std::chrono::seconds(now.st_mtim.tv_sec) + std::chrono::nanoseconds(now.st_mtim.tv_nsec)));
      if (mtime != file.mtime || static_cast<std::uint64_t>(now.st_size) != file.size) return;
    }
    removed[i] = ::unlink(file.path.c_str()) == 0 ? 1 : 0;
  });
  return {removed.begin(), removed.end()};
}

void parallel_for(std::size_t count, unsigned threads, const std::function<void(std::size_t)>& fn) {
  if (threads == 0) threads = default_threads();
  threads = static_cast<unsigned>(std::min<std::size_t>(threads, count));
  if (threads <= 1) {
    for (std::size_t i = 0; i < count; ++i) fn(i);
    return;
  }
  std::atomic<std::size_t> next{0};
  const std::size_t batch = std::clamp<std::size_t>(count / (threads * 16), 1, 64);
  const auto work = [&] {
    for (;;) {
      const std::size_t begin = next.fetch_add(batch);
      if (begin >= count) return;
      const std::size_t end = std::min(count, begin + batch);
      for (std::size_t i = begin; i < end; ++i) fn(i);
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& thread : pool) thread.join();
}

const std::string* find_part(const std::vector<cache::KeyPart>& parts, std::string_view name) {
  for (const cache::KeyPart& part : parts) {
    if (part.name == name) return &part.value;
  }
  return nullptr;
}

std::string describe_source(const std::vector<cache::KeyPart>& parts) {
  static const std::unordered_map<cache::Hash128, std::string, cache::Hash128Hasher> builtins = [] {
    std::unordered_map<cache::Hash128, std::string, cache::Hash128Hasher> out;
    for (const EmbeddedFile& file : embedded_files()) out.emplace(cache::hash128(file.text), std::string(file.name));
    return out;
  }();
  for (const char* name : {"source-name", "source_name"}) {
    if (const std::string* value = find_part(parts, name)) return *value;
  }
  const std::string* text = find_part(parts, "source");
  if (text == nullptr) return "?";
  const cache::Hash128 hash = cache::hash128(*text);
  if (const auto it = builtins.find(hash); it != builtins.end()) return it->second;
  return fmt::format("runtime source {} (hash {})", format_bytes(text->size()), hash.hex().substr(0, 16));
}

bool target_matches(std::string_view entry_target, std::string_view wanted) {
  if (entry_target == wanted) return true;
  return entry_target.size() > wanted.size() && entry_target.starts_with(wanted) && entry_target[wanted.size()] == ':';
}

void scan_store(const cache::Store& store, cache::ScanDepth depth, bool with_mtime,
                const std::function<void(unsigned shard, const cache::ScannedEntry&)>& fn,
                const std::function<void(unsigned shard, const cache::StrayFile&)>& on_stray) {
  parallel_for(cache::Store::kShardCount, io_threads(), [&](std::size_t shard) {
    const auto index = static_cast<unsigned>(shard);
    std::function<void(const cache::StrayFile&)> strays;
    if (on_stray) strays = [&](const cache::StrayFile& stray) { on_stray(index, stray); };
    store.scan_shard(
        index, depth, with_mtime, [&](const cache::ScannedEntry& scanned) { fn(index, scanned); }, strays);
  });
}

namespace {

cache::Hash128 held_key(const cache::ScannedEntry& scanned) {
  return scanned.entry != nullptr    ? scanned.entry->key_hash
         : scanned.header != nullptr ? scanned.header->key_hash
                                     : scanned.file_hash;
}

}  // namespace

EntryState entry_state(const cache::ScannedEntry& scanned) {
  if (!scanned.error.empty()) return scanned.io_error ? EntryState::unreadable : EntryState::damaged;
  if (held_key(scanned) != scanned.file_hash) return EntryState::damaged;
  return scanned.refused.empty() ? EntryState::ok : EntryState::refused;
}

std::string entry_problem(const cache::ScannedEntry& scanned) {
  if (!scanned.error.empty()) return std::string(scanned.error);
  const cache::Hash128 held = held_key(scanned);
  if (held != scanned.file_hash) {
    return fmt::format("file name says key {} but the entry holds key {}", scanned.file_hash.hex(), held.hex());
  }
  if (!scanned.refused.empty()) return fmt::format("refused: {}", scanned.refused);
  return {};
}

bool key_order(const cache::Hash128& a, const cache::Hash128& b) noexcept {
  return a.high != b.high ? a.high < b.high : a.low < b.low;
}

bool key_order(const cache::EntryFile& a, const cache::EntryFile& b) noexcept {
  return key_order(a.file_hash, b.file_hash);
}

bool is_plain_name(std::string_view kernel) { return !kernel.empty() && !is_name_expression(kernel); }

std::vector<std::vector<std::string>> name_sets(const std::vector<std::string>& kernels, bool one_program) {
  std::vector<std::vector<std::string>> sets;
  if (one_program) {
    sets.push_back(kernels);
    return sets;
  }
  bool plain = false;
  for (const std::string& kernel : kernels) {
    if (is_plain_name(kernel)) {
      if (!plain) sets.emplace_back();
      plain = true;
    } else if (std::none_of(sets.begin(), sets.end(),
                            [&](const auto& set) { return set.size() == 1 && set[0] == kernel; })) {
      sets.push_back({kernel});
    }
  }
  return sets;
}

std::string read_text_file(const std::filesystem::path& path, std::string_view what, std::uint64_t max_bytes) {
  const auto system_text = [](int error) { return std::error_code(error, std::system_category()).message(); };
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below, as is a device).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw UsageError(fmt::format("{} {}: cannot read: {}", what, path.string(), system_text(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    throw UsageError(fmt::format("{} {}: cannot read: {}", what, path.string(), system_text(errno)));
  }
  if (S_ISDIR(st.st_mode)) throw UsageError(fmt::format("{} {}: is a directory, not a file", what, path.string()));
  if (!S_ISREG(st.st_mode)) {
    throw UsageError(
        fmt::format("{} {}: not a regular file (a FIFO, socket or device is not read)", what, path.string()));
  }
  const auto too_large = [&](std::uint64_t size) {
    return UsageError(fmt::format("{} {}: {} bytes, over the limit of {} bytes (what one cache entry's key may hold)",
                                  what, path.string(), size, max_bytes));
  };
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) throw too_large(static_cast<std::uint64_t>(st.st_size));
  // Read to the end, but never past the limit (the file may grow while it is read).
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t length = 0;
  for (;;) {
    if (length == text.size()) {
      if (text.size() > max_bytes) throw too_large(text.size());
      text.resize(std::max<std::size_t>(text.size() * 2, 4096));
    }
    const ssize_t n = ::read(fd, text.data() + length, text.size() - length);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw UsageError(fmt::format("{} {}: read error: {}", what, path.string(), system_text(errno)));
    }
    if (n == 0) break;
    length += static_cast<std::size_t>(n);
  }
  if (length > max_bytes) throw too_large(length);
  text.resize(length);
  return text;
}

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

std::vector<std::string> with_include_options(std::vector<std::string> options,
                                              const std::vector<std::string>& include_dirs, bool toolkit_includes) {
  for (const std::string& dir : include_dirs) options.push_back("--include-path=" + dir);
  if (toolkit_includes) options.emplace_back("--toolkit-includes");
  return options;
}

}  // namespace kiln::cli
