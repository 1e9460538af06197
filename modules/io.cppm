// modules/io.cppm — tensors and trained weights in files, for PyTorch's nn.MultiheadAttention.
//
// `import mha.io;` next to `import mha;` gives the files: NumPy's .npy, .safetensors,
// folders of .npy files named by state_dict keys, the attention layers of a trained
// model's checkpoint, and other model families' Q/K/V layouts. The module (mha) does not
// need any of it. Read the files in this order:
//   io/npy.hpp               NumPy .npy files: read (every header field checked), write
//   io/safetensors.hpp       .safetensors files: the header read once, each tensor from its
//                      offset when asked for; writing
//   io/npy_folder.hpp        a folder of .npy files named by state_dict keys
//   io/checkpoint.hpp        a .safetensors file or a .npy folder, opened by its headers
//   io/attention_layers.hpp  the nn.MultiheadAttention layers of a checkpoint or a state_dict:
//                      found by key prefix, their Options, loaded, split into Q, K, V
//   io/layouts.hpp           GPT-2, BERT, GPT-NeoX, Megatron, Llama, ONNX weights <-> [Q; K; V]
// Each name is a file of modules/io/ (io/npy.hpp is io/npy.hpp). Internal code is in namespace
// mha::detail, not exported: dtypes.hpp (one table of element types), file_bytes.hpp
// (reading by offset), npy_header.hpp and safetensors_header.hpp (each format's header,
// checked).
//
// One module unit, each file one idea: docs/building.md says why.
module;
#include "third_party.hpp"

export module mha.io;

import mha;
import mha.core;

// check(), mha.core's helper, called unqualified by the files below.
namespace mha {
using detail::check;
}  // namespace mha

#include "io/dtypes.hpp"
#include "io/file_bytes.hpp"
#include "io/npy_header.hpp"
#include "io/npy.hpp"
#include "io/safetensors_header.hpp"
#include "io/safetensors.hpp"
#include "io/npy_folder.hpp"
#include "io/checkpoint.hpp"
#include "io/attention_layers.hpp"
#include "io/layouts.hpp"
