#include "models/base/embedded_file.h"

namespace domino {

const EmbeddedFile* FindEmbedded(std::span<const EmbeddedFile> files, std::string_view name) {
  for (const EmbeddedFile& file : files)
    if (file.name == name) return &file;
  return nullptr;
}

}  // namespace domino
