// Attention without a fused kernel (the exec/cuda_ops.h half for it): per query head, cuBLAS
// GEMMs batched over sequences around an fp32 causal softmax and its backward, in a workspace the
// context reserves (AttentionWorkspaceBytes).
#include "exec/cuda_common.cuh"

namespace domino::exec::cuda {
namespace {

// One block per row of the scores of all sequences (row = sequence * n + query token t, n keys per
// row, fp32, already scaled): the causal softmax in place, keys after t, and with a sliding
// `window` (0: none) keys before t - window, get probability 0. With `softcap` > 0 each score is
// soft-capped as it is read, softcap * tanh(s / softcap). The row's log-sum-exp goes to lse[row]
// (the backward recovers each capped score from it and P). The probabilities the next GEMM reads,
// each scaled by its dropout mask of `head` (exec/dropout.h; none at rate 0), go to p_t as T when
// it is not null, and in fp32 to p_f32 when that is not null.
template <typename T>
__global__ void CausalSoftmaxKernel(float* s, T* p_t, float* p_f32, float* lse, int64_t n,
                                    int64_t window, float softcap, AttentionDropout dropout,
                                    int64_t head) {
  const int64_t row = blockIdx.x, t = row % n;
  const int64_t lo = window > 0 && t > window ? t - window : 0;
  float* sr = s + row * n;
  float peak = -INFINITY;
  for (int64_t u = lo + threadIdx.x; u <= t; u += blockDim.x) {
    // Each thread reads back below only the scores it writes here.
    if (softcap > 0.0f) sr[u] = softcap * tanhf(sr[u] / softcap);
    peak = fmaxf(peak, sr[u]);
  }
  peak = BlockMax(peak);
  float sum = 0.0f;
  for (int64_t u = lo + threadIdx.x; u <= t; u += blockDim.x) {
    const float e = expf(sr[u] - peak);
    sr[u] = e;
    sum += e;
  }
  const float total = BlockSum(sum);  // >= 1 term equals exp(0), so total >= 1
  const float inv = 1.0f / total;
  if (threadIdx.x == 0) lse[row] = peak + logf(total);
  for (int64_t u = threadIdx.x; u < n; u += blockDim.x) {
    const float p = u >= lo && u <= t ? sr[u] * inv : 0.0f;
    sr[u] = p;
    const float kept = p != 0.0f ? p * dropout.Scale(row / n, head, t, u) : 0.0f;
    if (p_t != nullptr) p_t[row * n + u] = FromFloat<T>(kept);
    if (p_f32 != nullptr) p_f32[row * n + u] = kept;
  }
}

// The softmax backward of one row (layout as CausalSoftmaxKernel): dS = P (dP - rowsum(P dP)),
// written over dP in fp32 and, when ds_t is not null, as T. Masked keys have P = 0, so dS = 0.
// With `softcap` > 0, times the cap's derivative 1 - (c / softcap)^2, the capped score c being
// log P + the row's log-sum-exp (lse, as the forward kernel wrote it). With dropout, dp holds the
// gradient of the dropped probabilities, which the masks of `head` turn into P's first.
template <typename T>
__global__ void SoftmaxBackwardKernel(const float* p, float* dp, T* ds_t, const float* lse,
                                      int64_t n, float softcap, AttentionDropout dropout,
                                      int64_t head) {
  const int64_t row = blockIdx.x, t = row % n;
  const float* pr = p + row * n;
  float* dr = dp + row * n;
  float dot = 0.0f;
  for (int64_t u = threadIdx.x; u < n; u += blockDim.x) {
    // Each thread reads back below only the entries it writes here.
    if (dropout.rate > 0 && pr[u] != 0.0f) dr[u] *= dropout.Scale(row / n, head, t, u);
    dot += pr[u] * dr[u];
  }
  dot = BlockSum(dot);
  for (int64_t u = threadIdx.x; u < n; u += blockDim.x) {
    float ds = pr[u] * (dr[u] - dot);
    if (softcap > 0.0f && pr[u] > 0.0f) {
      const float th = (logf(pr[u]) + lse[row]) / softcap;
      ds *= 1.0f - th * th;
    }
    dr[u] = ds;
    if (ds_t != nullptr) ds_t[row * n + u] = FromFloat<T>(ds);
  }
}

// The attention scratch: fp32 scores/probabilities and their gradients, and T copies of both for
// the GEMMs that take them as an operand, each `cells` entries (one query head, all sequences),
// and each row's log-sum-exp.
struct AttentionScratch {
  float* s;
  float* dp;
  void* p_t;
  void* ds_t;
  float* lse;
};

AttentionScratch Carve(void* workspace, size_t cells) {
  char* at = static_cast<char*>(workspace);
  AttentionScratch a{};
  a.s = reinterpret_cast<float*>(at);
  at += AlignUp(cells * 4, kAlign);
  a.dp = reinterpret_cast<float*>(at);
  at += AlignUp(cells * 4, kAlign);
  a.p_t = at;
  at += AlignUp(cells * 2, kAlign);
  a.ds_t = at;
  at += AlignUp(cells * 2, kAlign);
  a.lse = reinterpret_cast<float*>(at);  // AttentionWorkspaceBytes reserves a row's worth
  return a;
}

Status CheckAttention(const Context* c, int64_t sequences, int64_t seq_len, int64_t heads,
                      int64_t kv_heads, int64_t head_dim, int64_t window, double softcap,
                      const AttentionDropout& dropout, DView qkv, DView out) {
  if (sequences < 0 || seq_len < 0 || heads <= 0 || kv_heads <= 0 || head_dim <= 0 ||
      heads % kv_heads != 0)
    return Error("attention: heads must be a positive multiple of kv_heads, sizes positive");
  if (window < 0) return Error("attention: a sliding window of 0 (none) or more tokens");
  if (!(softcap >= 0) || !std::isfinite(softcap))
    return Error("attention: a soft cap of 0 (none) or a finite positive value");
  if (!(dropout.rate >= 0 && dropout.rate < 1))
    return Error("attention: a dropout rate of at least 0 and below 1");
  if (!Valid(qkv) || !Valid(out)) return Error("attention: an invalid view");
  if (qkv.rows != sequences * seq_len || qkv.cols != (heads + 2 * kv_heads) * head_dim)
    return Error("attention: qkv must be (sequences * seq_len) x ((heads + 2 kv_heads) head_dim)");
  if (out.rows != qkv.rows || out.cols != heads * head_dim)
    return Error("attention: out must be (sequences * seq_len) x (heads head_dim)");
  if (sequences * seq_len > INT_MAX) return Error("attention: too many query rows");
  if (c->workspace_bytes < AttentionWorkspaceBytes(sequences, seq_len, heads))
    return Error("attention: call Reserve(AttentionWorkspaceBytes(...)) first");
  return Status::Ok();
}

// The column offsets of query head h's blocks in a qkv row, and of its key/value head's.
struct HeadColumns {
  int64_t q, k, v;
};

HeadColumns Columns(int64_t heads, int64_t kv_heads, int64_t d, int64_t h) {
  const int64_t g = h / (heads / kv_heads);
  return {h * d, (heads + g) * d, (heads + kv_heads + g) * d};
}

// The n x d block at column `col` of every sequence's n rows of `view`, batched over sequences.
Output HeadBlock(const Context* c, DView view, int64_t n, int64_t d, int64_t col) {
  return Output{
      Offset(view.data, col, Bytes(c)), BlasType(c->type), n, d, view.stride, n * view.stride};
}
Operand AsOperand(const Output& o) {
  return Operand{o.data, o.type, o.rows, o.cols, o.ld, o.batch_stride};
}

// S = scale Q_h K_g^T into scratch.s (fp32), then the causal softmax of the soft-capped scores in
// place, each row's log-sum-exp into scratch.lse, and the probabilities head h's dropout keeps as
// the operand of the next GEMM: as T in scratch.p_t for 16-bit types; for fp32, scratch.s itself
// without dropout, else scratch.dp. Returns that operand.
Status Probabilities(Context* c, const Operand& q, const Operand& k, int64_t sequences, int64_t n,
                     int64_t window, float softcap, const AttentionDropout& dropout, int64_t h,
                     float scale, const AttentionScratch& scratch, Operand* p) {
  const Output s{scratch.s, CUDA_R_32F, n, n, n, n * n};
  Status e = RowMajorGemm(c, q, false, k, true, s, scale, 0.0f, sequences);
  if (!e.ok()) return e;
  const bool f32 = c->type == DType::kF32, dropped = dropout.rate > 0;
  float* p_f32 = f32 && dropped ? scratch.dp : nullptr;
  void* operand = !f32 ? scratch.p_t : dropped ? static_cast<void*>(scratch.dp) : scratch.s;
  *p = Operand{operand, BlasType(c->type), n, n, n, n * n};
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p_t = f32 ? nullptr : static_cast<T*>(scratch.p_t);
    CausalSoftmaxKernel<T><<<static_cast<unsigned>(sequences * n), kThreads, 0, Current(c)>>>(
        scratch.s, p_t, p_f32, scratch.lse, n, window, softcap, dropout, h);
    return Launched("causal softmax");
  });
}

}  // namespace

