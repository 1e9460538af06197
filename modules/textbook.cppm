// mha:textbook — multi_head_attention_forward and its backward, one idea per file.
//
// The readable reference of PyTorch's nn.MultiheadAttention, in reading order: random.hpp,
// versions.hpp, masks.hpp, attention.hpp, extra_keys.hpp, in_projection.hpp, options.hpp, inputs.hpp,
// parameters.hpp, generations.hpp, reference_forward.hpp (steps 3 to 10), gradients.hpp and
// reference_backward.hpp (the backward, steps 10 to 1). The loops of the forward's steps are
// in textbook/*.cpp, module implementation units: editing one recompiles that one file.
// It imports the platform only for linear(), the GEMM that a projection is.
//
// One module unit per layer, each file one idea: docs/building.md says why.
module;
#include "third_party.hpp"

export module mha:textbook;

import mha.core;
import :platform;

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
