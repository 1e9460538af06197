// modules/mha.cppm — PyTorch's torch.nn.MultiheadAttention, from scratch, one idea per file.
//
// Where to start: MultiheadAttention::forward() (api/multihead_attention.hpp). Its body,
// shared with forward_for_backward(), does two steps itself, the shapes (1) and the masks
// (2), and makes one call, attention_steps() (api/attention_paths.hpp), which runs steps 3 to
// 10 on the path chosen there: the readable reference, textbook::reference_forward
// (textbook/reference_forward.cpp), whose numbered steps each call the textbook file that
// teaches them, or the engine. The comment above forward() numbers the route to the
// weights. The machine underneath and the engine can be skipped at first.
//
// `import mha;` gives what a user calls in namespace mha (the module, the functional form,
// KVCache, the settings, the errors: docs/public-names.md lists them), the textbook's steps
// in namespace mha::textbook, the few textbook helpers of mha::detail that the engine and
// the API call (exported to them, as the textbook is a module of its own), and of the engine
// one test hook, mha::testing::lane_sums. Files are in two modules of their own: mha.io
// (.npy and .safetensors files, checkpoints, their attention layers, other models' weight
// layouts) and mha.golden (PyTorch's golden cases, and checking them).
//
// Four layers, one module unit each, each including its files in reading order
// (docs/building.md has the figures of why). The textbook is a module of its own, so that the
// compiler keeps every textbook file to mha.core; the platform, the engine and the API are
// partitions of mha:
//   mha.error     (error.cppm) mha::Error, the one exception type, and shape_string; a module
//                 of its own, re-exported here
//   mha.core      (core.cppm) mha.error and check(), the helper that throws it; a module of its
//                 own, which every layer imports and mha does not re-export
//   mha.textbook  (textbook.cppm, textbook/) the readable reference; a module of its own,
//                 which imports mha.core alone, and which mha re-exports
//     random.hpp              a seedable generator for initialisation and dropout
//     versions.hpp            which generation of PyTorch the library behaves as: 1.13 or 2.x
//     masks.hpp               bool and float masks, causal masks, padding, merging (step 2), step 7's mask
//     attention.hpp           heads, scaling, softmax, dropout, scaled dot-product attention
//     extra_keys.hpp          add_bias_kv: bias_k and bias_v appended as one more key
//     in_projection.hpp       the packed (3E, E) in_proj_weight: split, pack, project; linear
//     options.hpp             the module's and forward's arguments, forward's output, the paths
//     inputs.hpp              the inputs' shapes and layouts (step 1), the caller's layout (step 10)
//     parameters.hpp          the parameters by state_dict name, their initialisation and version
//     generations.hpp         what PyTorch 1.13 and 2.x each do with the same call: paths, masks
//     reference_forward.hpp   multi_head_attention_forward, steps 3 to 10, one tensor per step
//     gradients.hpp           the backward of each step: linear, softmax, dropout, heads, ...
//     reference_backward.hpp  the gradients of a forward, steps 10 to 1 in reverse
//   mha:platform  (platform.cppm, platform/) the machine underneath
//     cpu.hpp                 what this CPU runs: SSE2, AVX, AVX2 + FMA, AVX-512; every kernel's dispatcher
//     threads.hpp             set_num_threads: the library's own pool of threads
//     workspace.hpp           the fast paths' buffers per thread, capped and releasable
//     blas.hpp                which OpenBLAS kernel runs the GEMMs; use_best_blas_kernel
//     gemm_library.hpp        oneDNN or OpenBLAS for the float GEMMs, and why oneDNN
//     packed_linear.hpp       a float linear layer on oneDNN's matmul, W^T reordered once
//     linear.hpp              the one GEMM entry point, and y = x W^T + b on it
//   mha:engine    (engine.cppm, engine/) the fast paths, all in namespace mha::detail
//     attention_problem.hpp   heads as strided views, masks as given: what the kernels solve
//     softmax_kernels.hpp     the engine's one softmax family: weights, exponentials, online
//     attention_tiles.hpp     a head's two products on AVX-512 registers, k and v copied once
//     fast_attention.hpp      every batch-head as two GEMMs and one softmax pass
//     flash_attention.hpp     tiles and an online softmax, the weights never formed
//     decode_weights.hpp      the decoding step's copy of the weights, four rows as one stream
//     engine.hpp              the fast forward: buffers, W^T, the fewest GEMMs, steps 3 to 10
//     engine_backward.hpp     the fast backward: GEMMs over strided heads, from a saved forward
//     training_forward.hpp    forward_for_backward() on the engine: its GEMMs, the reference's record
//     decode_step.hpp         one decoding step with a KV cache, at the speed of reading its bytes
//   mha:api       (api.cppm, api/) what a PyTorch user calls
//     attention_paths.hpp     every choice of path, each rule that overrides one; steps 3 to 10
//     pytorch_paths.hpp       which code of PyTorch runs a call: its native fast path or not
//     functional.hpp          F.multi_head_attention_forward itself, argument for argument
//     mask_preparation.hpp    PyTorch's mask arguments made step 7's one mask, in one place
//     multihead_attention.hpp the module: parameters, train/eval, forward, backward
//     kv_cache.hpp            decoding one token at a time: the keys and values kept, a step
// The engine's layer exports one name, mha::testing::lane_sums, for the tests; nothing else.
// It is re-exported because every interface partition must be, because the tests call that
// name, and because MultiheadAttention, which holds an Engine, can then be copied outside
// the module.
export module mha;

export import mha.error;
export import :platform;
// A module of its own, not a partition: re-exported, it gives the same names as one would.
export import mha.textbook;
// The engine exports one name, mha::testing::lane_sums, for the tests; nothing else. It is
// re-exported because every interface partition must be, and because MultiheadAttention,
// which holds one, needs its definition reachable.
export import :engine;
export import :api;
