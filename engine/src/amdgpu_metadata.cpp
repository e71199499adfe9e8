#include "amdgpu_metadata.hpp"

#include <cstring>
#include <limits>
#include <memory>
#include <utility>

#include "elf.hpp"

namespace kiln::amdgpu {
namespace {

// ---- A small MessagePack reader -------------------------------------------------------------------
// Builds a tree of Values. Every element consumes at least one input byte, so a valid tree has at most
// one value per input byte; counts are checked against the bytes left and against the values allocated
// so far before anything is reserved, and nesting deeper than kMaxDepth is refused (no stack
// exhaustion on hostile input).

constexpr int kMaxDepth = 32;

struct Value {
  enum class Kind : std::uint8_t { nil, boolean, unsigned_int, signed_int, floating, string, binary, array, map, ext };
  Kind kind = Kind::nil;
  std::uint64_t u = 0;  // unsigned_int, boolean
  std::int64_t i = 0;   // signed_int
  double f = 0;
  std::string_view text;     // string / binary / ext payload, pointing into the input
  std::vector<Value> items;  // array elements, or map keys and values interleaved

  [[nodiscard]] const Value* get(std::string_view key) const noexcept {
    if (kind != Kind::map) return nullptr;
    for (std::size_t k = 0; k + 1 < items.size(); k += 2) {
      if (items[k].kind == Kind::string && items[k].text == key) return &items[k + 1];
    }
    return nullptr;
  }
  /// A non-negative integer, whichever encoding carried it.
  [[nodiscard]] std::optional<std::uint64_t> as_unsigned() const noexcept {
    if (kind == Kind::unsigned_int) return u;
    if (kind == Kind::signed_int && i >= 0) return static_cast<std::uint64_t>(i);
    return std::nullopt;
  }
};

class MsgpackReader {
 public:
  explicit MsgpackReader(std::span<const std::byte> bytes) : m_bytes(bytes) {}

  /// One complete value; the reason on failure.
  std::variant<Value, std::string> read_document() {
    Value root;
    if (!read(root, 0)) return m_error;
    return root;
  }

 private:
  bool fail(std::string reason) {
    if (m_error.empty()) m_error = std::move(reason) + " at byte " + std::to_string(m_at);
    return false;
  }
  [[nodiscard]] std::size_t left() const noexcept { return m_bytes.size() - m_at; }

  /// A big-endian unsigned number of `width` bytes (1, 2, 4 or 8).
  bool number(std::size_t width, std::uint64_t& out) {
    if (left() < width) return fail("truncated number");
    out = 0;
    for (std::size_t k = 0; k < width; ++k) out = (out << 8) | std::to_integer<std::uint64_t>(m_bytes[m_at + k]);
    m_at += width;
    return true;
  }

  bool bytes(std::uint64_t size, std::string_view& out) {
    if (size > left()) return fail("string or binary runs past the end");
    out = std::string_view(reinterpret_cast<const char*>(m_bytes.data()) + m_at, static_cast<std::size_t>(size));
    m_at += static_cast<std::size_t>(size);
    return true;
  }

  bool container(Value& out, std::uint64_t count, bool is_map, int depth) {
    const std::uint64_t elements = is_map ? count * 2 : count;  // count < 2^32, no overflow
    if (elements > left()) return fail("container larger than the bytes left");
    // A valid document holds at most one value per byte; nested containers that claim more are refused
    // before their elements are allocated.
    if (elements > m_bytes.size() - m_values) return fail("more values than bytes");
    m_values += static_cast<std::size_t>(elements);
    out.kind = is_map ? Value::Kind::map : Value::Kind::array;
    out.items.resize(static_cast<std::size_t>(elements));
    for (Value& item : out.items) {
      if (!read(item, depth + 1)) return false;
    }
    return true;
  }

