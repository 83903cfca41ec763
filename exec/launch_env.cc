#include "exec/launch_env.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>

namespace domino::exec {
namespace {

struct Launcher {
  const char* name;
  const char* size;
  const char* rank;
  const char* local_rank;  // may be absent
};

constexpr Launcher kLaunchers[] = {
    {"OpenMPI", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"MPICH", "PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID"},
    {"Slurm", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID"},
    {"torchrun", "WORLD_SIZE", "RANK", "LOCAL_RANK"},
};

}  // namespace

Result<LaunchEnv> ReadLaunchEnv(
    const std::function<std::optional<std::string>(std::string_view)>& getenv_fn) {
  auto get = [&](const char* name) -> std::optional<std::string> {
    if (getenv_fn) return getenv_fn(name);
    const char* value = std::getenv(name);
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
  auto number = [&](const char* name, const std::string& text, int* out) -> Status {
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, *out);
    if (ec != std::errc() || ptr != end || *out < 0)
      return Error(
          fmt::format("launch environment: {}=\"{}\" is not a non-negative integer", name, text));
    return Status::Ok();
  };
  for (const Launcher& launcher : kLaunchers) {
    std::optional<std::string> size = get(launcher.size);
    if (!size) continue;
    std::optional<std::string> rank = get(launcher.rank);
    if (!rank)
      return Error(
          fmt::format("launch environment: {} is set but {} is not", launcher.size, launcher.rank));
    LaunchEnv env;
    env.source = fmt::format("{} ({})", launcher.name, launcher.size);
    DOMINO_RETURN_IF_ERROR(number(launcher.size, *size, &env.size));
    DOMINO_RETURN_IF_ERROR(number(launcher.rank, *rank, &env.rank));
    if (env.size < 1 || env.rank >= env.size)
      return Error(fmt::format("launch environment: {}={} is not a rank of {}={}", launcher.rank,
                               env.rank, launcher.size, env.size));
    if (std::optional<std::string> local = get(launcher.local_rank))
      DOMINO_RETURN_IF_ERROR(number(launcher.local_rank, *local, &env.local_rank));
    return env;
  }
  return LaunchEnv{};
}

}  // namespace domino::exec
