#include "corpus.hpp"

#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "test_support.hpp"

namespace kiln::differential {

namespace fs = std::filesystem;

namespace {

std::vector<FileOp> ops_of(const nlohmann::json& list) {
  std::vector<FileOp> out;
  for (const nlohmann::json& j : list) {
    FileOp op;
    op.op = j.at("op").get<std::string>();
    op.path = j.at("path").get<std::string>();
    if (j.contains("text")) op.text = j["text"].get<std::string>();
    if (j.contains("pad")) op.pad = j["pad"].get<std::size_t>();
    if (op.op != "write" && op.op != "remove" && op.op != "mkdir") throw std::runtime_error("unknown file op " + op.op);
    if (op.path.empty() || op.path.front() == '/' || op.path.find("..") != std::string::npos) {
      throw std::runtime_error("file op path outside the tree: " + op.path);
    }
    out.push_back(std::move(op));
  }
  return out;
}

/// `bytes` of comment lines: the bulk of a header set past the PCH threshold, cheap for the compiler.
std::string padding(std::size_t bytes) {
  std::string out;
  out.reserve(bytes + 100);
  for (std::size_t line = 0; out.size() < bytes; ++line) {
    out +=
        fmt::format("// padding line {:06} ................................................................\n", line);
  }
  return out;
}

}  // namespace

std::vector<Case> load_corpus(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read the corpus " + path.string());
  const nlohmann::json doc = nlohmann::json::parse(in);
  std::vector<Case> cases;
  for (const nlohmann::json& j : doc.at("cases")) {
    Case c;
    c.json = j;
    c.id = j.at("id").get<std::string>();
    c.index = j.at("index").get<int>();
    c.seed = j.at("seed").get<int>();
    c.features = j.at("features").get<std::vector<std::string>>();
    c.vendor = j.at("vendor").get<std::string>();
    c.target = j.at("target").get<std::string>();
    c.source_name = j.at("source_name").get<std::string>();
    c.source = j.at("source").get<std::string>();
    c.siblings = j.at("siblings").get<std::vector<std::string>>();
    c.options = j.at("options").get<std::vector<std::string>>();
    c.files = ops_of(j.at("files"));
    for (const nlohmann::json& step : j.at("steps")) c.steps.push_back(ops_of(step));
    cases.push_back(std::move(c));
  }
  return cases;
}

void generate(const fs::path& out, const std::string& arguments) {
  const std::string command = fmt::format("/usr/bin/python3 '{}/tests/differential/generate.py' {} --out '{}' 2>&1",
                                          KILN_SOURCE_DIR, arguments, out.string());
  int status = 0;
  const std::string said = test::shell_output(command, &status);
  if (status != 0) throw std::runtime_error(fmt::format("the generator failed ({}): {}", command, said));
}

std::string placed(std::string_view text, const fs::path& root) {
  std::string out;
  const std::string_view marker = "@ROOT@";
  for (std::size_t at = 0;;) {
    const std::size_t next = text.find(marker, at);
    out.append(text.substr(at, next - at));
    if (next == std::string_view::npos) break;
    out += root.string();
    at = next + marker.size();
  }
  return out;
}

void write_file(const fs::path& path, std::string_view bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

void apply(const std::vector<FileOp>& ops, const fs::path& root) {
  for (const FileOp& op : ops) {
    const fs::path path = root / op.path;
    if (op.op == "write") {
      write_file(path, placed(op.text, root) + padding(op.pad));
    } else if (op.op == "remove") {
      fs::remove(path);
    } else {
      fs::create_directories(path);
    }
  }
}

std::string describe(const std::vector<FileOp>& ops) {
  std::string out;
  for (const FileOp& op : ops) {
    if (!out.empty()) out += ", ";
    out += op.op + " " + op.path;
  }
  return out;
}

std::vector<std::string> bare_flags(const Case& c, const fs::path& root) {
  std::string standard = "c++17";
  std::vector<std::string> macros, folders;
  for (const std::string& option : c.options) {
    const std::string o = placed(option, root);
    if (o.starts_with("-std="))
      standard = o.substr(5);
    else if (o.starts_with("-D") || o.starts_with("-U"))
      macros.push_back(o);
    else if (o.starts_with("-I"))
      folders.push_back(o);
    else
      throw std::runtime_error(fmt::format("{}: the runner has no bare spelling for option '{}'", c.id, o));
  }
  std::vector<std::string> flags = {"-std=" + standard};
  flags.insert(flags.end(), macros.begin(), macros.end());
  if (c.vendor == "cuda") {
    flags.push_back("-arch=" + c.target);
    flags.emplace_back("-default-device");
    flags.emplace_back("-DKILN_WARP_SIZE=32");
  } else {
    flags.push_back("--offload-arch=" + c.target);
    flags.emplace_back("-DKILN_WARP_SIZE=64");
  }
  flags.insert(flags.end(), folders.begin(), folders.end());
  return flags;
}

}  // namespace kiln::differential
