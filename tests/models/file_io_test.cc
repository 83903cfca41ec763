#include "models/base/file_io.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace domino {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class WriteFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One folder per test: ctest runs the tests of this suite in parallel.
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           (std::string("file_io_test_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::string Read(const std::string& name) const {
    std::ifstream in(dir_ / name);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // Every name in the folder: no temporary may be left behind.
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

TEST_F(WriteFilesTest, WritesAndReplacesOnlyWithOverwrite) {
  ASSERT_TRUE(WriteFileAtomically(Path("r.yaml"), "one\n", false).ok());
  EXPECT_EQ(Read("r.yaml"), "one\n");
  Status again = WriteFileAtomically(Path("r.yaml"), "two\n", false);
  EXPECT_THAT(again.message(), HasSubstr("already exists (use --force to overwrite)"));
  ASSERT_TRUE(WriteFileAtomically(Path("r.yaml"), "two\n", true).ok());
  EXPECT_EQ(Read("r.yaml"), "two\n");
  EXPECT_EQ(Names(), std::vector<std::string>{"r.yaml"});
}

TEST_F(WriteFilesTest, RefusesLinksDevicesAndFifosEvenWithOverwrite) {
  std::ofstream(dir_ / "target") << "keep\n";
  fs::create_symlink(dir_ / "target", dir_ / "link");
  ASSERT_EQ(mkfifo(Path("fifo").c_str(), 0600), 0);
  Status link = WriteFileAtomically(Path("link"), "x", true);
  EXPECT_THAT(link.message(), HasSubstr("link: is a symbolic link"));
  EXPECT_TRUE(fs::is_symlink(dir_ / "link"));
  EXPECT_EQ(Read("target"), "keep\n");
  Status fifo = WriteFileAtomically(Path("fifo"), "x", true);
  EXPECT_THAT(fifo.message(), HasSubstr("fifo: not a regular file"));
  EXPECT_TRUE(fs::is_fifo(dir_ / "fifo"));
  Status device = WriteFileAtomically("/dev/null", "x", true);
  EXPECT_THAT(device.message(), HasSubstr("/dev/null: not a regular file"));
  EXPECT_THAT(WriteFileAtomically(dir_.string(), "x", true).message(), HasSubstr("is a directory"));
  EXPECT_EQ(Names(), (std::vector<std::string>{"fifo", "link", "target"}));
}

TEST_F(WriteFilesTest, WritesEveryOutputOrNone) {
  // The second output cannot be written: the first must not appear either.
  std::vector<OutputFile> files = {{Path("r.yaml"), "report"}, {Path("no/dir/t.json"), "trace"}};
  Status status = WriteFilesAtomically(files, false);
  EXPECT_THAT(status.message(), HasSubstr("folder"));
  EXPECT_TRUE(Names().empty());
  // The same file for two outputs.
  files = {{Path("x"), "report"}, {Path("./x"), "trace"}};
  files[1].path = (dir_ / "." / "x").string();
  EXPECT_THAT(WriteFilesAtomically(files, true).message(), HasSubstr("given for two outputs"));
  EXPECT_TRUE(Names().empty());
  // Relative names of one file that does not exist yet ("z" and "./z"), and an output that is an
  // input by another name or a hard link.
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir_);
  files = {{"z", "report"}, {"./z", "trace"}};
  const Status relative = WriteFilesAtomically(files, true);
  const std::vector<std::string> inputs = {"in.yaml"};
  const Status dotted = CheckNotAnInput("./in.yaml", inputs);
  std::ofstream("in.yaml") << "model\n";
  std::filesystem::create_hard_link("in.yaml", "hard.yaml");
  const Status linked = CheckNotAnInput("hard.yaml", inputs);
  const Status other = CheckNotAnInput("out.yaml", inputs);
  std::filesystem::remove("hard.yaml");
  std::filesystem::remove("in.yaml");
  std::filesystem::current_path(cwd);
  EXPECT_THAT(relative.message(), HasSubstr("z: given for two outputs"));
  // Checked alone, before a path's folder or file is looked at (a command's usage error).
  const std::vector<std::string> twice = {Path("no/dir/a"), Path("no/dir/./a")};
  const std::vector<std::string> stdout_twice = {"-", Path("r.yaml"), "-"};
  const std::vector<std::string> distinct = {"-", Path("r.yaml"), Path("no/dir/r.yaml")};
  EXPECT_THAT(CheckDistinctOutputs(twice).message(), HasSubstr("a: given for two outputs"));
  EXPECT_THAT(CheckDistinctOutputs(stdout_twice).message(), HasSubstr("-: given for two outputs"));
  EXPECT_TRUE(CheckDistinctOutputs(distinct).ok());
  EXPECT_THAT(dotted.message(), HasSubstr("is also an input"));
  EXPECT_THAT(linked.message(), HasSubstr("is also an input"));
  EXPECT_TRUE(other.ok()) << other.message();
  EXPECT_TRUE(Names().empty());
  files = {{Path("r.yaml"), "report"}, {Path("t.json"), "trace"}};
  ASSERT_TRUE(WriteFilesAtomically(files, false).ok());
  EXPECT_EQ(Read("r.yaml"), "report");
  EXPECT_EQ(Read("t.json"), "trace");
}

TEST_F(WriteFilesTest, TemporaryNamesFitAnyValidName) {
  const std::string name = std::string(250, 'n') + ".yaml";  // 255 bytes, the longest name
  ASSERT_TRUE(WriteFileAtomically(Path(name), "long\n", false).ok());
  EXPECT_EQ(Read(name), "long\n");
  EXPECT_EQ(Names(), std::vector<std::string>{name});
}

}  // namespace
}  // namespace domino
