#ifndef DOMINO_EXEC_CPU_KERNELS_H_
#define DOMINO_EXEC_CPU_KERNELS_H_

#include <cmath>
#include <cstdint>

#include "exec/dropout.h"

// fp32 reference kernels of one transformer layer and of the model's ends (embedding and
// cross-entropy), forward and backward, on row-major views.
// Every kernel reads and writes only the rows x cols window of its views, never the padding
// between rows, so a view may be a block of a wider tensor (a TP shard's columns). Shapes are
// preconditions, checked by assert. Eigen stays inside cpu_kernels.cc.
namespace domino::exec::cpu {

// A row-major fp32 matrix view: element (r, c) at data[r * stride + c]; stride >= cols.
struct Mat {
  float* data = nullptr;
  int64_t rows = 0, cols = 0, stride = 0;
};
struct ConstMat {
  const float* data = nullptr;
  int64_t rows = 0, cols = 0, stride = 0;
  ConstMat() = default;
  ConstMat(const float* d, int64_t r, int64_t c, int64_t s)
      : data(d), rows(r), cols(c), stride(s) {}
  ConstMat(const Mat& m) : data(m.data), rows(m.rows), cols(m.cols), stride(m.stride) {}  // NOLINT
};

// c = op(a) * op(b) (or c += ... when accumulate), op = transpose when the flag is set. c must not
// overlap a or b.
void Gemm(ConstMat a, bool transpose_a, ConstMat b, bool transpose_b, Mat c, bool accumulate);
// c = a + b (c may alias a or b); with `dropout` (exec/dropout.h: element (r, j) of the views,
// rate 0: none), c = a + b scaled by its mask: a residual add after its branch's dropout.
void Add(ConstMat a, ConstMat b, Mat c, const BranchDropout& dropout = {});
// c = a scaled by `dropout`'s mask (c may alias a): the dropout's backward on the gradient.
void Dropout(ConstMat a, const BranchDropout& dropout, Mat c);

enum class NormKind { kLayerNorm, kRmsNorm };
// Per row: LayerNorm y = (x - mean) / sqrt(var + eps) * gamma (no bias; var is the biased
// variance); RMSNorm y = x / sqrt(mean(x^2) + eps) * gamma. gamma has x.cols entries.
void NormForward(NormKind kind, ConstMat x, const float* gamma, float eps, Mat y);
// dx = d/dx given dy; when accumulate_dx, dx += that instead of =. dgamma (x.cols entries) is
// always accumulated: dgamma += sum over rows of dy * normalized(x).
void NormBackward(NormKind kind, ConstMat x, const float* gamma, float eps, ConstMat dy, Mat dx,
                  bool accumulate_dx, float* dgamma);

// GeLU, tanh approximation: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void GeluForward(ConstMat x, Mat y);
void GeluBackward(ConstMat x, ConstMat dy, Mat dx);
// A gated linear unit on x = [gate | up] (x.cols = 2 f, y.cols = f): y = act(gate) * up, with
// act SiLU (SwiGLU: silu(g) = g * sigmoid(g)) or the tanh GeLU above (GeGLU).
enum class Gate { kSilu, kGelu };
void GluForward(Gate gate, ConstMat x, Mat y);
void GluBackward(Gate gate, ConstMat x, ConstMat dy, Mat dx);  // dx.cols = 2 f: [dgate | dup]
// Squared ReLU (Nemotron-4): y = max(x, 0)^2, dy/dx = 2 max(x, 0).
void SquaredReluForward(ConstMat x, Mat y);
void SquaredReluBackward(ConstMat x, ConstMat dy, Mat dx);

// Causal self-attention with grouped-query attention over `sequences` sequences of `seq_len`
// tokens: qkv.rows = out.rows = sequences * seq_len, sequence-major. A row of qkv is [Q | K | V]:
// Q has `heads` heads of `head_dim` columns, K and V `kv_heads` heads each; query head h uses
// key/value head h / (heads / kv_heads). A row of out is the heads' outputs side by side. Scores
// are scaled by 1/sqrt(head_dim); token t attends to tokens 0..t of its sequence, or with a
// sliding `window` (ModelSpec::window) to tokens t - window..t (Megatron-Core's window_size
// (window, 0), flash-attn's window_size_left); the softmax is computed in fp32. With `softcap` > 0
// each scaled score s is soft-capped first, softcap * tanh(s / softcap) (ModelSpec::
// attention_softcap), and the backward scales its gradient by 1 - tanh(s / softcap)^2. With a
// `dropout` rate, each probability is scaled by its mask (exec/dropout.h) before P V, and the
// backward scales dP the same way.
// qkv.cols = (heads + 2 kv_heads) head_dim; heads % kv_heads == 0.
struct AttentionShape {
  int64_t sequences = 0, seq_len = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t window = 0;  // 0: none
  double softcap = 0;  // 0: none
  AttentionDropout dropout = {};
};
// The first key query t attends to under a sliding window of `window` tokens (0: none).
inline int64_t FirstKey(int64_t t, int64_t window) {
  return window > 0 && t > window ? t - window : 0;
}
void AttentionForward(const AttentionShape& shape, ConstMat qkv, Mat out);
// dqkv (qkv's layout) = gradient of sum(out * dout) with respect to qkv; recomputes the softmax.
void AttentionBackward(const AttentionShape& shape, ConstMat qkv, ConstMat dout, Mat dqkv);

// Rotary position embeddings on the Q and K heads of qkv rows (AttentionForward's layout), in
// place, rotate-half as Megatron-Core and Llama apply them: in each head of d = head_dim columns,
// pair (c, c + d/2) of row r turns by angle positions[r] x kRopeBase^(-2c/d) (exec/positions.h),
// (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin). V's columns are left alone. `inverse` turns
// by the negative angle: the backward, a rotation's gradient being its transpose. d is even.
struct RopeShape {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
};
void Rope(const RopeShape& shape, const int64_t* positions, bool inverse, Mat qkv);

// The model's ends. Token ids are stored as floats (exact below 2^24), one per row of a column.

// Vocab-parallel embedding lookup: row j of out = row (tokens[j] - vocab_begin) of `table` when
// the token lies in [vocab_begin, vocab_begin + table.rows), else zeros (another rank's part).
// out.cols = table.cols; out.rows = tokens.rows.
void EmbeddingForward(ConstMat tokens, int64_t vocab_begin, ConstMat table, Mat out);
// dtable += the rows of dy scattered to the tokens this part of the table holds.
void EmbeddingBackward(ConstMat tokens, int64_t vocab_begin, ConstMat dy, Mat dtable);

// Vocab-parallel cross-entropy, forward half. `logits` holds the columns [vocab_begin,
// vocab_begin + logits.cols) of the vocabulary; columns at or past `vocab` (padding) take no part.
// Per row j, with `parts` ranks: stats(j, part) = log-sum-exp of this part's valid logits (the
// lowest float when it has none), stats(j, parts) = the logit of label labels[j] if this part
// holds it, and every other column 0, so that the sum over parts of the stats is every part's
// log-sum-exp and the label's logit. stats.cols = parts + 1. With `softcap` > 0 every logit z is
// taken as softcap * tanh(z / softcap) (ModelSpec::logit_softcap), here and in the backward.
void CrossEntropyStats(ConstMat logits, ConstMat labels, int64_t vocab_begin, int64_t vocab,
                       int part, Mat stats, double softcap = 0);
// softcap * tanh(z / softcap), or z when softcap is 0.
inline double SoftCapped(double z, double softcap) {
  return softcap > 0 ? softcap * std::tanh(z / softcap) : z;
}
// The log-sum-exp over the whole vocabulary of summed stats row `row` (its first cols - 1 entries).
double LogSumExp(ConstMat stats, int64_t row);
// The mean over rows of summed stats of the token losses log-sum-exp - label logit.
double MeanCrossEntropy(ConstMat stats);
// dlogits = (softmax(logits) - onehot(label)) / tokens over this part's valid columns (the
// gradient of the mean loss over `tokens` tokens), 0 on padding; stats are the summed stats.
// With `softcap` > 0, of the capped logits, times the cap's derivative 1 - tanh(z / softcap)^2.
void CrossEntropyBackward(ConstMat logits, ConstMat labels, ConstMat stats, int64_t vocab_begin,
                          int64_t vocab, int64_t tokens, Mat dlogits, double softcap = 0);

}  // namespace domino::exec::cpu

#endif  // DOMINO_EXEC_CPU_KERNELS_H_
