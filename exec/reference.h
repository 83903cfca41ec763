#ifndef DOMINO_EXEC_REFERENCE_H_
#define DOMINO_EXEC_REFERENCE_H_

// The values every backend gives a schedule's given tensors (weights, norm gains, inputs, tokens),
// the same for every sharding of the model, so that a sharded run can be checked against the
// unsharded reference.
#include <cstdint>
#include <vector>

#include "exec/dropout.h"
#include "exec/positions.h"
#include "models/model_spec.h"
#include "planner/plan.h"
#include "planner/schedule.h"

namespace domino::exec {

// The reference values of the unsharded model: weights, the first layer's input and the top
// layer's output gradient, as a function of (seed, tensor role, whole row, whole column) only, so
// every sharding of a tensor holds the same numbers as the unsharded one, whatever its name.
// GEMM weights are uniform in +-1/sqrt(fan_in), norm weights in 1 +- 0.1, inputs and output
// gradients in +-1.
float ReferenceValue(uint64_t seed, const TensorRole& role, int64_t fan_in, int64_t row,
                     int64_t col);

// Fills `view` of rank `rank`'s `values` of `tensor` (rows x cols) with ReferenceValue through the
// tensor's Shard rule. A GEMM weight's fan-in is its whole rows (in_features x out_features), or
// its columns for the vocabulary-major embedding and LM head, so that padding the vocabulary
// differently for another TP size leaves every weight's value alone. Views of
// kParallelFillElements values or more are filled by up to 16 threads, the same values.
inline constexpr int64_t kParallelFillElements = int64_t{1} << 22;
void FillReference(const Tensor& tensor, int rank, int tp, uint64_t seed, const View& view,
                   std::vector<float>& values);

// Whether a role is a column of token ids: the tokens the embedding looks up or the labels of
// the loss (inputs of slot kEmbedding or kLmHead).
bool IsTokens(const TensorRole& role);
// Token `index` of the run's token stream, uniform over [0, vocab), from the seed alone. Row r of
// a micro-batch's tokens is token r of the stream and its label token r + 1 (the next token),
// the same on every rank.
int64_t ReferenceToken(uint64_t seed, int64_t vocab, int64_t index);

// Where the schedule sits in a larger run (exec/step.h): its layer l is the model's layer
// l + layer_offset (weights draw that layer's values), and its token stream starts at token
// token_offset (micro-batch g of an iteration starts at g x its tokens). With context parallelism
// (cp > 1) the schedule's rows are the rank's tokens of each sequence: CpPosition says where they
// sit in it. Dropout's masks hang on the same places (exec/dropout.h): `dropout` is the rate of
// the plan's attention dropout, `branch_dropout` of the hidden dropout on the attention's and on
// the MLP's residual branch (0: none; SetDropout).
struct FillOffsets {
  int layer = 0;
  int64_t token = 0;
  int cp = 1, cp_rank = 0;
  int64_t seq_len = 0;  // the whole sequence's tokens (with cp > 1)
  double dropout = 0;
  double branch_dropout[2] = {0, 0};  // [attention's, MLP's]
};

// Sets `fill`'s dropout rates to the plan's: kDropoutRate where it drops out (Plan::
// applies_dropout, Plan::branch_dropout), else 0.
void SetDropout(const Plan& plan, FillOffsets* fill);

// Fills `view` of rank `rank`'s `values` of a given tensor (IsGiven): token ids with
// ReferenceToken (a label is the next token), everything else with FillReference, both placed by
// `offsets`.
void FillGiven(const Tensor& tensor, const ModelSpec& model, int rank, int tp, uint64_t seed,
               const FillOffsets& offsets, const View& view, std::vector<float>& values);

// The dropout of attention op `op` of global layer `layer` on TP rank `rank`, over the rows of
// `qkv` (whole sequences of the micro-batch, without context parallelism): the rate `offsets`
// say and where its sequences and heads sit in the whole step (exec/dropout.h).
AttentionDropout AttentionDropoutAt(const FillOffsets& offsets, uint64_t seed, int rank, int layer,
                                    const Op& op, const View& qkv);

// The hidden dropout of global layer `layer`'s attention (`branch` 1) or MLP (2) residual branch
// over `view` of TP rank `rank`'s residual-stream tensor `tensor` (whole, or its sequence shard:
// a view within one row slice), placed by `offsets` (exec/dropout.h).
BranchDropout BranchDropoutAt(const FillOffsets& offsets, uint64_t seed, int rank, int tp,
                              int layer, int branch, const Tensor& tensor, const View& view);

}  // namespace domino::exec

#endif  // DOMINO_EXEC_REFERENCE_H_
