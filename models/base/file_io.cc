#include "models/base/file_io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <unistd.h>

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

Status WriteFileAtomically(const std::string& path, std::string_view content, bool overwrite) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!overwrite && fs::exists(path, ec))
    return Error(fmt::format("{}: already exists (use --force to overwrite)", path));
  fs::path target(path);
  fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
  if (!fs::is_directory(folder, ec))
    return Error(fmt::format("{}: folder {} does not exist", path, folder.string()));
  std::string temp = (folder / fmt::format(".{}.tmp{}", target.filename().string(), getpid())).string();
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) return Error(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) {
      int saved = errno;
      fs::remove(temp, ec);
      return Error(fmt::format("{}: cannot write: {}", path, std::strerror(saved)));
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    int saved = errno;
    fs::remove(temp, ec);
    return Error(fmt::format("{}: cannot write: {}", path, std::strerror(saved)));
  }
  return Status::Ok();
}

}  // namespace domino
