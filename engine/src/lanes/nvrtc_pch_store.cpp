#include "lanes/nvrtc_pch_store.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/stat.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "kiln/base/log.hpp"
#include "kiln/base/xxh3.hpp"
#include "lanes/nvrtc_heap.hpp"
#include "lanes/nvrtc_pch.hpp"

namespace kiln::vendor::pch {
namespace {

constexpr std::uint64_t kKeySeed = 0x6b696c6e2d70636bULL;  // "kiln-pck": a PCH key is never an entry's key

/// The GNU build id of the image loaded at `base`, as hex; empty when it has none.
std::string build_id(std::uintptr_t base) {
  struct Search {
    std::uintptr_t base;
    std::string id;
  } search{base, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_addr != s->base) return 0;
        for (int i = 0; i < info->dlpi_phnum && s->id.empty(); ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE) continue;
          const auto* at = reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr);
          const unsigned char* end = at + ph.p_memsz;
          while (at + sizeof(ElfW(Nhdr)) <= end) {
            const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(at);
            const unsigned char* name = at + sizeof(ElfW(Nhdr));
            const unsigned char* desc = name + ((note->n_namesz + 3) & ~3U);
            if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
              for (std::uint32_t b = 0; b < note->n_descsz; ++b) s->id += fmt::format("{:02x}", desc[b]);
              break;
            }
            at = desc + ((note->n_descsz + 3) & ~3U);
          }
        }
        return 1;
      },
      &search);
  return search.id;
}

