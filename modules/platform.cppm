// modules/platform.cppm — the machine underneath: which kernels run, on which threads, in which buffers.
//
// The CPU's vector instruction sets and the one dispatcher that runs each engine kernel at
// the best of them (cpu.hpp), which OpenBLAS kernel runs (blas.hpp), oneDNN
// or OpenBLAS for the float GEMMs (gemm_library.hpp), the library's pool of threads
// (threads.hpp), the fast paths' buffers (workspace.hpp), a float linear layer on oneDNN's
// matmul with its weight reordered once (packed_linear.hpp, internal), and the one GEMM entry
// point that every linear layer calls (linear.hpp, internal). Nothing here knows of attention.
//
// One module unit per layer, each file one idea: docs/building.md says why.
module;
#include "third_party_xtensor.hpp"
#if MHA_ONEDNN
#include <dnnl.h>    // gemm_library.hpp
#include <dnnl.hpp>  // packed_linear.hpp
#endif

export module mha:platform;

import mha.core;

// check(), mha.core's helper, called unqualified by the files below.
namespace mha {
using detail::check;
}  // namespace mha

#include "platform/cpu.hpp"
#include "platform/threads.hpp"
#include "platform/workspace.hpp"
#include "platform/blas.hpp"
#include "platform/gemm_library.hpp"
#include "platform/packed_linear.hpp"
#include "platform/linear.hpp"
