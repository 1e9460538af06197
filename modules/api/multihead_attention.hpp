// modules/api/multihead_attention.hpp — the module: torch.nn.MultiheadAttention in C++.
//
// Holds the options and the parameters under PyTorch's state_dict names (textbook/parameters.hpp),
// and runs MultiheadAttention.forward of torch/nn/modules/activation.py: forward() checks
// the shapes (step 1, textbook/inputs.hpp), prepares the masks (step 2, textbook/masks.hpp) and hands steps 3 to
// 10 to the path chosen: the readable reference (textbook/reference_forward.hpp), numbered as
// torch/nn/functional.py's multi_head_attention_forward, or the fast engine (mha:engine).
// backward() gives the gradients of a forward run by forward_for_backward(), as PyTorch's
// autograd computes them: step by step (textbook/reference_backward.hpp) or by GEMMs (engine/engine_backward.hpp).
// Every one of these choices of path is made in attention_paths.hpp, none here.
//
// Two variants, as in PyTorch:
//   packed    in_proj_weight (3E, E) = [W_q; W_k; W_v], used when kdim == vdim == E;
//   separate  q_proj_weight (E, E), k_proj_weight (E, kdim), v_proj_weight (E, vdim):
//             three independent projections, forced when kdim or vdim differs from E
//             and available on request (Options::separate_projections) otherwise.
// in_proj_bias (3E) = [b_q; b_k; b_v] is packed in both.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads,
// D = head_dim = E / H.
//
// Included by modules/api.cppm, in its module purview: no module line of its own.
// Uses mha.core, textbook/random.hpp, platform/threads.hpp, textbook/options.hpp, textbook/parameters.hpp, textbook/in_projection.hpp, textbook/inputs.hpp, textbook/masks.hpp, textbook/attention.hpp, textbook/reference_forward.hpp, functional.hpp, textbook/reference_backward.hpp, mha:engine, platform/linear.hpp, engine/engine_backward.hpp.

export namespace mha {

template <class T>
class MultiheadAttention;
template <class T>
class KVCache;

// What backward() needs from one forward: made by MultiheadAttention::forward_for_backward,
// read by its backward(), opaque to everyone else (so it always holds a forward's tensors
// as that forward made them). It names the weights it was made with: backward() refuses
// a record of another module, or of parameters since changed.
template <class T>
class ForwardRecord {
public:
  bool need_weights() const { return saved_.need_weights; }
  // (N*H, L, S'), True = kept: the dropout this forward applied; none without dropout.
  const std::optional<xt::xtensor<bool, 3>>& dropout_mask() const { return saved_.dropout_mask; }

  ForwardRecord(const ForwardRecord&) = default;
  ForwardRecord(ForwardRecord&&) noexcept = default;
  ForwardRecord& operator=(const ForwardRecord&) = default;
  ForwardRecord& operator=(ForwardRecord&&) noexcept = default;
  // Its tensors go to the thread's buffers, for the next training forward to reuse.
  ~ForwardRecord() { detail::keep_spare_record(std::move(saved_)); }

private:
  friend class MultiheadAttention<T>;
  ForwardRecord() = default;
  std::uint64_t weights_version_ = 0;
  detail::SavedForward<T> saved_;
};

// What backward() returns: dL/d(input) per distinct input object, in the caller's layout
// (as PyTorch's x.grad: self-attention has only `query`, the sum over its three uses;
// key is value has `query` and `key`), and dL/d(parameter) by state_dict name:
// g.query, g.key, g.value, g.parameters["in_proj_weight"], ... (textbook::Gradients' tensors).
// Gradients let go, or assigned over, leave their tensors to the thread's buffers, for the
// next backward of the same sizes to write into (engine/engine_backward.hpp): a training loop
// then touches no fresh memory for them.
template <class T>
struct Gradients : textbook::Gradients<T> {
  Gradients() = default;
  explicit Gradients(textbook::Gradients<T>&& gradients) noexcept : textbook::Gradients<T>(std::move(gradients)) {}
  Gradients(const Gradients&) = default;
  Gradients(Gradients&&) noexcept = default;
  Gradients& operator=(const Gradients&) = default;
  Gradients& operator=(Gradients&& other) noexcept {
    if (this != &other) {
      detail::keep_spare_gradients(std::move(tensors()));
      tensors() = std::move(other.tensors());
    }
    return *this;
  }
  ~Gradients() { detail::keep_spare_gradients(std::move(tensors())); }

private:
  textbook::Gradients<T>& tensors() { return *this; }
};

template <class T>
class MultiheadAttention {
public:
  // Parameters are initialised as PyTorch's _reset_parameters does, from `generator`;
  // then the dropout generator is seeded from it too, so that layers made one after the
  // other from one generator draw different dropout masks (as from PyTorch's global one).
  MultiheadAttention(const Options& options, Generator& generator) : options_(validated(options)), params_(options_) {
    params_.reset(generator);
    dropout_generator_.seed(generator.next_seed());
  }
  explicit MultiheadAttention(const Options& options, std::uint64_t seed = 0)
      : options_(validated(options)), params_(options_), dropout_generator_(seed) {
    Generator generator(seed);
    params_.reset(generator);
  }

