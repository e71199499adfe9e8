#pragma once
// Between gpu_main.cpp (main) and gpu_support.cpp: not for the tests themselves.
#include <optional>
#include <string>
#include <string_view>

namespace kiln_test::detail {

inline constexpr std::string_view kChildFlag = "--kiln-child";

/// Creates the shared engine on a fresh cache root. False (with the reason) when there is no device.
/// Errors other than DeviceUnavailable propagate: they are failures, not reasons to skip.
bool start_shared_engine(std::string& skip_reason);
/// Destroys the shared engine, then its cache root. Never throws.
void stop_shared_engine() noexcept;
/// When argv is `<exe> --kiln-child <mode> args...`: runs the registered mode and returns its exit
/// code; nullopt otherwise.
std::optional<int> run_child_mode(int argc, char** argv);

}  // namespace kiln_test::detail
