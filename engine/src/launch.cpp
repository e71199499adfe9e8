#include <fmt/format.h>

#include <cstring>

#include "kiln/error.hpp"
#include "kiln/launch.hpp"

namespace kiln {

void ArgPack::push_bytes(const void* data, std::size_t size, std::size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    throw LaunchError(fmt::format("kernel argument {}: alignment {} is not a power of two", m_count, alignment));
  }
  const std::size_t offset = (m_size + alignment - 1) & ~(alignment - 1);
  if (m_count >= kMaxArgs || offset + size > kMaxBytes) {
    throw LaunchError(fmt::format("kernel arguments exceed kiln's limit ({} arguments, {} bytes)", kMaxArgs, kMaxBytes));
  }
  std::memcpy(m_bytes + offset, data, size);
  m_sizes[m_count] = static_cast<std::uint32_t>(size);
  m_offsets[m_count] = static_cast<std::uint32_t>(offset);
  ++m_count;
  m_size = offset + size;
}

}  // namespace kiln
