#ifndef DOMINO_MODELS_BASE_FILE_IO_H_
#define DOMINO_MODELS_BASE_FILE_IO_H_

#include <span>
#include <string>
#include <string_view>

#include "models/base/result.h"

namespace domino {

// Reads a whole file. The error names the path and the system's reason.
Result<std::string> ReadTextFile(const std::string& path);

// A relative path named inside the file `from_file` (a plan's model, a node's GPU): the one
// beside `from_file` where it exists, else `ref` as given (from the working directory), so that
// such files refer to each other whatever the working directory.
std::string PathNear(std::string_view ref, std::string_view from_file);

// One output of a command: where it goes ("-" is stdout) and what it holds.
struct OutputFile {
  std::string path;
  std::string content;
};

// Checks that `path` may be written: "-" (stdout); or a path whose folder exists and which is
// absent or, with `overwrite`, a regular file. A symbolic link is refused, not written through
// (nor replaced by a file): the error says to give the file it points to. Devices, FIFOs,
// sockets and directories are refused.
Status CheckOutputPath(const std::string& path, bool overwrite);

// No path twice (the same file by another name too) and "-" at most once: each output of a
// command needs its own file.
Status CheckDistinctOutputs(std::span<const std::string> paths);

// CheckOutputPath for every path, and CheckDistinctOutputs: a command checks its outputs before
// long work, so that a bad path costs nothing.
Status CheckOutputPaths(std::span<const std::string> paths, bool overwrite);

// An error when `output` is one of `inputs` (the same file by another name too): a command
// whose output is of another kind than its input never writes over what it reads, --force or not.
Status CheckNotAnInput(const std::string& output, std::span<const std::string> inputs);

// Writes every file or none. First checks every path (CheckOutputPaths), then writes each content
// to a temporary file beside its target (a short name, whatever the length of the target's), then
// renames them all onto their targets, so a reader never sees half a file. A failure before the
// renames leaves every target untouched and no temporary behind. "-" is written to stdout after the
// files.
Status WriteFilesAtomically(std::span<const OutputFile> files, bool overwrite);

// WriteFilesAtomically with one file.
Status WriteFileAtomically(const std::string& path, std::string_view content, bool overwrite);

}  // namespace domino

#endif  // DOMINO_MODELS_BASE_FILE_IO_H_
