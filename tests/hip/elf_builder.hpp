#pragma once
// Test helpers: a minimal ELF64 writer and MessagePack encoder, to build code-object-shaped inputs
// (sections, symbols, notes, AMDGPU metadata) byte by byte, valid or deliberately broken.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::test {

using Bytes = std::vector<std::byte>;

inline void put(Bytes& out, const void* data, std::size_t size) {
  const auto* b = static_cast<const std::byte*>(data);
  out.insert(out.end(), b, b + size);
}
template <typename T>
void put_le(Bytes& out, T value) {
  put(out, &value, sizeof value);  // little-endian host
}
template <typename T>
void put_be(Bytes& out, T value) {
  for (int shift = (sizeof(T) - 1) * 8; shift >= 0; shift -= 8)
    out.push_back(static_cast<std::byte>((value >> shift) & 0xff));
}

/// A MessagePack encoder writing the smallest encoding of each value (as LLVM's writer does), or a
/// forced wider one for tests of every tag.
class Msgpack {
 public:
  Msgpack& map(std::uint32_t n) {
    if (n < 16)
      byte(0x80 | n);
    else if (n < 65536) {
      byte(0xde);
      put_be<std::uint16_t>(m_out, static_cast<std::uint16_t>(n));
    } else {
      byte(0xdf);
      put_be<std::uint32_t>(m_out, n);
    }
    return *this;
  }
  Msgpack& array(std::uint32_t n) {
    if (n < 16)
      byte(0x90 | n);
    else if (n < 65536) {
      byte(0xdc);
      put_be<std::uint16_t>(m_out, static_cast<std::uint16_t>(n));
    } else {
      byte(0xdd);
      put_be<std::uint32_t>(m_out, n);
    }
    return *this;
  }
  Msgpack& str(std::string_view s) {
    if (s.size() < 32)
      byte(0xa0 | static_cast<std::uint32_t>(s.size()));
    else if (s.size() < 256) {
      byte(0xd9);
      byte(static_cast<std::uint32_t>(s.size()));
    } else {
      byte(0xda);
      put_be<std::uint16_t>(m_out, static_cast<std::uint16_t>(s.size()));
    }
    put(m_out, s.data(), s.size());
    return *this;
  }
  Msgpack& uint(std::uint64_t v) {
    if (v < 128)
      byte(static_cast<std::uint32_t>(v));
    else if (v < 256) {
      byte(0xcc);
      byte(static_cast<std::uint32_t>(v));
    } else if (v < 65536) {
      byte(0xcd);
      put_be<std::uint16_t>(m_out, static_cast<std::uint16_t>(v));
    } else if (v < (1ULL << 32)) {
      byte(0xce);
      put_be<std::uint32_t>(m_out, static_cast<std::uint32_t>(v));
    } else {
      byte(0xcf);
      put_be<std::uint64_t>(m_out, v);
    }
    return *this;
  }
  Msgpack& boolean(bool b) { return byte(b ? 0xc3 : 0xc2); }
  Msgpack& raw(std::initializer_list<std::uint8_t> bytes) {
    for (std::uint8_t b : bytes) byte(b);
    return *this;
  }
  Msgpack& byte(std::uint32_t b) {
    m_out.push_back(static_cast<std::byte>(b));
    return *this;
  }
  [[nodiscard]] const Bytes& bytes() const { return m_out; }

 private:
  Bytes m_out;
};

struct KernelSpec {
  std::string name;
  struct Arg {
    std::uint64_t offset, size;
    std::string kind;
  };
  std::vector<Arg> args;
  std::uint64_t kernarg_size = 0;
  std::uint32_t wavefront = 64;
};

/// The NT_AMDGPU_METADATA document LLVM writes, reduced to the fields kiln reads plus a few others.
inline Bytes amdgpu_metadata(const std::vector<KernelSpec>& kernels,
                             std::string_view target = "amdgcn-amd-amdhsa--gfx90a") {
  Msgpack m;
  m.map(3).str("amdhsa.kernels").array(static_cast<std::uint32_t>(kernels.size()));
  for (const KernelSpec& k : kernels) {
    m.map(7).str(".args").array(static_cast<std::uint32_t>(k.args.size()));
    for (const auto& a : k.args) {
      m.map(3).str(".offset").uint(a.offset).str(".size").uint(a.size).str(".value_kind").str(a.kind);
    }
    m.str(".kernarg_segment_size").uint(k.kernarg_size);
    m.str(".max_flat_workgroup_size").uint(1024);
    m.str(".name").str(k.name);
    m.str(".symbol").str(k.name + ".kd");
    m.str(".wavefront_size").uint(k.wavefront);
    m.str(".uses_dynamic_stack").boolean(false);
  }
  m.str("amdhsa.target").str(target);
  m.str("amdhsa.version").array(2).uint(1).uint(1);
  return m.bytes();
}

/// A minimal ELF64 image: sections (a .shstrtab is added), optional symbols (.symtab + .strtab).
class ElfBuilder {
 public:
  struct Symbol {
    std::string name;
    std::uint8_t type, bind;
    std::uint16_t section;
  };

  ElfBuilder(std::uint16_t machine, std::uint32_t flags) : m_machine(machine), m_flags(flags) {}