  const Options& options() const { return options_; }
  std::size_t embed_dim() const { return detail::Sizes(options_).E; }
  std::size_t num_heads() const { return detail::Sizes(options_).H; }
  std::size_t head_dim() const { return detail::Sizes(options_).D; }
  std::size_t kdim() const { return detail::Sizes(options_).kdim; }
  std::size_t vdim() const { return detail::Sizes(options_).vdim; }
  // PyTorch's _qkv_same_embed_dim: true when the packed in_proj_weight is possible.
  bool qkv_same_embed_dim() const { return kdim() == embed_dim() && vdim() == embed_dim(); }
  // True when the parameters hold in_proj_weight; false for q/k/v_proj_weight.
  bool packed() const { return params_.packed; }

  // Training mode (dropout on) or evaluation mode, as nn.Module.train() / eval().
  // A new module is in training mode, as in PyTorch.
  void train(bool mode = true) { training_ = mode; }
  void eval() { training_ = false; }
  bool training() const { return training_; }
  // Seeds the generator that training-mode dropout draws from, under the lock that the
  // forwards drawing from it take: the next dropout masks are then those of this seed.
  void seed_dropout(std::uint64_t seed) {
    const std::lock_guard<std::mutex> lock(dropout_mutex_.mutex);
    dropout_generator_.seed(seed);
  }

  // A number that changes at every change of the parameters and that no other state of
  // any module's parameters has had: equal numbers mean equal weights (a cache's key).
  std::uint64_t weights_version() const { return params_.version(); }

  // ---- parameters, by PyTorch's state_dict names -----------------------------------

  // The state_dict keys, in PyTorch's order.
  std::vector<std::string> parameter_names() const { return params_.names(); }

  // The shape PyTorch gives the parameter `name`.
  std::vector<std::size_t> parameter_shape(std::string_view name) const {
    const std::size_t E = embed_dim();
    if (name == "in_proj_weight") {
      const auto shape = textbook::in_proj_weight_shape(E);  // (3E, E)
      return {shape.begin(), shape.end()};
    }
    if (name == "q_proj_weight" || name == "out_proj.weight") return {E, E};
    if (name == "k_proj_weight") return {E, kdim()};
    if (name == "v_proj_weight") return {E, vdim()};
    if (name == "in_proj_bias") return {3 * E};
    if (name == "out_proj.bias") return {E};
    if (name == "bias_k" || name == "bias_v") return {1, 1, E};
    throw Error(fmt::format("name: unknown parameter '{}'", name));
  }

  xt::xarray<T> parameter(std::string_view name) const { return params_.get(name); }

  // Sets one parameter; its shape must be PyTorch's. Nothing is reshaped or cast.
  void set_parameter(std::string_view name, const xt::xarray<T>& value) { params_.set(name, value); }

  StateDict<T> state_dict() const {
    StateDict<T> dict;
    for (const auto& name : parameter_names()) dict.emplace(name, parameter(name));
    return dict;
  }

