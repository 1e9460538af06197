// mha.io: tensors and trained weights in files, for PyTorch's nn.MultiheadAttention.
//
// `import mha.io;` next to `import mha;` gives the files: NumPy's .npy, .safetensors,
// folders of .npy files named by state_dict keys, the attention layers of a trained
// model's checkpoint, and other model families' Q/K/V layouts. The module (mha) does not
// need any of it. Read the partitions in this order:
//   :npy               NumPy .npy files: read (every header field checked), write
//   :safetensors       .safetensors files: the header read once, each tensor from its
//                      offset when asked for; writing
//   :npy_folder        a folder of .npy files named by state_dict keys
//   :checkpoint        a .safetensors file or a .npy folder, opened by its headers
//   :attention_layers  the nn.MultiheadAttention layers of a checkpoint or a state_dict:
//                      found by key prefix, their Options, loaded, split into Q, K, V
//   :layouts           GPT-2, BERT, GPT-NeoX, Megatron, Llama, ONNX weights <-> [Q; K; V]
// Internal code is in namespace mha::detail, in implementation partitions that are not
// exported: :dtypes (one table of element types), :file_bytes (reading by offset),
// :npy_header and :safetensors_header (each format's header, checked). The exported
// templates call only functions of those partitions, and name none of their classes: a
// template is instantiated in the importer's code, where clang 16 cannot complete a class
// defined in an implementation partition.
export module mha.io;

export import :npy;
export import :safetensors;
export import :npy_folder;
export import :checkpoint;
export import :attention_layers;
export import :layouts;