  /// Returns the new section's index.
  std::uint16_t section(std::string name, std::uint32_t type, Bytes data, std::uint64_t align = 4) {
    m_sections.push_back({std::move(name), type, std::move(data), 0, align, 0});
    return static_cast<std::uint16_t>(m_sections.size());  // index 0 is the null section
  }
  void note(std::string section_name, std::string_view owner, std::uint32_t type, const Bytes& desc) {
    Bytes data;
    put_le<std::uint32_t>(data, static_cast<std::uint32_t>(owner.size() + 1));
    put_le<std::uint32_t>(data, static_cast<std::uint32_t>(desc.size()));
    put_le<std::uint32_t>(data, type);
    put(data, owner.data(), owner.size());
    data.push_back(std::byte{0});
    while (data.size() % 4 != 0) data.push_back(std::byte{0});
    data.insert(data.end(), desc.begin(), desc.end());
    while (data.size() % 4 != 0) data.push_back(std::byte{0});
    section(std::move(section_name), 7, std::move(data));
  }
  void symbol(std::string name, std::uint8_t type, std::uint8_t bind, std::uint16_t section_index) {
    m_symbols.push_back({std::move(name), type, bind, section_index});
  }

  [[nodiscard]] Bytes build() const {
    std::vector<Section> sections = m_sections;
    if (!m_symbols.empty()) {
      Bytes strtab{std::byte{0}};
      Bytes symtab(24, std::byte{0});
      for (const Symbol& s : m_symbols) {
        put_le<std::uint32_t>(symtab, static_cast<std::uint32_t>(strtab.size()));
        put(strtab, s.name.data(), s.name.size());
        strtab.push_back(std::byte{0});
        symtab.push_back(static_cast<std::byte>((s.bind << 4) | s.type));
        symtab.push_back(std::byte{0});
        put_le<std::uint16_t>(symtab, s.section);
        put_le<std::uint64_t>(symtab, 0);
        put_le<std::uint64_t>(symtab, 0);
      }
      sections.push_back({".strtab", 3, strtab, 0, 1, 0});
      sections.push_back({".symtab", 2, symtab, static_cast<std::uint32_t>(sections.size()), 8, 24});
    }
    Bytes shstrtab{std::byte{0}};
    std::vector<std::uint32_t> name_offsets;
    for (const Section& s : sections) {
      name_offsets.push_back(static_cast<std::uint32_t>(shstrtab.size()));
      put(shstrtab, s.name.data(), s.name.size());
      shstrtab.push_back(std::byte{0});
    }
    name_offsets.push_back(static_cast<std::uint32_t>(shstrtab.size()));
    put(shstrtab, ".shstrtab", 10);
    sections.push_back({".shstrtab", 3, shstrtab, 0, 1, 0});

    Bytes out(64, std::byte{0});
    std::vector<std::uint64_t> offsets;
    for (const Section& s : sections) {
      while (out.size() % 8 != 0) out.push_back(std::byte{0});
      offsets.push_back(out.size());
      out.insert(out.end(), s.data.begin(), s.data.end());
    }
    while (out.size() % 8 != 0) out.push_back(std::byte{0});
    const std::uint64_t section_table = out.size();
    out.insert(out.end(), 64, std::byte{0});  // null section
    for (std::size_t i = 0; i < sections.size(); ++i) {
      const Section& s = sections[i];
      put_le<std::uint32_t>(out, name_offsets[i]);
      put_le<std::uint32_t>(out, s.type);
      put_le<std::uint64_t>(out, 0);  // flags
      put_le<std::uint64_t>(out, 0);  // addr
      put_le<std::uint64_t>(out, offsets[i]);
      put_le<std::uint64_t>(out, s.data.size());
      put_le<std::uint32_t>(out, s.link);
      put_le<std::uint32_t>(out, 0);  // info
      put_le<std::uint64_t>(out, s.align);
      put_le<std::uint64_t>(out, s.entsize);
    }
    const unsigned char ident[16] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 64, 2, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(out.data(), ident, 16);
    const auto write = [&](std::size_t at, auto value) { std::memcpy(out.data() + at, &value, sizeof value); };
    write(16, std::uint16_t{3});  // ET_DYN
    write(18, m_machine);
    write(20, std::uint32_t{1});
    write(40, section_table);
    write(48, m_flags);
    write(52, std::uint16_t{64});
    write(58, std::uint16_t{64});
    write(60, static_cast<std::uint16_t>(sections.size() + 1));
    write(62, static_cast<std::uint16_t>(sections.size()));  // .shstrtab is last
    return out;
  }

 private:
  struct Section {
    std::string name;
    std::uint32_t type;
    Bytes data;
    std::uint32_t link;
    std::uint64_t align;
    std::uint64_t entsize;
  };
  std::uint16_t m_machine;
  std::uint32_t m_flags;
  std::vector<Section> m_sections;
  std::vector<Symbol> m_symbols;
};

/// A code-object-shaped image holding `kernels`: ".kd" symbols and the metadata note.
inline Bytes fake_code_object(const std::vector<KernelSpec>& kernels, std::uint32_t flags = 0x53f) {
  ElfBuilder elf(224, flags);
  elf.note(".note", "AMDGPU", 32, amdgpu_metadata(kernels));
  const std::uint16_t rodata = elf.section(".rodata", 1, Bytes(64 * kernels.size() + 1, std::byte{0}), 64);
  for (const KernelSpec& k : kernels) {
    elf.symbol(k.name, 2, 1, rodata);
    elf.symbol(k.name + ".kd", 1, 1, rodata);
  }
  return elf.build();
}

}  // namespace kiln::test