  // As nn.Module.load_state_dict(strict=True): every name must be known and present.
  void load_state_dict(const StateDict<T>& dict) {
    const auto names = parameter_names();
    for (const auto& [name, _] : dict)
      check(std::find(names.begin(), names.end(), name) != names.end(), "state_dict",
            "unexpected key '{}' (expected keys: {})", name, fmt::join(names, ", "));
    for (const auto& name : names) check(dict.contains(name), "state_dict", "missing key '{}'", name);
    for (const auto& name : names) set_parameter(name, dict.at(name));
  }

  // ---- the two variants --------------------------------------------------------------

  // The projections as three separate weights and biases, whichever variant this is.
  SeparateProjections<T> separate_projections() const { return params_.separate_projections(); }

  // The same module with three separate projections (the packed weight split into rows).
  MultiheadAttention to_separate() const { return converted(/*packed=*/false); }

  // The same module with the packed in_proj_weight; an error unless kdim == vdim == E.
  MultiheadAttention to_packed() const {
    check(qkv_same_embed_dim(), "kdim, vdim",
          "cannot pack: in_proj_weight needs kdim == vdim == embed_dim = {}, got kdim = {}, vdim = {}", embed_dim(),
          kdim(), vdim());
    return converted(/*packed=*/true);
  }

  // ---- forward -----------------------------------------------------------------------

  // The in-projection on sequence-first batched inputs, as multi_head_attention_forward
  // computes it before bias_k/bias_v: q (L, N, E), k (S, N, E), v (S, N, E).
  textbook::QKV<T> in_projection(const xt::xtensor<T, 3>& query, const xt::xtensor<T, 3>& key,
                                 const xt::xtensor<T, 3>& value,
                                 textbook::Aliasing aliasing = textbook::Aliasing::none) const {
    return params_.in_projection(query, key, value, aliasing);
  }

  // q, k and v exactly as forward() computes them from these inputs (steps 1 and 3).
  textbook::QKV<T> in_projection(const xt::xarray<T>& query, const xt::xarray<T>& key,
                                 const xt::xarray<T>& value) const {
    const detail::Geometry g = detail::geometry(query, key, value, ForwardOptions<T>{}, options_);
    const bool batch_first = options_.batch_first && g.batched;
    auto seq_first = [batch_first](const xt::xarray<T>& x) { return textbook::to_seq_first_batched(x, batch_first); };
    return params_.in_projection(seq_first(query), seq_first(key), seq_first(value), g.aliasing);
  }

  // Which implementation forward() runs; every one gives PyTorch's results (see AttentionPath).
  void set_attention_path(AttentionPath path) { attention_path_ = path; }
  AttentionPath attention_path() const { return attention_path_; }

  // The path forward() takes for these sizes (S counts bias_k and the zero key), when no rule
  // of PathRule overrides it (choose_forward_path, attention_paths.hpp).
  AttentionPath resolved_attention_path(bool need_weights, std::size_t L, std::size_t S) const {
    return detail::choose_forward_path(
               PathFacts{.requested = attention_path_, .need_weights = need_weights, .L = L, .S = S})
        .path;
  }

  // Which code PyTorch runs for this call, in the generation options().pytorch names (its
  // native fast path, or multi_head_attention_forward with or without the weights), and
  // why not the fast path, in PyTorch's words. forward() computes what that code computes.
  PathChoice pytorch_path(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                          const ForwardOptions<T>& opts = {}) const {
    return detail::module_path(options_, training_, opts, detail::geometry(query, key, value, opts, options_));
  }

  // MultiheadAttention.forward(query, key, value, ...). Pass the same object as query,
  // key and value for self-attention (Python's `query is key is value`). Steps 1 and 2 are
  // in forward_steps(), which forward_for_backward() runs too; steps 3 to 10 run on the
  // path chosen (attention_paths.hpp): the readable reference (textbook::reference_forward,
  // reference_forward.cpp) or the engine.
  //
  // The default route, need_weights=true and averaged over heads, no dropout, on the engine:
  // five calls in four files, from here to the weights (tests/route_test.py checks that each
  // function is defined in its file and called by the one before):
  //   route 0  forward                  api/multihead_attention.hpp
  //   route 1  forward_steps            api/multihead_attention.hpp  steps 1 and 2
  //   route 2  attention_steps          api/attention_paths.cpp      the path: choose_forward_path
  //   route 3  forward                  engine/engine.hpp            Engine::forward, steps 3 to 10
  //   route 4  attend                   engine/engine.hpp            step 8, the kernel: choose_kernel
  //   route 5  fast_attention_averaged  engine/fast_attention.hpp    the mean over heads, as they go
  // On the side, each returning before the next hop: geometry (step 1, textbook/inputs.hpp),
  // module_path (pytorch_paths.hpp) and module_mask (step 2, mask_preparation.hpp), choose_forward_path and
  // choose_kernel (attention_paths.hpp); under route 5, the softmax row kernels.
  Output<T> forward(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                    const ForwardOptions<T>& opts = {}) {
    return forward_steps(query, key, value, opts, /*saved=*/nullptr);
  }

