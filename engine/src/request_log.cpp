// The request log (KILN_RECORD): writing, parsing and reading it (kiln/tooling/request_log.hpp).
#include "kiln/tooling/request_log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln/base/hash.hpp"
#include "kiln/base/log.hpp"
#include "kiln/error.hpp"
#include "kiln/options.hpp"
#include "kiln/tooling/targets.hpp"

namespace kiln::detail {
namespace {

using nlohmann::json;

constexpr std::string_view kBase64Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

bool is_valid_utf8(std::string_view text) noexcept {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    std::size_t extra = 0;
    std::uint32_t code = 0;
    if (lead < 0x80) {
      ++i;
      continue;
    } else if ((lead & 0xE0) == 0xC0) {
      extra = 1;
      code = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      extra = 2;
      code = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
      extra = 3;
      code = lead & 0x07;
    } else {
      return false;
    }
    if (i + extra >= text.size()) return false;
    for (std::size_t k = 1; k <= extra; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      code = (code << 6) | (next & 0x3F);
    }
    const bool overlong = (extra == 1 && code < 0x80) || (extra == 2 && code < 0x800) || (extra == 3 && code < 0x10000);
    if (overlong || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
    i += extra + 1;
  }
  return true;
}

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const std::uint32_t v = (static_cast<unsigned char>(bytes[i]) << 16) |
                            (static_cast<unsigned char>(bytes[i + 1]) << 8) | static_cast<unsigned char>(bytes[i + 2]);
    out += kBase64Alphabet[(v >> 18) & 63];
    out += kBase64Alphabet[(v >> 12) & 63];
    out += kBase64Alphabet[(v >> 6) & 63];
    out += kBase64Alphabet[v & 63];
  }
  if (const std::size_t rest = bytes.size() - i; rest > 0) {
    std::uint32_t v = static_cast<unsigned char>(bytes[i]) << 16;
    if (rest == 2) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += kBase64Alphabet[(v >> 18) & 63];
    out += kBase64Alphabet[(v >> 12) & 63];
    out += rest == 2 ? kBase64Alphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    std::uint32_t v = 0;
    int padding = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      std::uint32_t digit = 0;
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        ++padding;
      } else {
        if (padding > 0) return std::nullopt;
        const std::size_t position = kBase64Alphabet.find(c);
        if (position == std::string_view::npos) return std::nullopt;
        digit = static_cast<std::uint32_t>(position);
      }
      v = (v << 6) | digit;
    }
    out += static_cast<char>((v >> 16) & 0xFF);
    if (padding < 2) out += static_cast<char>((v >> 8) & 0xFF);
    if (padding < 1) out += static_cast<char>(v & 0xFF);
  }
  return out;
}

/// Stores `text` under "text", or under "text_base64" when it is not valid UTF-8.
void put_text(nlohmann::ordered_json& object, std::string_view text) {
  if (is_valid_utf8(text)) {
    object["text"] = std::string(text);
  } else {
    object["text_base64"] = base64_encode(text);
  }
}

class LineError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::string get_text(const json& object, std::string_view what) {
  if (const auto it = object.find("text"); it != object.end()) {
    if (!it->is_string()) throw LineError(fmt::format("{}: \"text\" is not a string", what));
    return it->get<std::string>();
  }
  if (const auto it = object.find("text_base64"); it != object.end()) {
    if (!it->is_string()) throw LineError(fmt::format("{}: \"text_base64\" is not a string", what));
    auto decoded = base64_decode(it->get_ref<const std::string&>());
    if (!decoded) throw LineError(fmt::format("{}: \"text_base64\" is not valid base64", what));
    return std::move(*decoded);
  }
  throw LineError(fmt::format("{}: has neither \"text\" nor \"text_base64\"", what));
}

const json& require(const json& object, const char* field) {
  const auto it = object.find(field);
  if (it == object.end()) throw LineError(fmt::format("missing \"{}\"", field));
  return *it;
}

std::string require_string(const json& object, const char* field) {
  const json& value = require(object, field);
  if (!value.is_string()) throw LineError(fmt::format("\"{}\" is not a string", field));
  return value.get<std::string>();
}