  bool read(Value& out, int depth) {
    if (depth > kMaxDepth) return fail("nesting deeper than " + std::to_string(kMaxDepth));
    if (left() == 0) return fail("truncated document");
    const auto tag = std::to_integer<std::uint8_t>(m_bytes[m_at++]);
    if (tag <= 0x7f) {
      out.kind = Value::Kind::unsigned_int;
      out.u = tag;
      return true;
    }
    if (tag >= 0xe0) {
      out.kind = Value::Kind::signed_int;
      out.i = static_cast<std::int8_t>(tag);
      return true;
    }
    if ((tag & 0xf0) == 0x80) return container(out, tag & 0x0f, true, depth);
    if ((tag & 0xf0) == 0x90) return container(out, tag & 0x0f, false, depth);
    if ((tag & 0xe0) == 0xa0) {
      out.kind = Value::Kind::string;
      return bytes(tag & 0x1f, out.text);
    }
    switch (tag) {
      case 0xc0:
        out.kind = Value::Kind::nil;
        return true;
      case 0xc2:
      case 0xc3:
        out.kind = Value::Kind::boolean;
        out.u = tag == 0xc3 ? 1 : 0;
        return true;
      case 0xc4:
      case 0xc5:
      case 0xc6: {  // bin 8/16/32
        std::uint32_t size = 0;
        if (!sized(tag - 0xc4, size)) return false;
        out.kind = Value::Kind::binary;
        return bytes(size, out.text);
      }
      case 0xc7:
      case 0xc8:
      case 0xc9: {  // ext 8/16/32: size, type byte, payload
        std::uint32_t size = 0;
        if (!sized(tag - 0xc7, size)) return false;
        out.kind = Value::Kind::ext;
        return bytes(std::uint64_t{size} + 1, out.text);
      }
      case 0xca: {
        std::uint64_t raw = 0;
        if (!number(4, raw)) return false;
        const auto bits = static_cast<std::uint32_t>(raw);
        float value = 0;
        std::memcpy(&value, &bits, sizeof value);
        out.kind = Value::Kind::floating;
        out.f = value;
        return true;
      }
      case 0xcb: {
        std::uint64_t bits = 0;
        if (!number(8, bits)) return false;
        std::memcpy(&out.f, &bits, sizeof out.f);
        out.kind = Value::Kind::floating;
        return true;
      }
      case 0xcc:
      case 0xcd:
      case 0xce:
      case 0xcf:  // uint 8/16/32/64
        out.kind = Value::Kind::unsigned_int;
        return number(std::size_t{1} << (tag - 0xcc), out.u);
      case 0xd0:
      case 0xd1:
      case 0xd2:
      case 0xd3: {  // int 8/16/32/64: sign-extended from its width
        const std::size_t width = std::size_t{1} << (tag - 0xd0);
        std::uint64_t raw = 0;
        if (!number(width, raw)) return false;
        const unsigned shift = static_cast<unsigned>(64 - 8 * width);
        out.kind = Value::Kind::signed_int;
        out.i = static_cast<std::int64_t>(raw << shift) >> shift;
        return true;
      }
      case 0xd4:
      case 0xd5:
      case 0xd6:
      case 0xd7:
      case 0xd8:  // fixext 1/2/4/8/16: type byte + payload
        out.kind = Value::Kind::ext;
        return bytes(1 + (std::uint64_t{1} << (tag - 0xd4)), out.text);
      case 0xd9:
      case 0xda:
      case 0xdb: {  // str 8/16/32
        std::uint32_t size = 0;
        if (!sized(tag - 0xd9, size)) return false;
        out.kind = Value::Kind::string;
        return bytes(size, out.text);
      }
      case 0xdc:
      case 0xdd: {  // array 16/32
        std::uint32_t count = 0;
        if (!sized(tag - 0xdc + 1, count)) return false;
        return container(out, count, false, depth);
      }
      case 0xde:
      case 0xdf: {  // map 16/32
        std::uint32_t count = 0;
        if (!sized(tag - 0xde + 1, count)) return false;
        return container(out, count, true, depth);
      }
      default:
        return fail("unknown MessagePack tag " + std::to_string(tag));  // 0xc1 is never used
    }
  }

  /// A length field of 1, 2 or 4 bytes (width_code 0, 1, 2).
  bool sized(int width_code, std::uint32_t& out) {
    std::uint64_t value = 0;
    if (!number(std::size_t{1} << width_code, value)) return false;
    out = static_cast<std::uint32_t>(value);
    return true;
  }