  // ---- backward ----------------------------------------------------------------------

  // forward(), and what backward() needs from it: the output, and a record of the inputs
  // and intermediates that the gradients are taken at (what PyTorch's autograd saves).
  // With AttentionPath::reference set it runs the reference forward, whose every
  // intermediate is a tensor; on every other path the engine's GEMMs (engine/training_forward.hpp),
  // keeping the same intermediates. Either keeps the (N*H, L, S') softmax, as PyTorch's
  // autograd does. In training with dropout, the record holds the dropout mask drawn (or
  // opts.dropout_mask, replayed), drawn in the same order on both.
  std::pair<Output<T>, ForwardRecord<T>> forward_for_backward(const xt::xarray<T>& query, const xt::xarray<T>& key,
                                                              const xt::xarray<T>& value,
                                                              const ForwardOptions<T>& opts = {}) {
    check(opts.grad_enabled, "grad_enabled",
          "expected true for forward_for_backward (gradients are taken of this forward), got false");
    ForwardRecord<T> record;
    Output<T> out = forward_steps(query, key, value, opts, &record.saved_);  // what backward() needs, kept
    record.weights_version_ = params_.version();
    return {std::move(out), std::move(record)};
  }

  // The gradients of loss = sum(attn_output * grad_attn_output)
  //                         [+ sum(attn_output_weights * grad_attn_output_weights)]
  // with respect to the inputs of the forward recorded and to every parameter, as PyTorch's
  // autograd computes them. Each gradient has the shape of what it belongs to, inputs in
  // the caller's layout; an input given as one object for several arguments gets one
  // gradient, the sum over its uses (PyTorch's x.grad). The record must come from this
  // module with its parameters unchanged since. AttentionPath::reference runs
  // textbook/reference_backward.hpp, every other path the GEMMs of engine/engine_backward.hpp.
  Gradients<T> backward(const ForwardRecord<T>& record, const xt::xarray<T>& grad_attn_output,
                        const std::optional<xt::xarray<T>>& grad_attn_output_weights = {}) const {
    const auto& s = record.saved_;
    check(record.weights_version_ == params_.version(), "record",
          "expected a record of a forward of this module with its current parameters (weights version {}), got one "
          "of weights version {}: another module's, or made before the parameters changed",
          params_.version(), record.weights_version_);
    check(std::equal(s.output_shape.begin(), s.output_shape.end(), grad_attn_output.shape().begin(),
                     grad_attn_output.shape().end()),
          "grad_attn_output", "expected shape {} (attn_output's), got {}", shape_string(s.output_shape),
          shape_string(grad_attn_output.shape()));
    if (grad_attn_output_weights) {
      check(s.need_weights, "grad_attn_output_weights",
            "expected none: the forward ran with need_weights=false and returned no weights, got shape {}",
            shape_string(grad_attn_output_weights->shape()));
      check(std::equal(s.weights_shape.begin(), s.weights_shape.end(), grad_attn_output_weights->shape().begin(),
                       grad_attn_output_weights->shape().end()),
            "grad_attn_output_weights", "expected shape {} (attn_output_weights'), got {}",
            shape_string(s.weights_shape), shape_string(grad_attn_output_weights->shape()));
    }
    // the reference's step-by-step gradients or the engine's GEMMs: the one choice (attention_paths.hpp)
    return Gradients<T>(
        detail::backward_steps(options_, params_, s, grad_attn_output, grad_attn_output_weights, attention_path_));
  }

private:
  friend class KVCache<T>;

