#include "tools/table.h"

#include <algorithm>
#include <cctype>
#include <string_view>

namespace domino::cli {
namespace {

// A number with an optional short unit suffix: "12.5", "-3", "40.3%", "1.181x", "2.65B".
bool LooksNumeric(const std::string& cell) {
  size_t end = cell.size();
  while (end > 0 && std::string_view("%xBMGKT").find(cell[end - 1]) != std::string_view::npos &&
         cell.size() - end < 1)
    --end;
  if (end == 0) return false;
  size_t digits = 0;
  for (size_t i = 0; i < end; ++i) {
    char c = cell[i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      ++digits;
    } else if (!(c == '.' || ((c == '-' || c == '+') && i == 0))) {
      return false;
    }
  }
  return digits > 0;
}

}  // namespace

void Table::Print(std::ostream& out) const {
  std::vector<size_t> width(header_.size(), 0);
  auto widen = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i)
      width[i] = std::max(width[i], row[i].size());
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
