// mha: PyTorch's torch.nn.MultiheadAttention, from scratch, one idea per partition.
//
// `import mha;` gives the module and what it is made of. Files are in two modules of
// their own: mha.io (.npy and .safetensors files, checkpoints, their attention layers,
// other models' weight layouts) and mha.golden (PyTorch's golden cases, and checking
// them). Read the partitions in this order:
//   :error                 mha::Error, the one exception type of the library
//   :cpu                   what this CPU runs: SSE2, AVX, AVX2 + FMA, AVX-512
//   :blas                  which OpenBLAS kernel runs the GEMMs: the best this CPU runs
//   :random                a seedable generator for initialisation and dropout
//   :in_projection         the packed (3E, E) in_proj_weight: split, pack, project
//   :masks                 bool and float masks, causal masks, padding and merging
//   :attention             heads, softmax, dropout, scaled dot-product attention
//   :threads               set_num_threads: the library's threads, OpenBLAS's held to one
//   :multihead_attention   the module itself: parameters, initialisation, forward
//   :fast_attention        (internal) the fast path: GEMMs on strided views, fused softmax
//   :flash_attention       (internal) the memory-efficient path: tiles, online softmax
// Internal helpers (BLAS calls, shape checks) live in :detail, which is not exported.
export module mha;

export import :error;
export import :cpu;
export import :blas;
export import :random;
export import :in_projection;
export import :masks;
export import :threads;
export import :attention;
export import :multihead_attention;