  // forward() and forward_for_backward(): steps 1 and 2 here, 3 to 10 on the path chosen,
  // a record for backward() kept in `saved` when given.
  Output<T> forward_steps(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                          const ForwardOptions<T>& opts, detail::SavedForward<T>* saved) {
    const double dropout_p = training_ ? options_.dropout : 0.0;
    const auto turn = dropout_turn(dropout_p, opts.dropout_mask.has_value());

    // 1) the shapes: batched or not, the sequence-first sizes, which inputs are the same object
    const detail::Geometry g = detail::geometry(query, key, value, opts, options_);
    check_dropout_mask(opts.dropout_mask, dropout_p, g);

    // 2) the code PyTorch runs (its fast path or not), and the masks as float masks, read
    //    as the generation chosen reads them: bool True -> -inf (_canonical_mask), shapes
    //    checked, made step 7's one mask (mask_preparation.hpp)
    std::vector<Warning> warnings;
    const textbook::MergedMask<T> mask =
        detail::module_mask(options_, detail::module_path(options_, training_, opts, g).path, opts, g, warnings);

    // 3)-10) the attention itself, on the path chosen (attention_paths.hpp)
    Output<T> out =
        detail::attention_steps(engine_, options_, params_, query, key, value, g, mask, opts, detail::StaticKV<T>{},
                                attention_path_, dropout_p, dropout_generator_, saved);
    out.warnings = std::move(warnings);
    return out;
  }

  // Training-mode dropout draws from the module's one generator: calls that draw take
  // turns, each drawing as one call alone would. Without dropout, calls share nothing.
  std::unique_lock<std::mutex> dropout_turn(double dropout_p, bool replayed) {
    if (dropout_p > 0 && !replayed) return std::unique_lock<std::mutex>(dropout_mutex_.mutex);
    return {};
  }

  // A decoding step of KVCache::step: `x` (L_new, N, E), its k and v appended to `cache`,
  // then its attention over the whole cache with the cache as static_k and static_v,
  // causal among the new positions. Only the query is projected again, by the engine.
  Output<T> attend_to_cache(const xt::xarray<T>& x, KVCache<T>& cache, bool need_weights) {
    check(!options_.add_bias_kv && !options_.add_zero_attn, "options",
          "a KV cache needs add_bias_kv=False and add_zero_attn=False (PyTorch adds no bias to static keys), got "
          "add_bias_kv={} and add_zero_attn={}",
          options_.add_bias_kv, options_.add_zero_attn);
    const double dropout_p = training_ ? options_.dropout : 0.0;
    const auto turn = dropout_turn(dropout_p, /*replayed=*/false);
    ForwardOptions<T> opts;
    opts.need_weights = need_weights;

    // 1) the shapes, and the new positions' k and v into the cache: (N*H, t0 + L_new, D)
    const detail::Geometry g = detail::geometry(x, x, x, opts, options_);
    const bool batch_first = options_.batch_first && g.batched;
    // the engine's decode_step, or the steps below: the choice is decodes_fast (attention_paths.hpp)
    if (detail::decodes_fast(attention_path_, need_weights, dropout_p, /*rows=*/g.L * g.N))
      return decode_step(x, g, batch_first, cache);
    const auto x3 = textbook::to_seq_first_batched(x, batch_first);               // (L_new, N, E)
    const auto k = key_value_projection(x3, 1), v = key_value_projection(x3, 2);  // (L_new, N, E) each
    const std::size_t t0 = cache.length();
    cache.append(textbook::split_heads(k, num_heads()), textbook::split_heads(v, num_heads()));  // (N*H, L_new, D) each

    // 2) new position i (at t0 + i) sees the cache up to itself (mask_preparation.hpp)
    const textbook::MergedMask<T> mask = detail::cache_step_mask<T>(options_, t0, g.L);  // (1, L_new, t0 + L_new)

    // 3)-10) the steps, with the cache as static_k and static_v
    return detail::attention_steps(engine_, options_, params_, x, x, x, g, mask, opts, cache.statics(), attention_path_,
                                   dropout_p, dropout_generator_);
  }

