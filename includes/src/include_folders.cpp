#include "include_folders.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "kiln/base/log.hpp"
#include "stat_memo.hpp"

namespace kiln::cache::detail {

IncludeFolders::IncludeFolders(DependencyManifests& manifests, AtomicCounters& counters)
    : m_manifests(manifests), m_counters(counters), m_lean(lean_from_environment()) {}

IncludeFolders::IncludeFolders(DependencyManifests& manifests, Storage& storage, AtomicCounters& counters)
    : m_manifests(manifests), m_storage(&storage), m_counters(counters), m_lean(lean_from_environment()) {}

bool IncludeFolders::lean_from_environment() {
  const char* setting = std::getenv("KILN_LEAN_HEADERS");
  if (setting == nullptr || setting[0] == '\0') return true;
  const std::string_view value = setting;
  if (value == "0" || value == "off") return false;
  if (value != "1" && value != "on") {
    KILN_LOG(warn, "KILN_LEAN_HEADERS='{}' is not 0 or 1: lean header sets on", value);
  }
  return true;
}

std::vector<std::filesystem::path> IncludeFolders::folders(std::span<const std::filesystem::path> include_dirs,
                                                           const std::filesystem::path* toolkit_library) const {
  std::vector<std::filesystem::path> folders(include_dirs.begin(), include_dirs.end());
  if (toolkit_library != nullptr) {
    for (std::filesystem::path& folder : toolkit_include_dirs(*toolkit_library)) folders.push_back(std::move(folder));
  }
  return checked_include_folders(folders, &ManifestsAccess::stat_memo(m_manifests));
}

std::optional<Hash128> IncludeFolders::look_up(const SettleInput& input, LookupStats& looked,
                                               std::string& dependency_part) {
  const auto started = std::chrono::steady_clock::now();
  std::optional<Hash128> result = m_manifests.lookup(input.request_hash, input.request_canonical, &looked, &dependency_part);
  KILN_LOG(debug,
           "{}: dependency manifest {}: {} in {:.3f} ms (read {} of {} bytes {:.3f}, parse {:.3f}, check {:.3f} ms, of "
           "which {:.3f} ms settling paths on {} thread(s): {} stat, {} absent under an absent folder, {} from the stat "
           "memo, {} header(s) re-read{})",
           input.source_name, input.request_hash.hex(), to_string(looked.outcome),
           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count(),
           looked.bytes_read, looked.manifest_bytes, looked.read_ns / 1e6, looked.parse_ns / 1e6, looked.check_ns / 1e6,
           looked.settle_ns / 1e6, looked.settle_threads, looked.stats, looked.inferred_absent, looked.memo_hits,
           looked.reads, looked.validated_hits != 0 ? "; a set checked moments ago" : "");
  return result;
}

namespace {

/// What a dependency manifest from another machine may name for this request (ManifestScope): below its
/// include folders, or one of the absolute paths its source and in-memory headers include, by name or by
/// a computed include's guesses (as the resolver makes them), and its retry names. A file such an include
/// reaches is not in it: a manifest naming one is refused and the request resolves, which is correct.
ManifestScope scope_of(const SettleInput& input, const ScanResult& source_scan) {
  ManifestScope scope;
  for (const std::filesystem::path& folder : input.folders) scope.folders.push_back(folder.string());
  Defines defines;
  add_flag_defines(MacroContext::from_flags(input.flags, input.traits, input.compiler), defines);
  std::vector<std::string> computed;
  const auto take = [&](const ScanResult& scanned) {
    for (const IncludeRef& ref : scanned.refs) {
      if (!ref.name.empty() && ref.name.front() == '/') scope.files.push_back(normalize(ref.name));
    }
    for (const Define& d : scanned.defines) defines[d.name].push_back({d.text, d.function_like});
    for (const std::string& operand : scanned.computed) computed.push_back(operand);
  };
  take(source_scan);  // the settle's one scan of the source
  for (const MemoryHeader& header : input.memory_headers) {
    ScanResult scanned;
    scan_includes(header.text, scanned);
    take(scanned);
  }
  for (const std::string& operand : computed) {
    for (const Guess& guess : guess_computed(operand, defines)) {
      if (!guess.name.empty() && guess.name.front() == '/') scope.files.push_back(normalize(guess.name));
    }
  }
  for (const std::string& name : input.retry_names) {
    if (!name.empty() && name.front() == '/') scope.files.push_back(normalize(name));
  }
  return scope;
}

}  // namespace

template <class Scanned>
std::optional<Settled> IncludeFolders::by_manifest(const SettleInput& input, const Scanned& scanned) {
  // The first level: the manifest of the request key names the entry's key when every recorded header
  // still has its stat (or its digest) and every path probed empty is still empty. No header is read.
  std::string dependency_part;
  LookupStats looked;
  std::optional<Hash128> result = look_up(input, looked, dependency_part);
  // None here: a node with the same tree may have recorded one. Fetched, it is installed only when it
  // names nothing a resolve of this request could not read, after each header it names was read and
  // hashed once here (so this lookup re-reads none whose digest matched; no resolve).
  // (The scope is made only where a remote may be asked: it scans the request's texts.)
  if (looked.outcome == ManifestOutcome::no_manifest && m_storage != nullptr && !m_storage->remotes().empty() &&
      m_manifests.mode() == StoreMode::read_write &&
      m_manifests.fetch(*m_storage, input.request_hash, input.request_canonical, scope_of(input, scanned()))) {
    result = look_up(input, looked, dependency_part);
  }
  if (!result) return std::nullopt;
  // The answer is taken only when it is the hash of this request keyed with the dependency part of
  // the result that matched: canonical_dependencies() of a set whose every header was found here
  // with its recorded digest and every absent path found absent. So whatever a manifest says, even
  // a hostile one with a valid MAC from a remote, it can only name the key of this request with
  // header bytes that are on this machine now: a set no honest resolve made has no entry (a miss,
  // and the compile resolves first); a set one made is what this request reads. At worst a miss,
  // never a wrong binary.
  const Hash128 entry = kiln::includes::entry_key_hash(input.request_canonical, dependency_part);
  if (entry == *result) {
    m_counters.manifest_hits.fetch_add(1, std::memory_order_relaxed);
    return Settled{std::move(dependency_part), nullptr};
  }
  // A manifest whose result does not hash back to itself (not ours, or another format): resolve.
  KILN_LOG(info, "dependency manifest of {} names {} but its headers give {}; resolving the includes",
           input.request_hash.hex(), result->hex(), entry.hex());
  return std::nullopt;
}

std::optional<Settled> IncludeFolders::settle_by_manifest(const SettleInput& input) {
  std::optional<ScanResult> source_scan;
  return by_manifest(input, [&]() -> const ScanResult& {
    if (!source_scan) scan_includes(input.source_text, source_scan.emplace());
    return *source_scan;
  });
}

Settled IncludeFolders::settle(const SettleInput& input, bool use_manifest) {
  // The source is scanned once per settle, when first needed (a manifest's answer needs no scan).
  std::optional<ScanResult> source_scan;
  const auto scanned = [&]() -> const ScanResult& {
    if (!source_scan) scan_includes(input.source_text, source_scan.emplace());
    return *source_scan;
  };
  if (use_manifest) {
    if (std::optional<Settled> settled = by_manifest(input, scanned)) return std::move(*settled);
  }
  if (input.ahead != nullptr) {
    if (input.ahead->resolved) m_counters.include_resolves.fetch_add(1, std::memory_order_relaxed);
    return *input.ahead;
  }
  return resolve(input, std::vector<std::string>(input.retry_names.begin(), input.retry_names.end()), input.full,
                 /*count=*/true, &scanned());
}

Settled IncludeFolders::resolve_ahead(const SettleInput& input) {
  return resolve(input, std::vector<std::string>(input.retry_names.begin(), input.retry_names.end()), input.full,
                 /*count=*/false);
}

std::optional<IncludeFolders::Retry> IncludeFolders::retry(const SettleInput& input, const ResolvedIncludes& resolved,
                                                           std::string_view compile_log) {
  std::optional<std::string> missing = missing_include_from_log(compile_log);
  // The retry's one scan of the source: for the lean walk's signature and the resolve.
  std::optional<ScanResult> source_scan;
  const auto scanned = [&]() -> const ScanResult& {
    if (!source_scan) scan_includes(input.source_text, source_scan.emplace());
    return *source_scan;
  };
  if (missing && resolved.lean) {
    // The lean set's compile asked for a header: a branch the walk judged untaken was taken (an untaken
    // name), or the header is missing from every branch's set too. Once, with every branch; and the
    // requests with this walk's signature are resolved in full from now on.
    {
      const MacroContext macros = MacroContext::from_flags(input.flags, input.traits, input.compiler);
      IncludeInput in{.source_name = input.source_name,
                      .source_text = input.source_text,
                      .memory_headers = input.memory_headers,
                      .folders = {input.folders.begin(), input.folders.end()},
                      .traits = input.traits,
                      .retry_names = {input.retry_names.begin(), input.retry_names.end()}};
      in.lean = true;
      in.macros = &macros;
      const Hash128 signature = ResolvedSets::signature(in, scanned());
      const std::lock_guard lock(m_lean_failed_mutex);
      m_lean_failed.insert(signature);
    }
    std::vector<std::string> names(input.retry_names.begin(), input.retry_names.end());
    std::string name;
    const bool untaken = untaken_include_name(*missing);
    if (!untaken && names.size() < kMaxRetries && std::find(names.begin(), names.end(), *missing) == names.end()) {
      name = *missing;
      names.push_back(name);
    }
    Settled settled = resolve(input, std::move(names), /*full=*/true, /*count=*/true, &scanned());
    // A real name that no folder has either: the compiler reached that include through includes the lean
    // set handed over as the full set does (an untaken one would have failed first, and the compilers stop
    // at a header they cannot open), so the full set's compile would fail on it too: the error stands.
    if (!untaken && std::find(settled.includes->unresolved.begin(), settled.includes->unresolved.end(), *missing) !=
                        settled.includes->unresolved.end()) {
      return std::nullopt;
    }
    KILN_LOG(debug, "{}: the compiler asked for '{}', which the lean header set left out; compiling again with every "
             "branch's headers",
             input.source_name, *missing);
    return Retry{std::move(name), true, std::move(settled)};
  }
  if (!missing || input.retry_names.size() >= kMaxRetries ||
      std::find(input.retry_names.begin(), input.retry_names.end(), *missing) != input.retry_names.end()) {
    return std::nullopt;
  }
  std::vector<std::string> names(input.retry_names.begin(), input.retry_names.end());
  names.push_back(*missing);
  Settled settled = resolve(input, std::move(names), input.full, /*count=*/true, &scanned());
  if (settled.includes->dependencies.headers.size() <= resolved.dependencies.headers.size()) {
    return std::nullopt;  // no folder has it (only new absent probes): the error stands
  }
  KILN_LOG(debug, "{}: the compiler asked for '{}', which the include scan could not see; compiling again with it",
           input.source_name, *missing);
  return Retry{std::move(*missing), false, std::move(settled)};
}

void IncludeFolders::record(const Hash128& request_hash, std::string_view request_canonical,
                            const ResolvedIncludes* resolved, const Hash128& entry_hash) noexcept {
  // Only what the resolver read is recorded: a manifest hit is already recorded (and refreshed).
  if (resolved == nullptr) return;
  const std::vector<std::byte> bytes =
      m_manifests.record(request_hash, request_canonical, resolved->dependencies, entry_hash);
  if (m_storage != nullptr) m_storage->publish_manifest(request_hash, bytes);
}

Settled IncludeFolders::resolve(const SettleInput& input, std::vector<std::string> retry_names, bool full,
                                bool count, const ScanResult* source_scan) {
  IncludeInput in{.source_name = input.source_name,
                  .source_text = input.source_text,
                  .memory_headers = input.memory_headers,
                  .folders = {input.folders.begin(), input.folders.end()},
                  .traits = input.traits,
                  .retry_names = std::move(retry_names)};
  // The lean walk, unless it is off, this is a retry, or a lean walk of this signature missed a header. The
  // macros are the request's either way: computed includes are expanded with its -D definitions.
  const MacroContext macros = MacroContext::from_flags(input.flags, input.traits, input.compiler);
  in.lean = m_lean && !full && in.retry_names.empty();
  in.macros = &macros;
  in.file_cache = &m_files;
  in.stat_memo = &ManifestsAccess::stat_memo(m_manifests);
  in.trust_window = m_manifests.config().trust_window;
  const auto started = std::chrono::steady_clock::now();
  const auto elapsed_ms = [&started] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  };
  ScanResult own_scan;
  if (source_scan == nullptr) {
    scan_includes(input.source_text, own_scan);
    source_scan = &own_scan;
  }
  in.source_scan = source_scan;
  Hash128 signature = ResolvedSets::signature(in, *source_scan);
  if (in.lean) {
    const std::lock_guard lock(m_lean_failed_mutex);
    if (m_lean_failed.contains(signature)) in.lean = false;
  }
  if (!in.lean) signature = ResolvedSets::signature(in, *source_scan);
  FileWork checked;
  if (std::optional<ResolvedSets::Set> set = m_sets.find(signature, *in.stat_memo, realtime_now_ns(), checked)) {
    auto resolved = for_source(*set->resolved, input.source_text, *source_scan, checked);
    KILN_LOG(debug, "{}: the includes resolved for an earlier request with the same includes still hold ({} header(s), "
             "{} path(s) probed absent; {} stat, {} from the stat memo): taken in {:.3f} ms",
             input.source_name, resolved->dependencies.headers.size(), resolved->dependencies.absent.size(),
             checked.stats, checked.memo_hits, elapsed_ms());
    return Settled{std::move(set->dependency_part), std::move(resolved)};
  }
  const std::uint64_t cached_before = log::enabled(log::Level::debug) ? m_files.usage().hits : 0;
  auto resolved = std::make_shared<const ResolvedIncludes>(resolve_includes(in));
  if (count) m_counters.include_resolves.fetch_add(1, std::memory_order_relaxed);
  std::string dependency_part = canonical_dependencies(resolved->dependencies);
  m_sets.remember(signature, ResolvedSets::Set{resolved, dependency_part});
  const auto ms = [](std::chrono::nanoseconds t) { return std::chrono::duration<double, std::milli>(t).count(); };
  KILN_LOG(debug, "{}: resolved the includes in {:.3f} ms ({}; {} {:.3f} ms{}, rewrite {:.3f} ms): {} header(s) ({} unchanged "
           "since an earlier resolve), {} path(s) probed absent; {} stat, {} from the stat memo, {} file(s) read{}; {} "
           "byte(s) handed to the compiler",
           input.source_name, elapsed_ms(),
           resolved->lean ? fmt::format("lean, {} include(s) left untaken", resolved->untaken) : std::string("every branch"),
           resolved->lean ? "walk" : "scan", ms(resolved->walk_time),
           resolved->walk_read_time.count() > 0
               ? fmt::format(" (reading {:.3f} ms, waiting for the read-ahead {:.3f} ms)", ms(resolved->walk_read_time),
                             ms(resolved->walk_wait_time))
               : std::string(),
           ms(resolved->rewrite_time),
           resolved->dependencies.headers.size(), m_files.usage().hits - cached_before,
           resolved->dependencies.absent.size(), resolved->work.stats, resolved->work.memo_hits, resolved->work.reads,
           resolved->read_ahead > 0 ? fmt::format(" ({} more read ahead)", resolved->read_ahead) : std::string(), [&] {
             std::size_t bytes = resolved->compiler_source.size();
             for (const CompilerHeader& h : resolved->compiler_headers) bytes += h.text.size();
             return bytes;
           }());
  return Settled{std::move(dependency_part), std::move(resolved), /*resolved=*/true};
}

}  // namespace kiln::cache::detail
