// modules/textbook.cppm — multi_head_attention_forward and its backward, one idea per file.
//
// The readable reference of PyTorch's nn.MultiheadAttention, in reading order: random.hpp,
// versions.hpp, masks.hpp, attention.hpp, extra_keys.hpp, in_projection.hpp, options.hpp, inputs.hpp,
// parameters.hpp, generations.hpp, reference_forward.hpp (steps 3 to 10), gradients.hpp and
// reference_backward.hpp (the backward, steps 10 to 1). The loops of the forward's steps are
// in textbook/*.cpp, module implementation units: editing one recompiles that one file.
// It imports mha.core alone: every product here is a loop nest a reader can follow, linear()
// included, and nothing of the platform, the engine or the API is named (the compiler keeps
// this interface to it; tests/layers_test.py keeps the .cpp bodies, which see all of mha).
// Its steps are in namespace mha::textbook, its helpers in mha::detail; the types a user
// passes to and gets from the module (Options, ForwardOptions, Output, ...) in mha.
//
// One module unit per layer, each file one idea: docs/building.md says why.
module;
#include "third_party.hpp"

export module mha:textbook;

import mha.core;

// check(), mha.core's helper, called unqualified by the files below.
namespace mha {
using detail::check;
}  // namespace mha

#include "textbook/random.hpp"
#include "textbook/versions.hpp"
#include "textbook/masks.hpp"
#include "textbook/attention.hpp"
#include "textbook/extra_keys.hpp"
#include "textbook/in_projection.hpp"
#include "textbook/options.hpp"
#include "textbook/inputs.hpp"
#include "textbook/parameters.hpp"
#include "textbook/generations.hpp"
#include "textbook/reference_forward.hpp"
#include "textbook/gradients.hpp"
#include "textbook/reference_backward.hpp"
