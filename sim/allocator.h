#ifndef DOMINO_SIM_ALLOCATOR_H_
#define DOMINO_SIM_ALLOCATOR_H_

namespace domino::sim {

// A prediction allocates and frees tens of megabytes (schedules, costs, timelines). By default
// glibc maps blocks over 128 KiB afresh and hands the freed top of the heap back to the kernel, so
// every prediction pays page faults to zero the same memory again: a fifth to a third of
// BM_PredictGpt3_13B's time, and of a plan search's. KeepFreedMemory has the allocator keep what
// it frees (blocks up to 32 MiB from the heap, which grows in 256 MiB steps and keeps up to 1 GiB
// of free top); call it once at
// startup of a program that predicts many plans. Elsewhere than glibc it does nothing.
void KeepFreedMemory();

}  // namespace domino::sim

#endif  // DOMINO_SIM_ALLOCATOR_H_
