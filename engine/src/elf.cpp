#include "elf.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstring>
#include <optional>
#include <unordered_set>

namespace kiln::elf {
namespace {

// ELF64 layout (System V gABI): offsets of the fields read here.
constexpr std::size_t kHeaderSize = 64;
constexpr std::size_t kSectionHeaderSize = 64;
constexpr std::size_t kSymbolSize = 24;
constexpr std::uint32_t kSectionSymtab = 2;
constexpr std::uint32_t kSectionDynsym = 11;
constexpr std::uint16_t kSectionIndexExtended = 0xffff;  // SHN_XINDEX

/// A bounds-checked little-endian cursor over the input.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) : m_bytes(bytes) {}

  [[nodiscard]] bool has(std::uint64_t offset, std::uint64_t size) const noexcept {
    return offset <= m_bytes.size() && size <= m_bytes.size() - offset;
  }
  template <typename T>
  [[nodiscard]] std::optional<T> read(std::uint64_t offset) const noexcept {
    if (!has(offset, sizeof(T))) return std::nullopt;
    T value{};  // little-endian host (x86-64, aarch64): the bytes are the value
    std::memcpy(&value, m_bytes.data() + offset, sizeof(T));
    return value;
  }
  [[nodiscard]] std::span<const std::byte> slice(std::uint64_t offset, std::uint64_t size) const noexcept {
    if (!has(offset, size)) return {};
    return m_bytes.subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(size));
  }
  [[nodiscard]] std::size_t size() const noexcept { return m_bytes.size(); }

 private:
  std::span<const std::byte> m_bytes;
};

static_assert(std::endian::native == std::endian::little, "the ELF reader assumes a little-endian host");

/// The NUL-terminated string at `offset` of a string table; nullopt when it runs off the table.
std::optional<std::string> string_at(std::span<const std::byte> table, std::uint64_t offset) {
  if (offset >= table.size()) return std::nullopt;
  const auto* begin = reinterpret_cast<const char*>(table.data()) + offset;
  const std::size_t room = table.size() - static_cast<std::size_t>(offset);
  const void* end = std::memchr(begin, '\0', room);
  if (end == nullptr) return std::nullopt;
  return std::string(begin, static_cast<const char*>(end));
}

}  // namespace

std::variant<Image, std::string> parse(std::span<const std::byte> bytes) {
  const Reader r(bytes);
  if (bytes.size() < kHeaderSize) return std::string("not an ELF image: shorter than an ELF64 header");
  static constexpr unsigned char kMagic[4] = {0x7f, 'E', 'L', 'F'};
  if (std::memcmp(bytes.data(), kMagic, 4) != 0) return std::string("not an ELF image: bad magic");
  if (std::to_integer<int>(bytes[4]) != 2) return std::string("not an ELF64 image (EI_CLASS is not ELFCLASS64)");
  if (std::to_integer<int>(bytes[5]) != 1) return std::string("not a little-endian ELF image (EI_DATA)");

  Image image;
  image.os_abi = std::to_integer<std::uint8_t>(bytes[7]);
  image.abi_version = std::to_integer<std::uint8_t>(bytes[8]);
  image.type = *r.read<std::uint16_t>(16);
  image.machine = *r.read<std::uint16_t>(18);
  image.flags = *r.read<std::uint32_t>(48);
  const std::uint64_t section_offset = *r.read<std::uint64_t>(40);
  const std::uint16_t entry_size = *r.read<std::uint16_t>(58);
  std::uint64_t count = *r.read<std::uint16_t>(60);
  std::uint64_t names_index = *r.read<std::uint16_t>(62);
  if (section_offset == 0) return image;  // no section table: nothing more to read
  if (entry_size < kSectionHeaderSize) return std::string("section header entries smaller than 64 bytes");
  if (!r.has(section_offset, kSectionHeaderSize)) return std::string("section table outside the image");
  // Extended numbering: section 0 holds the real count (sh_size) and name-table index (sh_link).
  if (count == 0) count = *r.read<std::uint64_t>(section_offset + 32);
  if (names_index == kSectionIndexExtended) names_index = *r.read<std::uint32_t>(section_offset + 40);
  if (count > r.size() / kSectionHeaderSize || !r.has(section_offset, count * entry_size)) {
    return std::string("truncated section table");
  }

  struct Raw {
    std::uint32_t name, type, link;
    std::uint64_t offset, size, alignment;
  };
  std::vector<Raw> raw;
  raw.reserve(static_cast<std::size_t>(count));
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t at = section_offset + i * entry_size;
    Raw s{*r.read<std::uint32_t>(at),      *r.read<std::uint32_t>(at + 4),  *r.read<std::uint32_t>(at + 40),
          *r.read<std::uint64_t>(at + 24), *r.read<std::uint64_t>(at + 32), *r.read<std::uint64_t>(at + 48)};
    if (s.type != kSectionNobits && s.type != 0 && !r.has(s.offset, s.size)) {
      return "section " + std::to_string(i) + " lies outside the image";
    }
    raw.push_back(s);
  }
  if (names_index >= count) return std::string("section name table index out of range");
  const std::span<const std::byte> names = raw[names_index].type == kSectionNobits
                                               ? std::span<const std::byte>()
                                               : r.slice(raw[names_index].offset, raw[names_index].size);

  image.sections.reserve(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) {
    Section s;
    s.type = raw[i].type;
    s.offset = raw[i].offset;
    s.size = raw[i].size;
    s.alignment = raw[i].alignment;
    if (s.type != kSectionNobits && s.type != 0) s.data = r.slice(s.offset, s.size);
    if (i != 0) {
      std::optional<std::string> name = string_at(names, raw[i].name);
      if (!name) return "section " + std::to_string(i) + " has a name outside the name table";
      s.name = std::move(*name);
    }
    image.sections.push_back(std::move(s));
  }

  // Symbols: .symtab when present (it lists local symbols too), else .dynsym.
  std::size_t table = raw.size();
  for (std::size_t i = 1; i < raw.size(); ++i) {
    if (raw[i].type == kSectionSymtab) {
      table = i;
      break;
    }
    if (raw[i].type == kSectionDynsym && table == raw.size()) table = i;
  }
  if (table == raw.size()) return image;
  if (raw[table].link == 0 || raw[table].link >= raw.size() || raw[raw[table].link].type == kSectionNobits) {
    return std::string("symbol table names no valid string table");
  }
  const std::span<const std::byte> strings = image.sections[raw[table].link].data;
  const std::span<const std::byte> entries = image.sections[table].data;
  const std::size_t symbol_count = entries.size() / kSymbolSize;
  image.symbols.reserve(symbol_count);
  const Reader sr(entries);
  for (std::size_t i = 1; i < symbol_count; ++i) {  // entry 0 is the reserved null symbol
    const std::uint64_t at = i * kSymbolSize;
    Symbol sym;
    const std::uint32_t name = *sr.read<std::uint32_t>(at);
    const std::uint8_t info = *sr.read<std::uint8_t>(at + 4);
    sym.type = static_cast<std::uint8_t>(info & 0xf);
    sym.bind = static_cast<std::uint8_t>(info >> 4);
    sym.section_index = *sr.read<std::uint16_t>(at + 6);
    sym.value = *sr.read<std::uint64_t>(at + 8);
    sym.size = *sr.read<std::uint64_t>(at + 16);
    std::optional<std::string> text = string_at(strings, name);
    if (!text) return "symbol " + std::to_string(i) + " has a name outside the string table";
    sym.name = std::move(*text);
    image.symbols.push_back(std::move(sym));
  }
  return image;
}