  // Steps 3 to 10 of a decoding step on the engine: q, k, v, the attention over the cache
  // and out_proj in one pass (engine/decode_step.hpp), k and v written into the cache.
  Output<T> decode_step(const xt::xarray<T>& x, const detail::Geometry& g, bool batch_first, KVCache<T>& cache) {
    const std::size_t E = embed_dim(), H = num_heads();
    const detail::DecodeSizes z{g.L, g.N, E, H, E / H, batch_first};
    const auto room = cache.make_room(g.N * H, E / H, g.L);
    // Bytes read: the weights and the cache. Below 1 MiB a second thread costs more than it saves.
    const double bytes = sizeof(T) * (4.0 * double(E * E) + 2.0 * double(g.N * E * (room.t0 + g.L)));
    Output<T> out;
    out.attn_output = xt::xarray<T>::from_shape(x.shape());  // the query's layout
    const auto weights = engine_.decode_weights(params_);    // interleaved, made once per version
    detail::decode_step(params_, *weights, z, x.data(), room, out.attn_output.data(),
                        detail::threads_for(bytes, /*threshold=*/double(1 << 20), detail::engine_threads()));
    cache.commit(g.L);
    return out;
  }

  // k (block 1) or v (block 2) of x3 (L_new, N, E): x3 W^T + b with the rows of W and b
  // that in_proj_weight and in_proj_bias give that block, or k/v_proj_weight. q is not
  // computed: the step's attention projects it. No choice of path: every step that is not
  // decode_step projects k and v here, on every path; packed or not is the variant's layout.
  xt::xtensor<T, 3> key_value_projection(const xt::xtensor<T, 3>& x3, std::size_t block) const {
    const std::size_t E = embed_dim();
    const std::size_t first = textbook::qkv_rows(block, E).first;  // the block's first row of in_proj_weight
    const T* w = params_.packed ? params_.in_proj_weight.data() + first * E
                                : (block == 1 ? params_.separate.w_k : params_.separate.w_v).data();
    const T* b = params_.in_proj_bias ? params_.in_proj_bias->data() + first : nullptr;
    xt::xtensor<T, 3> y({x3.shape(0), x3.shape(1), E});
    detail::linear_into(x3.data(), x3.shape(0) * x3.shape(1), E, detail::LinearWeight<T>{w, E, false}, E, b, y.data());
    return y;
  }

  // A dropout mask replays a dropout: only where one is drawn (training, dropout > 0),
  // of the weights' shape (N*H, L, S').
  void check_dropout_mask(const std::optional<xt::xtensor<bool, 3>>& mask, double dropout_p,
                          const detail::Geometry& g) const {
    if (!mask) return;
    const std::size_t B = g.N * num_heads(), L = g.L;
    const std::size_t S_total = g.S + options_.add_bias_kv + options_.add_zero_attn;  // S'
    check(dropout_p > 0, "dropout_mask",
          "expected none: this forward applies no dropout (training={}, dropout={}), so there is nothing to replay; "
          "got a mask of shape {}",
          training_, options_.dropout, shape_string(mask->shape()));
    check(mask->shape(0) == B && mask->shape(1) == L && mask->shape(2) == S_total, "dropout_mask",
          "expected shape {} (N*H, L, S'), got {}", shape_string({B, L, S_total}), shape_string(mask->shape()));
  }

  // A copy, checked: the constructors keep it as options_.
  static Options validated(const Options& options) {
    detail::validate(options);
    return options;
  }

  MultiheadAttention converted(bool packed) const {
    MultiheadAttention m(*this);
    m.options_.separate_projections = !packed;
    m.params_ = params_.repacked(packed);
    return m;
  }

  Options options_;
  textbook::Parameters<T> params_;
  bool training_ = true;
  AttentionPath attention_path_ = AttentionPath::automatic;
  Generator dropout_generator_;
  detail::OwnMutex dropout_mutex_;  // one forward() at a time draws from dropout_generator_
  detail::Engine<T> engine_;        // the fast paths' state: W^T per version of the weights
};

}  // namespace mha

// The module is compiled once, in the library, for float and double (instantiations.cpp):
// code that imports mha calls those instead of compiling the whole forward again.
namespace mha {
extern template class MultiheadAttention<float>;
extern template class MultiheadAttention<double>;
}  // namespace mha
