#ifndef DOMINO_TESTS_HARDWARE_TEST_UTIL_H_
#define DOMINO_TESTS_HARDWARE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace domino::testing_util {

// Returns `text` with its one occurrence of `from` replaced by `to`; fails the test otherwise.
inline std::string Replace(std::string text, std::string_view from, std::string_view to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "'" << from << "' not in the test's YAML";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// A fresh folder under the test's temporary directory, named after the running test.
inline std::filesystem::path FreshDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                              (std::string("hw_") + info->test_suite_name() + "_" + info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string WriteFile(const std::filesystem::path& path, std::string_view text) {
  std::ofstream(path) << text;
  return path.string();
}

}  // namespace domino::testing_util

#endif  // DOMINO_TESTS_HARDWARE_TEST_UTIL_H_
