// The remote tier's configuration (remote.hpp): parsing and redacting redis:// and http(s):// URLs and
// KILN_REMOTE_CACHE's list of them, the KILN_REMOTE_* environment variables (the fleet secret file and
// the HTTP credential files are read by remote_mac.cpp), the Redis key names and the HTTP object paths.
// Plain text handling: compiled with or without hiredis and libcurl. Which parser a URL goes to is the
// table of backends' choice (remote_open.cpp: parse_remote_url).
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>

#include "kiln/base/sha256.hpp"
#include "kiln/cache/remote.hpp"
#include "remote_mac.hpp"
#include "remote_open.hpp"

namespace kiln::cache {

namespace {

constexpr std::string_view kScheme = "redis://";

[[noreturn]] void bad_url(std::string_view url, std::string_view why) {
  throw std::invalid_argument(
      fmt::format("invalid remote cache URL \"{}\": {} (expected redis://[[user]:password@]host[:port][/db])",
                  redact_remote_url(url), why));
}

/// Parses decimal digits only (no sign, no spaces) up to `max`.
std::optional<std::uint64_t> parse_decimal(std::string_view text, std::uint64_t max) noexcept {
  if (text.empty() || text.size() > 20) return std::nullopt;
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || value > max) return std::nullopt;
  return value;
}

int hex_digit(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/// Decodes %XX escapes; nullopt for a malformed escape.
std::optional<std::string> percent_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    const int high = hex_digit(text[i + 1]);
    const int low = hex_digit(text[i + 2]);
    if (high < 0 || low < 0) return std::nullopt;
    out.push_back(static_cast<char>(high * 16 + low));
    i += 2;
  }
  return out;
}

bool valid_host_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
}

bool valid_ipv6_char(char c) noexcept { return hex_digit(c) >= 0 || c == ':' || c == '.' || c == '%'; }

/// KILN_REMOTE_* as a whole number in [min, max]; nullopt when unset or empty.
std::optional<std::uint64_t> environment_number(const char* name, std::uint64_t min, std::uint64_t max) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  const auto number = parse_decimal(value, max);
  if (!number || *number < min) {
    throw std::invalid_argument(fmt::format("{}=\"{}\" is not a whole number from {} to {}", name, value, min, max));
  }
  return number;
}

/// Parses [host|[ipv6]][:port] into `config` (port stays as it is when none is written).
template <class Bad>
void parse_host_port(std::string_view host_port, RemoteConfig& config, const Bad& bad) {
  std::string_view host;
  std::optional<std::string_view> port_text;
  if (host_port.starts_with('[')) {
    const std::size_t close = host_port.find(']');
    if (close == std::string_view::npos) bad("unterminated [ in an IPv6 host");
    host = host_port.substr(1, close - 1);
    const std::string_view after = host_port.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') bad("unexpected text after the IPv6 host");
      port_text = after.substr(1);
    }
    if (host.empty() || !std::all_of(host.begin(), host.end(), valid_ipv6_char)) {
      bad(fmt::format("\"{}\" is not an IPv6 address", host));
    }
  } else {
    const std::size_t colon = host_port.find(':');
    if (colon != std::string_view::npos && host_port.find(':', colon + 1) != std::string_view::npos) {
      bad("an IPv6 host must be written in brackets: [::1]:port");
    }
    host = host_port.substr(0, colon);
    if (colon != std::string_view::npos) port_text = host_port.substr(colon + 1);
    if (host.empty()) bad("no host");
    if (!std::all_of(host.begin(), host.end(), valid_host_char)) {
      bad(fmt::format("\"{}\" is not a host name or address", host));
    }
  }
  config.host = std::string(host);
  if (port_text) {
    const auto port = parse_decimal(*port_text, 65535);
    if (!port || *port == 0) bad(fmt::format("port \"{}\" is not a number from 1 to 65535", *port_text));
    config.port = static_cast<std::uint16_t>(*port);
  }
}

/// A path character an HTTP tier's URL may hold as written (RFC 3986 pchar and '/'; '%' for escapes).
bool valid_path_char(char c) noexcept {
  return valid_host_char(c) || c == '/' || c == '~' || c == '%' || c == '!' || c == '$' || c == '&' ||
         c == '\'' || c == '(' || c == ')' || c == '*' || c == '+' || c == ';' || c == '=' || c == ':' || c == '@';
}

