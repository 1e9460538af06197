// modules/api.cppm — what a PyTorch user calls: the functional form, the module, the KV cache.
//
// Every choice of path, for steps 3 to 10 (the reference or the engine, and the engine's
// kernel), the backward and the decoding step, with the rules that override the path asked
// for (attention_paths.hpp), F.multi_head_attention_forward argument for argument
// (functional.hpp), the module with its parameters, train/eval, forward and backward
// (multihead_attention.hpp), and decoding one token at a time (kv_cache.hpp). Start
// reading at MultiheadAttention::forward().
//
// One module unit per layer, each file one idea: docs/building.md says why.
module;
#include "third_party_xtensor.hpp"

export module mha:api;

import mha.core;
import :platform;
import mha.textbook;
import :engine;

// check(), mha.core's helper, called unqualified by the files below.
namespace mha {
using detail::check;
}  // namespace mha

#include "api/attention_paths.hpp"
#include "api/pytorch_paths.hpp"
#include "api/functional.hpp"
#include "api/mask_preparation.hpp"
#include "api/multihead_attention.hpp"
#include "api/kv_cache.hpp"
