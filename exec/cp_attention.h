#ifndef DOMINO_EXEC_CP_ATTENTION_H_
#define DOMINO_EXEC_CP_ATTENTION_H_

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "exec/communicator.h"
#include "exec/dropout.h"
#include "exec/interpreter.h"
#include "models/base/result.h"
#include "planner/plan.h"
#include "planner/schedule.h"

namespace domino::exec {

// Context parallelism's attention core, one op at a time as the schedule lays it out for the
// plan's CpComm (planner/lower_attention.cc), on the host: each op packs what it reads from the
// backend, moves it over the CP groups and folds keys into each query's online softmax (running
// max, sum and weighted V) in double, causally by position in the sequence. Forward ends with
// the output and each query's log-sum-exp, kept for the backward, which adds each key's part of
// dQ, dK and dV. With dropout, each key's weight in the output is scaled by its mask (the running
// sum is not), and backward dV and dP take the same mask.
// - p2p, the ring: each rank's block is its tokens' K and V (backward, with their accumulated
//   gradients). Forward: transfer j passes the current block to the next CP rank and receives the
//   previous rank's (double-buffered: the block step j computes with stays), block j folds the
//   current block in. Backward: block j adds the current block's part of dQ, dK and dV (dK and dV
//   travel with their block); transfer j > 0 passes the block on with its gradients, and after
//   the last block one more pass brings each block's gradients home.
// - all_gather: K and V all-gathered over the CP group; each of the rank's two chunks of queries
//   (ring_step 0 and 1) attends to every rank's keys before it. Backward: gathered again, the
//   chunks add dK and dV of the whole sequence, which a reduce-scatter brings to their owners.
// - a2a: an all-to-all trades the rank's tokens of every head for all the sequence's tokens of
//   1/cp of the heads, the attention runs over them, and another trades the output back (backward:
//   dout in, dQ, dK and dV out).
// - a2a+p2p: a2a's trades inside each group of cp_a2a consecutive CP ranks, and between them the
//   ring over the groups (the ranks with the same place in theirs), each block holding its group's
//   tokens of 1/cp_a2a of the heads.
//
// One per rank of a CP group; its cores in progress are keyed by backend, layer, row slice and
// phase, so the micro-batches' backends and the recompute's cores stay apart.
class CpAttention {
 public:
  // The floating-point work of one forward attention core of `plan` on one rank (a layer's row
  // slice of a micro-batch; the backward's is about 2.5 times it), as this class runs it on the
  // host: each local query against the keys before it, 4 head_dim operations a key and head.
  static double HostFlopsPerCore(const Plan& plan);
  // The most HostFlopsPerCore that `execute` runs: 50 GFLOP, about a minute of one host core
  // (a forward core of Llama 3 8B at seq 8192 over cp 2, one sequence, is 275).
  static constexpr double kMaxHostFlopsPerCore = 50e9;

  // Called by every rank of `cp` (a2a+p2p splits it into its groups); this rank is cp.rank().
  static Result<std::unique_ptr<CpAttention>> Create(const Plan& plan, Communicator& cp);
  // Whether `op` is one of context parallelism's: the attention core (kAttn, kAttnGrad) or a
  // transfer or collective of the CP groups.
  static bool Runs(const Op& op);
  // Runs op `id` of `schedule` (one that Runs) on `backend`'s tensors; the attention within a
  // sliding `window` of tokens (the model's where it covers the op's layer; 0: none), each query
  // at position t attending to the keys at t - window .. t, its scores soft-capped where the
  // model caps them, and with the layer's `dropout` (exec/dropout.h: its first sequence the
  // micro-batch's, its first head the TP rank's; rate 0: none).
  Status Run(const Schedule& schedule, int32_t id, Backend& backend, int window,
             const AttentionDropout& dropout = {});

 private:
  CpAttention(const Plan& plan, Communicator& cp) : plan_(plan), cp_(cp) {}