/// Refuses a path with a "." or ".." segment, also %-escaped ("%2e%2e": a server decodes it before it
/// resolves the path), an escaped '/' (a segment the server may split) and escaped control characters.
template <class Bad>
void check_path_segments(std::string_view path, const Bad& bad) {
  while (!path.empty()) {
    path.remove_prefix(1);  // the '/'
    const std::size_t slash = path.find('/');
    const std::string_view raw = path.substr(0, slash);
    path = slash == std::string_view::npos ? std::string_view{} : path.substr(slash);
    const std::optional<std::string> segment = percent_decode(raw);
    if (!segment) bad("malformed %-escape in the path");
    if (*segment == "." || *segment == "..") bad("the path must not hold \".\" or \"..\" segments (also %-escaped)");
    if (segment->find('/') != std::string::npos) bad("the path must not hold an escaped '/' (%2F)");
    if (std::any_of(segment->begin(), segment->end(),
                    [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
      bad("the path must not hold control characters");
    }
  }
}

}  // namespace

RemoteConfig detail::parse_http_url(std::string_view url) {
  const auto bad = [url](std::string_view why) {
    throw std::invalid_argument(
        fmt::format("invalid remote cache URL \"{}\": {} (expected http(s)://[user@]host[:port][/path]"
                    "[?layout=subdirs|flat|bazel])",
                    redact_remote_url(url), why));
  };
  RemoteConfig config;
  config.kind = RemoteKind::http;
  config.tls = url.starts_with("https://");
  config.port = config.tls ? 443 : 80;
  // An HTTP transfer carries a whole entry: give it longer than one Redis command.
  config.connect_timeout = std::chrono::milliseconds(250);
  config.operation_timeout = std::chrono::milliseconds(2000);
  config.lease_wait = std::chrono::milliseconds(0);  // a plain HTTP server cannot hold a lease
  std::string_view rest = url.substr(config.tls ? 8 : 7);
  if (const std::size_t hash = rest.find('#'); hash != std::string_view::npos) bad("fragments are not supported");
  std::string_view query;
  if (const std::size_t question = rest.find('?'); question != std::string_view::npos) {
    query = rest.substr(question + 1);
    rest = rest.substr(0, question);
  }
  const std::size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash);
  if (const std::size_t at = authority.rfind('@'); at != std::string_view::npos) {
    const std::string_view user_info = authority.substr(0, at);
    authority = authority.substr(at + 1);
    if (user_info.find(':') != std::string_view::npos) {
      bad("a password in the URL would show in process listings and logs; put it in "
          "KILN_REMOTE_HTTP_PASSWORD_FILE (or KILN_REMOTE_HTTP_PASSWORD) and keep only the user in the URL");
    }
    auto user = percent_decode(user_info);
    if (!user) bad("malformed %-escape in the user");
    if (std::any_of(user->begin(), user->end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; })) {
      bad("the user holds a control character");
    }
    config.user = std::move(*user);
  }
  parse_host_port(authority, config, bad);
  while (path.ends_with('/')) path.remove_suffix(1);
  if (!std::all_of(path.begin(), path.end(), valid_path_char)) bad("the path holds a character that must be %-escaped");
  check_path_segments(path, bad);
  config.path = std::string(path);
  bool layout_given = false;
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (item.empty()) continue;
    if (item.starts_with("layout=")) {
      if (layout_given) bad("layout is given more than once");
      layout_given = true;
    }
    if (item == "layout=subdirs") {
      config.layout = HttpLayout::subdirs;
    } else if (item == "layout=flat") {
      config.layout = HttpLayout::flat;
    } else if (item == "layout=bazel") {
      config.layout = HttpLayout::bazel;
    } else if (item.starts_with("layout=")) {
      bad(fmt::format("unknown layout \"{}\" (subdirs, flat or bazel)", item.substr(7)));
    } else {
      bad(fmt::format("unknown parameter \"{}\" (only layout=subdirs|flat|bazel)", item));
    }
  }
  return config;
}

namespace {

/// A credential for an HTTP tier: the file named by `file_variable` (owner-only, like the secret), else
/// `variable`'s value. Empty when neither is set.
std::string credential(const char* file_variable, const char* variable, std::string& source) {
  if (const char* file = std::getenv(file_variable); file != nullptr) {
    source = fmt::format("{}={}", file_variable, file);
    return detail::read_credential_file(file_variable, file);
  }
  if (const char* value = std::getenv(variable); value != nullptr && *value != '\0') {
    // A line break would end the header line it goes into and start another (header injection); the
    // file form refuses it too. Not echoed: the value is a credential.
    if (std::string_view(value).find_first_of("\r\n") != std::string_view::npos) {
      throw std::invalid_argument(fmt::format("{} holds a line break (CR or LF); a credential is one line", variable));
    }
    source = variable;
    return value;
  }
  return {};
}

}  // namespace

