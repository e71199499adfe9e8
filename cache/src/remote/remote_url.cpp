// The remote tier's configuration (remote.hpp): parsing and redacting redis:// URLs, the KILN_REMOTE_*
// environment variables (the fleet secret file is read by remote_mac.cpp), and the Redis key names.
// Plain text handling: compiled with or without hiredis.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <optional>
#include <stdexcept>

#include "kiln/cache/remote.hpp"
#include "remote_mac.hpp"

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

}  // namespace

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

RemoteConfig parse_remote_url(std::string_view url) {
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

  std::string_view host;
  std::optional<std::string_view> port_text;
  if (host_port.starts_with('[')) {
    const std::size_t close = host_port.find(']');
    if (close == std::string_view::npos) bad_url(url, "unterminated [ in an IPv6 host");
    host = host_port.substr(1, close - 1);
    const std::string_view after = host_port.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') bad_url(url, "unexpected text after the IPv6 host");
      port_text = after.substr(1);
    }
    if (host.empty() || !std::all_of(host.begin(), host.end(), valid_ipv6_char)) {
      bad_url(url, fmt::format("\"{}\" is not an IPv6 address", host));
    }
  } else {
    const std::size_t colon = host_port.find(':');
    if (colon != std::string_view::npos && host_port.find(':', colon + 1) != std::string_view::npos) {
      bad_url(url, "an IPv6 host must be written in brackets: redis://[::1]:6379");
    }
    host = host_port.substr(0, colon);
    if (colon != std::string_view::npos) port_text = host_port.substr(colon + 1);
    if (host.empty()) bad_url(url, "no host");
    if (!std::all_of(host.begin(), host.end(), valid_host_char)) {
      bad_url(url, fmt::format("\"{}\" is not a host name or address", host));
    }
  }
  config.host = std::string(host);

  if (port_text) {
    const auto port = parse_decimal(*port_text, 65535);
    if (!port || *port == 0) bad_url(url, fmt::format("port \"{}\" is not a number from 1 to 65535", *port_text));
    config.port = static_cast<std::uint16_t>(*port);
  }
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
  // Set but empty is an error, not "no secret": a fleet that means to authenticate must not run
  // without it because a variable expanded to nothing.
  if (const char* file = std::getenv("KILN_REMOTE_SECRET_FILE"); file != nullptr) {
    config.secret = detail::read_secret_file(file);
    config.secret_file = file;
  }
  return config;
}

std::string RemoteConfig::display() const {
  const std::string user_part = user.empty() ? std::string() : user + "@";
  const bool ipv6 = host.find(':') != std::string::npos;
  return fmt::format("redis://{}{}{}{}:{}/{}", user_part, ipv6 ? "[" : "", host, ipv6 ? "]" : "", port, db);
}

std::string RemoteConfig::entry_key(const Hash128& key) const { return key_prefix + key.hex(); }
std::string RemoteConfig::lease_key(const Hash128& key) const { return key_prefix + "lease:" + key.hex(); }
std::string RemoteConfig::mac_key(const Hash128& key) const { return key_prefix + "mac:" + key.hex(); }

}  // namespace kiln::cache
