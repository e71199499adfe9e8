#pragma once
// Launch configuration and argument packing.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace kiln {

struct Dim3 {
  std::uint32_t x = 1, y = 1, z = 1;
  constexpr Dim3() = default;
  constexpr Dim3(std::uint32_t x_, std::uint32_t y_ = 1, std::uint32_t z_ = 1) : x(x_), y(y_), z(z_) {}  // NOLINT(google-explicit-constructor)
};

/// A raw stream handle (CUstream / hipStream_t), e.g. from CuPy's `stream.ptr` or PyTorch's
/// `torch.cuda.current_stream().cuda_stream`. nullptr = the legacy default stream.
using StreamHandle = void*;

struct LaunchConfig {
  Dim3 grid;
  Dim3 block;
  std::uint32_t shared_bytes = 0;  ///< dynamic shared memory
  StreamHandle stream = nullptr;
};

/// A kernel parameter as the binary declares it: what a packed launch is checked against. Here, not in
/// engine.hpp, so the lanes that read it from a binary need no engine header.
struct ParamInfo {
  std::size_t offset = 0;
  std::size_t size = 0;
};

/// Kernel arguments packed with natural alignment, as the kernel's parameter buffer expects them.
/// Records each argument's size and offset so a launch can be checked against the binary.
class ArgPack {
 public:
  static constexpr std::size_t kMaxBytes = 4096;  ///< the classic kernel parameter limit of both vendors
  static constexpr std::size_t kMaxArgs = 128;

  template <typename T>
  void push(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "kernel arguments must be trivially copyable");
    push_bytes(&value, sizeof(T), alignof(T));
  }
  /// Appends raw bytes aligned to `alignment` (a power of two). Throws LaunchError past the limits.
  void push_bytes(const void* data, std::size_t size, std::size_t alignment);

  [[nodiscard]] const std::byte* data() const noexcept { return m_bytes; }
  [[nodiscard]] std::byte* data() noexcept { return m_bytes; }
  [[nodiscard]] std::size_t size() const noexcept { return m_size; }
  [[nodiscard]] std::size_t count() const noexcept { return m_count; }
  [[nodiscard]] std::size_t arg_size(std::size_t i) const noexcept { return m_sizes[i]; }
  [[nodiscard]] std::size_t arg_offset(std::size_t i) const noexcept { return m_offsets[i]; }

 private:
  // Deliberately not zero-initialised: a launch packs into this on the stack on the hot path.
  alignas(16) std::byte m_bytes[kMaxBytes];
  std::uint32_t m_sizes[kMaxArgs];
  std::uint32_t m_offsets[kMaxArgs];
  std::size_t m_size = 0;
  std::size_t m_count = 0;
};

}  // namespace kiln
