#ifndef DOMINO_MODELS_MODEL_LIMITS_H_
#define DOMINO_MODELS_MODEL_LIMITS_H_

#include "models/base/yaml_reader.h"

namespace domino {

// The sizes every model reader accepts (model YAML, Hugging Face configs): upper bounds far
// above any real model, low enough that every count in model_counts.h fits in an int64
// (layers * (hidden * (4 * attention width + 3 * ffn)) stays below 4e18) and the attention's
// width (heads * head_dim) in an int. Layers also index ops in 16 bits (planner/schedule.h
// OpTags::layer, TensorRole::layer, Op::layer_begin).
inline constexpr IntRange kLayersRange{1, 32'767};
inline constexpr IntRange kHiddenRange{1, 1'000'000};
inline constexpr IntRange kHeadsRange{1, 1'000'000};
inline constexpr IntRange kFfnRange{1, 10'000'000};
inline constexpr IntRange kAttentionWidthRange{1, 10'000'000};  // heads * head_dim
inline constexpr IntRange kVocabRange{1, 100'000'000};
inline constexpr IntRange kSeqLenRange{1, 100'000'000};

}  // namespace domino

#endif  // DOMINO_MODELS_MODEL_LIMITS_H_
