#include "resolved_sets.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <string_view>
#include <vector>

#include "kiln/includes/dep_manifest.hpp"
#include "paths.hpp"
#include "stat_memo.hpp"

namespace kiln::cache::detail {
namespace {

/// Appends `text` length-prefixed, so no two field lists give the same bytes.
void field(std::string& out, std::string_view text) {
  const auto size = static_cast<std::uint64_t>(text.size());
  out.append(reinterpret_cast<const char*>(&size), sizeof size);
  out.append(text);
}

/// Whether what a stat found at a recorded path still agrees with the record: a header has its stat (the
/// same file, unchanged: a regular file, since it was one when read), an absent path no regular file.
bool header_holds(bool present, const FileStat& stat, const HeaderRecord& record) {
  return present && stat == record.stat;
}

}  // namespace

Hash128 ResolvedSets::signature(const IncludeInput& input, const ScanResult& source_scan) {
  std::string bytes = "kiln-resolve/1";
  field(bytes, input.traits.name);
  field(bytes, input.traits.opens_absolute_paths ? "absolute-paths-from-disk" : "absolute-paths-in-memory");
  field(bytes, std::to_string(input.folders.size()));
  for (const std::filesystem::path& folder : input.folders) field(bytes, folder.native());
  field(bytes, std::to_string(input.memory_headers.size()));
  for (const MemoryHeader& header : input.memory_headers) {
    field(bytes, header.name);
    field(bytes, hash128(header.text).hex());
  }
  field(bytes, std::to_string(input.retry_names.size()));
  for (const std::string& name : input.retry_names) field(bytes, name);
  // The source is looked into by its folder (quoted includes among the memory headers), its includes in
  // order, its computed includes' operands and its macro definitions (which may expand a computed include
  // anywhere in the tree): the source's bytes otherwise never change what is read.
  field(bytes, dirname(normalize(input.source_name)));
  field(bytes, std::to_string(source_scan.refs.size()));
  for (const IncludeRef& ref : source_scan.refs) {
    field(bytes, ref.name);
    const char flags[3] = {ref.angled ? 'a' : 'q', ref.next ? 'n' : '-', ref.has_include ? 'h' : 'i'};
    field(bytes, std::string_view(flags, sizeof flags));
  }
  // A lean walk is decided by the macros too: the request's (its flags) and the source's directives.
  const bool lean = input.lean && input.macros != nullptr && input.retry_names.empty();
  field(bytes, lean ? "lean" : "full");
  if (lean) {
    field(bytes, input.macros->signature());
    field(bytes, std::to_string(source_scan.directives.size()));
    for (const Directive& d : source_scan.directives) {
      const char flags[2] = {static_cast<char>('a' + static_cast<int>(d.kind)), d.function_like ? 'f' : 'o'};
      field(bytes, std::string_view(flags, sizeof flags));
      field(bytes, d.name);
      field(bytes, d.text);
      field(bytes, std::to_string(d.index));
    }
  }
  field(bytes, std::to_string(source_scan.computed.size()));
  for (const std::string& operand : source_scan.computed) field(bytes, operand);
  field(bytes, std::to_string(source_scan.defines.size()));
  for (const Define& d : source_scan.defines) {
    field(bytes, d.name);
    field(bytes, d.text);
    field(bytes, d.function_like ? "f" : "o");
  }
  // A computed include's names depend on the request's -D macros too (resolve.hpp), lean walk or not.
  if (!lean && input.macros != nullptr) field(bytes, input.macros->signature());
  return hash128(bytes);
}

std::optional<ResolvedSets::Set> ResolvedSets::find(const Hash128& signature, StatMemo& memo, std::int64_t now_ns,
                                                    FileWork& work) {
  Set set;
  {
    const std::lock_guard lock(m_mutex);
    const auto it = m_sets.find(signature);
    if (it == m_sets.end()) return std::nullopt;
    set = it->second;
  }
  const DependencySet& deps = set.resolved->dependencies;
  const std::size_t headers = deps.headers.size();
  std::vector<std::string_view> paths;
  paths.reserve(headers + deps.absent.size());
  for (const HeaderRecord& header : deps.headers) paths.emplace_back(header.path);
  for (const std::string& path : deps.absent) paths.emplace_back(path);

  // 0: not known yet, 1: holds, 2: differs (a memo answer that says a path holds a file where none was is
  // asked of stat again: a folder there counts as absent, as for the resolve).
  std::vector<std::uint8_t> verdict(paths.size(), 0);
  memo.find_each(std::span<const std::string_view>(paths), now_ns, [&](std::size_t i, const StatMemo::Seen& seen) {
    ++work.memo_hits;
    if (i < headers) {
      verdict[i] = header_holds(seen.present, seen.stat, deps.headers[i]) ? 1 : 2;
    } else if (!seen.present) {
      verdict[i] = 1;
    }
  });
  bool holds = std::none_of(verdict.begin(), verdict.end(), [](std::uint8_t v) { return v == 2; });
  for (std::size_t i = 0; holds && i < paths.size(); ++i) {
    if (verdict[i] != 0) continue;
    ++work.stats;
    const std::string path(paths[i]);
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
      const FileStat found = to_file_stat(st);
      memo.remember(path, StatMemo::Seen{true, found, now_ns});
      holds = i < headers ? S_ISREG(st.st_mode) && header_holds(true, found, deps.headers[i]) : !S_ISREG(st.st_mode);
    } else {
      const int error = errno;
      if (error == ENOENT || error == ENOTDIR) memo.remember(path, StatMemo::Seen{false, {}, now_ns});
      holds = i >= headers && (error == ENOENT || error == ENOTDIR || error == ENAMETOOLONG || error == ELOOP);
    }
  }
  if (!holds) {
    const std::lock_guard lock(m_mutex);
    const auto it = m_sets.find(signature);
    if (it != m_sets.end() && it->second.resolved == set.resolved) {
      m_sets.erase(it);
      std::erase(m_order, signature);
    }
    return std::nullopt;
  }
  return set;
}

void ResolvedSets::remember(const Hash128& signature, Set set) {
  const auto& headers = set.resolved->dependencies.headers;
  if (!std::all_of(headers.begin(), headers.end(), [](const HeaderRecord& h) { return h.trusted_stat; })) return;
  const std::lock_guard lock(m_mutex);
  if (!m_sets.contains(signature)) {
    while (m_sets.size() >= kMaxSets && !m_order.empty()) {  // the oldest goes
      m_sets.erase(m_order.front());
      m_order.erase(m_order.begin());
    }
    m_order.push_back(signature);
  }
  m_sets.insert_or_assign(signature, std::move(set));
}

std::shared_ptr<const ResolvedIncludes> for_source(const ResolvedIncludes& set, std::string_view text,
                                                   const ScanResult& scan, const FileWork& work) {
  auto out = std::make_shared<ResolvedIncludes>();
  out->dependencies = set.dependencies;
  out->compiler_headers = set.compiler_headers;
  out->compiler_source = rewrite_source(text, scan, set.source_links);
  out->prelude_end = rewritten_prelude_end(text, scan, set.source_links, out->compiler_source);
  out->source_links = set.source_links;
  out->unresolved = set.unresolved;
  out->computed = set.computed;
  out->work = work;
  out->lean = set.lean;  // (a retry after its compile must know it was lean)
  out->untaken = set.untaken;
  return out;
}

}  // namespace kiln::cache::detail
