// `domino calibrate`: measure GEMMs, memory-bound ops and collectives into a hardware profile.
#include "tools/cmd_pending.h"

namespace domino::cli {

void SetupCalibrate(CLI::App* sub) {
  InstallPending(sub, "calibrate", "the simulator uses the catalog's datasheet figures");
}

}  // namespace domino::cli
