#include <fmt/format.h>

#include <string>
#include <vector>

#include "exec/execute.h"
#include "exec/step_runner.h"
#include "planner/lower.h"

namespace domino::exec::whole_step {
namespace {

// One compared item of the check: a parameter of one stage's chunk (its gradient and its updated
// value), in the order the stage's first rank sends them to rank 0.
struct Item {
  int stage = 0;
  std::string name;
  TensorRole role;    // the reference's role (layers counted from the model's first)
  bool copy = false;  // the last stage's copy of the tied word embedding
};

}  // namespace

Status CheckStep(const Plan& plan, const Iteration& it, StepRunner& run, const RankCoords& me,
                 Communicator& world, const ExecuteOptions& options,
                 const std::vector<double>& losses, ExecuteResult* result) {
  DOMINO_RETURN_IF_ERROR(run.Settle());
  Groups& g = run.groups();
  // Each stage's first TP and DP ranks gather their chunks' parameters over TP and send them,
  // gradient then value, to rank 0.
  if (me.dp == 0 && me.cp == 0) {
    for (const auto& c : run.chunks()) {
      for (const Bucket& b : c->buckets) {
        for (const Param& p : b.params) {
          for (int32_t id : {p.grad, p.value}) {
            const Tensor& t = c->schedule.tensors()[id];
            Result<std::vector<float>> mine = c->mbs[0]->Read(id);
            if (!mine.ok()) return mine.error();
            Result<WholeTensor> whole = GatherWholeTensor(t, *mine, *g.tp, /*reduced=*/true);
            if (!whole.ok()) return whole.error();
            if (me.tp == 0)
              DOMINO_RETURN_IF_ERROR(
                  world.Send(whole->values.data(), static_cast<int64_t>(whole->values.size()), 0));
          }
        }
      }
    }
  }
  float failed = 0;
  if (world.rank() == 0) {
    const Plan ref_plan = StepReferencePlan(plan);
    Result<Iteration> ref_it = LowerIteration(ref_plan, IterationOptions{false});
    if (!ref_it.ok()) return ref_it.error();
    SelfCommunicator self;
    Result<Groups> ref_groups = SplitGroups(ref_plan, self, RankCoords{});
    if (!ref_groups.ok()) return ref_groups.error();
    ExecuteOptions ref_options = options;
    ref_options.backend = BackendKind::kCpu;  // the reference runs on the CPU
    ref_options.progress = {};
    ref_options.alter_chunk = {};
    StepRunner ref(ref_plan, *ref_it, RankCoords{}, std::move(ref_groups).value(), ref_options);
    DOMINO_RETURN_IF_ERROR(ref.Init());
    std::vector<double> ref_losses;
    Timeline unused;
    for (int step = 1; step <= options.steps; ++step) {
      DOMINO_RETURN_IF_ERROR(ref.Step(step, &unused));
      Result<double> loss = ref.Loss();
      if (!loss.ok()) return loss.error();
      ref_losses.push_back(*loss);
    }
    DOMINO_RETURN_IF_ERROR(ref.Settle());
    const Chunk& ref_chunk = *ref.chunks()[0];
    for (int step = 0; step < options.steps; ++step) {
      WholeTensor got{1, 1, {static_cast<float>(losses[step])}};
      WholeTensor want{1, 1, {static_cast<float>(ref_losses[step])}};
      result->checks.push_back(
          CompareTensors(fmt::format("loss (step {})", step + 1), got, want, options.tolerance));
    }
    // Every stage's chunks, in the order their first ranks sent them.
    const int vs_total = static_cast<int>(it.virtual_stages.size());
    std::vector<int> first(vs_total + 1, 0);
    for (int vs = 0; vs < vs_total; ++vs) first[vs + 1] = first[vs] + it.virtual_stages[vs].layers;
    std::vector<TensorCheck> grads, values;
    for (int s = 0; s < it.stages; ++s) {
      const int from = WorldRank(plan, RankCoords{0, s, 0, 0});
      for (int chunk = 0; chunk < it.chunks; ++chunk) {
        const int vs = chunk * it.stages + s;
        Chunk shape;
        shape.vs = vs;
        shape.shape = it.virtual_stages[vs];
        Result<Schedule> sched = LowerChunk(plan, shape.shape);
        if (!sched.ok()) return sched.error();
        shape.schedule = std::move(sched).value();
        DOMINO_RETURN_IF_ERROR(Describe(plan, shape));
        for (const Bucket& b : shape.buckets) {
          for (const Param& p : b.params) {
            for (int32_t id : {p.grad, p.value}) {
              const Tensor& t = shape.schedule.tensors()[id];
              TensorRole role = t.role;
              if (role.layer >= 0) role.layer = static_cast<int16_t>(role.layer + first[vs]);
              const int32_t ref_id = FindTensor(ref_chunk.schedule.tensors(), role);
              if (ref_id < 0)
                return Error(fmt::format("the reference has no tensor {}", RoleName(role)));
              const Tensor& rt = ref_chunk.schedule.tensors()[ref_id];
              WholeTensor got;
              const Shape2 whole = WholeShape(t, plan.tp);
              got.rows = whole.rows, got.cols = whole.cols;
              got.values.resize(static_cast<size_t>(whole.rows * whole.cols));
              DOMINO_RETURN_IF_ERROR(
                  world.Recv(got.values.data(), static_cast<int64_t>(got.values.size()), from));
              Result<std::vector<float>> ref_values = ref_chunk.mbs[0]->Read(ref_id);
              if (!ref_values.ok()) return ref_values.error();
              WholeTensor want{rt.rows, rt.cols, std::move(ref_values).value()};
              // Vocabulary padding depends on the TP size: compare the vocabulary's rows.
              const bool vocab =
                  role.slot == TensorSlot::kEmbedding || role.slot == TensorSlot::kLmHead;
              for (WholeTensor* w : {&got, &want})
                if (vocab && w->rows > plan.model.vocab) {
                  w->rows = plan.model.vocab;
                  w->values.resize(static_cast<size_t>(w->rows * w->cols));
                }
              std::string name = RoleName(rt.role) + (id == p.grad ? "" : " (updated)");
              if (role.slot == TensorSlot::kEmbedding && role.layer < 0 && !shape.shape.embedding)
                name += fmt::format(" (stage {}'s copy)", s);
              (id == p.grad ? grads : values)
                  .push_back(CompareTensors(name, got, want, options.tolerance));
            }
          }
        }
      }
    }
    for (auto* list : {&grads, &values})
      result->checks.insert(result->checks.end(), list->begin(), list->end());
    for (const TensorCheck& c : result->checks) failed += c.ok ? 0.0f : 1.0f;
  }
  DOMINO_RETURN_IF_ERROR(world.AllReduce(&failed, 1));
  result->passed = failed == 0;
  return Status::Ok();
}

}  // namespace domino::exec::whole_step
