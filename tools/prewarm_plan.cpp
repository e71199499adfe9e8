// kiln prewarm's planner (prewarm_plan.hpp): flags -> validated jobs -> where each job runs.
#include "prewarm_plan.hpp"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "cli.hpp"
#include "kiln/error.hpp"
#include "kiln/tooling/targets.hpp"
#include "requests.hpp"
#include "text_file.hpp"

namespace kiln::cli::prewarm {

std::string Job::label() const {
  if (request.source_name.empty()) return "a line that is no request";  // (its reason names the line)
  std::string text = fmt::format("{} [{}] {}", request.source_name, fmt::join(kernels, ", "), request.target);
  if (!request.options.empty()) text += fmt::format(" {{{}}}", fmt::join(request.options, " "));
  return text;
}

Source make_source(const detail::RecordedRequest& request) {
  if (request.builtin) return Source::builtin(request.source_name);
  return Source::from_text(request.source_name, request.source_text, request.headers);
}

namespace {

std::vector<std::string> split_options(std::string_view text) {
  std::vector<std::string> out;
  std::istringstream in{std::string(text)};
  for (std::string option; in >> option;) out.push_back(option);
  return out;
}

/// Validates an option list the way the engine will read it. Throws UsageError naming `flag`.
std::string canonical_options(const std::vector<std::string>& options, std::string_view flag) {
  try {
    return Options(options).canonical();
  } catch (const Error& error) {
    throw UsageError(fmt::format("{}: {}", flag, error.what()));
  }
}

std::vector<std::string> resolve_targets(const Requests& flags, Engine& engine) {
  std::vector<std::string> targets;
  const auto add = [&](const std::string& target) {
    if (std::find(targets.begin(), targets.end(), target) == targets.end()) targets.push_back(target);
  };
  for (const std::string& target : flags.targets) {
    if (target != "native") {
      add(target);
      continue;
    }
    const std::vector<DeviceInfo> devices = engine.devices();
    if (devices.empty()) {
      std::string lanes;
      for (const LaneInfo& lane : engine.lanes())
        lanes += fmt::format("; {}: {}", kiln::to_string(lane.vendor), lane.status);
      throw UsageError(fmt::format("--target native: this machine has no GPU{}", lanes));
    }
    for (const DeviceInfo& device : devices) add(device.target);
  }
  if (flags.targets.empty()) {
    for (const std::string& target : engine.default_targets()) add(target);
  }
  for (const std::string& target : targets) {
    try {
      (void)detail::parse_target(target);
    } catch (const Error& error) {
      throw UsageError(fmt::format("--target {}: {}", target, error.what()));
    }
  }
  return targets;
}

Header read_header_flag(const std::string& spec) {
  const std::size_t equals = spec.find('=');
  const std::filesystem::path path = equals == std::string::npos ? spec : spec.substr(equals + 1);
  Header header;
  header.name = equals == std::string::npos ? path.filename().string() : spec.substr(0, equals);
  if (header.name.empty()) throw UsageError(fmt::format("--header '{}': empty header name", spec));
  header.text = read_text_file(path, "--header");
  return header;
}

/// Refuses, with one line, a target the engine cannot compile for (unknown to its compiler, or the
/// compiler is missing) and an --option the target's compiler has no spelling for; otherwise every
/// request for it would fail the same way. A recorded request is checked whole (its options, names
/// and target as recorded), and its error names its line in the request log. Plans only
/// (Engine::plan_prewarm): nothing is compiled and no include is resolved; a request's includes are
/// settled once, by the prewarm() that serves it.
void validate_jobs(std::vector<Job>& jobs, const std::vector<std::vector<std::string>>& option_sets,
                   Engine& engine) {
  std::map<std::string, std::string> targets;  // target -> why it cannot be compiled for (empty: it can)
  std::set<Vendor> vendors;
  for (Job& job : jobs) {
    if (!job.refused.empty()) continue;
    if (job.origin.empty()) vendors.insert(job.vendor);  // the requests --option applies to
    auto [known, inserted] = targets.try_emplace(job.request.target);
    if (inserted) {
      try {
        (void)engine.plan_prewarm(*job.source, Options(), {}, job.request.target);
      } catch (const Error& error) {
        known->second = error.what();
      }
    }
    if (known->second.empty()) continue;
    // A target the command line gave is the flag's fault; a recorded one is its line's alone.
    if (job.origin.empty() || job.target_from_flags) throw UsageError(known->second);
    job.refused = fmt::format("{}: {}", job.origin, known->second);
  }
  for (const auto& options : option_sets) {
    for (const Vendor vendor : vendors) {
      try {
        (void)Options(options).vendor_flags(vendor);
      } catch (const Error& error) {
        throw UsageError(fmt::format("--option: {}", error.what()));
      }
    }
  }
  // Each request planned, once: the plan asks the store for its key, and a recorded request that cannot
  // be made is refused here, naming its line (one from the command line reports its error when it runs).
  for (Job& job : jobs) {
    if (!job.refused.empty()) continue;
    try {
      job.planned = engine.plan_prewarm(*job.source, Options(job.request.options), job.request.name_expressions,
                                        job.request.target);
    } catch (const Error& error) {
      if (!job.origin.empty()) job.refused = fmt::format("{}: {}", job.origin, error.what());
    }
  }
}

struct SourceSpec {
  detail::RecordedRequest request;  // source fields only
  Source source;
  std::vector<std::string> kernels;
};

}  // namespace

std::vector<Job> build_jobs(const Requests& flags, Engine& engine, bool quiet) {
  std::vector<SourceSpec> specs;
  const auto add_builtin = [&](const std::string& name, bool explicit_kernels) {
    Source source = Source::builtin(name);
    std::vector<std::string> kernels = explicit_kernels ? flags.kernels : source.listed_kernels();
    if (kernels.empty()) {
      if (!flags.all_builtin || explicit_kernels) {
        throw UsageError(fmt::format("built-in {}: no --kernel given and it lists no kernels", source.name()));
      }
      return;
    }
    detail::RecordedRequest request;
    request.source_name = source.name();
    request.builtin = true;
    request.source_hash = source.content_hash().hex();
    specs.push_back({std::move(request), std::move(source), std::move(kernels)});
  };
  if (flags.all_builtin) {
    for (const std::string& name : Source::builtin_names()) add_builtin(name, false);
  }
  for (const std::string& name : flags.builtins) {
    try {
      add_builtin(name, !flags.kernels.empty());
    } catch (const ConfigError& error) {
      throw UsageError(fmt::format("--builtin {}: {}", name, error.what()));
    }
  }
  std::vector<Header> headers;
  for (const std::string& spec : flags.headers) headers.push_back(read_header_flag(spec));
  for (const std::string& file : flags.sources) {
    detail::RecordedRequest request;
    request.source_name = std::filesystem::path(file).filename().string();
    request.source_text = read_text_file(file, "--source");
    request.headers = headers;
    std::optional<Source> made;
    try {
      made = Source::from_text(request.source_name, request.source_text, request.headers);
    } catch (const ConfigError& error) {
      throw UsageError(fmt::format("--source {}: {}", file, error.what()));
    }
    Source source = std::move(*made);
    request.source_hash = source.content_hash().hex();
    std::vector<std::string> kernels = flags.kernels.empty() ? source.listed_kernels() : flags.kernels;
    if (kernels.empty()) {
      throw UsageError(
          fmt::format("--source {}: give --kernel NAME (or list kernels on a '//! kiln-kernels:' first line)", file));
    }
    specs.push_back({std::move(request), std::move(source), std::move(kernels)});
  }
  if (!flags.kernels.empty() && flags.sources.empty() && flags.builtins.empty()) {
    throw UsageError("--kernel needs --source FILE or --builtin NAME");
  }
  if (!flags.headers.empty() && flags.sources.empty()) throw UsageError("--header needs --source FILE");

  std::vector<std::vector<std::string>> option_sets;
  if (flags.option_sets.empty()) {
    option_sets.push_back(flags.options);
  } else {
    for (const std::string& set : flags.option_sets) {
      std::vector<std::string> options = flags.options;
      for (std::string& option : split_options(set)) options.push_back(std::move(option));
      option_sets.push_back(std::move(options));
    }
  }
  for (auto& options : option_sets) options = with_include_options(options, flags.include_dirs, flags.toolkit_includes);
  for (const auto& options : option_sets) (void)canonical_options(options, "--option");

  std::vector<detail::RecordedRequest> recorded;
  std::vector<std::string> recorded_at;  // "manifest FILE line N" of each record, for its errors
  std::vector<std::pair<std::string, std::string>> unreadable;  // each line that is no record: where, why
  for (const std::string& log_file : flags.request_logs) {
    std::vector<std::size_t> lines;
    std::vector<detail::RequestLogLineError> bad;
    std::vector<detail::RecordedRequest> records = detail::read_request_log(log_file, &lines, &bad);
    // A line cut short (a recorder killed mid-append) or one this kiln cannot read fails alone; a file
    // none of whose lines is a request is not a request log at all (a wrong file): refused whole.
    if (records.empty() && !bad.empty()) {
      throw UsageError(fmt::format("manifest {} line {}: {}", log_file, bad.front().line, bad.front().why));
    }
    for (detail::RecordedRequest& record : records) recorded.push_back(std::move(record));
    for (const std::size_t line : lines) recorded_at.push_back(fmt::format("manifest {} line {}", log_file, line));
    for (const detail::RequestLogLineError& line : bad) {
      unreadable.emplace_back(fmt::format("manifest {} line {}", log_file, line.line), line.why);
    }
  }
  if (specs.empty() && recorded.empty()) {
    throw UsageError("nothing to prewarm: give --all-builtin, --builtin NAME, --source FILE or --manifest FILE");
  }

  const std::vector<std::string> targets =
      (!specs.empty() || !flags.targets.empty()) ? resolve_targets(flags, engine) : std::vector<std::string>{};

  std::vector<Job> jobs;
  std::set<std::string> seen;
  const auto add_job = [&](Job job) {
    std::string identity;
    if (job.refused.empty()) {
      job.vendor = detail::parse_target(job.request.target).vendor;
      try {
        identity = fmt::format("{}\n{}\n{}\n{}", job.source->content_hash().hex(),
                               fmt::join(job.request.name_expressions, "\x1f"),
                               canonical_options(job.request.options, "--option"), job.request.target);
      } catch (const UsageError& error) {
        if (job.origin.empty()) throw;
        job.refused = fmt::format("{}: {}", job.origin, error.what());  // a recorded option set of its own
      }
    }
    if (!job.refused.empty()) identity = fmt::format("{}\n{}", job.origin, job.request.target);
    if (seen.insert(identity).second) jobs.push_back(std::move(job));
  };
  for (const SourceSpec& spec : specs) {
    const auto sets = name_sets(spec.kernels, flags.one_program);
    for (const auto& names : sets) {
      std::vector<std::string> served = names;
      if (names.empty()) {
        for (const std::string& kernel : spec.kernels) {
          if (is_plain_name(kernel)) served.push_back(kernel);
        }
      }
      for (const auto& options : option_sets) {
        for (const std::string& target : targets) {
          Job job;
          job.request = spec.request;
          job.request.name_expressions = names;
          job.request.options = options;
          job.request.target = target;
          job.source = spec.source;
          job.kernels = served;
          if (names.empty()) job.plain_kernels = served;
          add_job(std::move(job));
        }
      }
    }
  }
  std::set<std::string> warned;
  for (std::size_t r = 0; r < recorded.size(); ++r) {
    const detail::RecordedRequest& record = recorded[r];
    const std::string& origin = recorded_at[r];
    std::optional<Source> source;
    std::string refused;
    try {
      source = make_source(record);
    } catch (const Error& error) {
      refused = fmt::format("{}: {}", origin, error.what());
    }
    if (source && record.builtin && source->content_hash().hex() != record.source_hash &&
        warned.insert(record.source_name).second && !quiet) {
      std::cerr << fmt::format(
          "kiln: note: built-in {} changed since the manifest was recorded; prewarming the "
          "current version\n",
          record.source_name);
    }
    const std::vector<std::string> record_targets =
        flags.targets.empty() ? std::vector<std::string>{record.target} : targets;
    for (const std::string& target : record_targets) {
      Job job;
      job.refused = refused;
      try {
        (void)detail::parse_target(target);
      } catch (const Error& error) {
        if (!flags.targets.empty()) throw UsageError(fmt::format("--target {}: {}", target, error.what()));
        if (job.refused.empty()) job.refused = fmt::format("{}: target {}: {}", origin, target, error.what());
      }
      job.request = record;
      job.request.target = target;
      job.source = source;
      job.kernels =
          record.name_expressions.empty() ? std::vector<std::string>{"extern \"C\" kernels"} : record.name_expressions;
      job.origin = origin;
      job.target_from_flags = !flags.targets.empty();
      add_job(std::move(job));
    }
  }
  for (auto& [origin, why] : unreadable) {
    Job job;
    job.refused = fmt::format("{}: {}", origin, why);
    job.origin = std::move(origin);
    add_job(std::move(job));
  }
  validate_jobs(jobs, option_sets, engine);
  return jobs;
}

namespace {

/// A request whose entry is already in the local store: serving it is a file read, cheaper than
/// starting a worker (a damaged entry is removed and recompiled here, as the engine always does).
bool locally_cached(Engine& engine, const Job& job) {
  return job.planned && job.planned->key && engine.cached_locally(*job.planned->key);
}

/// A size estimate of a compile, for longest-first: the bytes the request hands the compiler beyond
/// kiln's own headers (which every request has). A proxy: compile times grow roughly with the size of
/// the source; nothing better is known before compiling.
std::size_t estimated_cost(const Job& job) {
  std::size_t bytes = job.source->text().size();
  for (const Header& header : job.request.headers) bytes += header.text.size();
  return bytes;
}

}  // namespace

Plan plan_jobs(Engine& engine, const std::vector<Job>& jobs, unsigned parallel, bool use_processes) {
  Plan plan;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (!jobs[i].refused.empty()) continue;  // not run (run_prewarm reports it)
    const bool process = use_processes && parallel > 1 && !locally_cached(engine, jobs[i]);
    (process ? plan.in_workers : plan.in_process).push_back(i);
  }
  if (plan.in_workers.size() == 1) {
    // One compile gains nothing from a process of its own.
    plan.in_process.push_back(plan.in_workers.front());
    plan.in_workers.clear();
    std::sort(plan.in_process.begin(), plan.in_process.end());
  }
  std::stable_sort(plan.in_workers.begin(), plan.in_workers.end(),
                   [&](std::size_t a, std::size_t b) { return estimated_cost(jobs[a]) > estimated_cost(jobs[b]); });
  plan.workers = std::min<unsigned>(parallel, static_cast<unsigned>(plan.in_workers.size()));
  return plan;
}

}  // namespace kiln::cli::prewarm
