// The kernel library as libkiln embeds it: every device_src/*.cu on disk is a built-in source with
// the same bytes, kiln/rtc.h is embedded, and Source::listed_kernels() reads each file's
// `//! kiln-kernels: ` line as written (what `kiln prewarm --all-builtin` compiles). No GPU needed.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/embedded.hpp"
#include "kiln/source.hpp"

namespace {

const std::filesystem::path kDeviceSrc = std::filesystem::path(KILN_SOURCE_DIR) / "device_src";

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

/// The entries of the first line, split on ';' and trimmed: the format device_src/*.cu promise.
std::vector<std::string> entries_of_first_line(const std::string& text) {
  const std::string tag = "//! kiln-kernels: ";
  std::vector<std::string> entries;
  if (text.compare(0, tag.size(), tag) != 0) {
    return entries;
  }
  std::stringstream line(text.substr(tag.size(), text.find('\n') - tag.size()));
  std::string item;
  while (std::getline(line, item, ';')) {
    const auto first = item.find_first_not_of(" \t\r");
    if (first != std::string::npos) {
      entries.push_back(item.substr(first, item.find_last_not_of(" \t\r") - first + 1));
    }
  }
  return entries;
}

}  // namespace

TEST_CASE("every device_src/*.cu is a built-in source with the same bytes", "[rtc][device_src]") {
  std::vector<std::string> on_disk;
  for (const auto& entry : std::filesystem::directory_iterator(kDeviceSrc)) {
    if (entry.path().extension() == ".cu") {
      on_disk.push_back(entry.path().filename().string());
    }
  }
  std::sort(on_disk.begin(), on_disk.end());
  REQUIRE_FALSE(on_disk.empty());
  std::vector<std::string> builtin = kiln::Source::builtin_names();
  std::sort(builtin.begin(), builtin.end());
  CHECK(builtin == on_disk);
  for (const std::string& file : on_disk) {
    INFO(file);
    CHECK(std::string(kiln::Source::builtin(file).text()) == read_file(kDeviceSrc / file));
  }
}

TEST_CASE("kiln/rtc.h is embedded and every built-in source sees it", "[rtc][device_src]") {
  const auto files = kiln::embedded_files();
  const auto rtc =
      std::find_if(files.begin(), files.end(), [](const kiln::EmbeddedFile& f) { return f.name == "kiln/rtc.h"; });
  REQUIRE(rtc != files.end());
  CHECK(std::string(rtc->text) == read_file(kDeviceSrc / "kiln" / "rtc.h"));
  const kiln::Source saxpy = kiln::Source::builtin("saxpy.cu");
  const auto headers = saxpy.headers();
  CHECK(std::any_of(headers.begin(), headers.end(), [](const kiln::Header& h) { return h.name == "kiln/rtc.h"; }));
}

TEST_CASE("Source::listed_kernels reads each kiln-kernels line as written", "[rtc][device_src]") {
  for (const std::string& file : kiln::Source::builtin_names()) {
    INFO(file);
    const std::vector<std::string> expected = entries_of_first_line(read_file(kDeviceSrc / file));
    CHECK_FALSE(expected.empty());
    CHECK(kiln::Source::builtin(file).listed_kernels() == expected);
  }
  // The templated entries survive with their inner spaces and commas.
  const std::vector<std::string> map = kiln::Source::builtin("map.cu").listed_kernels();
  CHECK(std::find(map.begin(), map.end(), "kiln::map<float, 4>") != map.end());
}
