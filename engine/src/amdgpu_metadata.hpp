#pragma once
// The AMDGPU code-object metadata note (code object v3+): owner "AMDGPU", type NT_AMDGPU_METADATA (32),
// a MessagePack map. It declares each kernel's arguments (size, offset, kind), its kernarg segment,
// wavefront size and work-group limit: what kiln checks a launch against before calling HIP, and what
// works without a GPU. Read with a small bounds-checked MessagePack reader of our own.
//
// Hostile input: nothing here throws (except std::bad_alloc) or reads outside the given bytes; nesting
// is capped and every count is checked against the bytes left before anything is allocated.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/launch.hpp"

namespace kiln::amdgpu {

inline constexpr std::uint32_t kNoteMetadata = 32;  ///< NT_AMDGPU_METADATA
inline constexpr std::string_view kNoteOwner = "AMDGPU";

struct KernelArg {
  std::string name;        ///< ".name" (may be empty)
  std::string value_kind;  ///< ".value_kind": "by_value", "global_buffer", "hidden_global_offset_x", ...
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  /// Hidden arguments are appended by the compiler (implicit kernargs); a caller never passes them.
  [[nodiscard]] bool hidden() const noexcept { return value_kind.starts_with("hidden_"); }
};

struct KernelMetadata {
  std::string name;             ///< ".name": the kernel's (lowered) name
  std::string symbol;           ///< ".symbol": the kernel descriptor, "<name>.kd"
  std::vector<KernelArg> args;  ///< every argument, hidden ones included, in declaration order
  std::uint64_t kernarg_segment_size = 0;
  std::uint64_t kernarg_segment_align = 0;
  std::uint64_t group_segment_fixed_size = 0;    ///< static LDS bytes
  std::uint64_t private_segment_fixed_size = 0;  ///< scratch bytes per work-item
  std::uint32_t wavefront_size = 0;
  std::uint32_t max_flat_workgroup_size = 0;
  std::uint32_t sgpr_count = 0;
  std::uint32_t vgpr_count = 0;
};

struct CodeObjectMetadata {
  std::string target;                  ///< "amdhsa.target": "amdgcn-amd-amdhsa--gfx90a", with features when fixed
  std::vector<std::uint64_t> version;  ///< "amdhsa.version": {1, 1} = code object v4, {1, 2} = v5
  std::vector<KernelMetadata> kernels;
};

/// Parses the MessagePack document of an NT_AMDGPU_METADATA note. Returns the reason on failure.
[[nodiscard]] std::variant<CodeObjectMetadata, std::string> parse_metadata(std::span<const std::byte> msgpack);

/// Finds the metadata note of an AMDGPU code object (an ELF image) and parses it.
[[nodiscard]] std::variant<CodeObjectMetadata, std::string> read_metadata(std::span<const std::byte> code_object);

/// The kernel whose ".name" is `name` (or whose ".symbol" is "<name>.kd"); nullptr when absent.
[[nodiscard]] const KernelMetadata* find_kernel(const CodeObjectMetadata& metadata, std::string_view name) noexcept;

/// The arguments a caller passes to kernel `name` of a code object: offset and size of each non-hidden
/// argument, in order. nullopt when the code object, its metadata or the kernel cannot be read.
[[nodiscard]] std::optional<std::vector<ParamInfo>> amdgpu_params(std::span<const std::byte> code_object,
                                                                  std::string_view name);

/// The target id an AMDGPU ELF header's e_flags name (code object v4+): the processor from the mach
/// bits plus ":sramecc±" / ":xnack±" when fixed ("gfx90a:sramecc+:xnack-"); features "any" or
/// unsupported are omitted. Empty when the mach value is unknown.
[[nodiscard]] std::string target_from_flags(std::uint32_t e_flags);

}  // namespace kiln::amdgpu