std::vector<std::string> require_strings(const json& object, const char* field) {
  const json& value = require(object, field);
  if (!value.is_array()) throw LineError(fmt::format("\"{}\" is not an array", field));
  std::vector<std::string> out;
  for (const json& item : value) {
    if (!item.is_string()) throw LineError(fmt::format("\"{}\" holds a non-string", field));
    out.push_back(item.get<std::string>());
  }
  return out;
}

RecordedRequest parse_line(std::string_view line) {
  json object;
  try {
    object = json::parse(line);
  } catch (const json::parse_error& error) {
    // nlohmann's message is "[json.exception.parse_error.101] parse error at line 1, column 5: ...".
    std::string what = error.what();
    if (const auto colon = what.find("column"); colon != std::string::npos) what = what.substr(colon);
    throw LineError(fmt::format("not valid JSON ({})", what));
  }
  if (!object.is_object()) throw LineError("not a JSON object");
  const json& version = require(object, "v");
  if (!version.is_number_integer()) throw LineError("\"v\" is not an integer");
  if (version.get<long long>() != kRequestLogVersion) {
    throw LineError(fmt::format("manifest version {} is not supported (this kiln reads version {})",
                                version.get<long long>(), kRequestLogVersion));
  }
  RecordedRequest record;
  record.source_name = require_string(object, "source");
  if (record.source_name.empty()) throw LineError("\"source\" is empty");
  const json& builtin = require(object, "builtin");
  if (!builtin.is_boolean()) throw LineError("\"builtin\" is not true or false");
  record.builtin = builtin.get<bool>();
  record.source_hash = require_string(object, "source_hash");
  if (!cache::Hash128::from_hex(record.source_hash)) throw LineError("\"source_hash\" is not 32 hex digits");
  record.name_expressions = require_strings(object, "names");
  record.options = require_strings(object, "options");
  record.target = require_string(object, "target");
  if (record.target.empty()) throw LineError("\"target\" is empty");
  // Checked here, where the line number is known, rather than when the request is replayed.
  try {
    (void)parse_target(record.target);
  } catch (const Error& error) {
    throw LineError(fmt::format("\"target\": {}", error.what()));
  }
  try {
    (void)Options(record.options);
  } catch (const Error& error) {
    throw LineError(fmt::format("\"options\": {}", error.what()));
  }
  if (!record.builtin) {
    record.source_text = get_text(object, "runtime source");
    if (const auto it = object.find("headers"); it != object.end()) {
      if (!it->is_array()) throw LineError("\"headers\" is not an array");
      for (const json& header : *it) {
        if (!header.is_object()) throw LineError("\"headers\" holds a non-object");
        Header h;
        h.name = require_string(header, "name");
        h.text = get_text(header, fmt::format("header \"{}\"", h.name));
        record.headers.push_back(std::move(h));
      }
    }
  }
  return record;
}

}  // namespace

RecordedRequest parse_request_log_line(std::string_view line) {
  try {
    return parse_line(line);
  } catch (const LineError& error) {
    throw ConfigError(error.what());
  }
}

std::string request_log_line(const RecordedRequest& record) {
  // ordered_json: the fields appear in the documented order, "v" first, for people reading request logs.
  using ordered = nlohmann::ordered_json;
  ordered object = ordered::object();
  object["v"] = kRequestLogVersion;
  // Names and options are identifiers and flags; a non-UTF-8 byte in them is replaced, not fatal.
  object["source"] = record.source_name;
  object["builtin"] = record.builtin;
  object["source_hash"] = record.source_hash;
  object["names"] = record.name_expressions;
  object["options"] = record.options;
  object["target"] = record.target;
  if (!record.builtin) {
    put_text(object, record.source_text);
    ordered headers = ordered::array();
    for (const Header& header : record.headers) {
      ordered h = ordered::object();
      h["name"] = header.name;
      put_text(h, header.text);
      headers.push_back(std::move(h));
    }
    object["headers"] = std::move(headers);
  }
  return object.dump(-1, ' ', false, ordered::error_handler_t::replace);
}

