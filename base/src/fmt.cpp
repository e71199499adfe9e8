// fmt's out-of-line half, compiled once for all of kiln. Every other file includes fmt's headers
// without FMT_HEADER_ONLY, so each translation unit no longer compiles fmt's formatting engine
// (format-inl.h) for itself: with it, a file that formats anything took 5-10x longer to compile,
// and that was most of the build. libkiln exports these symbols, so the CLI, the tests and the
// benchmarks linking libkiln use this copy. Debian's libfmt.so is not linked: libkiln must load on
// machines (the wheel's, the GPU machine's) that do not have it.
#include <fmt/format-inl.h>

// The templates fmt's headers declare `extern template` (or call without a definition) when not
// header-only: one explicit instantiation each, so that every caller finds them here.
namespace fmt {
inline namespace v9 {
namespace detail {
template locale_ref::locale_ref(const std::locale&);
template auto locale_ref::get<std::locale>() const -> std::locale;
template auto thousands_sep_impl<char>(locale_ref) -> thousands_sep_result<char>;
template auto thousands_sep_impl<wchar_t>(locale_ref) -> thousands_sep_result<wchar_t>;
template auto decimal_point_impl(locale_ref) -> char;
template auto decimal_point_impl(locale_ref) -> wchar_t;
template void vformat_to(buffer<char>&, string_view, basic_format_args<buffer_context<char>>, locale_ref);
}  // namespace detail
}  // namespace v9
}  // namespace fmt
