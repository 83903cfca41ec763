#include "tools/table.h"

#include <algorithm>
#include <cctype>

namespace domino::cli {
namespace {

bool LooksNumeric(const std::string& cell) {
  if (cell.empty()) return false;
  char c = cell[0];
  return std::isdigit(static_cast<unsigned char>(c)) || ((c == '-' || c == '+' || c == '.') && cell.size() > 1);
}

}  // namespace

void Table::Print(std::ostream& out) const {
  std::vector<size_t> width(header_.size(), 0);
  auto widen = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) width[i] = std::max(width[i], row[i].size());
  };
  widen(header_);
  for (const auto& row : rows_) widen(row);
  auto print_row = [&](const std::vector<std::string>& row, bool header) {
    std::string line;
    for (size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      std::string pad(width[i] - cell.size(), ' ');
      bool right = !header && LooksNumeric(cell);
      if (i) line += "  ";
      line += right ? pad + cell : cell + (i + 1 < width.size() ? pad : "");
    }
    out << line << "\n";
  };
  print_row(header_, true);
  std::string rule;
  for (size_t i = 0; i < width.size(); ++i) rule += (i ? "  " : "") + std::string(width[i], '-');
  out << rule << "\n";
  for (const auto& row : rows_) print_row(row, false);
}

}  // namespace domino::cli