RequestRecorder::RequestRecorder(std::filesystem::path path) : m_path(std::move(path)) {}

RequestRecorder::~RequestRecorder() {
  if (m_fd >= 0) ::close(m_fd);
}

void RequestRecorder::record(const RecordedRequest& record) noexcept {
  try {
    std::string line = request_log_line(record);
    line += '\n';
    const std::string id = cache::hash128(line).hex();
    const std::lock_guard lock(m_mutex);
    if (m_failed || m_seen.count(id) != 0) return;
    const auto fail = [&](std::string_view what, int error) {
      m_failed = true;
      KILN_LOG(warn, "KILN_RECORD: cannot {} manifest {}: {}; recording stops for this engine", what, m_path.string(),
               std::error_code(error, std::system_category()).message());
    };
    if (m_fd < 0) {
      m_fd = ::open(m_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
      if (m_fd < 0) return fail("open", errno);
    }
    ssize_t written = 0;
    do {
      written = ::write(m_fd, line.data(), line.size());
    } while (written < 0 && errno == EINTR);
    if (written < 0) return fail("append to", errno);
    if (static_cast<std::size_t>(written) != line.size()) return fail("append a whole line to", ENOSPC);
    m_seen.insert(id);
  } catch (...) {
    // Out of memory while recording: drop this record; recording never fails a request.
  }
}

std::vector<RecordedRequest> read_request_log(const std::filesystem::path& path, std::vector<std::size_t>* line_numbers,
                                              std::vector<RequestLogLineError>* bad_lines) {
  const auto system_text = [](int error) { return std::error_code(error, std::system_category()).message(); };
  // O_NONBLOCK: opening a FIFO must not wait for a writer; only regular files are read (a FIFO or a
  // device such as /dev/zero could be read without end), up to kMaxRequestLogBytes.
  // The messages say "manifest FILE": the name users give the file (`kiln prewarm --manifest`).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw ConfigError(fmt::format("manifest {}: cannot open: {}", path.string(), system_text(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    throw ConfigError(fmt::format("manifest {}: cannot open: {}", path.string(), system_text(errno)));
  }
  if (S_ISDIR(st.st_mode)) throw ConfigError(fmt::format("manifest {}: is a directory, not a file", path.string()));
  if (!S_ISREG(st.st_mode)) {
    throw ConfigError(
        fmt::format("manifest {}: not a regular file (a FIFO, socket or device is not read)", path.string()));
  }
  const auto too_large = [&](std::uint64_t size) {
    return ConfigError(
        fmt::format("manifest {}: {} bytes, over the limit of {} bytes", path.string(), size, kMaxRequestLogBytes));
  };
  if (static_cast<std::uint64_t>(st.st_size) > kMaxRequestLogBytes) {
    throw too_large(static_cast<std::uint64_t>(st.st_size));
  }
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t length = 0;
  for (;;) {
    if (length == text.size()) {
      if (text.size() > kMaxRequestLogBytes) throw too_large(text.size());
      text.resize(std::max<std::size_t>(text.size() * 2, 4096));  // it grew since fstat
    }
    const ssize_t n = ::read(fd, text.data() + length, text.size() - length);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw ConfigError(fmt::format("manifest {}: read error: {}", path.string(), system_text(errno)));
    }
    if (n == 0) break;
    length += static_cast<std::size_t>(n);
  }
  if (length > kMaxRequestLogBytes) throw too_large(length);
  std::vector<RecordedRequest> records;
  std::string_view rest(text.data(), length);
  std::size_t line_number = 0;
  while (!rest.empty()) {
    const std::size_t end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    try {
      records.push_back(parse_line(line));
      if (line_numbers != nullptr) line_numbers->push_back(line_number);
    } catch (const LineError& error) {
      if (bad_lines == nullptr) {
        throw ConfigError(fmt::format("manifest {} line {}: {}", path.string(), line_number, error.what()));
      }
      bad_lines->push_back({line_number, error.what()});
    }
  }
  return records;
}

}  // namespace kiln::detail
