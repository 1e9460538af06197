// modules/textbook/options.hpp — what torch.nn.MultiheadAttention(...) and its forward(...) take and give.
//
// Options are the constructor's arguments, ForwardOptions the forward's arguments after
// query, key and value, Output its return value (attn_output, attn_output_weights).
// AttentionPath picks which implementation runs a forward: every one gives PyTorch's
// results (docs/performance.md shows what each costs); PathRule names the rule that
// overrides it when it cannot.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads.
//
// Included by modules/textbook.cppm, in its module purview: no module line of its own.
// Uses mha.core, versions.hpp, masks.hpp.

export namespace mha {

// The arguments of torch.nn.MultiheadAttention(...).
struct Options {
  std::int64_t embed_dim = 0;
  std::int64_t num_heads = 0;
  double dropout = 0.0;
  bool bias = true;
  bool add_bias_kv = false;
  bool add_zero_attn = false;
  std::optional<std::int64_t> kdim;  // none: embed_dim
  std::optional<std::int64_t> vdim;  // none: embed_dim
  bool batch_first = false;
  // Keep q/k/v_proj_weight separate even when kdim == vdim == embed_dim.
  bool separate_projections = false;
  // Behave as PyTorch 1.13 or as PyTorch 2.x where the two differ (versions.hpp).
  PyTorchVersion pytorch = PyTorchVersion::v2;
};

// The arguments of MultiheadAttention.forward(...) after query, key and value.
template <class T>
struct ForwardOptions {
  std::optional<Mask<T>> key_padding_mask;  // (N, S), or (S) unbatched; True = padding
  bool need_weights = true;
  std::optional<Mask<T>> attn_mask;  // (L, S) or (N*H, L, S); unbatched (L, S) or (H, L, S)
  bool average_attn_weights = true;
  bool is_causal = false;  // a hint that attn_mask is the causal mask; needs attn_mask
  // Replays a dropout instead of drawing one: (N*H, L, S'), True = kept, S' = S + add_bias_kv
  // + add_zero_attn. Only in training with dropout > 0 (an error otherwise: there would be
  // nothing to replay); kept weights are scaled by 1 / (1 - p), as PyTorch's dropout does.
  std::optional<xt::xtensor<bool, 3>> dropout_mask;
  // False: the call runs as PyTorch's under torch.no_grad() or torch.inference_mode(), where
  // the module may take its native fast path (generations.hpp). True: parameters that
  // require grad, as a module's do, and the slow path.
  bool grad_enabled = true;
};

// What forward returns: attn_output, and attn_output_weights when need_weights.
template <class T>
struct Output {
  xt::xarray<T> attn_output;                         // (L, N, E), (N, L, E) or (L, E)
  std::optional<xt::xarray<T>> attn_output_weights;  // (N, L, S) or (N, H, L, S); unbatched without N
  std::vector<Warning> warnings;                     // what PyTorch would warn of this call (versions.hpp)
};

// A name -> tensor map, keyed by PyTorch's state_dict names.
template <class T>
using StateDict = std::map<std::string, xt::xarray<T>>;

// How forward() computes the attention. All give PyTorch's results; they differ in speed,
// memory and how much of the computation a reader can follow:
//   reference         one readable loop nest per step, every intermediate of PyTorch's
//                     multi_head_attention_forward materialised (reference_forward.hpp; the
//                     tutorials' path);
//   fast              BLAS GEMMs on strided views of the projection buffers, mask and
//                     softmax in one pass, batch-heads on threads (mha:engine);
//   memory_efficient  tiles and an online softmax, the (N*H, L, S) weights never formed
//                     (engine/flash_attention.hpp); only with need_weights=false, else mha::Error;
//   automatic         memory_efficient when need_weights=false and a head's (L, S) scores
//                     exceed 4M entries, fast otherwise. The default.
// The path asked for runs unless it cannot give PyTorch's results; then one rule overrides
// it, and PathRule names it. choose_forward_path (api/attention_paths.hpp) applies them in
// this order, each one `if`, and says which decided (mha::testing::choose_forward_path asks it):
//   fully_masked_rows_take_the_reference         2.x's SDPA gives a query row that may attend
//       to no key weight 0 ("safe softmax"); the reference does, the engine's kernels give NaN
//   records_without_products_take_the_reference  forward_for_backward() with static_k/static_v
//       or an empty size: nothing for the engine's GEMMs to multiply
//   records_keep_the_weights                     forward_for_backward() off the reference keeps
//       the (N*H, L, S') softmax for backward(): fast's GEMMs (engine/training_forward.hpp),
//       for automatic and memory_efficient too
//   dropout_replays_take_the_reference           a dropout mask to replay: the engine draws
//       its own dropout inside its kernels
// Otherwise the rule is as_requested, or automatic_by_size when automatic was resolved.
// memory_efficient with need_weights=true is the caller's error (mha::Error), not overridden.
enum class AttentionPath { automatic, reference, fast, memory_efficient };

// Which rule decided the path of a forward (see AttentionPath).
enum class PathRule {
  as_requested,
  automatic_by_size,
  fully_masked_rows_take_the_reference,
  records_without_products_take_the_reference,
  records_keep_the_weights,
  dropout_replays_take_the_reference
};

}  // namespace mha

// Exported for the API and the engine, which call both: they are outside mha.textbook, and
// see only what it exports (docs/public-names.md lists these helpers apart from the API).
export namespace mha::detail {

// The checks of MultiheadAttention.__init__, with its messages.
void validate(const Options& options) {
  check(options.embed_dim > 0 && options.num_heads > 0, "embed_dim, num_heads",
        "embed_dim and num_heads must be greater than 0, got embed_dim={} and num_heads={} instead", options.embed_dim,
        options.num_heads);
  check(options.embed_dim % options.num_heads == 0, "embed_dim",
        "embed_dim must be divisible by num_heads, got embed_dim={} and num_heads={}", options.embed_dim,
        options.num_heads);
  check(options.kdim.value_or(1) > 0, "kdim", "kdim must be greater than 0, got {}", options.kdim.value_or(0));
  check(options.vdim.value_or(1) > 0, "vdim", "vdim must be greater than 0, got {}", options.vdim.value_or(0));
  check(options.dropout >= 0.0 && options.dropout <= 1.0, "dropout",
        "dropout probability has to be between 0 and 1, but got {}", options.dropout);
}

// The sizes that Options give, as unsigned numbers. Only for validated Options.
struct Sizes {
  std::size_t E, H, D, kdim, vdim;
  explicit Sizes(const Options& o)
      : E(static_cast<std::size_t>(o.embed_dim)),
        H(static_cast<std::size_t>(o.num_heads)),
        D(E / H),
        kdim(static_cast<std::size_t>(o.kdim.value_or(o.embed_dim))),
        vdim(static_cast<std::size_t>(o.vdim.value_or(o.embed_dim))) {}
};

}  // namespace mha::detail
