// modules/api/functional.hpp — torch.nn.functional.multi_head_attention_forward, argument for argument.
//
// The function the module calls (torch/nn/functional.py, PyTorch 1.13.1): every tensor the
// module keeps as a parameter is an argument here, each optional on its own
// (in_proj_bias=None, out_proj_bias=None), and it has two arguments the module never
// passes: static_k and static_v, keys and values already projected and split into heads,
// (N*H, S, D), that replace k and v after the in-projection. That is how a KV cache is fed
// to PyTorch's attention (kv_cache.hpp). This file is the arguments and their checks only:
// steps 3 to 10 are attention_steps (attention_paths.hpp), as for MultiheadAttention::forward.
//
// This interface declares; the bodies are in functional.cpp, compiled for float and double.
//
// Legend: L = target length, S = source length (static_k's when given), N = batch,
// E = embed_dim, H = heads, D = head_dim = E / H, B = N*H, Ek = kdim, Ev = vdim.
//
// Included by modules/api.cppm, in its module purview: no module line of its own.
// Uses mha.core, textbook/random.hpp, textbook/options.hpp, textbook/masks.hpp, attention_paths.hpp.

export namespace mha {

// The arguments of F.multi_head_attention_forward after query, key and value, under
// their names and in their order, so that designated initialisers read as the Python call:
//
//   mha::multi_head_attention_forward(query, key, value, {.embed_dim_to_check = E,
//       .num_heads = H, .in_proj_weight = &w, .in_proj_bias = &b, .out_proj_weight = &w_o});
//
// A tensor is a pointer: nullptr is Python's None, and nothing is copied (a KV cache is
// passed as it is). The arguments that have no default in Python (embed_dim_to_check
// to out_proj_bias) get here the value that means "none" or "off"; out_proj_weight must
// still be given, as in PyTorch.
template <class T>
struct FunctionalArguments {
  std::int64_t embed_dim_to_check = 0;
  std::int64_t num_heads = 0;
  const xt::xarray<T>* in_proj_weight = nullptr;  // (3E, E), unless use_separate_proj_weight
  const xt::xarray<T>* in_proj_bias = nullptr;    // (3E)
  const xt::xarray<T>* bias_k = nullptr;          // (1, 1, E), with bias_v
  const xt::xarray<T>* bias_v = nullptr;          // (1, 1, E), with bias_k
  bool add_zero_attn = false;
  double dropout_p = 0.0;
  const xt::xarray<T>* out_proj_weight = nullptr;  // (E, E): required
  const xt::xarray<T>* out_proj_bias = nullptr;    // (E)
  bool training = true;                            // dropout only in training, as PyTorch's default
  const Mask<T>* key_padding_mask = nullptr;       // (N, S), or (S) unbatched; True = padding
  bool need_weights = true;
  const Mask<T>* attn_mask = nullptr;  // (L, S) or (N*H, L, S): S is the key's length, not static_k's
  bool use_separate_proj_weight = false;
  const xt::xarray<T>* q_proj_weight = nullptr;  // (E, E), with use_separate_proj_weight
  const xt::xarray<T>* k_proj_weight = nullptr;  // (E, Ek)
  const xt::xarray<T>* v_proj_weight = nullptr;  // (E, Ev)
  const xt::xarray<T>* static_k = nullptr;       // (N*H, S_static, D), or (H, S_static, D) unbatched
  const xt::xarray<T>* static_v = nullptr;       // (N*H, S_static, D), or (H, S_static, D) unbatched
  bool average_attn_weights = true;
};

// F.multi_head_attention_forward(query, key, value, ...): query (L, N, E) sequence-first,
// or (L, E) unbatched; key (S, N, Ek), value (S, N, Ev). Returns attn_output (L, N, E) and,
// with need_weights, attn_output_weights (N, L, S') averaged or (N, H, L, S') per head,
// where S' counts static_k, bias_k and the zero key. PyTorch's checks and rejections, each
// an mha::Error naming the argument. `path` picks the implementation (every one gives
// PyTorch's results); dropout in training draws from `generator`, which must then be given.
template <class T>
Output<T> multi_head_attention_forward(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                                       const FunctionalArguments<T>& args,
                                       AttentionPath path = AttentionPath::automatic, Generator* generator = nullptr);

}  // namespace mha
