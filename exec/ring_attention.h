#ifndef DOMINO_EXEC_RING_ATTENTION_H_
#define DOMINO_EXEC_RING_ATTENTION_H_

#include <map>
#include <tuple>
#include <vector>

#include "exec/communicator.h"
#include "exec/interpreter.h"
#include "models/base/result.h"
#include "planner/plan.h"
#include "planner/schedule.h"

namespace domino::exec {

// Context parallelism's ring attention, one op of the ring at a time, as the schedule lays it
// out (planner/lower_attention.cc). Each rank's block is its tokens' K and V (and, backward, their
// accumulated gradients). Forward: transfer j passes the current block to the next CP rank and
// receives the previous rank's (double-buffered: the block step j computes with stays), block j
// folds the current block's keys into each local query's online softmax (running max, sum and
// weighted V), causally by position in the sequence; the last block writes the output and keeps
// each query's log-sum-exp for the backward. Backward: block j adds the current block's part of
// dQ, dK and dV (dK and dV travel with their block); transfer j > 0 passes the block on with its
// gradients, and after the last block one more pass brings each block's gradients home.
//
// One per rank of a CP group (`cp`, this rank `cp_rank`); its rings are keyed by backend, layer,
// row slice and phase, so the micro-batches' backends and the recompute's rings stay apart.
class RingAttention {
 public:
  RingAttention(const Plan& plan, int cp_rank, Communicator& cp)
      : plan_(plan), cp_rank_(cp_rank), cp_(cp) {}
  // Runs op `id` of `schedule` (kAttn, kAttnGrad or kCpSendRecv of a plan with cp > 1) on
  // `backend`'s tensors.
  Status Run(const Schedule& schedule, int32_t id, Backend& backend);

 private:
  struct Ring {
    int owner = 0;                   // the CP rank whose tokens the current block holds
    std::vector<float> block, next;  // [K | V] (forward), [K | V | dK | dV] (backward)
    bool has_next = false;
    std::vector<double> max, sum, acc;  // forward: per query and head (acc: x head_dim)
    std::vector<float> dq;              // backward: per query, [dQ]
  };
  // What the backward needs of a forward ring: each query and head's log-sum-exp and the output.
  struct RingOutput {
    std::vector<float> lse, out;
  };
  using RingKey = std::tuple<const Backend*, int, int, int>;  // backend, layer, slice, phase

  struct RingShape {
    int64_t heads, kv_heads, dim, local, rows;
    int64_t q_cols() const { return heads * dim; }
    int64_t kv_cols() const { return kv_heads * dim; }
  };

  void Block(const RingShape& sh, const std::vector<float>& qkv, const std::vector<float>& dout,
             const RingOutput* saved, Ring& ring, bool backward) const;

  const Plan& plan_;
  int cp_rank_;
  Communicator& cp_;
  std::map<RingKey, Ring> rings_;                                       // the rings in progress
  std::map<std::tuple<const Backend*, int, int>, RingOutput> outputs_;  // forward results
};

}  // namespace domino::exec

#endif  // DOMINO_EXEC_RING_ATTENTION_H_
