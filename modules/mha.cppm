// mha: PyTorch's torch.nn.MultiheadAttention, from scratch, one idea per file.
//
// Where to start: MultiheadAttention::forward() in :multihead_attention, then the reference
// forward it calls (reference_forward.cpp), whose numbered steps each call the file
// that teaches them. The machine underneath and the engine can be skipped at first.
//
// `import mha;` gives the module and what it is made of. Files are in two modules of
// their own: mha.io (.npy and .safetensors files, checkpoints, their attention layers,
// other models' weight layouts) and mha.golden (PyTorch's golden cases, and checking
// them). The textbook, in reading order:
//   mha.core             mha::Error, the one exception type of the library (a module
//                        of its own, re-exported here)
//   :random              a seedable generator for initialisation and dropout
//   :in_projection       the packed (3E, E) in_proj_weight: split, pack, project
//   :masks               bool and float masks, causal masks, padding, merging (step 2)
//   :attention           heads, scaling, softmax, dropout, scaled dot-product attention
//   :extra_keys          add_bias_kv: bias_k and bias_v appended as one more key
//   :options             the module's and forward's arguments, forward's output, the paths
//   :inputs              the inputs' shapes and layouts (step 1), the caller's layout (step 10)
//   :parameters          the parameters by state_dict name, and their initialisation
//   :reference_forward   multi_head_attention_forward, steps 3 to 10, one tensor per step
//   :functional          F.multi_head_attention_forward itself, argument for argument:
//                        static_k/static_v, each bias optional, separate weights
//   :gradients           the backward of each step: linear, softmax, dropout, heads, ...
//   :reference_backward  the gradients of a forward, steps 10 to 1 in reverse
//   :multihead_attention the module: parameters, train/eval, a forward that picks a path,
//                        backward
//   :kv_cache            decoding one token at a time: the keys and values kept, a step
// The machine underneath:
//   :cpu                 what this CPU runs: SSE2, AVX, AVX2 + FMA, AVX-512
//   :blas                which OpenBLAS kernel runs the GEMMs; use_best_blas_kernel
//   :gemm_library        oneDNN or OpenBLAS for the float GEMMs, and why oneDNN
//   :threads             set_num_threads: the library's own pool of threads
//   :workspace           the fast paths' buffers per thread, capped and releasable
//
// The engine behind AttentionPath::fast and memory_efficient is internal, all of it in
// namespace mha::detail, none of it exported (its layer is re-exported only so that
// MultiheadAttention, which holds an Engine, can be copied outside the module):
//   :engine              the fast forward: buffers, W^T, the fewest GEMMs, steps 3 to 10
//   :engine_backward     the fast backward: GEMMs over strided heads, from a saved forward
//   :training_forward    forward_for_backward() on the engine: its GEMMs, the reference's record
//   :fast_attention      every batch-head as two GEMMs and one softmax pass
//   :flash_attention     tiles and an online softmax, the weights never formed
//   :softmax_kernels     the softmax row kernels and the SIMD level they run at
//   :attention_tiles     a head's two products on AVX-512 registers, k and v copied once
//   :attention_problem   heads as strided views, masks as given: what the kernels solve
//   :packed_linear       a float linear layer on oneDNN's matmul, W^T reordered once
//   :linear              the one GEMM entry point, and y = x W^T + b on it
//
// Each name above is one file, :attention being textbook/attention.hpp. The files are in
// four layers, each one module partition that includes its files, each file after those it
// uses: mha:platform (modules/platform/: :cpu to :workspace, :packed_linear and :linear), mha:textbook
// (modules/textbook/), mha:engine (modules/engine/) and mha:api (modules/api/: :functional,
// :multihead_attention, :kv_cache). docs/building.md has the figures of why.
export module mha;

export import mha.core;
export import :platform;
export import :textbook;
// The engine exports no name; it is re-exported because every interface partition must be,
// and because MultiheadAttention, which holds one, needs its definition reachable.
export import :engine;
export import :api;
