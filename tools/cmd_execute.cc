// `domino execute PLAN`: run a plan for real and measure its timeline.
#include <memory>

#include "exec/cuda_device.h"
#include "tools/cmd_pending.h"
#include "tools/command.h"

namespace domino::cli {

void SetupExecute(CLI::App* sub) {
  auto backend = std::make_shared<std::string>("cpu");
  sub->add_option("--backend", *backend, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  InstallPending(sub, "execute", "`domino simulate --plan` predicts the same plan");
  // A CUDA run needs a GPU whatever else is missing: say so first, as the executor will.
  sub->parse_complete_callback([backend] {
    if (*backend != "cuda") return;
    Result<std::vector<exec::CudaDevice>> devices = exec::ListCudaDevices();
    if (!devices.ok()) Fail("execute", devices.message());
  });
}

}  // namespace domino::cli