// Per query head h (key/value head g), batched over sequences:
//   S = scale Q_h K_g^T (fp32), P = causal softmax(cap(S)) (within the window),
//   O_h = drop(P) V_g.
Status Attention(Context* c, int64_t sequences, int64_t seq_len, int64_t heads, int64_t kv_heads,
                 int64_t head_dim, int64_t window, double softcap, const AttentionDropout& dropout,
                 DView qkv, DView out) {
  if (Status e = CheckAttention(c, sequences, seq_len, heads, kv_heads, head_dim, window, softcap,
                                dropout, qkv, out);
      !e.ok())
    return e;
  if (sequences == 0 || seq_len == 0) return Status::Ok();
  const int64_t n = seq_len, d = head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const AttentionScratch scratch = Carve(c->workspace, static_cast<size_t>(sequences * n * n));
  for (int64_t h = 0; h < heads; ++h) {
    const HeadColumns col = Columns(heads, kv_heads, d, h);
    const Operand q = AsOperand(HeadBlock(c, qkv, n, d, col.q)),
                  k = AsOperand(HeadBlock(c, qkv, n, d, col.k));
    const Operand v = AsOperand(HeadBlock(c, qkv, n, d, col.v));
    Operand p{};
    Status e = Probabilities(c, q, k, sequences, n, window, static_cast<float>(softcap), dropout, h,
                             scale, scratch, &p);
    if (e.ok())
      e = RowMajorGemm(c, p, false, v, false, HeadBlock(c, out, n, d, h * d), 1.0f, 0.0f,
                       sequences);
    if (!e.ok()) return Error("attention: " + e.message());
  }
  return Status::Ok();
}

