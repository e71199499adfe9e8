#pragma once
// A small, bounds-checked ELF64 (little-endian) reader for the binaries both lanes produce: NVIDIA
// CUBINs and AMDGPU code objects. It reads the header, the section table, the symbol table and notes;
// nothing is relocated or executed. Used by the engine (kernel lists, metadata) and by the CLI.
//
// Hostile input: parse() never throws, never reads outside the given bytes, and allocates at most a
// small multiple of the input's size. Spans in the result point into the caller's bytes, which must
// outlive the Image.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/cache/types.hpp"

namespace kiln::elf {

inline constexpr std::uint16_t kMachineCuda = 190;    ///< EM_CUDA
inline constexpr std::uint16_t kMachineAmdgpu = 224;  ///< EM_AMDGPU (0xe0)

inline constexpr std::uint32_t kSectionNote = 7;    ///< SHT_NOTE
inline constexpr std::uint32_t kSectionNobits = 8;  ///< SHT_NOBITS: no bytes in the file

inline constexpr std::uint8_t kSymbolObject = 1;  ///< STT_OBJECT
inline constexpr std::uint8_t kSymbolFunc = 2;    ///< STT_FUNC
inline constexpr std::uint8_t kBindLocal = 0;     ///< STB_LOCAL
inline constexpr std::uint8_t kBindGlobal = 1;    ///< STB_GLOBAL
inline constexpr std::uint8_t kBindWeak = 2;      ///< STB_WEAK

struct Section {
  std::string name;
  std::uint32_t type = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::uint64_t alignment = 0;
  std::span<const std::byte> data;  ///< empty for SHT_NOBITS
};

struct Symbol {
  std::string name;
  std::uint8_t type = 0;  ///< STT_*
  std::uint8_t bind = 0;  ///< STB_*
  std::uint16_t section_index = 0;
  std::uint64_t value = 0;
  std::uint64_t size = 0;
};

struct Note {
  std::string name;  ///< owner, without the terminating NUL ("AMDGPU", "NVIDIA Corp")
  std::uint32_t type = 0;
  std::span<const std::byte> desc;
};

struct Image {
  std::uint16_t type = 0;        ///< e_type
  std::uint16_t machine = 0;     ///< e_machine
  std::uint32_t flags = 0;       ///< e_flags (the target on both vendors)
  std::uint8_t os_abi = 0;       ///< EI_OSABI
  std::uint8_t abi_version = 0;  ///< EI_ABIVERSION (AMDGPU: 2 = code object v4, 3 = v5)
  std::vector<Section> sections;
  std::vector<Symbol> symbols;  ///< .symtab, or .dynsym when there is no .symtab
};

/// Parses an ELF64 little-endian image. Returns the reason when `bytes` is not one ("truncated section
/// table", ...). Never throws (except std::bad_alloc), never reads outside `bytes`.
[[nodiscard]] std::variant<Image, std::string> parse(std::span<const std::byte> bytes);

/// The section named `name`, or nullptr.
[[nodiscard]] const Section* find_section(const Image& image, std::string_view name) noexcept;

/// Every note of every SHT_NOTE section, in file order. Malformed notes end their section's list.
[[nodiscard]] std::vector<Note> notes(const Image& image);

/// The kernels a binary defines, in symbol-table order, each once. CUBIN: FUNC symbols (global or weak:
/// template instantiations are weak) that have a ".nv.info.<name>" section. AMDGPU code object: the
/// "<name>.kd" kernel descriptors, minus the suffix. PTX: the ".entry" names. Empty for anything
/// unreadable. Never throws (except std::bad_alloc).
[[nodiscard]] std::vector<std::string> kernel_names(PayloadKind kind, std::span<const std::byte> binary);

}  // namespace kiln::elf
