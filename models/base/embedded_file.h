#ifndef DOMINO_MODELS_BASE_EMBEDDED_FILE_H_
#define DOMINO_MODELS_BASE_EMBEDDED_FILE_H_

#include <span>
#include <string_view>

namespace domino {

// A catalog file compiled into the binary by cmake/Embed.cmake, so that catalog names resolve
// from any working directory. `name` is the file's stem ("gpt3-13b"), `path` its path in the
// source tree ("models/catalog/gpt3-13b.yaml"), used in error messages.
struct EmbeddedFile {
  std::string_view name;
  std::string_view path;
  std::string_view text;
};

// Returns the entry called `name`, or nullptr.
const EmbeddedFile* FindEmbedded(std::span<const EmbeddedFile> files, std::string_view name);

}  // namespace domino

#endif  // DOMINO_MODELS_BASE_EMBEDDED_FILE_H_
