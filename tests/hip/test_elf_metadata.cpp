// The ELF reader and the AMDGPU metadata parser on hand-built input: what they read from well-formed
// images, and that hostile images (truncated, bit-flipped, oversized counts, deep nesting) give a
// reason instead of a crash or an out-of-bounds read. Real HIPRTC / NVRTC output: see test_hip_rtc.cpp.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>

#include "amdgpu_metadata.hpp"
#include "elf.hpp"
#include "elf_builder.hpp"

using kiln::test::Bytes;
using kiln::test::ElfBuilder;
using kiln::test::KernelSpec;
using kiln::test::Msgpack;

namespace {

const std::vector<KernelSpec> kSaxpy = {
    {"saxpy",
     {{0, 4, "by_value"},
      {4, 4, "by_value"},
      {8, 8, "global_buffer"},
      {16, 8, "global_buffer"},
      {24, 8, "hidden_global_offset_x"},
      {32, 8, "hidden_global_offset_y"}},
     40,
     64},
    {"_Z5scaleIfLi4EEvPT_S0_", {{0, 8, "global_buffer"}, {8, 4, "by_value"}}, 12, 32},
};

bool inside(std::span<const std::byte> part, const Bytes& whole) {
  if (part.empty()) return true;
  const auto* begin = whole.data();
  return part.data() >= begin && part.data() + part.size() <= begin + whole.size();
}

}  // namespace

TEST_CASE("parse refuses what is not an ELF64 little-endian image, with a reason", "[elf]") {
  const Bytes good = kiln::test::fake_code_object(kSaxpy);
  const auto reason = [](Bytes b) {
    auto r = kiln::elf::parse(b);
    REQUIRE(std::holds_alternative<std::string>(r));
    return std::get<std::string>(r);
  };
  CHECK_THAT(reason({}), Catch::Contains("shorter than an ELF64 header"));
  Bytes bad_magic = good;
  bad_magic[1] = std::byte{'X'};
  CHECK_THAT(reason(bad_magic), Catch::Contains("bad magic"));
  Bytes elf32 = good;
  elf32[4] = std::byte{1};
  CHECK_THAT(reason(elf32), Catch::Contains("ELF64"));
  Bytes big_endian = good;
  big_endian[5] = std::byte{2};
  CHECK_THAT(reason(big_endian), Catch::Contains("little-endian"));
  Bytes truncated(good.begin(), good.end() - 10);
  CHECK_THAT(reason(truncated), Catch::Contains("section table"));
}

TEST_CASE("an AMDGPU code object: header, sections, symbols, note, kernels, metadata", "[elf][amdgpu]") {
  const Bytes image = kiln::test::fake_code_object(kSaxpy, 0xe3f);
  auto parsed = kiln::elf::parse(image);
  REQUIRE(std::holds_alternative<kiln::elf::Image>(parsed));
  const auto& elf = std::get<kiln::elf::Image>(parsed);
  CHECK(elf.machine == kiln::elf::kMachineAmdgpu);
  CHECK(elf.flags == 0xe3fu);
  CHECK(elf.abi_version == 2);
  REQUIRE(kiln::elf::find_section(elf, ".note") != nullptr);
  CHECK(kiln::elf::find_section(elf, ".nothing") == nullptr);
  CHECK(elf.symbols.size() == 4);

  const auto notes = kiln::elf::notes(elf);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].name == "AMDGPU");
  CHECK(notes[0].type == kiln::amdgpu::kNoteMetadata);

  CHECK(kiln::elf::kernel_names(kiln::PayloadKind::amdgpu_code_object, image) ==
        std::vector<std::string>{"saxpy", "_Z5scaleIfLi4EEvPT_S0_"});

  auto metadata = kiln::amdgpu::read_metadata(image);
  REQUIRE(std::holds_alternative<kiln::amdgpu::CodeObjectMetadata>(metadata));
  const auto& md = std::get<kiln::amdgpu::CodeObjectMetadata>(metadata);
  CHECK(md.target == "amdgcn-amd-amdhsa--gfx90a");
  CHECK(md.version == std::vector<std::uint64_t>{1, 1});
  REQUIRE(md.kernels.size() == 2);
  CHECK(md.kernels[0].name == "saxpy");
  CHECK(md.kernels[0].symbol == "saxpy.kd");
  CHECK(md.kernels[0].args.size() == 6);
  CHECK(md.kernels[0].kernarg_segment_size == 40);
  CHECK(md.kernels[0].wavefront_size == 64);
  CHECK(md.kernels[0].max_flat_workgroup_size == 1024);
  CHECK(md.kernels[1].wavefront_size == 32);

  // Hidden arguments are not the caller's: saxpy takes 4.
  const auto params = kiln::amdgpu::amdgpu_params(image, "saxpy");
  REQUIRE(params.has_value());
  REQUIRE(params->size() == 4);
  const std::size_t offsets[] = {0, 4, 8, 16}, sizes[] = {4, 4, 8, 8};
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK((*params)[i].offset == offsets[i]);
    CHECK((*params)[i].size == sizes[i]);
  }
  // Found by ".name" or by the descriptor symbol's stem; unknown kernels give nullopt.
  CHECK(kiln::amdgpu::amdgpu_params(image, "_Z5scaleIfLi4EEvPT_S0_")->size() == 2);
  CHECK_FALSE(kiln::amdgpu::amdgpu_params(image, "nope").has_value());
  CHECK_FALSE(kiln::amdgpu::amdgpu_params(Bytes(10), "saxpy").has_value());
}

