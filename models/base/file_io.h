#ifndef DOMINO_MODELS_BASE_FILE_IO_H_
#define DOMINO_MODELS_BASE_FILE_IO_H_

#include <string>
#include <string_view>

#include "models/base/result.h"

namespace domino {

// Reads a whole file. The error names the path and the system's reason.
Result<std::string> ReadTextFile(const std::string& path);

// Writes `content` to `path` through a temporary file in the same folder and a rename, so a
// reader never sees half a file and a failed write leaves nothing behind. With `overwrite`
// false an existing file is an error.
Status WriteFileAtomically(const std::string& path, std::string_view content, bool overwrite);

}  // namespace domino

#endif  // DOMINO_MODELS_BASE_FILE_IO_H_