  std::span<const std::byte> m_bytes;
  std::size_t m_at = 0;
  std::size_t m_values = 0;  // values allocated so far (never more than the input's size)
  std::string m_error;
};

std::string text_of(const Value* v) {
  return v != nullptr && v->kind == Value::Kind::string ? std::string(v->text) : std::string();
}

template <typename T>
bool number_of(const Value& map, std::string_view key, T& out, std::string& error, std::string_view where) {
  const Value* v = map.get(key);
  if (v == nullptr) return true;  // absent fields keep their default
  const std::optional<std::uint64_t> n = v->as_unsigned();
  if (!n || *n > std::numeric_limits<T>::max()) {
    error = std::string(where) + ": " + std::string(key) + " is not a non-negative integer";
    return false;
  }
  out = static_cast<T>(*n);
  return true;
}

}  // namespace

std::variant<CodeObjectMetadata, std::string> parse_metadata(std::span<const std::byte> msgpack) {
  MsgpackReader reader(msgpack);
  auto document = reader.read_document();
  if (auto* error = std::get_if<std::string>(&document)) return "metadata is not valid MessagePack: " + *error;
  const Value& root = std::get<Value>(document);
  if (root.kind != Value::Kind::map) return std::string("metadata is not a map");

  CodeObjectMetadata out;
  out.target = text_of(root.get("amdhsa.target"));
  if (const Value* version = root.get("amdhsa.version"); version != nullptr && version->kind == Value::Kind::array) {
    for (const Value& part : version->items) {
      if (auto n = part.as_unsigned()) out.version.push_back(*n);
    }
  }
  const Value* kernels = root.get("amdhsa.kernels");
  if (kernels == nullptr) return out;
  if (kernels->kind != Value::Kind::array) return std::string("amdhsa.kernels is not an array");
  std::string error;
  for (const Value& k : kernels->items) {
    if (k.kind != Value::Kind::map) return std::string("an amdhsa.kernels element is not a map");
    KernelMetadata kernel;
    kernel.name = text_of(k.get(".name"));
    kernel.symbol = text_of(k.get(".symbol"));
    const std::string where = "kernel '" + kernel.name + "'";
    if (!number_of(k, ".kernarg_segment_size", kernel.kernarg_segment_size, error, where) ||
        !number_of(k, ".kernarg_segment_align", kernel.kernarg_segment_align, error, where) ||
        !number_of(k, ".group_segment_fixed_size", kernel.group_segment_fixed_size, error, where) ||
        !number_of(k, ".private_segment_fixed_size", kernel.private_segment_fixed_size, error, where) ||
        !number_of(k, ".wavefront_size", kernel.wavefront_size, error, where) ||
        !number_of(k, ".max_flat_workgroup_size", kernel.max_flat_workgroup_size, error, where) ||
        !number_of(k, ".sgpr_count", kernel.sgpr_count, error, where) ||
        !number_of(k, ".vgpr_count", kernel.vgpr_count, error, where)) {
      return error;
    }
    if (const Value* args = k.get(".args"); args != nullptr) {
      if (args->kind != Value::Kind::array) return where + ": .args is not an array";
      for (const Value& a : args->items) {
        if (a.kind != Value::Kind::map) return where + ": an .args element is not a map";
        KernelArg arg;
        arg.name = text_of(a.get(".name"));
        arg.value_kind = text_of(a.get(".value_kind"));
        if (a.get(".size") == nullptr || a.get(".offset") == nullptr)
          return where + ": an argument lacks .size or .offset";
        if (!number_of(a, ".size", arg.size, error, where) || !number_of(a, ".offset", arg.offset, error, where))
          return error;
        kernel.args.push_back(std::move(arg));
      }
    }
    out.kernels.push_back(std::move(kernel));
  }
  return out;
}

std::variant<CodeObjectMetadata, std::string> read_metadata(std::span<const std::byte> code_object) {
  auto parsed = elf::parse(code_object);
  if (auto* error = std::get_if<std::string>(&parsed)) return *error;
  const elf::Image& image = std::get<elf::Image>(parsed);
  if (image.machine != elf::kMachineAmdgpu) {
    return "not an AMDGPU code object (e_machine " + std::to_string(image.machine) + ", expected 224)";
  }
  for (const elf::Note& note : elf::notes(image)) {
    if (note.type == kNoteMetadata && note.name == kNoteOwner) return parse_metadata(note.desc);
  }
  return std::string("the code object has no NT_AMDGPU_METADATA note (code object v2/v3 or stripped)");
}

const KernelMetadata* find_kernel(const CodeObjectMetadata& metadata, std::string_view name) noexcept {
  for (const KernelMetadata& k : metadata.kernels) {
    if (k.name == name) return &k;
  }
  for (const KernelMetadata& k : metadata.kernels) {
    if (k.symbol.size() == name.size() + 3 && k.symbol.starts_with(name) && k.symbol.ends_with(".kd")) return &k;
  }
  return nullptr;
}

std::optional<std::vector<ParamInfo>> amdgpu_params(std::span<const std::byte> code_object, std::string_view name) {
  auto metadata = read_metadata(code_object);
  const auto* parsed = std::get_if<CodeObjectMetadata>(&metadata);
  if (parsed == nullptr) return std::nullopt;
  const KernelMetadata* kernel = find_kernel(*parsed, name);
  if (kernel == nullptr) return std::nullopt;
  std::vector<ParamInfo> params;
  for (const KernelArg& arg : kernel->args) {
    if (arg.hidden()) continue;
    params.push_back({static_cast<std::size_t>(arg.offset), static_cast<std::size_t>(arg.size)});
  }
  return params;
}

std::string target_from_flags(std::uint32_t e_flags) {
  // EF_AMDGPU_MACH_* (llvm/BinaryFormat/ELF.h). 0x20-0x47 checked against LLVM 15's header and against
  // HIPRTC 5.2 output for every target it knows; later values from newer LLVM releases.
  struct Mach {
    std::uint32_t value;
    const char* name;
  };
  static constexpr Mach kMachs[] = {
      {0x20, "gfx600"},  {0x21, "gfx601"},  {0x22, "gfx700"},  {0x23, "gfx701"},  {0x24, "gfx702"},  {0x25, "gfx703"},
      {0x26, "gfx704"},  {0x28, "gfx801"},  {0x29, "gfx802"},  {0x2a, "gfx803"},  {0x2b, "gfx810"},  {0x2c, "gfx900"},
      {0x2d, "gfx902"},  {0x2e, "gfx904"},  {0x2f, "gfx906"},  {0x30, "gfx908"},  {0x31, "gfx909"},  {0x32, "gfx90c"},
      {0x33, "gfx1010"}, {0x34, "gfx1011"}, {0x35, "gfx1012"}, {0x36, "gfx1030"}, {0x37, "gfx1031"}, {0x38, "gfx1032"},
      {0x39, "gfx1033"}, {0x3a, "gfx602"},  {0x3b, "gfx705"},  {0x3c, "gfx805"},  {0x3d, "gfx1035"}, {0x3e, "gfx1034"},
      {0x3f, "gfx90a"},  {0x40, "gfx940"},  {0x41, "gfx1100"}, {0x42, "gfx1013"}, {0x43, "gfx1150"}, {0x44, "gfx1103"},
      {0x45, "gfx1036"}, {0x46, "gfx1101"}, {0x47, "gfx1102"}, {0x48, "gfx1200"}, {0x4a, "gfx1151"}, {0x4b, "gfx941"},
      {0x4c, "gfx942"},  {0x4e, "gfx1201"}, {0x4f, "gfx950"},
  };
  const std::uint32_t mach = e_flags & 0xffu;
  std::string target;
  for (const Mach& m : kMachs) {
    if (m.value == mach) target = m.name;
  }
  if (target.empty()) return target;
  // Code object v4+ feature fields: 0 unsupported, 1 any, 2 off, 3 on. Printed in LLVM's order.
  const std::uint32_t sramecc = (e_flags >> 10) & 3u;
  const std::uint32_t xnack = (e_flags >> 8) & 3u;
  if (sramecc >= 2) target += sramecc == 3 ? ":sramecc+" : ":sramecc-";
  if (xnack >= 2) target += xnack == 3 ? ":xnack+" : ":xnack-";
  return target;
}

}  // namespace kiln::amdgpu
