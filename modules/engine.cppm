// modules/engine.cppm — the fast paths behind AttentionPath::fast and memory_efficient (internal).
//
// All of it in namespace mha::detail (the layer exports one name, mha::testing::lane_sums, for
// the tests; nothing else): heads as strided views (attention_problem.hpp), the softmax of a
// row, one family for every path (softmax_kernels.hpp), every batch-head as two GEMMs (fast_attention.hpp), tiles and
// an online softmax (flash_attention.hpp), the fast forward (engine.hpp) and backward
// (engine_backward.hpp), and forward_for_backward() on the engine (training_forward.hpp), and a
// KV cache's decoding step (decode_step.hpp) on its own copy of the weights
// (decode_weights.hpp). Skip it on a first reading: the tests hold it to the textbook.
//
// One module unit per layer, each file one idea: docs/building.md says why.
module;
#include "third_party_xtensor.hpp"
#if defined(__x86_64__)
#include <immintrin.h>  // attention_tiles.hpp: AVX-512 intrinsics, in functions compiled for it
#endif

export module mha:engine;

import mha.core;
import :platform;
import mha.textbook;

#include "engine/attention_problem.hpp"
#include "engine/softmax_kernels.hpp"
#include "engine/attention_tiles.hpp"
#include "engine/fast_attention.hpp"
#include "engine/flash_attention.hpp"
#include "engine/decode_weights.hpp"
#include "engine/engine.hpp"
#include "engine/engine_backward.hpp"
#include "engine/training_forward.hpp"
#include "engine/decode_step.hpp"
