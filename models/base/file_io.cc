#include "models/base/file_io.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace domino {

Result<std::string> ReadTextFile(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return Error(fmt::format("{}: is a directory, expected a file", path));
  // Devices and pipes (/dev/zero, a FIFO) could block or never end: inputs are regular files of
  // reasonable size.
  const fs::file_status status = fs::status(path, ec);
  if (!ec && fs::exists(status) && !fs::is_regular_file(status))
    return Error(fmt::format("{}: not a regular file", path));
  constexpr uintmax_t kMaxInputBytes = 64u << 20;
  const uintmax_t size = fs::file_size(path, ec);
  if (!ec && size > kMaxInputBytes)
    return Error(fmt::format("{}: {} MiB; inputs are at most {} MiB", path, size >> 20,
                             kMaxInputBytes >> 20));
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Error(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
  return text.str();
}

Status CheckOutputPath(const std::string& path, bool overwrite) {
  namespace fs = std::filesystem;
  if (path == "-") return Status::Ok();
  if (path.empty()) return Error("an output path is empty");
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(path, ec);
  if (fs::is_symlink(status))
    return Error(
        fmt::format("{}: is a symbolic link; domino neither writes through nor replaces "
                    "links: give the file it points to",
                    path));
  if (fs::exists(status)) {
    if (fs::is_directory(status)) return Error(fmt::format("{}: is a directory", path));
    if (!fs::is_regular_file(status))
      return Error(
          fmt::format("{}: not a regular file (a device, FIFO or socket); domino "
                      "replaces only regular files",
                      path));
    if (!overwrite)
      return Error(fmt::format("{}: already exists (use --force to overwrite)", path));
  }
  fs::path target(path);
  fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
  if (!fs::is_directory(folder, ec))
    return Error(fs::exists(folder, ec)
                     ? fmt::format("{}: {} is not a folder", path, folder.string())
                     : fmt::format("{}: folder {} does not exist", path, folder.string()));
  if (access(folder.c_str(), W_OK) != 0)
    return Error(
        fmt::format("{}: cannot write in {}: {}", path, folder.string(), std::strerror(errno)));
  return Status::Ok();
}

namespace {

// Whether two paths name one file: the same path once absolute, with links and dot segments
// resolved (libstdc++'s weakly_canonical leaves a relative path whose first part does not exist
// as given: "z" and "./z" would differ), or, where both exist, the same file (a hard link).
bool SameFile(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  if (a == b) return true;
  std::error_code ec;
  const fs::path ca = fs::weakly_canonical(fs::absolute(a, ec), ec);
  if (ec) return false;
  const fs::path cb = fs::weakly_canonical(fs::absolute(b, ec), ec);
  if (ec) return false;
  if (ca == cb) return true;
  return fs::exists(ca, ec) && fs::exists(cb, ec) && fs::equivalent(ca, cb, ec) && !ec;
}

}  // namespace

Status CheckOutputPaths(std::span<const std::string> paths, bool overwrite) {
  for (const std::string& path : paths) DOMINO_RETURN_IF_ERROR(CheckOutputPath(path, overwrite));
  return CheckDistinctOutputs(paths);
}

Status CheckDistinctOutputs(std::span<const std::string> paths) {
  for (size_t i = 0; i < paths.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      const bool same = paths[i] == paths[j] ||
                        (paths[i] != "-" && paths[j] != "-" && SameFile(paths[i], paths[j]));
      if (same)
        return Error(
            fmt::format("{}: given for two outputs; each output needs its own file", paths[i]));
    }
  }
  return Status::Ok();
}

std::string PathNear(std::string_view ref, std::string_view from_file) {
  namespace fs = std::filesystem;
  const fs::path path(ref);
  if (ref.empty() || path.is_absolute() || from_file.empty() || from_file == "-")
    return std::string(ref);
  const fs::path dir = fs::path(from_file).parent_path();
  std::error_code ec;
  if (!dir.empty() && fs::exists(dir / path, ec)) return (dir / path).string();
  return std::string(ref);
}

Status CheckNotAnInput(const std::string& output, std::span<const std::string> inputs) {
  if (output.empty() || output == "-") return Status::Ok();
  for (const std::string& input : inputs) {
    if (input.empty()) continue;
    if (SameFile(input, output))
      return Error(
          fmt::format("{}: is also an input of this command; write the output to "
                      "another file",
                      output));
  }
  return Status::Ok();
}

Status WriteFilesAtomically(std::span<const OutputFile> files, bool overwrite) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> paths;
  for (const OutputFile& file : files) paths.push_back(file.path);
  DOMINO_RETURN_IF_ERROR(CheckOutputPaths(paths, overwrite));
  // Temporaries first, all of them; then the renames, which only fail if the folder changed.
  std::vector<std::string> temps(files.size());
  auto remove_temps = [&] {
    for (const std::string& temp : temps)
      if (!temp.empty()) fs::remove(temp, ec);
  };
  const mode_t mask = umask(0);
  umask(mask);
  for (size_t i = 0; i < files.size(); ++i) {
    const OutputFile& file = files[i];
    if (file.path == "-") continue;
    fs::path target(file.path);
    fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
    std::string name = (folder / ".domino-XXXXXX").string();
    int fd = mkstemp(name.data());
    if (fd < 0) {
      int saved = errno;
      remove_temps();
      return Error(fmt::format("{}: cannot write: {}", file.path, std::strerror(saved)));
    }
    temps[i] = name;
    const char* data = file.content.data();
    size_t left = file.content.size();
    int saved = 0;
    while (left > 0 && saved == 0) {
      ssize_t n = write(fd, data, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        saved = n < 0 ? errno : EIO;
      else
        data += n, left -= static_cast<size_t>(n);
    }
    if (saved == 0 && fchmod(fd, 0666 & ~mask) != 0) saved = errno;
    if (close(fd) != 0 && saved == 0) saved = errno;
    if (saved != 0) {
      remove_temps();
      return Error(fmt::format("{}: cannot write: {}", file.path, std::strerror(saved)));
    }
  }
  for (size_t i = 0; i < files.size(); ++i) {
    if (temps[i].empty()) continue;
    if (std::rename(temps[i].c_str(), files[i].path.c_str()) != 0) {
      int saved = errno;
      remove_temps();
      return Error(fmt::format("{}: cannot write: {}", files[i].path, std::strerror(saved)));
    }
    temps[i].clear();
  }
  for (const OutputFile& file : files) {
    if (file.path != "-") continue;
    std::fwrite(file.content.data(), 1, file.content.size(), stdout);
    std::fflush(stdout);
  }
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path, std::string_view content, bool overwrite) {
  const OutputFile file{path, std::string(content)};
  return WriteFilesAtomically(std::span<const OutputFile>(&file, 1), overwrite);
}

}  // namespace domino