const Section* find_section(const Image& image, std::string_view name) noexcept {
  for (const Section& s : image.sections) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::vector<Note> notes(const Image& image) {
  std::vector<Note> out;
  for (const Section& section : image.sections) {
    if (section.type != kSectionNote) continue;
    // Note fields are padded to 4 bytes, or to 8 in sections aligned to 8 (gABI; GNU property notes).
    const std::uint64_t align = section.alignment == 8 ? 8 : 4;
    const auto pad = [align](std::uint64_t n) { return (n + align - 1) / align * align; };
    const Reader r(section.data);
    std::uint64_t at = 0;
    while (r.has(at, 12)) {
      const std::uint64_t name_size = *r.read<std::uint32_t>(at);
      const std::uint64_t desc_size = *r.read<std::uint32_t>(at + 4);
      const std::uint32_t type = *r.read<std::uint32_t>(at + 8);
      const std::uint64_t name_at = at + 12;
      if (!r.has(name_at, pad(name_size))) break;
      const std::uint64_t desc_at = name_at + pad(name_size);
      if (!r.has(desc_at, desc_size)) break;
      Note note;
      const std::span<const std::byte> name = r.slice(name_at, name_size);
      note.name.assign(reinterpret_cast<const char*>(name.data()), name.size());
      while (!note.name.empty() && note.name.back() == '\0') note.name.pop_back();
      note.type = type;
      note.desc = r.slice(desc_at, desc_size);
      out.push_back(std::move(note));
      if (!r.has(desc_at, pad(desc_size))) break;
      at = desc_at + pad(desc_size);
    }
  }
  return out;
}

namespace {

std::vector<std::string> ptx_entries(std::span<const std::byte> binary) {
  const std::string_view text(reinterpret_cast<const char*>(binary.data()), binary.size());
  std::vector<std::string> out;
  constexpr std::string_view kEntry = ".entry";
  for (std::size_t at = text.find(kEntry); at != std::string_view::npos; at = text.find(kEntry, at + 1)) {
    std::size_t i = at + kEntry.size();
    if (i >= text.size() || (text[i] != ' ' && text[i] != '\t')) continue;
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    const std::size_t begin = i;
    while (i < text.size() && (std::isalnum(static_cast<unsigned char>(text[i])) || text[i] == '_' || text[i] == '$'))
      ++i;
    if (i > begin) out.emplace_back(text.substr(begin, i - begin));
  }
  return out;
}

}  // namespace

std::vector<std::string> kernel_names(PayloadKind kind, std::span<const std::byte> binary) {
  if (kind == PayloadKind::ptx) return ptx_entries(binary);
  auto parsed = parse(binary);
  const Image* image = std::get_if<Image>(&parsed);
  if (image == nullptr) return {};
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  if (kind == PayloadKind::cubin) {
    std::unordered_set<std::string> info_sections;
    constexpr std::string_view kInfo = ".nv.info.";
    for (const Section& s : image->sections) {
      if (s.name.size() > kInfo.size() && s.name.starts_with(kInfo)) info_sections.insert(s.name.substr(kInfo.size()));
    }
    for (const Symbol& sym : image->symbols) {
      if (sym.type != kSymbolFunc || (sym.bind != kBindGlobal && sym.bind != kBindWeak)) continue;
      if (info_sections.count(sym.name) != 0 && seen.insert(sym.name).second) out.push_back(sym.name);
    }
  } else if (kind == PayloadKind::amdgpu_code_object) {
    constexpr std::string_view kDescriptor = ".kd";
    for (const Symbol& sym : image->symbols) {
      if (sym.name.size() <= kDescriptor.size() || !sym.name.ends_with(kDescriptor)) continue;
      std::string name = sym.name.substr(0, sym.name.size() - kDescriptor.size());
      if (seen.insert(name).second) out.push_back(std::move(name));
    }
  }
  return out;
}

}  // namespace kiln::elf