TEST_CASE("CUBIN kernels: FUNC symbols, global or weak, with a .nv.info.<name> section", "[elf][cubin]") {
  ElfBuilder elf(kiln::elf::kMachineCuda, 0x5a);
  const std::uint16_t text1 = elf.section(".text.k1", 1, Bytes(16));
  const std::uint16_t text2 = elf.section(".text.tmpl", 1, Bytes(16));
  const std::uint16_t text3 = elf.section(".text.helper", 1, Bytes(16));
  elf.section(".nv.info.k1", 0x70000000, Bytes(8));
  elf.section(".nv.info.tmpl", 0x70000000, Bytes(8));
  elf.section(".nv.info.local_fn", 0x70000000, Bytes(8));
  elf.symbol("k1", kiln::elf::kSymbolFunc, kiln::elf::kBindGlobal, text1);
  elf.symbol("tmpl", kiln::elf::kSymbolFunc, kiln::elf::kBindWeak, text2);       // template instantiation
  elf.symbol("helper", kiln::elf::kSymbolFunc, kiln::elf::kBindGlobal, text3);   // no .nv.info: not a kernel
  elf.symbol("local_fn", kiln::elf::kSymbolFunc, kiln::elf::kBindLocal, text3);  // local: not a kernel
  elf.symbol("k1", kiln::elf::kSymbolObject, kiln::elf::kBindGlobal, text1);     // not a function
  const Bytes image = elf.build();
  CHECK(kiln::elf::kernel_names(kiln::PayloadKind::cubin, image) == std::vector<std::string>{"k1", "tmpl"});
  // The same bytes read as the other vendor's format give nothing, not a guess.
  CHECK(kiln::elf::kernel_names(kiln::PayloadKind::amdgpu_code_object, image).empty());
}

TEST_CASE("PTX kernels: the .entry names", "[elf][ptx]") {
  const std::string ptx =
      ".version 9.0\n.target sm_90\n.visible .entry saxpy(\n.param .u32 n)\n{ ret; }\n"
      ".visible .entry _Z5scaleIfLi4EEvPT_S0_(\n)\n{ ret; }\n.func helper()\n{ ret; }\n.entryx no\n";
  const auto* bytes = reinterpret_cast<const std::byte*>(ptx.data());
  CHECK(kiln::elf::kernel_names(kiln::PayloadKind::ptx, {bytes, ptx.size()}) ==
        std::vector<std::string>{"saxpy", "_Z5scaleIfLi4EEvPT_S0_"});
}

TEST_CASE("every MessagePack encoding the metadata may use is read", "[amdgpu][msgpack]") {
  Msgpack m;
  m.map(1).str("amdhsa.kernels").array(1).byte(0xde).byte(0).byte(6);                         // map16 with 6 entries
  m.byte(0xd9).byte(5).raw({'.', 'n', 'a', 'm', 'e'}).byte(0xda).byte(0).byte(1).raw({'k'});  // str8, str16
  m.str(".kernarg_segment_size").byte(0xcf).raw({0, 0, 0, 0, 0, 0, 0, 200});                  // uint64
  m.str(".wavefront_size").byte(0xd0).byte(32);                                               // int8
  m.str(".max_flat_workgroup_size").byte(0xcd).raw({0x04, 0x00});                             // uint16
  m.str(".vgpr_count").byte(0xce).raw({0, 0, 0, 7});                                          // uint32
  m.str(".args").byte(0xdc).raw({0, 1}).map(4).str(".size").uint(4).str(".offset").uint(0);   // array16
  m.str(".value_kind").str("by_value").str(".x").raw({0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0});   // float64 ignored
  auto parsed = kiln::amdgpu::parse_metadata(m.bytes());
  REQUIRE(std::holds_alternative<kiln::amdgpu::CodeObjectMetadata>(parsed));
  const auto& md = std::get<kiln::amdgpu::CodeObjectMetadata>(parsed);
  REQUIRE(md.kernels.size() == 1);
  CHECK(md.kernels[0].name == "k");
  CHECK(md.kernels[0].kernarg_segment_size == 200);
  CHECK(md.kernels[0].wavefront_size == 32);
  CHECK(md.kernels[0].max_flat_workgroup_size == 1024);
  CHECK(md.kernels[0].vgpr_count == 7);
  REQUIRE(md.kernels[0].args.size() == 1);
  CHECK(md.kernels[0].args[0].value_kind == "by_value");
}

