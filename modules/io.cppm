// mha.io: tensors and trained weights in files, for PyTorch's nn.MultiheadAttention.
//
// `import mha.io;` next to `import mha;` gives the files: NumPy's .npy, .safetensors,
// folders of .npy files named by state_dict keys, the attention layers of a trained
// model's checkpoint, and other model families' Q/K/V layouts. The module (mha) does not
// need any of it. Read the files in this order:
//   :npy               NumPy .npy files: read (every header field checked), write
//   :safetensors       .safetensors files: the header read once, each tensor from its
//                      offset when asked for; writing
//   :npy_folder        a folder of .npy files named by state_dict keys
//   :checkpoint        a .safetensors file or a .npy folder, opened by its headers
//   :attention_layers  the nn.MultiheadAttention layers of a checkpoint or a state_dict:
//                      found by key prefix, their Options, loaded, split into Q, K, V
//   :layouts           GPT-2, BERT, GPT-NeoX, Megatron, Llama, ONNX weights <-> [Q; K; V]
// Each name is a file of modules/io/ (:npy is io/npy.hpp). Internal code is in namespace
// mha::detail, not exported: dtypes.hpp (one table of element types), file_bytes.hpp
// (reading by offset), npy_header.hpp and safetensors_header.hpp (each format's header,
// checked).
//
// One module unit, each file one idea: docs/building.md says why.
module;
#include "third_party.hpp"

export module mha.io;

import mha;

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
