// parse_remote_url, the KILN_REMOTE_* variables (the fleet secret file among them) and the password
// never showing in messages. No server.
#include <sys/stat.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/cache/remote.hpp"
#include "kiln/cache/storage.hpp"
#include "remote_open.hpp"  // cache/src/remote: the table of backends
#include "stderr_capture.hpp"
#include "test_support.hpp"

using kiln::cache::parse_remote_url;
using kiln::cache::RemoteConfig;
using kiln::test::ScopedEnv;
using kiln::test::TempDir;

namespace {

/// The message of the std::invalid_argument that parse_remote_url throws for `url`.
std::string url_error(const std::string& url) {
  try {
    (void)parse_remote_url(url);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  FAIL("parse_remote_url accepted " << url);
  return {};
}

}  // namespace

TEST_CASE("parse_remote_url reads host, port and database", "[remote][url]") {
  const RemoteConfig plain = parse_remote_url("redis://127.0.0.1:6380");
  CHECK(plain.host == "127.0.0.1");
  CHECK(plain.port == 6380);
  CHECK(plain.db == 0);
  CHECK(plain.user.empty());
  CHECK(plain.password.empty());

  const RemoteConfig defaults = parse_remote_url("redis://cache.example.org");
  CHECK(defaults.host == "cache.example.org");
  CHECK(defaults.port == 6379);

  const RemoteConfig with_db = parse_remote_url("redis://cache:7000/12");
  CHECK(with_db.port == 7000);
  CHECK(with_db.db == 12);
  CHECK(parse_remote_url("redis://cache:7000/").db == 0);

  const RemoteConfig ipv6 = parse_remote_url("redis://[::1]:6390/2");
  CHECK(ipv6.host == "::1");
  CHECK(ipv6.port == 6390);
  CHECK(ipv6.db == 2);
  CHECK(ipv6.display() == "redis://[::1]:6390/2");
}

TEST_CASE("parse_remote_url reads user and password", "[remote][url]") {
  const RemoteConfig acl = parse_remote_url("redis://kiln:s3cret@10.0.0.5:6379/1");
  CHECK(acl.user == "kiln");
  CHECK(acl.password == "s3cret");
  CHECK(acl.host == "10.0.0.5");
  CHECK(acl.db == 1);

  const RemoteConfig legacy = parse_remote_url("redis://:only-password@host:1");
  CHECK(legacy.user.empty());
  CHECK(legacy.password == "only-password");

  // Percent-escapes, and an unescaped '@' in the password (the last '@' ends the user info).
  const RemoteConfig escaped = parse_remote_url("redis://us%65r:p%40ss%3Aw0rd@host:2");
  CHECK(escaped.user == "user");
  CHECK(escaped.password == "p@ss:w0rd");
  CHECK(parse_remote_url("redis://u:a@b@host:3").password == "a@b");
}

TEST_CASE("display() and messages never show the password", "[remote][url]") {
  const RemoteConfig config = parse_remote_url("redis://kiln:hunter2@host:6379/3");
  CHECK(config.display() == "redis://kiln@host:6379/3");
  CHECK(parse_remote_url("redis://:hunter2@host:6379").display() == "redis://host:6379/0");

  const std::string message = url_error("redis://kiln:hunter2@host:notaport");
  CHECK(message.find("hunter2") == std::string::npos);
  CHECK(message.find("notaport") != std::string::npos);
  CHECK(message.find("redis://kiln:***@host:notaport") != std::string::npos);

  CHECK(kiln::cache::redact_remote_url("redis://a:b/c@host:1") == "redis://a:***@host:1");
  CHECK(kiln::cache::redact_remote_url("redis://secret@host:1") == "redis://***@host:1");
  CHECK(kiln::cache::redact_remote_url("redis://host:1/0") == "redis://host:1/0");
}

TEST_CASE("parse_remote_url rejects malformed URLs with a clear message", "[remote][url]") {
  CHECK(url_error("").find("scheme must be redis://") != std::string::npos);
  CHECK(url_error("ftp://host:6379").find("scheme must be redis://") != std::string::npos);
  CHECK(url_error("rediss://host:6379").find("TLS") != std::string::npos);
  CHECK(url_error("redis://").find("no host") != std::string::npos);
  CHECK(url_error("redis://:6379").find("no host") != std::string::npos);
  CHECK(url_error("redis://host:").find("port \"\"") != std::string::npos);
  CHECK(url_error("redis://host:0").find("port \"0\"") != std::string::npos);
  CHECK(url_error("redis://host:65536").find("port \"65536\"") != std::string::npos);
  CHECK(url_error("redis://host:-1").find("port") != std::string::npos);
  CHECK(url_error("redis://host:6379/x").find("database \"x\"") != std::string::npos);
  CHECK(url_error("redis://host:6379/1/2").find("database") != std::string::npos);
  CHECK(url_error("redis://host:6379/-1").find("database") != std::string::npos);
  CHECK(url_error("redis://host:6379?timeout=1").find("query") != std::string::npos);
  CHECK(url_error("redis://::1:6379").find("brackets") != std::string::npos);
  CHECK(url_error("redis://[::1").find("unterminated") != std::string::npos);
  CHECK(url_error("redis://[zz]:1").find("IPv6") != std::string::npos);
  CHECK(url_error("redis://ho st:1").find("host name") != std::string::npos);
  CHECK(url_error("redis://user@host:1").find("user:password") != std::string::npos);
  CHECK(url_error("redis://user:@host:1").find("password is empty") != std::string::npos);
  CHECK(url_error("redis://u:%zz@host:1").find("%-escape") != std::string::npos);
  // Every message names the expected form.
  CHECK(url_error("redis://host:x").find("expected redis://[[user]:password@]host[:port][/db]") != std::string::npos);
}

TEST_CASE("remote_config_from_environment applies KILN_REMOTE_* and rejects nonsense", "[remote][url]") {
  {
    const ScopedEnv timeout("KILN_REMOTE_TIMEOUT_MS", "40");
    const ScopedEnv connect("KILN_REMOTE_CONNECT_TIMEOUT_MS", "30");
    const ScopedEnv retry("KILN_REMOTE_RETRY_S", "5");
    const ScopedEnv ttl("KILN_REMOTE_TTL", "86400");
    const ScopedEnv lease("KILN_REMOTE_LEASE_WAIT_MS", "0");
    const RemoteConfig config = kiln::cache::remote_config_from_environment("redis://h:1");
    CHECK(config.operation_timeout.count() == 40);
    CHECK(config.connect_timeout.count() == 30);
    CHECK(config.retry_after.count() == 5);
    CHECK(config.ttl.count() == 86400);
    CHECK(config.lease_wait.count() == 0);
  }
  const RemoteConfig defaults = kiln::cache::remote_config_from_environment("redis://h:1");
  CHECK(defaults.operation_timeout.count() == 250);
  CHECK(defaults.connect_timeout.count() == 100);
  CHECK(defaults.ttl.count() == 0);
  CHECK(defaults.lease_wait.count() > 0);

  for (const char* bad : {"abc", "-5", "0", "1e3", "999999999"}) {
    const ScopedEnv timeout("KILN_REMOTE_TIMEOUT_MS", bad);
    try {
      (void)kiln::cache::remote_config_from_environment("redis://h:1");
      FAIL("KILN_REMOTE_TIMEOUT_MS=" << bad << " was accepted");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find("KILN_REMOTE_TIMEOUT_MS") != std::string::npos);
    }
  }
}

