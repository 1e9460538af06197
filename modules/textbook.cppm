// modules/textbook.cppm — multi_head_attention_forward and its backward, one idea per file.
//
// The readable reference of PyTorch's nn.MultiheadAttention, in reading order: random.hpp,
// versions.hpp, masks.hpp, attention.hpp, extra_keys.hpp, in_projection.hpp, options.hpp, inputs.hpp,
// parameters.hpp, generations.hpp, reference_forward.hpp (steps 3 to 10), gradients.hpp and
// reference_backward.hpp (the backward, steps 10 to 1). The loops of the forward's steps are
// in textbook/*.cpp, its implementation units (`module mha.textbook;`): editing one
// recompiles that one file.
// A module of its own, which imports mha.core alone: every product here is a loop nest a
// reader can follow, linear() included, and nothing of the platform, the engine or the API
// can be named, in this interface or in the .cpp bodies: the compiler refuses it (the test
// "layers: the compiler refuses a textbook unit that names ..." builds one that tries), and
// tests/layers_test.py keeps every textbook unit's imports to mha.core and its includes to
// the textbook's own files.
// Its steps are in namespace mha::textbook, its helpers in mha::detail; the types a user
// passes to and gets from the module (Options, ForwardOptions, Output, ...) in mha. mha
// re-exports it. Being another module, the engine and the API see only what it exports: the
// few helpers of mha::detail they call (Sizes, Geometry, SavedForward, masks_as, ...) are in
// `export namespace` blocks of their own, and docs/public-names.md lists them apart.
//
// One module unit per layer, each file one idea: docs/building.md says why.
module;
#include "third_party_xtensor.hpp"

export module mha.textbook;

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
