#include "exec/nccl_ctas.h"

#include <gtest/gtest.h>

namespace domino::exec {
namespace {

NcclCtas Resolved(int min_ctas, int max_ctas) {
  Result<NcclCtas> r = ResolveNcclCtas(min_ctas, max_ctas);
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() ? *r : NcclCtas{};
}

// An unset value (0) becomes NCCL's default, so NCCL never sees a minimum without a maximum.
TEST(NcclCtas, FillsWhatIsUnsetWithNcclsDefaults) {
  EXPECT_EQ(Resolved(0, 0).min, 1);
  EXPECT_EQ(Resolved(0, 0).max, 64);
  EXPECT_EQ(Resolved(24, 0).min, 24);  // `--min-ctas 24 --max-ctas 0`: ncclInvalidArgument before
  EXPECT_EQ(Resolved(24, 0).max, 64);
  EXPECT_EQ(Resolved(0, 8).min, 1);
  EXPECT_EQ(Resolved(0, 8).max, 8);
  EXPECT_EQ(Resolved(16, 16).min, 16);
  EXPECT_EQ(Resolved(16, 16).max, 16);
}

TEST(NcclCtas, RefusesAPairNcclRefuses) {
  Result<NcclCtas> r = ResolveNcclCtas(32, 8);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(),
            "NCCL's minimum CTAs per collective (32) exceeds its maximum (8); NCCL would refuse "
            "the communicator");
  EXPECT_FALSE(ResolveNcclCtas(-1, 8).ok());
  EXPECT_FALSE(ResolveNcclCtas(1, 65).ok());
}

}  // namespace
}  // namespace domino::exec
