#ifndef DOMINO_TOOLS_TABLE_H_
#define DOMINO_TOOLS_TABLE_H_

#include <ostream>
#include <string>
#include <vector>

namespace domino::cli {

// A plain-text table for terminals: a header row, then rows of cells; columns are padded to
// their widest cell, text left-aligned and numbers right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print(std::ostream& out) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace domino::cli

#endif  // DOMINO_TOOLS_TABLE_H_
