// The resolver's lean walk (resolver.hpp): its walk in the compiler's order with a macro
// state (conditions.hpp), following only the includes a compile can reach; what it leaves untaken is
// rewritten to a name no compiler has (resolve.hpp, kUntakenPrefix). Its safety: ARCHITECTURE.md, the
// request path's include step.
#include <fmt/format.h>

#include <algorithm>

#include "resolver.hpp"

namespace kiln::cache::detail::resolving {
namespace {

/// The macro a file's include guard tests (#ifndef G / #if !defined(G), then #define G, and the matching
/// #endif last), or "".
std::string include_guard(const std::vector<Directive>& d) {
  using K = Directive::Kind;
  if (d.size() < 3 || d[1].kind != K::define || d[1].function_like || d.back().kind != K::endif) return {};
  std::string name;
  if (d[0].kind == K::ifndef) {
    name = d[0].name;
  } else if (d[0].kind == K::if_) {
    std::string text;
    for (const char c : d[0].text) {
      if (c != ' ' && c != '\t') text += c;
    }
    if (text.starts_with("!defined(") && text.ends_with(")")) name = text.substr(9, text.size() - 10);
    else if (text.starts_with("!defined")) name = text.substr(8);
  }
  if (name.empty() || name != d[1].name) return {};
  int depth = 0;  // the #endif that closes d[0] must be the last directive
  for (std::size_t i = 0; i < d.size(); ++i) {
    const K k = d[i].kind;
    if (k == K::if_ || k == K::ifdef || k == K::ifndef) ++depth;
    if (k == K::endif && --depth == 0) return i + 1 == d.size() ? name : std::string();
  }
  return {};
}

}  // namespace

/// The name an untaken include is rewritten to (no '"': it goes between quotes).
std::string untaken_name(std::string_view name) {
  std::string out(kUntakenPrefix);
  for (const char c : name) out += c == '"' ? '_' : c;
  return out;
}

std::string Resolver::link_name(const std::pair<IncludeRef, std::size_t>& link) const {
  return link.second == kUntaken ? untaken_name(link.first.name) : m_units[link.second].compiler_name;
}

const ScanResult& Resolver::scan_of(Unit& unit, std::size_t index) {
  if (unit.file) return unit.file->scan;
  if (!unit.own_scan) {
    if (index == 0 && m_input.source_scan != nullptr) {
      unit.own_scan = std::shared_ptr<const ScanResult>(std::shared_ptr<const ScanResult>(), m_input.source_scan);
    } else {
      auto scanned = std::make_shared<ScanResult>();
      scan_includes(unit.text, *scanned);
      unit.own_scan = std::move(scanned);
    }
  }
  return *unit.own_scan;
}

void Resolver::walk_all() {
  m_state.emplace(*m_input.macros);
  HeaderReadAhead read_ahead(m_access, m_folders);
  m_read_ahead = read_ahead.on() ? &read_ahead : nullptr;
  struct Clear {
    HeaderReadAhead*& p;
    ~Clear() { p = nullptr; }
  } clear{m_read_ahead};
  walk(0, true, 0);
  for (std::size_t i = 1; i < m_units.size(); ++i) {
    if (m_units[i].kind == Unit::Kind::memory && !m_units[i].walked_certain && !m_units[i].walked_uncertain) {
      walk(i, false, 0);
    }
  }
  m_read_ahead_reads = read_ahead.finish();
  check_computed();
  load_unread(0);
}

void Resolver::first_entry(Unit& unit, std::size_t index, const ScanResult& scan) {
  unit.ref_targets.assign(scan.refs.size(), kNotTaken);
  note_defines(scan.defines);
  for (const std::string& operand : scan.computed) m_computed.push_back({index, operand});
  unit.guard = include_guard(scan.directives);
  int depth = 0;
  for (const Directive& d : scan.directives) {
    using K = Directive::Kind;
    if (d.kind == K::if_ || d.kind == K::ifdef || d.kind == K::ifndef) ++depth;
    if (d.kind == K::endif) --depth;
    if (d.kind == K::pragma_once && depth == 0) unit.once = true;
  }
  if (m_read_ahead != nullptr) m_read_ahead->add(includer_of(unit), scan.refs);
  for (std::size_t i = 0; i < scan.refs.size(); ++i) {
    if (scan.refs[i].has_include) take(unit, scan.refs[i], i);
  }
}

Resolver::Found Resolver::take(Unit& unit, const IncludeRef& ref, std::size_t i) {
  const Found target = resolve(unit, ref);
  if (target.where == Where::none) {
    m_unresolved.push_back(ref.name);
    unit.ref_targets[i] = kNoTarget;
  } else {
    unit.ref_targets[i] = target.index;
  }
  return target;
}

Tri Resolver::condition(const Directive& d) const {
  using K = Directive::Kind;
  switch (d.kind) {
    case K::if_:
    case K::elif:
      return m_state->evaluate(d.text);
    case K::ifdef:
    case K::elifdef:
      return m_state->defined(d.name);
    case K::ifndef:
    case K::elifndef: {
      const Tri t = m_state->defined(d.name);
      return t == Tri::unknown ? t : (t == Tri::yes ? Tri::no : Tri::yes);
    }
    default:
      return Tri::yes;  // #else
  }
}

void Resolver::walk(std::size_t index, bool certain, int depth) {
  if (depth > kMaxWalkDepth) throw LeanGiveUp{};
  Unit& unit = m_units[index];  // (m_units is a deque: references stay valid as it grows)
  if (unit.kind == Unit::Kind::disk && !unit.file) {
    const auto asked = std::chrono::steady_clock::now();
    if (m_read_ahead != nullptr) {
      m_read_ahead->start();
      m_read_ahead->wait_for(unit.name);  // a helper reading it now: it will be in the cache
    }
    const auto waited = std::chrono::steady_clock::now();
    std::shared_ptr<const HeaderFileCache::File> file = load_header(unit.name, m_access);
    m_wait_time += waited - asked;
    m_read_time += std::chrono::steady_clock::now() - waited;
    if (!file) throw Vanished{};
    unit.text = file->bytes;
    unit.file = std::move(file);
  }
  const ScanResult& scan = scan_of(unit, index);
  if (unit.walked_certain || unit.walked_uncertain) {
    const bool seen_here = unit.walked_certain || !certain;  // entered before at least as surely as now
    if (unit.once && seen_here) return;
    if (!unit.guard.empty()) {
      const Tri guarded = m_state->defined(unit.guard);
      if (guarded == Tri::yes || (guarded == Tri::unknown && seen_here)) return;
    }
  } else {
    first_entry(unit, index, scan);
  }
  (certain ? unit.walked_certain : unit.walked_uncertain) = true;
  m_walked += scan.directives.size();
  if (m_walked > kMaxWalkDirectives) throw LeanGiveUp{};

  struct Group {
    bool parent_live, parent_certain;
    bool live = false, certain = false;
    bool done = false;   ///< a branch known to be taken was seen: the rest are not
    bool maybe = false;  ///< a branch that may be taken was seen: the rest are not certain
  };
  std::vector<Group> groups;
  bool live = true, here = certain;
  const auto enter = [](Group& g, Tri c) {
    g.live = c != Tri::no;
    g.certain = g.parent_certain && !g.maybe && c == Tri::yes;
    if (c == Tri::yes) g.done = true;
    if (c == Tri::unknown) g.maybe = true;
  };
  using K = Directive::Kind;
  const std::vector<Directive>& directives = scan.directives;
  for (std::size_t at = 0; at < directives.size(); ++at) {
    const Directive& d = directives[at];
    switch (d.kind) {
      case K::if_:
      case K::ifdef:
      case K::ifndef: {
        if (at < scan.inert_until.size() && scan.inert_until[at] != 0) {
          at = scan.inert_until[at];  // to its #endif: no branch of it changes what is read or defined
          continue;
        }
        Group g{live, here};
        if (live && &d == &scan.directives.front() && !unit.guard.empty() && !m_state->tracked(unit.guard)) {
          // A file's include guard that nothing defined yet: not defined, whatever its form (a compiler
          // that predefined a header's guard would compile the header empty).
          enter(g, Tri::yes);
        } else if (live) {
          enter(g, condition(d));
        } else {
          g.done = true;
        }
        groups.push_back(g);
        break;
      }
      case K::elif:
      case K::elifdef:
      case K::elifndef:
      case K::else_: {
        if (groups.empty()) break;  // a stray one: the compiler reports it
        Group& g = groups.back();
        if (!g.parent_live || g.done) {
          g.live = false;
        } else {
          enter(g, condition(d));
        }
        break;
      }
      case K::endif:
        if (!groups.empty()) groups.pop_back();
        break;
      default:
        if (!live) break;
        if (d.kind == K::define) {
          m_state->define(d.name, d.text, d.function_like, here);
        } else if (d.kind == K::undef) {
          m_state->undefine(d.name, here);
        } else if (d.kind == K::include) {
          const Found target = take(unit, scan.refs[d.index], d.index);
          if (target.where != Where::none) walk(target.index, here, depth + 1);
        } else if (d.kind == K::computed) {
          // Every name its operand may expand to, walked as maybe entered (the engine retries for a name
          // no guess reaches).
          for (const Guess& guess : guess_computed(scan.computed[d.index], m_defines)) {
            const Found target = add_alias(unit, guess.name, guess.angled, false);
            if (target.where != Where::none) walk(target.index, false, depth + 1);
          }
        }
        continue;
    }
    live = groups.empty() ? true : groups.back().live;
    here = groups.empty() ? certain : groups.back().certain;
  }
}

void Resolver::lean_links() {
  for (std::size_t index = 0; index < m_units.size(); ++index) {
    Unit& unit = m_units[index];
    const ScanResult& scan = scan_of(unit, index);
    unit.links.clear();
    for (std::size_t i = 0; i < scan.refs.size(); ++i) {
      const IncludeRef& ref = scan.refs[i];
      const std::size_t target = unit.ref_targets.empty() ? kNotTaken : unit.ref_targets[i];
      if (target == kNotTaken) {
        if (ref.has_include) continue;  // in a file never entered: nothing asks
        unit.links.emplace_back(ref, kUntaken);
        ++m_untaken;
        if (index == 0) m_source_untaken.emplace_back(i, untaken_name(ref.name));
      } else if (target != kNoTarget && m_units[target].kind == Unit::Kind::disk) {
        unit.links.emplace_back(ref, target);
        if (index == 0) m_source_links.emplace_back(i, target);
      }
    }
  }
}

}  // namespace kiln::cache::detail::resolving
