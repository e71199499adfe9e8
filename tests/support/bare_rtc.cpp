#include "bare_rtc.hpp"

#include <dlfcn.h>

#include <cctype>
#include <stdexcept>

namespace kiln::test {

// NVRTC's and HIPRTC's C functions have the same shapes (a result code, an opaque program); the result's
// 0 is success in both.
struct BareCompiler::Api {
  using Program = void*;
  int (*create)(Program*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  int (*compile)(Program, int, const char* const*) = nullptr;
  int (*log_size)(Program, std::size_t*) = nullptr;
  int (*log)(Program, char*) = nullptr;
  int (*code_size)(Program, std::size_t*) = nullptr;
  int (*code)(Program, char*) = nullptr;
  int (*ptx_size)(Program, std::size_t*) = nullptr;  // NVRTC only
  int (*ptx)(Program, char*) = nullptr;
  int (*destroy)(Program*) = nullptr;
  int (*add_name)(Program, const char*) = nullptr;
  int (*lowered_name)(Program, const char*, const char**) = nullptr;
};

namespace {

template <class F>
void bind(void* library, F& f, const std::string& name, const std::string& path) {
  f = reinterpret_cast<F>(::dlsym(library, name.c_str()));
  if (f == nullptr) throw std::runtime_error(path + " has no " + name);
}

std::vector<std::byte> fetch(void* program, int (*size)(void*, std::size_t*), int (*get)(void*, char*)) {
  std::size_t n = 0;
  if (size(program, &n) != 0 || n == 0) return {};
  std::vector<std::byte> out(n);
  if (get(program, reinterpret_cast<char*>(out.data())) != 0) return {};
  return out;
}

}  // namespace

BareCompiler::BareCompiler(std::string path, bool nvidia)
    : m_path(std::move(path)), m_nvidia(nvidia), m_api(std::make_unique<Api>()) {
  m_library = ::dlopen(m_path.c_str(), RTLD_NOW);
  if (m_library == nullptr) {
    const char* why = ::dlerror();
    throw std::runtime_error("cannot load " + m_path + ": " + (why != nullptr ? why : "?"));
  }
  const std::string p = nvidia ? "nvrtc" : "hiprtc";
  bind(m_library, m_api->create, p + "CreateProgram", m_path);
  bind(m_library, m_api->compile, p + "CompileProgram", m_path);
  bind(m_library, m_api->log_size, p + "GetProgramLogSize", m_path);
  bind(m_library, m_api->log, p + "GetProgramLog", m_path);
  bind(m_library, m_api->destroy, p + "DestroyProgram", m_path);
  bind(m_library, m_api->add_name, p + "AddNameExpression", m_path);
  bind(m_library, m_api->lowered_name, p + "GetLoweredName", m_path);
  if (nvidia) {
    bind(m_library, m_api->code_size, "nvrtcGetCUBINSize", m_path);
    bind(m_library, m_api->code, "nvrtcGetCUBIN", m_path);
    bind(m_library, m_api->ptx_size, "nvrtcGetPTXSize", m_path);
    bind(m_library, m_api->ptx, "nvrtcGetPTX", m_path);
  } else {
    bind(m_library, m_api->code_size, "hiprtcGetCodeSize", m_path);
    bind(m_library, m_api->code, "hiprtcGetCode", m_path);
  }
}

// The library stays loaded: kiln's lane holds it too, and unloading a vendor library mid-process is not
// something either vendor promises to survive.
BareCompiler::~BareCompiler() = default;

std::unique_ptr<BareCompiler> BareCompiler::nvrtc(const std::string& path) {
  return std::unique_ptr<BareCompiler>(new BareCompiler(path, true));
}

std::unique_ptr<BareCompiler> BareCompiler::hiprtc(const std::string& path) {
  return std::unique_ptr<BareCompiler>(new BareCompiler(path, false));
}

BareOutput BareCompiler::compile(const std::string& name, const std::string& source,
                                 const std::vector<std::string>& flags,
                                 const std::vector<std::pair<std::string, std::string>>& headers,
                                 const std::vector<std::string>& expressions) const {
  std::vector<const char*> names, texts, options;
  for (const auto& [header_name, text] : headers) {
    names.push_back(header_name.c_str());
    texts.push_back(text.c_str());
  }
  for (const std::string& flag : flags) options.push_back(flag.c_str());
  BareOutput out;
  Api::Program program = nullptr;
  if (m_api->create(&program, source.c_str(), name.c_str(), static_cast<int>(names.size()), texts.data(),
                    names.data()) != 0) {
    out.log = "CreateProgram failed";
    return out;
  }
  for (const std::string& expression : expressions) {
    if (m_api->add_name(program, expression.c_str()) != 0) {
      out.log = "AddNameExpression failed for " + expression;
      m_api->destroy(&program);
      return out;
    }
  }
  const int result = m_api->compile(program, static_cast<int>(options.size()), options.data());
  std::size_t size = 0;
  if (m_api->log_size(program, &size) == 0 && size > 1) {
    out.log.resize(size);
    m_api->log(program, out.log.data());
    out.log.resize(size - 1);  // the NUL
  }
  if (result == 0) {
    out.code = fetch(program, m_api->code_size, m_api->code);
    if (out.code.empty() && m_nvidia) out.code = fetch(program, m_api->ptx_size, m_api->ptx);  // a virtual arch
    out.ok = !out.code.empty();
    for (const std::string& expression : expressions) {
      const char* lowered = nullptr;
      if (m_api->lowered_name(program, expression.c_str(), &lowered) == 0 && lowered != nullptr) {
        out.lowered.emplace_back(expression, lowered);
      }
    }
  }
  m_api->destroy(&program);
  return out;
}

std::string blank_internal_tags(std::span<const std::byte> bytes) {
  std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const std::string marker = "_INTERNAL_";
  for (std::size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + 1)) {
    std::size_t i = at + marker.size() + 8;  // past the first 8 hex digits
    if (i >= text.size() || text[i] != '_') continue;
    std::size_t length = 0;
    for (++i; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i)
      length = length * 10 + (text[i] - '0');
    i += 1 + length;  // '_' and the file name
    if (i + 9 > text.size() || text[i] != '_') continue;
    for (std::size_t k = i + 1; k < i + 9; ++k) text[k] = '#';
  }
  return text;
}

}  // namespace kiln::test