  // Per row of a set of tokens: its sequence in the row slice and its position in that sequence.
  struct Rows {
    std::vector<int64_t> seq, pos;
  };
  // Keys of one or more CP ranks: rows x [K | V] forward, [K | V | dK | dV] backward, over this
  // rank's key/value heads; `owner` is where they came from (KeysAt).
  struct Keys {
    std::vector<float> data;
    int owner = 0;
  };
  // What the backward needs of a forward core: its query rows' [Q | K | V] (this rank's heads),
  // where they sit, the output and each query and head's log-sum-exp.
  struct Saved {
    std::vector<float> qkv, out, lse;
    Rows at;
  };
  // One attention core in progress.
  struct Core {
    std::vector<float> qkv;  // the query rows' [Q | K | V], this rank's heads
    Rows at;
    std::vector<float> dout;            // backward: the output's gradient, [dO]
    const Saved* saved = nullptr;       // backward: the forward's
    std::vector<double> max, sum, acc;  // forward: per query and head (acc: x head_dim)
    std::vector<float> dq;              // backward: per query, [dQ]
    std::vector<Keys> keys;             // all_gather: every rank's; otherwise the block in hand
    Keys next;                          // the ring's next block
    bool has_next = false;
    bool done = false;          // the attention is computed (a2a's trade out is next)
    std::vector<float> result;  // once done: the output, or [dQ | dK | dV]
  };
  using Key = std::tuple<const Backend*, int, int, int>;  // backend, layer, slice, phase

  // This rank's share of the heads (1/a2a of its TP rank's) and the rows of a slice.
  struct Dims {
    int64_t heads, kv_heads, dim, local, rows;
    int64_t q_cols() const { return heads * dim; }
    int64_t kv_cols() const { return kv_heads * dim; }
  };
  Dims DimsOf(const Schedule& s, int32_t id) const;
  // The rows of `ranks` consecutive CP ranks from `first`, each holding `rows` rows of the slice.
  Rows RowsOf(int first, int ranks, int64_t rows) const;
  // Where the keys of `owner` sit: a CP rank (all_gather, p2p) or a group of a2a ranks.
  Rows KeysAt(int owner, int64_t rows) const;

  Status Gather(const Schedule& s, int32_t id, Backend& backend, const Key& key);
  Status ReduceScatter(const Schedule& s, int32_t id, Backend& backend, const Key& key);
  Status Trade(const Schedule& s, int32_t id, Backend& backend, const Key& key);
  Status Transfer(const Schedule& s, int32_t id, Backend& backend, const Key& key);
  Status Attend(const Schedule& s, int32_t id, Backend& backend, const Key& key, int window,
                AttentionDropout dropout);
  // The core of `key`, or for the p2p ring at its first op (a transfer or block of step 0) a
  // new one with the rank's own block.
  Result<Core*> CoreOf(const Schedule& s, int32_t id, Backend& backend, const Key& key);
  const Saved* SavedOf(const Key& key) const;
  // Sets keys[0] to the own block: the 2 kv_cols() columns from `first` of each of `src`'s rows
  // (`src_cols` wide), one per row of c.at, with zero gradients when `backward`.
  void Start(const Dims& dm, Core& c, const float* src, int64_t src_cols, int64_t first,
             bool backward) const;
  // Sends the block in hand to the next rank of the ring and receives the previous one's.
  Status PassOn(Core& c);
  // After the last step: the forward's output (kept for the backward), or [dQ | dK | dV];
  // written now unless a trade out or the reduce-scatter follows.
  Status Finish(const Schedule& s, int32_t id, Backend& backend, const Key& key, Core& c,
                const Dims& dm, bool backward);
  // Folds `keys` into the core's queries (only chunk `chunk` of each local sequence, if >= 0),
  // those within `window` tokens before each query (0: all before it), under `dropout` (its
  // first sequence the slice's, its first head the core's).
  void Fold(const Dims& dm, Core& c, Keys& keys, bool backward, int chunk, int window,
            const AttentionDropout& dropout) const;

  const Plan& plan_;
  Communicator& cp_;
  CpComm comm_ = CpComm::kP2p;
  int a2a_ = 1;   // ranks of an a2a group: 1 (p2p, all_gather), cp (a2a), cp_a2a
  int ring_ = 1;  // ranks of the ring: cp / a2a_ (all_gather: none)
  Communicator* a2a_group_ = nullptr;  // this rank's a2a group
  Communicator* ring_group_ = nullptr;
  std::unique_ptr<Communicator> a2a_split_, ring_split_;           // a2a+p2p's
  std::map<Key, Core> cores_;                                      // in progress
  std::map<std::tuple<const Backend*, int, int>, Saved> outputs_;  // forward results
};

}  // namespace domino::exec

#endif  // DOMINO_EXEC_CP_ATTENTION_H_
