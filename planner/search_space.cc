// The pins of a search space: `--fix` items and `--strategy` (planner/search.h).

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <string>
#include <string_view>
#include <vector>

#include "planner/search.h"

namespace domino {
namespace {

bool ParseInt(std::string_view text, int* out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && ptr == text.data() + text.size() && *out > 0;
}

}  // namespace

Status ApplyFix(std::string_view fix, SearchSpace* space) {
  size_t start = 0;
  while (start <= fix.size()) {
    size_t end = fix.find(',', start);
    if (end == std::string_view::npos) end = fix.size();
    std::string_view item = fix.substr(start, end - start);
    start = end + 1;
    // As --vary refuses an empty value: a stray comma is a mistake, not nothing.
    if (item.empty())
      return Error(
          fmt::format("--fix: '{}' has an empty item (a comma at an end, or two in a "
                      "row): give KEY=VALUE,KEY=VALUE",
                      fix));
    size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      return Error(fmt::format("--fix: '{}' is not KEY=VALUE", item));
    std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    auto bad = [&](std::string_view rule) {
      return Error(fmt::format("--fix: {}={}: {}", key, value, rule));
    };
    int n = 0;
    auto as_bool = [&](std::optional<bool>* out) -> Status {
      if (value == "true")
        *out = true;
      else if (value == "false")
        *out = false;
      else
        return bad("expected true or false");
      return Status::Ok();
    };
    if (key == "tp" || key == "cp" || key == "pp" || key == "dp" || key == "v" || key == "mb" ||
        key == "p" || key == "q") {
      if (!ParseInt(value, &n)) return bad("expected a positive integer");
      // Each within the bound its plan key has.
      const PlanIntBound& bound = key == "tp"   ? kTpBound
                                  : key == "cp" ? kCpBound
                                  : key == "pp" ? kPpBound
                                  : key == "dp" ? kDpBound
                                  : key == "v"  ? kVirtualStagesBound
                                  : key == "mb" ? kMicroBatchBound
                                  : key == "p"  ? kRowSplitBound
                                                : kColSplitBound;
      if (std::optional<std::string> out_of_range = CheckBound(bound, n)) return bad(*out_of_range);
      if (key == "tp") space->tp = n;
      if (key == "cp") space->cp = n;
      if (key == "pp") space->pp = n;
      if (key == "dp") space->dp = n;
      if (key == "v") space->virtual_stages = n;
      if (key == "mb") space->micro_batch = n;
      if (key == "p") space->row_splits = {n};
      if (key == "q") space->col_splits = {n};
    } else if (key == "sp") {
      DOMINO_RETURN_IF_ERROR(as_bool(&space->sequence_parallel));
    } else if (key == "distopt") {
      DOMINO_RETURN_IF_ERROR(as_bool(&space->distributed_optimizer));
    } else if (key == "fsdp") {
      DOMINO_RETURN_IF_ERROR(as_bool(&space->fsdp));
    } else if (key == "recompute") {
      if (value == "none")
        space->recompute = Recompute::kNone;
      else if (value == "selective")
        space->recompute = Recompute::kSelective;
      else if (value == "full")
        space->recompute = Recompute::kFull;
      else
        return bad("expected none, selective or full");
    } else if (key == "scope") {
      if (value == "none")
        space->scopes = {OverlapScope::kNone};
      else if (value == "intra-layer")
        space->scopes = {OverlapScope::kIntraLayer};
      else if (value == "inter-layer")
        space->scopes = {OverlapScope::kInterLayer};
      else
        return bad("expected none, intra-layer or inter-layer");
    } else {
      return Error(
          fmt::format("--fix: unknown key '{}' (tp, cp, pp, dp, v, mb, sp, distopt, fsdp, "
                      "recompute, p, q, scope)",
                      key));
    }
  }
  return Status::Ok();
}

Status ApplyStrategy(std::string_view s, SearchSpace* space) {
  auto keep = [](std::vector<int>& v, auto pred) {
    v.erase(std::remove_if(v.begin(), v.end(), [&](int x) { return !pred(x); }), v.end());
  };
  if (s == "baseline") {
    keep(space->row_splits, [](int p) { return p == 1; });
    keep(space->col_splits, [](int q) { return q == 1; });
  } else if (s == "row") {
    keep(space->row_splits, [](int p) { return p > 1; });
    keep(space->col_splits, [](int q) { return q == 1; });
  } else if (s == "col") {
    keep(space->row_splits, [](int p) { return p == 1; });
    keep(space->col_splits, [](int q) { return q > 1; });
  } else if (s == "2d") {
    keep(space->row_splits, [](int p) { return p > 1; });
    keep(space->col_splits, [](int q) { return q > 1; });
  } else if ((s == "decomposed" || s == "both") && space->sequence_parallel &&
             !*space->sequence_parallel) {
    return Error(
        fmt::format("--strategy {} decomposes sequence parallelism's collectives: it "
                    "contradicts the pinned sp=false",
                    s));
  } else if (s == "decomposed") {
    keep(space->row_splits, [](int p) { return p == 1; });
    keep(space->col_splits, [](int q) { return q == 1; });
    space->methods = {OverlapMethod::kDecomposed};
    space->sequence_parallel = true;
  } else if (s == "both") {
    keep(space->row_splits, [](int p) { return p > 1; });
    keep(space->col_splits, [](int q) { return q == 1; });
    space->methods = {OverlapMethod::kBoth};
    space->sequence_parallel = true;
  } else if (s == "all") {
    space->methods = {OverlapMethod::kDomino, OverlapMethod::kDecomposed, OverlapMethod::kBoth};
  } else if (s != "any") {
    return Error(fmt::format(
        "--strategy: unknown '{}' (baseline, row, col, 2d, any, decomposed, both, all)", s));
  }
  if (space->row_splits.empty() || space->col_splits.empty())
    return Error(fmt::format("--strategy {} contradicts the pinned row/column split", s));
  return Status::Ok();
}

}  // namespace domino
