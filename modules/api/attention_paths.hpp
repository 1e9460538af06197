// modules/api/attention_paths.hpp — every choice of path, in one file: the forward's, step
// 8's kernel on the engine, the backward's and the decoding step's.
//
// MultiheadAttention::forward() does steps 1 (the shapes) and 2 (the masks, made step 7's
// one mask in mask_preparation.hpp) itself, then calls attention_steps(), which asks choose_forward_path() for the path and runs it: the
// readable reference (modules/textbook/reference_forward.cpp) or the engine
// (modules/engine/engine.hpp), with choose_kernel()'s kernel for step 8. The functional
// form, a KV cache's step and forward_for_backward() end there too; backward() asks
// backward_steps(), a KV cache's step decodes_fast(). Each choice is one `if` with its
// reason; where the caller's path cannot run, the rule that overrides it is named
// (PathRule, textbook/options.hpp, which lists them). Every choice is made once per call,
// from sizes and flags: none reads a tensor but the fully-masked-row check, which only
// SDPA's safe softmax off the reference needs.
// PyTorch makes the same choices in MultiheadAttention.forward (its "fast path" checks) and
// in scaled_dot_product_attention's backend selection; the choices here are ours, the
// results are PyTorch's on every path. The body of attention_steps is in
// attention_paths.cpp, compiled once for float and double.
//
// The engine's kernel is chosen here and passed in (AttentionKernel, engine/engine.hpp):
// the engine's layer imports the platform and the textbook, never the API.
//
// Legend: L = target length, S = source length, S' = S with bias_k and the zero key,
// N = batch, H = heads.
//
// Included by modules/api.cppm, in its module purview: no module line of its own.
// Uses textbook/options.hpp, textbook/reference_backward.hpp, engine/engine.hpp, engine/engine_backward.hpp.

export namespace mha {

// What decides the path of one forward, besides the path asked for: its sizes and what it
// must keep or replay. choose_forward_path() reads nothing else.
struct PathFacts {
  AttentionPath requested = AttentionPath::automatic;
  bool need_weights = true;
  std::size_t L = 0, S = 0;         // S' (with bias_k and the zero key)
  bool fully_masked_row = false;    // SDPA's safe softmax, and a row no key may attend to
  bool keeps_record = false;        // forward_for_backward(): a record for backward()
  bool engine_keeps_record = true;  // something for the engine's GEMMs to multiply
  bool replays_dropout = false;     // ForwardOptions::dropout_mask given
};

// The path that runs, and the rule that decided it.
struct ForwardPath {
  AttentionPath path = AttentionPath::fast;
  PathRule rule = PathRule::as_requested;
};

}  // namespace mha

namespace mha::detail {

// The forward's path: the caller's, unless a rule of PathRule overrides it, in the order
// textbook/options.hpp lists them. A record's engine forward is fast's GEMMs
// (training_forward), so a record off the reference is reported as fast.
inline ForwardPath choose_forward_path(const PathFacts& f) {
  const AttentionPath asked = f.requested;
  // 2.x's SDPA gives a row that no key may attend to weight 0: the reference does
  // (zero_fully_masked_rows), the engine's kernels give NaN
  if (f.fully_masked_row && asked != AttentionPath::reference)
    return {AttentionPath::reference, PathRule::fully_masked_rows_take_the_reference};
  // a record for backward() off the reference: the engine's training_forward, fast's GEMMs
  if (f.keeps_record && asked != AttentionPath::reference) {
    // static_k/static_v or an empty size: nothing for training_forward to multiply
    if (!f.engine_keeps_record)
      return {AttentionPath::reference, PathRule::records_without_products_take_the_reference};
    // backward() needs the (N*H, L, S') softmax: fast's GEMMs keep it, memory_efficient never forms it
    if (asked != AttentionPath::fast) return {AttentionPath::fast, PathRule::records_keep_the_weights};
    return {AttentionPath::fast, PathRule::as_requested};
  }
  if (f.keeps_record) return {AttentionPath::reference, PathRule::as_requested};  // the reference keeps its own
  // memory_efficient never forms the weights: asking for both is the caller's mistake, said
  if (asked == AttentionPath::memory_efficient)
    check(!f.need_weights, "need_weights",
          "the memory_efficient attention path never forms the attention weights; expected need_weights=false "
          "with it, got need_weights=true (choose AttentionPath::fast, reference or automatic for the weights)");
  ForwardPath chosen{asked, PathRule::as_requested};
  if (asked == AttentionPath::automatic) {
    // One head's (L, S') scores above 4M entries (16 MiB in float) are worth not forming.
    const bool large = static_cast<double>(f.L) * static_cast<double>(f.S) > static_cast<double>(1 << 22);
    chosen = {!f.need_weights && large ? AttentionPath::memory_efficient : AttentionPath::fast,
              PathRule::automatic_by_size};
  }
  // a dropout mask to replay: the engine draws its own dropout inside its kernels
  if (f.replays_dropout && chosen.path != AttentionPath::reference)
    return {AttentionPath::reference, PathRule::dropout_replays_take_the_reference};
  return chosen;
}

// Step 8's kernel on the engine for the path chosen (engine.hpp's attend runs it).
template <class T>
AttentionKernel choose_kernel(AttentionPath path, const ForwardOptions<T>& opts, double dropout_p) {
  // memory_efficient: tiles and an online softmax, the (L, S') scores never formed
  if (path == AttentionPath::memory_efficient) return AttentionKernel::flash;
  // no weights asked for: each output row is divided by its sum, D entries instead of S'
  if (!opts.need_weights) return AttentionKernel::fast_without_weights;
  // the mean over heads added up as the heads go: the (N*H, L, S') weights never exist
  if (opts.average_attn_weights && dropout_p == 0) return AttentionKernel::fast_averaged;
  // with dropout, every head's weights first: the masks are drawn in the reference's order
  if (opts.average_attn_weights) return AttentionKernel::fast_then_averaged;
  return AttentionKernel::fast_per_head;
}

// Steps 3 to 10, after the shapes (step 1) and the masks (step 2, made step 7's one mask at
// S' by mask_preparation.hpp), on the path choose_forward_path() gives: the reference
// (textbook::reference_forward), the engine's training_forward when a record is kept, else
// the engine (Engine::forward). Every one takes the same mask.
template <class T>
Output<T> attention_steps(Engine<T>& engine, const Options& options, const textbook::Parameters<T>& params,
                          const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                          const Geometry& g, const textbook::MergedMask<T>& mask, const ForwardOptions<T>& opts,
                          const StaticKV<T>& statics, AttentionPath path, double dropout_p, Generator& generator,
                          SavedForward<T>* saved = nullptr);

// The backward's path. The reference asked for gives its step-by-step gradients
// (textbook/reference_backward.hpp), each allocated as PyTorch's autograd does; every other
// path the engine's GEMMs (engine/engine_backward.hpp), written into the storage of the
// gradients this thread let go last. Both read a record of either forward: no rule overrides.
template <class T>
textbook::Gradients<T> backward_steps(const Options& options, const textbook::Parameters<T>& params,
                                      const SavedForward<T>& saved, const xt::xarray<T>& grad_attn_output,
                                      const std::optional<xt::xarray<T>>& grad_attn_output_weights,
                                      AttentionPath path) {
  if (path == AttentionPath::reference)
    return textbook::reference_backward(options, params, saved, grad_attn_output, grad_attn_output_weights);
  return fast_backward(options, params, saved, grad_attn_output, grad_attn_output_weights);
}

// Whether a KV cache's step takes the engine's decode_step (engine/decode_step.hpp), which
// streams the weights once for all its rows where a GEMM would pack them first; otherwise
// the step runs attention_steps() with the cache as static_k and static_v, and the mask of
// cache_step_mask (mask_preparation.hpp). decode_step takes no mask: the step's one mask is
// causal, which decode_step applies as the bound of each position's keys, and a cache step
// has no other (KVCache::step takes none). A step with more would not decode fast.
inline bool decodes_fast(AttentionPath path, bool need_weights, double dropout_p, std::size_t rows) {
  // the reference asked for: every step readable
  if (path == AttentionPath::reference) return false;
  // decode_step forms no weights and draws no dropout
  if (need_weights || dropout_p != 0) return false;
  // one token of up to 16 sequences: beyond that a GEMM's packing pays for itself
  return rows <= 16;
}

}  // namespace mha::detail