std::string_view to_string(HttpLayout layout) noexcept {
  switch (layout) {
    case HttpLayout::subdirs:
      return "subdirs";
    case HttpLayout::flat:
      return "flat";
    case HttpLayout::bazel:
      return "bazel";
  }
  return "?";
}

std::vector<std::string> split_remote_urls(std::string_view list) {
  std::vector<std::string> urls;
  std::vector<std::string> tiers;  // what each kept item names: its display form, or its text when unparsable
  while (true) {
    const std::size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (!item.empty()) {
      // The same server twice (redis://h and redis://h:6379/0 are one) would be asked twice per miss and
      // back-fill itself: it is one tier.
      std::string tier;
      try {
        tier = parse_remote_url(item).display();
      } catch (const std::invalid_argument&) {
        tier = std::string(item);  // opening it says what is wrong
      }
      if (std::find(tiers.begin(), tiers.end(), tier) == tiers.end()) {
        tiers.push_back(std::move(tier));
        urls.emplace_back(item);
      }
    }
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return urls;
}

std::string redact_remote_url(std::string_view url) {
  const std::size_t scheme_end = url.find("://");
  const std::size_t start = scheme_end == std::string_view::npos ? 0 : scheme_end + 3;
  const std::size_t at = url.rfind('@');
  if (at == std::string_view::npos || at < start) return std::string(url);
  const std::size_t colon = url.find(':', start);
  if (colon == std::string_view::npos || colon > at) {
    // No user: the whole user info may be a password.
    return fmt::format("{}***{}", url.substr(0, start), url.substr(at));
  }
  return fmt::format("{}***{}", url.substr(0, colon + 1), url.substr(at));
}

RemoteConfig detail::parse_redis_url(std::string_view url) {
  if (url.starts_with("rediss://")) bad_url(url, "TLS (rediss://) is not supported; use redis://");
  if (!url.starts_with(kScheme)) bad_url(url, "the scheme must be redis://");
  RemoteConfig config;
  std::string_view rest = url.substr(kScheme.size());

  if (const std::size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view user_info = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const std::size_t colon = user_info.find(':');
    if (colon == std::string_view::npos) bad_url(url, "the user info must be user:password or :password");
    auto user = percent_decode(user_info.substr(0, colon));
    auto password = percent_decode(user_info.substr(colon + 1));
    if (!user || !password) bad_url(url, "malformed %-escape in the user info");
    if (password->empty()) bad_url(url, "the password is empty");
    config.user = std::move(*user);
    config.password = std::move(*password);
  }

  const std::size_t slash = rest.find('/');
  const std::string_view host_port = rest.substr(0, slash);
  const std::string_view path = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
  if (path.find_first_of("?#") != std::string_view::npos || host_port.find_first_of("?#") != std::string_view::npos) {
    bad_url(url, "query strings and fragments are not supported");
  }

  parse_host_port(host_port, config, [url](std::string_view why) { bad_url(url, why); });
  if (!path.empty()) {
    const auto db = parse_decimal(path, static_cast<std::uint64_t>(std::numeric_limits<int>::max()));
    if (!db) bad_url(url, fmt::format("database \"{}\" is not a whole number", path));
    config.db = static_cast<int>(*db);
  }
  return config;
}

RemoteConfig remote_config_from_environment(std::string_view url) {
  RemoteConfig config = parse_remote_url(url);
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  if (auto v = environment_number("KILN_REMOTE_CONNECT_TIMEOUT_MS", 1, 600000))
    config.connect_timeout = milliseconds(*v);
  if (auto v = environment_number("KILN_REMOTE_TIMEOUT_MS", 1, 600000)) config.operation_timeout = milliseconds(*v);
  if (auto v = environment_number("KILN_REMOTE_RETRY_S", 0, 86400)) config.retry_after = seconds(*v);
  if (auto v = environment_number("KILN_REMOTE_TTL", 0, 10ULL * 366 * 86400)) config.ttl = seconds(*v);
  if (auto v = environment_number("KILN_REMOTE_LEASE_WAIT_MS", 0, 3600000)) config.lease_wait = milliseconds(*v);
  if (auto v = environment_number("KILN_REMOTE_MAX_ENTRY_MB", 1, 1024)) config.limits.max_file_bytes = *v << 20;
  // Set but empty is an error, not "no secret": a fleet that means to authenticate must not run
  // without it because a variable expanded to nothing.
  if (const char* file = std::getenv("KILN_REMOTE_SECRET_FILE"); file != nullptr) {
    config.secret = detail::read_secret_file(file);
    config.secret_file = file;
  }
  if (config.kind == RemoteKind::http) {
    // Only a compile-once lease on Redis exists: KILN_REMOTE_LEASE_WAIT_MS does not apply here.
    config.lease_wait = std::chrono::milliseconds(0);
    std::string token_source;
    config.bearer_token = credential("KILN_REMOTE_HTTP_TOKEN_FILE", "KILN_REMOTE_HTTP_TOKEN", token_source);
    std::string password_source;
    std::string password = credential("KILN_REMOTE_HTTP_PASSWORD_FILE", "KILN_REMOTE_HTTP_PASSWORD", password_source);
    if (const char* user = std::getenv("KILN_REMOTE_HTTP_USER"); user != nullptr && *user != '\0') {
      // Two users for one tier is a mistake to say, not one to settle silently.
      if (!config.user.empty() && config.user != user) {
        throw std::invalid_argument(
            fmt::format("remote cache {}: the URL's user and KILN_REMOTE_HTTP_USER (\"{}\") "
                        "differ; set one",
                        config.display(), user));
      }
      if (std::any_of(user, user + std::strlen(user), [](char c) { return static_cast<unsigned char>(c) < 0x20; })) {
        throw std::invalid_argument("KILN_REMOTE_HTTP_USER holds a control character");
      }
      config.user = user;
    }
    if (!config.bearer_token.empty() && !password.empty()) {
      throw std::invalid_argument(fmt::format(
          "remote cache {}: both a bearer token ({}) and a password ({}) are set; set one", config.display(),
          token_source, password_source));
    }
    if (!password.empty() && config.user.empty()) {
      throw std::invalid_argument(fmt::format("remote cache {}: {} is set but no user (KILN_REMOTE_HTTP_USER, or "
                                              "user@ in the URL)",
                                              config.display(), password_source));
    }
    config.password = std::move(password);
    config.credentials_source = !config.bearer_token.empty() ? token_source : password_source;
    if (const char* v = std::getenv("KILN_REMOTE_HTTP_INSECURE"); v != nullptr && *v != '\0') {
      const std::string_view value(v);
      if (value != "0" && value != "1") {
        throw std::invalid_argument(fmt::format("KILN_REMOTE_HTTP_INSECURE=\"{}\": expected 0 or 1", value));
      }
      config.verify_tls = value == "0";
    }
    if (const char* v = std::getenv("KILN_REMOTE_HTTP_CA_FILE"); v != nullptr && *v != '\0') config.ca_file = v;
    if (const char* v = std::getenv("KILN_REMOTE_HTTP_LIBCURL"); v != nullptr && *v != '\0') config.curl_library = v;
  }
  return config;
}

std::string RemoteConfig::display() const {
  const std::string user_part = user.empty() ? std::string() : user + "@";
  const bool ipv6 = host.find(':') != std::string::npos;
  if (kind == RemoteKind::http) {
    return fmt::format("{}://{}{}{}{}:{}{}{}", tls ? "https" : "http", user_part, ipv6 ? "[" : "", host,
                       ipv6 ? "]" : "", port, path,
                       layout == HttpLayout::subdirs ? "" : fmt::format("?layout={}", to_string(layout)));
  }
  return fmt::format("redis://{}{}{}{}:{}/{}", user_part, ipv6 ? "[" : "", host, ipv6 ? "]" : "", port, db);
}

std::string RemoteConfig::object_path(const Hash128& key) const {
  const std::string hex = key.hex();
  switch (layout) {
    case HttpLayout::flat:
      return fmt::format("{}/{}", path, hex);
    case HttpLayout::bazel:
      // bazel-remote's action cache wants 64 lower-case hex digits: a SHA-256 of kiln's key under a
      // label (never a digest of the content, which is what its CAS would check).
      return fmt::format("{}/ac/{}", path, kiln::detail::to_hex(kiln::detail::sha256("kiln-entry/1:" + hex)));
    case HttpLayout::subdirs:
      break;
  }
  return fmt::format("{}/{}/{}", path, hex.substr(0, 2), hex);
}

std::string RemoteConfig::entry_key(const Hash128& key) const { return key_prefix + key.hex(); }
std::string RemoteConfig::lease_key(const Hash128& key) const { return key_prefix + "lease:" + key.hex(); }
std::string RemoteConfig::mac_key(const Hash128& key) const { return key_prefix + "mac:" + key.hex(); }

}  // namespace kiln::cache