/// "<file name> <build id>" of the image holding `symbol`, or its size and modification time.
std::string image_identity(const void* symbol) {
  Dl_info info{};
  link_map* map = nullptr;
  if (symbol == nullptr || dladdr1(symbol, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0 ||
      map == nullptr) {
    return "-";
  }
  const std::string path = map->l_name != nullptr ? map->l_name : "";
  const std::string name = path.substr(path.rfind('/') + 1);
  if (std::string id = build_id(static_cast<std::uintptr_t>(map->l_addr)); !id.empty()) return name + " " + id;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return name + " ?";
  return fmt::format("{} {} bytes {}.{:09}", name, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

/// Decides a record still learning once it has enough uses (nvrtc_pch_store.hpp says how).
void judge(cache::PchRecord& r) {
  using Verdict = cache::PchRecord::Verdict;
  if (r.verdict != Verdict::learning || r.with_ms.size() < kVerdictUses) return;
  const bool measured = !r.without_ms.empty();
  if (!measured && r.make_ms <= 0) return;
  const double with = median(r.with_ms), baseline = measured ? median(r.without_ms) : r.make_ms;
  const double ratio = measured ? kPaysRatio : kPaysRatioAgainstMake;
  r.verdict = with < baseline * ratio ? Verdict::pays : Verdict::does_not_pay;
  r.why = fmt::format("{:.1f} ms a compile with it against {:.1f} ms {} (medians of {} and {}; it pays below {:.2f}x)",
                      with, baseline, measured ? "without" : "for the compile that made it", r.with_ms.size(),
                      measured ? r.without_ms.size() : 1, ratio);
}

void push_sample(std::vector<double>& samples, double ms) {
  samples.push_back(ms);
  if (samples.size() > cache::kPchSamples) samples.erase(samples.begin());
}

}  // namespace

std::string library_identity(const void* nvrtc_symbol, const void* builtins_symbol) {
  return image_identity(nvrtc_symbol) + "; " + image_identity(builtins_symbol);
}

cache::Hash128 Shelf::key(const CompileInput& input, const cache::Hash128& header_set, std::uint64_t heap_bytes) const {
  cache::detail::Xxh3Stream stream(kKeySeed);
  const auto add = [&stream](std::string_view part) {
    stream.update(part.data(), part.size());
    stream.update("\n", 1);
  };
  add("kiln-pch 1");
  add(m_identity);
  add(fmt::format("heap {:#x} {}", kHeapAddress, heap_bytes));
  add(fmt::format("target {}", input.target));
  for (const std::string& flag : input.flags) add(flag);
  add("--instantiate-templates-in-pch=false");  // kiln's PCH flags that reach NVRTC's PCH
  add(header_set.hex());
  return stream.digest();
}

bool Shelf::sharing() const noexcept {
  if (placement() == Placement::elsewhere) return false;
  const std::lock_guard lock(m_mutex);
  return m_off_reason.empty();
}

Shelf::Decision Shelf::decide(cache::Store& store, const cache::Hash128& key, std::uint64_t header_bytes,
                              std::uint64_t heap_bytes, std::string_view source_name) {
  using Kind = StoredPlan::Kind;
  Decision d;
  if (!sharing() || store.mode() == cache::StoreMode::memory_only) return d;  // the process's own folders
  const auto plan_of = [&](Kind kind) {
    d.kind = Decision::Kind::plan;
    d.plan = std::make_shared<StoredPlan>();
    d.plan->kind = kind;
    d.plan->key = key;
    d.plan->store = &store;
    return d;
  };
  {
    const std::lock_guard lock(m_mutex);
    KeyState& state = m_keys[key];
    if (state.file && state.file->unchanged()) {
      Decision use = plan_of(Kind::use);
      use.plan->file = state.file;
      return use;
    }
    if (state.file) {
      KILN_LOG(info, "stored precompiled header {} changed on disk since it was checked: checked again", state.file->path());
      state.file.reset();
    }
  }
  const std::optional<cache::PchRecord> record = store.read_pch_record(key);
  using Verdict = cache::PchRecord::Verdict;
  if (record && record->verdict == Verdict::too_large && record->pch_bytes > store.config().pch_limit()) {
    d.kind = Decision::Kind::skip;  // no room for it in the cache's PCH share: neither here nor in a folder
    return d;
  }
  if (m_mode == Mode::automatic && record && record->verdict == Verdict::does_not_pay) {
    d.kind = Decision::Kind::skip;
    return d;
  }
  const auto open = [&]() -> std::optional<Decision> {
    std::variant<cache::PchFile, cache::PchMiss> opened = store.open_pch(key);
    if (auto* miss = std::get_if<cache::PchMiss>(&opened)) {
      if (miss->removed) KILN_LOG(info, "stored precompiled header removed ({}): it is made again", miss->reason);
      return std::nullopt;
    }
    auto file = std::make_shared<const cache::PchFile>(std::move(std::get<cache::PchFile>(opened)));
    Decision use = plan_of(Kind::use);
    const std::lock_guard lock(m_mutex);
    KeyState& state = m_keys[key];
    if (!state.file) {
      state.file = file;
      ++m_checked;
      use.plan->check_ms = std::chrono::duration<double, std::milli>(file->check_time()).count();
    }
    use.plan->file = state.file;
    return use;
  };
  if (std::optional<Decision> use = open()) return *use;
  if (store.mode() != cache::StoreMode::read_write) return d;  // nothing stored, none to make here
  // A set's first compile on this machine goes without, unless the set is heavy (nvrtc_pch.hpp): its time is
  // the record's first sample without.
  if (header_bytes < kMakeAtFirstBytes && (!record || record->without_ms.empty())) return plan_of(Kind::without);
  const std::optional<std::uint64_t> free = store.pch_free_bytes();
  if (!free || *free < heap_bytes + kSpareBytes) {
    const std::lock_guard lock(m_mutex);
    if (!std::exchange(m_space_warned, true)) {
      KILN_LOG(warn,
               "precompiled headers not made: the cache's file system ({}) has {} MiB free, and one may take up to {} "
               "MiB (NVRTC's PCH heap) plus {} MiB to spare; compiles go without until there is room",
               store.pch_folder().string(), free.value_or(0) >> 20, heap_bytes >> 20, kSpareBytes >> 20);
    }
    return plan_of(Kind::without);
  }
  cache::CompileLease lease = store.acquire_pch_lease(key, std::chrono::milliseconds(0));
  if (!lease.owned()) {
    if (std::optional<Decision> use = open()) return *use;  // published just now
    return plan_of(Kind::without);                           // another process makes it: never waited for
  }
  std::string why;
  std::optional<cache::PchDraft> draft = store.begin_pch(key, why);
  if (!draft) {
    KILN_LOG(info, "precompiled header not made: {}", why);
    return plan_of(Kind::without);
  }
  Decision make = plan_of(Kind::make);
  make.plan->draft = std::move(draft);
  make.plan->lease = std::move(lease);
  make.plan->label = fmt::format("made for {}: {} bytes of headers", source_name, header_bytes);
  return make;
}

bool Shelf::record_sample(cache::Store& store, const cache::Hash128& key, bool with, double ms, double make_ms,
                          std::uint64_t pch_bytes) {
  {
    const std::lock_guard lock(m_mutex);
    if (m_keys[key].pays && make_ms == 0) return false;  // decided: nothing more to learn
  }
  cache::PchRecord record = store.read_pch_record(key).value_or(cache::PchRecord{});
  if (make_ms > 0) {
    record.make_ms = make_ms;
    record.pch_bytes = pch_bytes;
  } else {
    push_sample(with ? record.with_ms : record.without_ms, ms);
  }
  const auto before = record.verdict;
  judge(record);
  (void)store.write_pch_record(key, record);
  if (record.verdict == cache::PchRecord::Verdict::pays) {
    const std::lock_guard lock(m_mutex);
    m_keys[key].pays = true;
  }
  if (before == record.verdict || record.verdict != cache::PchRecord::Verdict::does_not_pay) return true;
  KILN_LOG(info, "precompiled header {} does not pay on this machine: {}{}", key.hex(), record.why,
           m_mode == Mode::automatic ? "; no longer made or used (KILN_PCH=1 uses it anyway)" : "; used anyway (KILN_PCH=1)");
  if (m_mode == Mode::automatic) {
    (void)store.remove_pch(key);
    const std::lock_guard lock(m_mutex);
    m_keys[key].file.reset();
  }
  return true;
}

void Shelf::after(StoredPlan& plan, bool created, bool used, const std::string& refusal, double ms) {
  using Kind = StoredPlan::Kind;
  cache::Store& store = *plan.store;
  switch (plan.kind) {
    case Kind::without:
      record_sample(store, plan.key, false, ms);
      return;
    case Kind::use:
      if (used) {
        {
          const std::lock_guard lock(m_mutex);
          ++m_used;
        }
        // A use is the PCH's last use (its LRU age): the sample's write marks it, or, once decided, a touch.
        if (!record_sample(store, plan.key, true, ms + plan.check_ms)) (void)store.touch_pch_record(plan.key);
      } else if (refusal.find("#20282") != std::string::npos) {
        // NVRTC refused its heap address: this process's heap is not where the file's was.
        const std::lock_guard lock(m_mutex);
        if (m_off_reason.empty()) {
          m_off_reason = "NVRTC refused a stored precompiled header's heap address (" + refusal + ")";
          KILN_LOG(warn, "stored precompiled headers not used by this process: {}", m_off_reason);
        }
      } else {
        // Made from other leading directives or flags (NVRTC's warning #630 or #629): this compile went without.
        KILN_LOG(debug, "stored precompiled header {} not taken: {}", plan.key.hex(), refusal);
        record_sample(store, plan.key, false, ms);
      }
      return;
    case Kind::make:
      break;
  }
  if (!created || !plan.draft) return;  // NVRTC made none (the draft is removed)
  if (placement() != Placement::placed) {
    const std::lock_guard lock(m_mutex);
    if (m_off_reason.empty()) m_off_reason = "NVRTC's PCH heap is not at kiln's address: " + placement_reason();
    return;
  }
  std::string why;
  bool too_large = false;
  const std::uint64_t made_bytes = [&] {
    struct stat st {};
    return ::stat(plan.draft->temp_path().c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
  }();
  if (store.publish_pch(std::move(*plan.draft), plan.label, why, &too_large)) {
    {
      const std::lock_guard lock(m_mutex);
      ++m_made;
    }
    record_sample(store, plan.key, false, 0, ms, made_bytes);
    return;
  }
  if (too_large) {
    cache::PchRecord record = store.read_pch_record(plan.key).value_or(cache::PchRecord{});
    record.verdict = cache::PchRecord::Verdict::too_large;
    record.pch_bytes = made_bytes;
    record.limit = store.config().pch_limit();
    record.why = why;
    (void)store.write_pch_record(plan.key, record);
    KILN_LOG(info, "precompiled header not kept: {}", why);
    return;
  }
  KILN_LOG(info, "precompiled header not stored: {}", why);
}

std::string Shelf::outlook(const cache::Store& store, const cache::Hash128& key, std::uint64_t header_bytes,
                           std::uint64_t heap_bytes,
                           const std::vector<std::pair<std::uint64_t, cache::Hash128>>& other_keys) const {
  using Verdict = cache::PchRecord::Verdict;
  if (store.mode() == cache::StoreMode::memory_only) {
    return "private to each process: the cache is memory-only (" + store.mode_reason() + "), so none is stored";
  }
  std::unordered_map<cache::Hash128, cache::PchListing, cache::Hash128Hasher> files;
  for (cache::PchListing& item : store.list_pch()) {
    if (!item.record) files.emplace(item.key, std::move(item));
  }
  const std::optional<cache::PchRecord> record = store.read_pch_record(key);
  const std::string verdict =
      !record ? std::string()
      : record->verdict == Verdict::learning
          ? fmt::format("; whether it pays here is decided after {} more compile(s) with it",
                        kVerdictUses - std::min(kVerdictUses, record->with_ms.size()))
          : fmt::format("; it {} here ({})", record->verdict == Verdict::pays ? "pays" : to_string(record->verdict),
                        record->why);
  const std::string name = fmt::format("a stored precompiled header ({}, PCH heap {} MiB)", key.hex(), heap_bytes >> 20);
  if (const auto found = files.find(key); found != files.end()) {
    if (std::string damaged = store.check_pch_file(found->second.path); !damaged.empty()) {
      return fmt::format("{} is damaged ({}): the next compile removes it and goes on as if there were none", name,
                         damaged);
    }
    if (m_mode == Mode::automatic && record && record->verdict == Verdict::does_not_pay) {
      return fmt::format("{}, not used: it does not pay here ({}); KILN_PCH=1 uses it anyway", name, record->why);
    }
    return fmt::format("{}: {:.1f} MiB, checked: a compile uses it{}", name,
                       static_cast<double>(found->second.size) / (1 << 20), verdict);
  }
  std::string text;
  if (record && record->verdict == Verdict::too_large && record->pch_bytes > store.config().pch_limit()) {
    text = fmt::format("none ({}): its PCH ({} MiB) is larger than the cache's share for them ({} MiB, "
                       "KILN_PCH_MAXSIZE): compiles go without",
                       key.hex(), record->pch_bytes >> 20, store.config().pch_limit() >> 20);
  } else if (m_mode == Mode::automatic && record && record->verdict == Verdict::does_not_pay) {
    text = fmt::format("none ({}): it does not pay on this machine ({}): compiles go without; KILN_PCH=1 makes it "
                       "anyway",
                       key.hex(), record->why);
  } else if (store.mode() != cache::StoreMode::read_write) {
    text = fmt::format("none stored ({}), and none is made where the cache is read-only ({}): compiles go without",
                       key.hex(), store.mode_reason());
  } else if (header_bytes < kMakeAtFirstBytes && (!record || record->without_ms.empty())) {
    text = fmt::format("none stored yet ({}): this header set's next compile goes without one (measured), the one "
                       "after makes it",
                       key.hex());
  } else {
    text = fmt::format("none stored yet ({}): this header set's next compile makes it{}", key.hex(), verdict);
  }
  for (const auto& [size, other] : other_keys) {
    if (files.count(other) != 0) {
      text += fmt::format("; one made under a {} MiB PCH heap is stored ({}): a process whose heap has grown to that "
                          "size uses it",
                          size >> 20, other.hex());
      break;
    }
  }
  return text;
}

std::string Shelf::describe() const {
  if (placement() == Placement::elsewhere) return "not shared: NVRTC's PCH heap is elsewhere (" + placement_reason() + ")";
  const std::lock_guard lock(m_mutex);
  if (!m_off_reason.empty()) return "not shared: " + m_off_reason;
  return fmt::format("shared through the cache ({} checked, {} used, {} made by this process; heap at {:#x})", m_checked,
                     m_used, m_made, kHeapAddress);
}

}  // namespace kiln::vendor::pch