TEST_CASE("keys live under the kiln:v1: namespace", "[remote][url]") {
  const RemoteConfig config = parse_remote_url("redis://h:1");
  const kiln::cache::Hash128 key{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  CHECK(config.entry_key(key) == "kiln:v1:0123456789abcdeffedcba9876543210");
  CHECK(config.lease_key(key) == "kiln:v1:lease:0123456789abcdeffedcba9876543210");
  CHECK(config.mac_key(key) == "kiln:v1:mac:0123456789abcdeffedcba9876543210");
}

namespace {

/// remote_config_from_environment's message with KILN_REMOTE_SECRET_FILE=`path`; fails if it accepts.
std::string secret_error(const std::string& path) {
  const ScopedEnv secret("KILN_REMOTE_SECRET_FILE", path.c_str());
  try {
    (void)kiln::cache::remote_config_from_environment("redis://h:1");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  FAIL("KILN_REMOTE_SECRET_FILE=" << path << " was accepted");
  return {};
}

}  // namespace

TEST_CASE("KILN_REMOTE_SECRET_FILE: the secret, and the files that are refused", "[remote][url][auth]") {
  const TempDir dir;
  const std::string secret(32, 's');

  SECTION("unset: unauthenticated") {
    const RemoteConfig config = kiln::cache::remote_config_from_environment("redis://h:1");
    CHECK_FALSE(config.authenticated());
    CHECK(config.secret.empty());
  }
  SECTION("a private file: its bytes less one trailing newline") {
    for (const std::string& text : {secret, secret + "\n", secret + "\r\n"}) {
      const std::string path = dir.write_file("secret", text, 0600);
      const ScopedEnv env("KILN_REMOTE_SECRET_FILE", path.c_str());
      const RemoteConfig config = kiln::cache::remote_config_from_environment("redis://h:1");
      CHECK(config.authenticated());
      CHECK(config.secret == secret);
      CHECK(config.secret_file == path);
      // The secret never shows where the configuration is described.
      CHECK(config.display().find(secret) == std::string::npos);
    }
    // Exactly 16 bytes is enough; an owner-only 0400 file is fine.
    const std::string path = dir.write_file("short-enough", std::string(16, 'x') + "\n", 0400);
    const ScopedEnv env("KILN_REMOTE_SECRET_FILE", path.c_str());
    CHECK(kiln::cache::remote_config_from_environment("redis://h:1").secret == std::string(16, 'x'));
  }
  SECTION("refused files: each error names the variable, the file and why") {
    const std::string missing = (dir.path() / "missing").string();
    const std::string message = secret_error(missing);
    CHECK(message.find("KILN_REMOTE_SECRET_FILE=" + missing) != std::string::npos);
    CHECK(message.find("No such file") != std::string::npos);

    const std::string empty = dir.write_file("empty", "", 0600);
    CHECK(secret_error(empty).find(empty + ": the file is empty") != std::string::npos);
    const std::string newline = dir.write_file("newline", "\n", 0600);
    CHECK(secret_error(newline).find("the file is empty") != std::string::npos);

    const std::string short_secret = dir.write_file("short", std::string(15, 'x') + "\n", 0600);
    const std::string short_message = secret_error(short_secret);
    CHECK(short_message.find(short_secret) != std::string::npos);
    CHECK(short_message.find("15 bytes; it needs at least 16") != std::string::npos);

    for (const mode_t mode : {0644, 0640, 0604, 0660, 0602, 0610}) {
      INFO("mode " << std::oct << mode);
      const std::string path = dir.write_file("shared", secret, mode);
      const std::string shared = secret_error(path);
      CHECK(shared.find(path) != std::string::npos);
      CHECK(shared.find("lets group or others read or write it") != std::string::npos);
      CHECK(shared.find("chmod 600") != std::string::npos);
      std::filesystem::remove(path);
    }

    const std::string folder = (dir.path() / "folder").string();
    std::filesystem::create_directory(folder);
    CHECK(secret_error(folder).find(folder + ": not a regular file") != std::string::npos);
    const std::string fifo = (dir.path() / "fifo").string();
    REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
    CHECK(secret_error(fifo).find("not a regular file") != std::string::npos);  // and it did not block

    const std::string huge = dir.write_file("huge", std::string(5000, 'x'), 0600);
    CHECK(secret_error(huge).find("at most 4096") != std::string::npos);

    CHECK(secret_error("").find("KILN_REMOTE_SECRET_FILE=: set but empty") != std::string::npos);
  }
}

TEST_CASE("open_remote matches remote_supported()", "[remote][url]") {
  const RemoteConfig config = parse_remote_url("redis://127.0.0.1:1");
  if (kiln::cache::remote_supported()) {
    // Opening never connects: a dead server is found on first use.
    const auto tier = kiln::cache::open_remote(config);
    REQUIRE(tier != nullptr);
    CHECK(tier->describe() == "redis 127.0.0.1:1/0");
  } else {
    try {
      (void)kiln::cache::open_remote(config);
      FAIL("open_remote succeeded in a build without hiredis");
    } catch (const std::runtime_error& e) {
      const std::string message = e.what();
      CHECK(message.find("hiredis") != std::string::npos);
      CHECK(message.find("redis://127.0.0.1:1/0") != std::string::npos);
    }
  }
}

TEST_CASE("the table of backends: an unknown scheme is refused naming every known one; each tier names its backend",
          "[remote][url]") {
  const auto backends = kiln::cache::detail::remote_backends();
  REQUIRE(backends.size() >= 2);
  for (const char* url : {"s3://bucket/kiln", "grpc://cas:8980", "ftp://host:6379", "redis:/host", "host:6379"}) {
    INFO(url);
    const std::string error = url_error(url);
    CHECK(error.find("the scheme must be ") != std::string::npos);
    CHECK(kiln::cache::remote_backend_name(url).empty());
    // Every scheme of every row is named: a row added to the table is named without another edit.
    for (const auto& backend : backends) {
      for (const std::string_view scheme : backend.schemes) {
        if (!scheme.empty()) CHECK(error.find(scheme) != std::string::npos);
      }
      CHECK(error.find(backend.form) != std::string::npos);
    }
  }
  // Each row: a URL of each of its schemes parses to its kind, names its backend, and opens a tier (no
  // server is asked) whose backend() is the row's name, or says this build lacks its client.
  std::vector<std::string_view> names;
  for (const auto& backend : backends) {
    INFO(backend.name);
    names.push_back(backend.name);
    for (const std::string_view scheme : backend.schemes) {
      if (scheme.empty()) continue;
      const std::string url = std::string(scheme) + "127.0.0.1:1";
      INFO(url);
      const RemoteConfig config = parse_remote_url(url);
      CHECK(config.kind == backend.kind);
      CHECK(kiln::cache::remote_backend_name(url) == backend.name);
      if (!backend.supported()) {
        CHECK_THROWS_AS(kiln::cache::open_remote(config), std::runtime_error);
        continue;
      }
      const auto tier = kiln::cache::open_remote(config);
      REQUIRE(tier != nullptr);
      CHECK(tier->backend() == backend.name);
      CHECK(tier->describe().starts_with(std::string(backend.name) + " 127.0.0.1:1"));
      CHECK(tier->fleet_lease() == (backend.kind == kiln::cache::RemoteKind::redis));
    }
  }
  std::sort(names.begin(), names.end());
  CHECK(std::adjacent_find(names.begin(), names.end()) == names.end());  // one row per backend
  CHECK(std::find(names.begin(), names.end(), "redis") != names.end());
  CHECK(std::find(names.begin(), names.end(), "http") != names.end());
  // A refused scheme its row claims keeps the row's own reason.
  CHECK(url_error("rediss://host:6379").find("TLS (rediss://) is not supported") != std::string::npos);
}

TEST_CASE("parse_remote_url reads http(s) URLs: port, path, layout; refuses a password in the URL",
          "[remote][url][http]") {
  const RemoteConfig plain = parse_remote_url("http://cache.example:8080/kiln/v1/");
  CHECK(plain.kind == kiln::cache::RemoteKind::http);
  CHECK_FALSE(plain.tls);
  CHECK(plain.host == "cache.example");
  CHECK(plain.port == 8080);
  CHECK(plain.path == "/kiln/v1");
  CHECK(plain.layout == kiln::cache::HttpLayout::subdirs);
  CHECK(plain.lease_wait.count() == 0);  // HTTP holds no compile lease
  CHECK(plain.display() == "http://cache.example:8080/kiln/v1");

  const RemoteConfig secure = parse_remote_url("https://ci@[::1]/c?layout=flat");
  CHECK(secure.tls);
  CHECK(secure.port == 443);
  CHECK(secure.host == "::1");
  CHECK(secure.user == "ci");
  CHECK(secure.layout == kiln::cache::HttpLayout::flat);
  CHECK(secure.display() == "https://ci@[::1]:443/c?layout=flat");
  CHECK(parse_remote_url("http://h").port == 80);
  CHECK(parse_remote_url("http://h").path.empty());

  // Object names per layout.
  const kiln::cache::Hash128 key{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  CHECK(plain.object_path(key) == "/kiln/v1/01/" + key.hex());
  CHECK(secure.object_path(key) == "/c/" + key.hex());
  const RemoteConfig bazel = parse_remote_url("http://h:9090?layout=bazel");
  const std::string bazel_path = bazel.object_path(key);
  CHECK(bazel_path.starts_with("/ac/"));
  CHECK(bazel_path.size() == 4 + 64);
  CHECK(bazel_path.find_first_not_of("0123456789abcdef", 4) == std::string::npos);

  CHECK(url_error("http://u:pw@host/x").find("KILN_REMOTE_HTTP_PASSWORD_FILE") != std::string::npos);
  CHECK(url_error("http://u:pw@host/x").find("pw@") == std::string::npos);
  CHECK(url_error("http://host/x?layout=tree").find("unknown layout") != std::string::npos);
  CHECK(url_error("http://host/x?ttl=1").find("unknown parameter") != std::string::npos);
  CHECK(url_error("http://host/a b").find("%-escaped") != std::string::npos);
  CHECK(url_error("http://host/a/../b").find("..") != std::string::npos);
  CHECK(url_error("http://:80/x").find("no host") != std::string::npos);
  CHECK(url_error("https://host:99999/").find("port") != std::string::npos);
}

TEST_CASE("split_remote_urls splits KILN_REMOTE_CACHE's chain at commas", "[remote][url][http]") {
  using V = std::vector<std::string>;
  CHECK(kiln::cache::split_remote_urls("") == V{});
  CHECK(kiln::cache::split_remote_urls("redis://h:1") == V{"redis://h:1"});
  CHECK(kiln::cache::split_remote_urls(" redis://h:1 ,https://c/k%2Cx,, ") == V{"redis://h:1", "https://c/k%2Cx"});
}

TEST_CASE("an http tier's credentials come from files or the environment, never both kinds", "[remote][url][http]") {
  const TempDir dir("kiln-http-url");
  const std::string token = dir.write_file("token", "t0k3n\n", 0600);
  {
    const ScopedEnv file("KILN_REMOTE_HTTP_TOKEN_FILE", token.c_str());
    const RemoteConfig config = kiln::cache::remote_config_from_environment("https://h/k");
    CHECK(config.bearer_token == "t0k3n");
    CHECK(config.credentials_source == "KILN_REMOTE_HTTP_TOKEN_FILE=" + token);
    CHECK(config.verify_tls);
    const ScopedEnv password("KILN_REMOTE_HTTP_PASSWORD", "pw");
    const ScopedEnv user("KILN_REMOTE_HTTP_USER", "u");
    CHECK_THROWS_WITH(kiln::cache::remote_config_from_environment("https://h/k"), Catch::Contains("set one"));
  }
  {
    const ScopedEnv password("KILN_REMOTE_HTTP_PASSWORD", "pw");
    CHECK_THROWS_WITH(kiln::cache::remote_config_from_environment("https://h/k"), Catch::Contains("no user"));
    const RemoteConfig config = kiln::cache::remote_config_from_environment("https://u@h/k");
    CHECK(config.user == "u");
    CHECK(config.password == "pw");
    CHECK(config.display().find("pw") == std::string::npos);
  }
  {
    const ScopedEnv insecure("KILN_REMOTE_HTTP_INSECURE", "1");
    const ScopedEnv timeout("KILN_REMOTE_TIMEOUT_MS", "750");
    const ScopedEnv library("KILN_REMOTE_HTTP_LIBCURL", "/opt/curl/libcurl.so.4");
    const RemoteConfig config = kiln::cache::remote_config_from_environment("https://h/k");
    CHECK_FALSE(config.verify_tls);
    CHECK(config.operation_timeout.count() == 750);
    CHECK(config.curl_library == "/opt/curl/libcurl.so.4");
    const ScopedEnv bad("KILN_REMOTE_HTTP_INSECURE", "yes");
    CHECK_THROWS_WITH(kiln::cache::remote_config_from_environment("https://h/k"), Catch::Contains("expected 0 or 1"));
  }
  // Redis URLs ignore the HTTP variables.
  const ScopedEnv token_env("KILN_REMOTE_HTTP_TOKEN", "x");
  CHECK(kiln::cache::remote_config_from_environment("redis://h:1").bearer_token.empty());
}

TEST_CASE("http URLs: escaped dot segments, a repeated layout and an unknown scheme are refused clearly",
          "[remote][url][http]") {
  // A server decodes %2e before it resolves the path: "%2e%2e" is "..".
  for (const char* url : {"http://host/a/%2e%2e/b", "http://host/a/%2E%2e", "http://host/%2e/x", "http://host/a/.%2E/b",
                          "http://host/a/./b"}) {
    INFO(url);
    CHECK(url_error(url).find("\".\" or \"..\" segments") != std::string::npos);
  }
  CHECK(url_error("http://host/a%2Fb").find("%2F") != std::string::npos);
  CHECK(url_error("http://host/a%0d%0ab").find("control") != std::string::npos);
  CHECK(url_error("http://host/a%zz").find("%-escape") != std::string::npos);
  CHECK(parse_remote_url("http://host/a..b/%2e%2ex").path == "/a..b/%2e%2ex");  // not a dot segment
  // Last-wins would hide a mistake: one layout only.
  CHECK(url_error("http://host/k?layout=flat&layout=bazel").find("layout is given more than once") !=
        std::string::npos);
  CHECK(url_error("http://host/k?layout=flat&layout=flat").find("more than once") != std::string::npos);
  // The message for an unknown scheme names both forms, not only Redis's.
  const std::string ftp = url_error("ftp://host:21/x");
  CHECK(ftp.find("the scheme must be redis://, http:// or https://") != std::string::npos);
  CHECK(ftp.find("http(s)://[user@]host[:port][/path]") != std::string::npos);
  CHECK(url_error("http://u%0a@host/k").find("control character") != std::string::npos);
}

TEST_CASE("split_remote_urls keeps one tier per server", "[remote][url][http]") {
  using V = std::vector<std::string>;
  std::string forty;
  for (int i = 0; i < 40; ++i) forty += "http://cache:8080/kiln,";
  CHECK(kiln::cache::split_remote_urls(forty) == V{"http://cache:8080/kiln"});
  // The same server written two ways is one tier; another path, db or layout is another tier.
  CHECK(kiln::cache::split_remote_urls("redis://h,redis://h:6379/0,redis://h:6379/1") ==
        V{"redis://h", "redis://h:6379/1"});
  CHECK(kiln::cache::split_remote_urls("http://c/k/,http://c:80/k,http://c/k?layout=flat,http://c/j") ==
        V{"http://c/k/", "http://c/k?layout=flat", "http://c/j"});
  // An unparsable item is kept (opening it says what is wrong), once.
  CHECK(kiln::cache::split_remote_urls("ftp://x,ftp://x") == V{"ftp://x"});
}

TEST_CASE("http credentials from the environment: no line breaks in a token; the URL's user is not replaced",
          "[remote][url][http]") {
  for (const char* token : {"abc\r\nX-Injected: 1", "abc\n", "abc\rdef"}) {
    const ScopedEnv env("KILN_REMOTE_HTTP_TOKEN", token);
    try {
      (void)kiln::cache::remote_config_from_environment("https://h/k");
      FAIL("a token with a line break was accepted");
    } catch (const std::invalid_argument& e) {
      const std::string message = e.what();
      CHECK(message.find("KILN_REMOTE_HTTP_TOKEN holds a line break") != std::string::npos);
      CHECK(message.find("Injected") == std::string::npos);  // a credential is not echoed
    }
  }
  {
    const ScopedEnv password("KILN_REMOTE_HTTP_PASSWORD", "pw");
    const ScopedEnv user("KILN_REMOTE_HTTP_USER", "other");
    CHECK_THROWS_WITH(kiln::cache::remote_config_from_environment("https://u@h/k"),
                      Catch::Contains("the URL's user and KILN_REMOTE_HTTP_USER (\"other\") differ"));
    CHECK(kiln::cache::remote_config_from_environment("https://other@h/k").user == "other");
    CHECK(kiln::cache::remote_config_from_environment("https://h/k").user == "other");
  }
}

TEST_CASE("a tier that cannot be opened is named once in the warning", "[remote][url][http]") {
  const TempDir dir("kiln-url-prefix");
  const ScopedEnv token("KILN_REMOTE_HTTP_TOKEN", "t");
  const ScopedEnv password("KILN_REMOTE_HTTP_PASSWORD", "pw");
  const ScopedEnv user("KILN_REMOTE_HTTP_USER", "u");
  kiln::cache::StorageConfig config;
  config.local.root = dir.path();
  config.remote_url = "http://cache.example:8080/kiln";
  const kiln::test::StderrCapture capture;
  const kiln::cache::Storage storage(config);
  CHECK(storage.remotes().empty());
  const std::string text = capture.text();
  INFO(text);
  CHECK(kiln::test::count_occurrences(text, "remote cache http://") == 1);
  CHECK(text.find("remote cache http://cache.example:8080/kiln: both a bearer token") != std::string::npos);
}