TEST_CASE("hostile MessagePack: reasons, no crash, no huge allocation", "[amdgpu][msgpack]") {
  const auto reason = [](const Bytes& b) {
    auto r = kiln::amdgpu::parse_metadata(b);
    REQUIRE(std::holds_alternative<std::string>(r));
    return std::get<std::string>(r);
  };
  // A map claiming 2^32-1 entries in 5 bytes is refused before anything is allocated.
  CHECK_THAT(reason(Msgpack().raw({0xdf, 0xff, 0xff, 0xff, 0xff}).bytes()),
             Catch::Contains("larger than the bytes left"));
  // Nested arrays that each claim almost all remaining bytes: refused by the value budget.
  Msgpack nested;
  for (int i = 0; i < 30; ++i) nested.raw({0xdc, 0x01, 0x00});
  Bytes padded = nested.bytes();
  padded.resize(300, std::byte{0xc0});
  CHECK_THAT(reason(padded), Catch::Contains("more values than bytes"));
  // Depth bomb: 100 nested one-element arrays.
  Msgpack deep;
  for (int i = 0; i < 100; ++i) deep.array(1);
  deep.uint(1);
  CHECK_THAT(reason(deep.bytes()), Catch::Contains("nesting deeper"));
  CHECK_THAT(reason(Msgpack().raw({0xc1}).bytes()), Catch::Contains("unknown MessagePack tag"));
  CHECK_THAT(reason(Msgpack().raw({0xdb, 0xff, 0xff, 0xff, 0xf0, 'a'}).bytes()), Catch::Contains("past the end"));
  CHECK_THAT(reason(Msgpack().raw({0xcf, 1, 2}).bytes()), Catch::Contains("truncated"));
  CHECK_THAT(reason(Msgpack().array(1).uint(1).bytes()), Catch::Contains("not a map"));
  // Wrong shapes inside a valid document.
  CHECK_THAT(reason(Msgpack().map(1).str("amdhsa.kernels").uint(3).bytes()), Catch::Contains("not an array"));
  CHECK_THAT(reason(Msgpack()
                        .map(1)
                        .str("amdhsa.kernels")
                        .array(1)
                        .map(1)
                        .str(".args")
                        .array(1)
                        .map(1)
                        .str(".size")
                        .uint(4)
                        .bytes()),
             Catch::Contains("lacks .size or .offset"));
  CHECK_THAT(
      reason(Msgpack().map(1).str("amdhsa.kernels").array(1).map(1).str(".wavefront_size").raw({0xd0, 0xff}).bytes()),
      Catch::Contains("not a non-negative integer"));  // int8 -1, sign-extended
  CHECK_THAT(reason(Msgpack().map(1).str("amdhsa.kernels").array(1).map(1).str(".wavefront_size").str("64").bytes()),
             Catch::Contains("not a non-negative integer"));
  CHECK_THAT(
      reason(Msgpack().map(1).str("amdhsa.kernels").array(1).map(1).str(".wavefront_size").uint(1ULL << 40).bytes()),
      Catch::Contains("not a non-negative integer"));
}

TEST_CASE("every truncation and 20000 bit flips of a code object: no crash, spans inside the input", "[elf][fuzz]") {
  const Bytes original = kiln::test::fake_code_object(kSaxpy);
  const auto exercise = [](const Bytes& image) {
    auto parsed = kiln::elf::parse(image);
    std::size_t checked = 0;
    if (const auto* elf = std::get_if<kiln::elf::Image>(&parsed)) {
      for (const auto& s : elf->sections) {
        REQUIRE(inside(s.data, image));
        ++checked;
      }
      for (const auto& n : kiln::elf::notes(*elf)) {
        REQUIRE(inside(n.desc, image));
        ++checked;
      }
    }
    (void)kiln::elf::kernel_names(kiln::PayloadKind::amdgpu_code_object, image);
    (void)kiln::elf::kernel_names(kiln::PayloadKind::cubin, image);
    (void)kiln::amdgpu::amdgpu_params(image, "saxpy");
    return checked;
  };
  std::size_t parsed_spans = 0;
  for (std::size_t n = 0; n < original.size(); ++n)
    parsed_spans += exercise(Bytes(original.begin(), original.begin() + n));
  std::mt19937 random(12345);
  for (int i = 0; i < 20000; ++i) {
    Bytes mutated = original;
    const int flips = 1 + static_cast<int>(random() % 4);
    for (int f = 0; f < flips; ++f) mutated[random() % mutated.size()] ^= static_cast<std::byte>(1u << (random() % 8));
    parsed_spans += exercise(mutated);
  }
  CHECK(parsed_spans > 0);  // the mutations did reach the section and note readers
}

TEST_CASE("e_flags name the target: mach bits plus fixed sramecc/xnack", "[amdgpu]") {
  using kiln::amdgpu::target_from_flags;
  CHECK(target_from_flags(0x53f) == "gfx90a");  // xnack any, sramecc any
  CHECK(target_from_flags(0x63f) == "gfx90a:xnack-");
  CHECK(target_from_flags(0x73f) == "gfx90a:xnack+");
  CHECK(target_from_flags(0xe3f) == "gfx90a:sramecc+:xnack-");
  CHECK(target_from_flags(0x530) == "gfx908");
  CHECK(target_from_flags(0x36) == "gfx1030");
  CHECK(target_from_flags(0x4c) == "gfx942");
  CHECK(target_from_flags(0x7e).empty());
}