export namespace mha::testing {

// For tests: the path a forward with these facts takes, and the rule that decided it
// (detail::choose_forward_path above, which every forward asks).
ForwardPath choose_forward_path(const PathFacts& facts) { return detail::choose_forward_path(facts); }

// For tests: a forward whose step 7's mask is given as it is, made by the test from the
// textbook's functions (textbook::merged_mask, add_per_query, add_per_key): a mask kind of
// the test's own, run through attention_steps above on the path asked for, as a module's
// forward runs (a record kept, with keep_record, and dropped). Dropout, with dropout_p,
// draws from a generator seeded with dropout_seed. docs/building.md, "Adding a mask kind".
template <class T>
Output<T> forward_with_mask(const Options& options, const textbook::Parameters<T>& params, const xt::xarray<T>& query,
                            const xt::xarray<T>& key, const xt::xarray<T>& value, const textbook::MergedMask<T>& mask,
                            const ForwardOptions<T>& opts, AttentionPath path, bool keep_record = false,
                            double dropout_p = 0, std::uint64_t dropout_seed = 0) {
  detail::validate(options);
  const detail::Geometry g = detail::geometry(query, key, value, opts, options);
  const std::size_t S_total = g.S + options.add_bias_kv + options.add_zero_attn;  // S'
  check(mask.L == g.L && mask.S == S_total && mask.H == detail::Sizes(options).H, "mask",
        "expected step 7's mask for L = {}, S' = {}, H = {}, got one for L = {}, S' = {}, H = {}", g.L, S_total,
        detail::Sizes(options).H, mask.L, mask.S, mask.H);
  const std::size_t B = g.N * mask.H;  // the batch-heads every path reads the mask's rows for
  if (mask.per_query)
    check((mask.per_query->shape(0) == 1 || mask.per_query->shape(0) == B) && mask.per_query->shape(1) == g.L &&
              mask.per_query->shape(2) == S_total,
          "mask", "expected a per_query part of shape (1 or {}, {}, {}), got {}", B, g.L, S_total,
          shape_string(mask.per_query->shape()));
  if (mask.per_key)
    check(mask.per_key->shape(0) == g.N && mask.per_key->shape(1) == S_total, "mask",
          "expected a per_key part of shape ({}, {}), got {}", g.N, S_total, shape_string(mask.per_key->shape()));
  detail::Engine<T> engine;
  Generator generator(dropout_seed);
  detail::SavedForward<T> saved;
  return detail::attention_steps(engine, options, params, query, key, value, g, mask, opts, detail::StaticKV<T>{}, path,
                                 dropout_p, generator, keep_record ? &saved : nullptr);
}

}  // namespace mha::testing