// Per query head h (key/value head g), batched over sequences, with P recomputed as forward:
//   dV_g += drop(P)^T dO_h,  dP = drop(dO_h V_g^T),  dS = P (dP - rowsum(P dP)) (times the cap's
//   derivative),  dQ_h = scale dS K_g,  dK_g += scale dS^T Q_h.
// dqkv is cleared first because the query heads of a group add into one dK_g and dV_g.
Status AttentionBackward(Context* c, int64_t sequences, int64_t seq_len, int64_t heads,
                         int64_t kv_heads, int64_t head_dim, int64_t window, double softcap,
                         const AttentionDropout& dropout, DView qkv, DView dout, DView dqkv) {
  if (Status e = CheckAttention(c, sequences, seq_len, heads, kv_heads, head_dim, window, softcap,
                                dropout, qkv, dout);
      !e.ok())
    return e;
  if (!Valid(dqkv) || !SameShape(qkv, dqkv))
    return Error("attention backward: dqkv differs from qkv");
  if (Status e = Zero(c, dqkv); !e.ok()) return Error("attention backward: " + e.message());
  if (sequences == 0 || seq_len == 0) return Status::Ok();
  const int64_t n = seq_len, d = head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const AttentionScratch scratch = Carve(c->workspace, static_cast<size_t>(sequences * n * n));
  const bool f32 = c->type == DType::kF32;
  const Output dp{scratch.dp, CUDA_R_32F, n, n, n, n * n};
  const Operand ds{
      f32 ? static_cast<void*>(scratch.dp) : scratch.ds_t, BlasType(c->type), n, n, n, n * n};
  for (int64_t h = 0; h < heads; ++h) {
    const HeadColumns col = Columns(heads, kv_heads, d, h);
    const Operand q = AsOperand(HeadBlock(c, qkv, n, d, col.q)),
                  k = AsOperand(HeadBlock(c, qkv, n, d, col.k));
    const Operand v = AsOperand(HeadBlock(c, qkv, n, d, col.v));
    const Operand d_out = AsOperand(HeadBlock(c, dout, n, d, h * d));
    Operand p{};
    Status e = Probabilities(c, q, k, sequences, n, window, static_cast<float>(softcap), dropout, h,
                             scale, scratch, &p);
    // dV first: in fp32 with dropout the dropped P it reads sits where dP goes next.
    if (e.ok())
      e = RowMajorGemm(c, p, true, d_out, false, HeadBlock(c, dqkv, n, d, col.v), 1.0f, 1.0f,
                       sequences);
    if (e.ok()) e = RowMajorGemm(c, d_out, false, v, true, dp, 1.0f, 0.0f, sequences);
    if (e.ok()) {
      e = ByType(c->type, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* ds_t = f32 ? nullptr : static_cast<T*>(scratch.ds_t);
        SoftmaxBackwardKernel<T><<<static_cast<unsigned>(sequences * n), kThreads, 0, Current(c)>>>(
            scratch.s, scratch.dp, ds_t, scratch.lse, n, static_cast<float>(softcap), dropout, h);
        return Launched("softmax backward");
      });
    }
    if (e.ok())
      e = RowMajorGemm(c, ds, false, k, false, HeadBlock(c, dqkv, n, d, col.q), scale, 0.0f,
                       sequences);
    if (e.ok())
      e = RowMajorGemm(c, ds, true, q, false, HeadBlock(c, dqkv, n, d, col.k), scale, 1.0f,
                       sequences);
    if (!e.ok()) return Error("attention backward: " + e.message());
  }
  return Status::Ok();
}

}  // namespace domino::exec::cuda
