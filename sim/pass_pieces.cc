#include "sim/pass_pieces.h"

#include <algorithm>

namespace domino::sim {

PartIndex IndexPart(const Schedule& s, const Timeline& t, const std::vector<OpCost>& costs,
                    bool backward, bool combined, int layers) {
  PartIndex part;
  part.layers = layers;
  part.start_us = 0;
  part.end_us = t.end_us();
  auto in_part = [&](const Op& op) { return !combined || InBackwardPart(op) == backward; };
  if (combined) {
    double split = part.end_us;
    for (size_t i = 0; i < s.size(); ++i)
      if (InBackwardPart(s.ops()[i])) split = std::min(split, t.ops[i].start_us);
    (backward ? part.start_us : part.end_us) = split;
  }
  part.done_us.assign(std::max(layers, 1), part.start_us);
  // (With one piece, Piece reads no layer's end.)
  for (size_t i = 0; i < (layers > 1 ? s.size() : 0); ++i) {
    const Op& op = s.ops()[i];
    if (!in_part(op) || op.tags.layer < 0 || op.tags.layer >= layers) continue;
    double& done = part.done_us[op.tags.layer];
    done = std::clamp(t.ops[i].end_us, done, part.end_us);
  }
  // Forward layers finish in ascending order, backward in descending: make the ends monotone.
  if (!backward)
    for (int l = 1; l < layers; ++l)
      part.done_us[l] = std::max(part.done_us[l], part.done_us[l - 1]);
  else
    for (int l = layers - 2; l >= 0; --l)
      part.done_us[l] = std::max(part.done_us[l], part.done_us[l + 1]);
  // Each op belongs to the piece its end falls in.
  std::vector<double> gemm(std::max(layers, 1), 0.0), serial(std::max(layers, 1), 0.0);
  for (size_t i = 0; i < s.size(); ++i) {
    const Op& op = s.ops()[i];
    if (!in_part(op)) continue;
    int piece = 0;
    if (layers > 1) {
      const double end = t.ops[i].end_us;
      if (!backward) {
        piece =
            static_cast<int>(std::lower_bound(part.done_us.begin(), part.done_us.end() - 1, end) -
                             part.done_us.begin());
      } else {
        // done_us descends with the layer: the piece is the highest layer whose end covers it
        // (the layers that cover it are a prefix), or layer 0 when none does.
        const auto covering = std::partition_point(part.done_us.begin(), part.done_us.end(),
                                                   [&](double done) { return done >= end; });
        piece = std::max(0, static_cast<int>(covering - part.done_us.begin()) - 1);
      }
    }
    const OpCost& c = costs[i];
    serial[piece] += c.alone_us;
    if (op.stream == Stream::kCompute &&
        (op.kind == OpKind::kGemm || op.kind == OpKind::kAttention))
      gemm[piece] += std::max(0.0, c.alone_us - c.launch_us);
  }
  part.gemm_prefix.assign(gemm.size() + 1, 0);
  part.serial_prefix.assign(serial.size() + 1, 0);
  for (size_t l = 0; l < gemm.size(); ++l) {
    part.gemm_prefix[l + 1] = part.gemm_prefix[l] + gemm[l];
    part.serial_prefix[l + 1] = part.serial_prefix[l] + serial[l];
  }
  return part;
}

PieceTimes Piece(const PartIndex& part, const Op& op) {
  const int layers = part.layers;
  PieceTimes p;
  int lb = 0, le = std::max(layers, 1);
  double start = part.start_us, end = part.end_us;
  if (op.layer_begin >= 0 && layers > 0) {
    lb = op.layer_begin;
    le = op.layer_end;
    if (op.func == OpFunc::kForwardPass) {
      if (lb > 0) start = part.done_us[lb - 1];
      if (le < layers) end = part.done_us[le - 1];
    } else {
      if (le < layers) start = part.done_us[le];
      if (lb > 0) end = part.done_us[lb];
    }
  }
  p.duration_us = std::max(0.0, end - start);
  p.gemm_us = std::min(p.duration_us, part.gemm_prefix[le] - part.gemm_prefix[lb]);
  p.serial_us = part.serial_prefix[le] - part.serial_prefix[lb];
  return p;
}

PassShares SharesOf(const Schedule& s, const std::vector<OpCost>& costs) {
  double tails = 0, gemm = 0, body = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const Op& op = s.ops()[i];
    if (op.stream != Stream::kCompute ||
        (op.kind != OpKind::kGemm && op.kind != OpKind::kAttention))
      continue;
    const double us = std::max(0.0, costs[i].alone_us - costs[i].launch_us);
    body += us;
    tails += costs[i].tail_share * us;
    if (op.kind == OpKind::kGemm) gemm += us;
  }
  return body > 0 ? PassShares{tails / body, gemm / body} : PassShares{};
}

OpCost PassCost(double duration_us, double gemm_us, int sms, double stall_share) {
  OpCost cost;
  cost.stall_share = stall_share;
  cost.alone_us = duration_us;
  cost.tiles = gemm_us > 0 ? sms * kPassWaves : 0;
  cost.wave_us = gemm_us / kPassWaves;
  cost.launch_us = duration_us - gemm_us;
  return cost;
}

}  // namespace domino::sim
