// domino: plan, predict and run tensor-parallel LLM training with Domino-style overlap.
#include "tools/app.h"

int main(int argc, char** argv) { return domino::cli::RunDomino(argc, argv); }
