// domino: plan, predict and run tensor-parallel LLM training with Domino-style overlap.
#include "sim/allocator.h"
#include "tools/app.h"

int main(int argc, char** argv) {
  domino::sim::KeepFreedMemory();  // plan, sweep and validate predict thousands of plans
  return domino::cli::RunDomino(argc, argv);
}
