// mha:multihead_attention — the module: torch.nn.MultiheadAttention in C++.
//
// Holds the parameters under PyTorch's state_dict names and runs the forward pass of
// torch/nn/modules/activation.py (MultiheadAttention.forward) and
// torch/nn/functional.py (multi_head_attention_forward), step by step and in the same
// order, with the same shape checks. It is not a fused or approximate kernel: every
// intermediate of PyTorch's slow path exists here too.
//
// Two variants, as in PyTorch:
//   packed    in_proj_weight (3E, E) = [W_q; W_k; W_v], used when kdim == vdim == E;
//   separate  q_proj_weight (E, E), k_proj_weight (E, kdim), v_proj_weight (E, vdim):
//             three independent projections, forced when kdim or vdim differs from E
//             and available on request (Options::separate_projections) otherwise.
// in_proj_bias (3E) = [b_q; b_k; b_v] is packed in both.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads,
// D = head_dim = E / H, B = N*H.
module;
#include "third_party.hpp"

export module mha:multihead_attention;

import :error;
import :random;
import :in_projection;
import :masks;
import :attention;
import :detail;
import :threads;
import :fast_attention;
import :flash_attention;

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
};

// The arguments of MultiheadAttention.forward(...) after query, key and value.
template <class T>
struct ForwardOptions {
  std::optional<Mask<T>> key_padding_mask;  // (N, S), or (S) unbatched; True = padding
  bool need_weights = true;
  std::optional<Mask<T>> attn_mask;  // (L, S) or (N*H, L, S); unbatched (L, S) or (H, L, S)
  bool average_attn_weights = true;
  bool is_causal = false;  // a hint that attn_mask is the causal mask; needs attn_mask
};

// What forward returns: attn_output, and attn_output_weights when need_weights.
template <class T>
struct Output {
  xt::xarray<T> attn_output;                         // (L, N, E), (N, L, E) or (L, E)
  std::optional<xt::xarray<T>> attn_output_weights;  // (N, L, S) or (N, H, L, S); unbatched without N
};

// A name -> tensor map, keyed by PyTorch's state_dict names.
template <class T>
using StateDict = std::map<std::string, xt::xarray<T>>;

// A query, key or value made sequence-first and batched, as multi_head_attention_forward
// sees it: (N, L, E) batch_first is transposed, (L, E) unbatched gets a batch of 1.
template <class T>
xt::xtensor<T, 3> to_seq_first_batched(const xt::xarray<T>& x, bool batch_first) {
  if (x.dimension() == 2) return xt::xtensor<T, 3>(xt::view(x, xt::all(), xt::newaxis(), xt::all()));  // (L, 1, E)
  check(x.dimension() == 3, "input", "expected a 2-D or 3-D tensor, got {}-D", x.dimension());
  if (batch_first) return xt::xtensor<T, 3>(xt::transpose(x, {1, 0, 2}));  // (N, L, E) -> (L, N, E)
  return xt::xtensor<T, 3>(x);
}

// How forward() computes the attention. All give PyTorch's results; they differ in speed,
// memory and how much of the computation a reader can follow:
//   reference         one readable loop nest per step, every intermediate of PyTorch's
//                     multi_head_attention_forward materialised (the tutorials' path);
//   fast              BLAS GEMMs on strided views of the projection buffers, mask and
//                     softmax in one pass, batch-heads on threads (:fast_attention);
//   memory_efficient  tiles and an online softmax, the (N*H, L, S) weights never formed
//                     (:flash_attention); only with need_weights=false, else mha::Error;
//   automatic         memory_efficient when need_weights=false and a head's (L, S) scores
//                     exceed 4M entries, fast otherwise. The default.
enum class AttentionPath { automatic, reference, fast, memory_efficient };

template <class T>
class MultiheadAttention {
public:
  // Parameters are initialised as PyTorch's _reset_parameters does, from `generator`.
  MultiheadAttention(const Options& options, Generator& generator) : options_(options) {
    validate_options();
    allocate_parameters();
    reset_parameters(generator);
  }
  explicit MultiheadAttention(const Options& options, std::uint64_t seed = 0)
      : options_(options), dropout_generator_(seed) {
    validate_options();
    allocate_parameters();
    Generator generator(seed);
    reset_parameters(generator);
  }

  const Options& options() const { return options_; }
  std::size_t embed_dim() const { return static_cast<std::size_t>(options_.embed_dim); }
  std::size_t num_heads() const { return static_cast<std::size_t>(options_.num_heads); }
  std::size_t head_dim() const { return embed_dim() / num_heads(); }
  std::size_t kdim() const { return static_cast<std::size_t>(options_.kdim.value_or(options_.embed_dim)); }
  std::size_t vdim() const { return static_cast<std::size_t>(options_.vdim.value_or(options_.embed_dim)); }
  // PyTorch's _qkv_same_embed_dim: true when the packed in_proj_weight is possible.
  bool qkv_same_embed_dim() const { return kdim() == embed_dim() && vdim() == embed_dim(); }
  // True when the parameters hold in_proj_weight; false for q/k/v_proj_weight.
  bool packed() const { return qkv_same_embed_dim() && !options_.separate_projections; }

  // Training mode (dropout on) or evaluation mode, as nn.Module.train() / eval().
  // A new module is in training mode, as in PyTorch.
  void train(bool mode = true) { training_ = mode; }
  void eval() { training_ = false; }
  bool training() const { return training_; }
  Generator& dropout_generator() { return dropout_generator_; }

  // ---- parameters, by PyTorch's state_dict names -----------------------------------

  // The state_dict keys, in PyTorch's order.
  std::vector<std::string> parameter_names() const {
    std::vector<std::string> names;
    if (packed()) names = {"in_proj_weight"};
    else names = {"q_proj_weight", "k_proj_weight", "v_proj_weight"};
    if (options_.bias) names.push_back("in_proj_bias");
    if (options_.add_bias_kv) names.insert(names.end(), {"bias_k", "bias_v"});
    names.push_back("out_proj.weight");
    if (options_.bias) names.push_back("out_proj.bias");
    return names;
  }

  // The shape PyTorch gives the parameter `name`.
  std::vector<std::size_t> parameter_shape(std::string_view name) const {
    const std::size_t E = embed_dim();
    if (name == "in_proj_weight") return {3 * E, E};
    if (name == "q_proj_weight" || name == "out_proj.weight") return {E, E};
    if (name == "k_proj_weight") return {E, kdim()};
    if (name == "v_proj_weight") return {E, vdim()};
    if (name == "in_proj_bias") return {3 * E};
    if (name == "out_proj.bias") return {E};
    if (name == "bias_k" || name == "bias_v") return {1, 1, E};
    throw Error(fmt::format("name: unknown parameter '{}'", name));
  }

  xt::xarray<T> parameter(std::string_view name) const {
    require_parameter(name);
    // An optional parameter that require_parameter() has found in this module's options.
    auto present = [name](const auto& optional) -> xt::xarray<T> {
      if (!optional) throw Error(fmt::format("{}: no such parameter in this module", name));
      return *optional;
    };
    if (name == "in_proj_weight") return in_proj_weight_;
    if (name == "q_proj_weight") return separate_.w_q;
    if (name == "k_proj_weight") return separate_.w_k;
    if (name == "v_proj_weight") return separate_.w_v;
    if (name == "in_proj_bias") return present(in_proj_bias_);
    if (name == "bias_k") return present(bias_k_);
    if (name == "bias_v") return present(bias_v_);
    if (name == "out_proj.weight") return out_proj_weight_;
    return present(out_proj_bias_);
  }

  // Sets one parameter; its shape must be PyTorch's. Nothing is reshaped or cast.
  void set_parameter(std::string_view name, const xt::xarray<T>& value) {
    require_parameter(name);
    const auto expected = parameter_shape(name);
    check(std::equal(expected.begin(), expected.end(), value.shape().begin(), value.shape().end()), name,
          "expected shape {}, got {}", shape_string(expected), shape_string(value.shape()));
    if (name == "in_proj_weight") in_proj_weight_ = value;
    else if (name == "q_proj_weight") separate_.w_q = value;
    else if (name == "k_proj_weight") separate_.w_k = value;
    else if (name == "v_proj_weight") separate_.w_v = value;
    else if (name == "in_proj_bias") in_proj_bias_ = value;
    else if (name == "bias_k") bias_k_ = value;
    else if (name == "bias_v") bias_v_ = value;
    else if (name == "out_proj.weight") out_proj_weight_ = value;
    else out_proj_bias_ = value;
    weights_changed();
  }

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
  SeparateProjections<T> separate_projections() const {
    if (packed()) return split_packed(in_proj_weight_, in_proj_bias_);
    SeparateProjections<T> p = separate_;
    if (in_proj_bias_) {
      p.b_q = bias_block(in_proj_bias_, 0, embed_dim());
      p.b_k = bias_block(in_proj_bias_, 1, embed_dim());
      p.b_v = bias_block(in_proj_bias_, 2, embed_dim());
    }
    return p;
  }

  // The same module with three separate projections (the packed weight split into rows).
  MultiheadAttention to_separate() const {
    Options options = options_;
    options.separate_projections = true;
    return converted(options);
  }

  // The same module with the packed in_proj_weight; an error unless kdim == vdim == E.
  MultiheadAttention to_packed() const {
    check(qkv_same_embed_dim(), "kdim, vdim",
          "cannot pack: in_proj_weight needs kdim == vdim == embed_dim = {}, got kdim = {}, vdim = {}", embed_dim(),
          kdim(), vdim());
    Options options = options_;
    options.separate_projections = false;
    return converted(options);
  }

  // ---- forward -----------------------------------------------------------------------

  // The in-projection on sequence-first batched inputs, as multi_head_attention_forward
  // computes it before bias_k/bias_v: q (L, N, E), k (S, N, E), v (S, N, E).
  QKV<T> in_projection(const xt::xtensor<T, 3>& query, const xt::xtensor<T, 3>& key, const xt::xtensor<T, 3>& value,
                       Aliasing aliasing = Aliasing::none) const {
    if (packed()) return in_projection_packed(query, key, value, in_proj_weight_, in_proj_bias_, aliasing);
    return mha::in_projection(query, key, value, separate_projections());
  }

  // q, k and v exactly as forward() computes them from these inputs (steps 1 and 3).
  QKV<T> in_projection(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value) const {
    const auto in = inputs(query, key, value, {});
    return in_projection(in.query, in.key, in.value, in.aliasing);
  }

  // Which implementation forward() runs; every one gives PyTorch's results (see AttentionPath).
  void set_attention_path(AttentionPath path) { attention_path_ = path; }
  AttentionPath attention_path() const { return attention_path_; }

  // The path forward() takes for these sizes: automatic resolved, memory_efficient
  // refused when the weights are asked for (it never forms them).
  AttentionPath resolved_attention_path(bool need_weights, std::size_t L, std::size_t S) const {
    if (attention_path_ == AttentionPath::memory_efficient)
      check(!need_weights, "need_weights",
            "the memory_efficient attention path never forms the attention weights; expected need_weights=false "
            "with it, got need_weights=true (choose AttentionPath::fast, reference or automatic for the weights)");
    if (attention_path_ != AttentionPath::automatic) return attention_path_;
    // One head's (L, S) scores above 4M entries (16 MiB in float) are worth not forming.
    const bool large = static_cast<double>(L) * static_cast<double>(S) > static_cast<double>(1 << 22);
    return !need_weights && large ? AttentionPath::memory_efficient : AttentionPath::fast;
  }

  // MultiheadAttention.forward(query, key, value, ...). Pass the same object as query,
  // key and value for self-attention (Python's `query is key is value`).
  Output<T> forward(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                    const ForwardOptions<T>& opts = {}) {
    // Training-mode dropout draws from the module's one generator: calls that draw take
    // turns, each drawing as one call alone would. Without dropout, calls share nothing.
    std::unique_lock<std::mutex> drawing;
    if (training_ && options_.dropout > 0) drawing = std::unique_lock<std::mutex>(dropout_mutex_.mutex);

    // 1) check shapes: batched or not, the sequence-first sizes, which inputs are the same object
    const Geometry g = geometry(query, key, value, opts);
    const std::size_t L = g.L, N = g.N, S = g.S;

    // 2) masks as float masks: bool True -> -inf (_canonical_mask), shapes checked
    Masks masks;
    masks.key_padding_mask = prepare_key_padding_mask(opts.key_padding_mask, g.batched, N, S);  // (N, S)
    masks.causal_hint = opts.is_causal && !masks.key_padding_mask && !opts.need_weights;
    if (!masks.causal_hint)
      masks.attn_mask = prepare_attn_mask(opts.attn_mask, g.batched, L, N, S);  // (1 or N*H, L, S)

    // 3)-10) the attention itself, by the path chosen
    const std::size_t S_total = S + options_.add_bias_kv + options_.add_zero_attn;  // S'
    const AttentionPath path = resolved_attention_path(opts.need_weights, L, S_total);
    if (path == AttentionPath::reference)
      return reference_forward(inputs(query, key, value, opts), std::move(masks), opts);
    return fast_forward(query, key, value, g, std::move(masks), opts, path);
  }

private:
  // The two masks after step 2 of forward(), before bias_k/bias_v and the zero key pad them.
  struct Masks {
    std::optional<xt::xtensor<T, 3>> attn_mask;         // (1 or N*H, L, S)
    std::optional<xt::xtensor<T, 2>> key_padding_mask;  // (N, S)
    bool causal_hint = false;  // is_causal taken at its word: the causal mask replaces attn_mask
  };

  // The readable path: every intermediate of PyTorch's multi_head_attention_forward exists.
  Output<T> reference_forward(const auto& in, Masks masks, const ForwardOptions<T>& opts) {
    const std::size_t L = in.query.shape(0), N = in.query.shape(1);
    auto& attn_mask = masks.attn_mask;
    auto& key_padding_mask = masks.key_padding_mask;

    // 3) in-projection: the packed (3E, E) weight, or three separate ones
    auto [q, k, v] = in_projection(in.query, in.key, in.value, in.aliasing);  // (L, N, E), (S, N, E), (S, N, E)

    // 4) bias_k, bias_v: one more key and value position, the masks padded to match
    if (options_.add_bias_kv) append_bias_kv(k, v, attn_mask, key_padding_mask);  // (S+1, N, E)

    // 5) heads: (L, N, E) -> (N*H, L, D)
    auto qh = split_heads(q, num_heads());  // (N*H, L, D)
    auto kh = split_heads(k, num_heads());  // (N*H, S', D)
    auto vh = split_heads(v, num_heads());  // (N*H, S', D)

    // 6) add_zero_attn: one more key and value, all zeros, the masks padded to match
    if (options_.add_zero_attn) {
      kh = append_zero_row(kh);  // (N*H, S'+1, D)
      vh = append_zero_row(vh);
      if (attn_mask) attn_mask = pad_last(*attn_mask);
      if (key_padding_mask) key_padding_mask = pad_last(*key_padding_mask);
    }
    const std::size_t S_total = kh.shape(1);

    // 7) one additive mask: attn_mask + key_padding_mask, or the causal mask of the hint
    std::optional<xt::xtensor<T, 3>> mask;
    if (masks.causal_hint) mask = causal_attn_mask(L, S_total);            // (1, L, S')
    else mask = merge_masks(attn_mask, key_padding_mask, num_heads(), L);  // (1 or N*H, L, S')

    // 8) attention per head: softmax(q k^T / sqrt(D) + mask) v, dropout in training only
    const double dropout_p = training_ ? options_.dropout : 0.0;
    auto attention = scaled_dot_product_attention(qh, kh, vh, mask, dropout_p, dropout_generator_);

    // 9) heads side by side again, then out_proj: (N*H, L, D) -> (L, N, E)
    auto attn_output =
        linear(merge_heads(attention.output, num_heads()), out_proj_weight_, out_proj_bias_);  // (L, N, E)

    // 10) back to the caller's layout; the weights per head or averaged over heads
    Output<T> out;
    out.attn_output = caller_layout(attn_output, in.batched);
    if (opts.need_weights)
      out.attn_output_weights = output_weights(attention.weights, N, L, S_total, opts.average_attn_weights, in.batched);
    return out;
  }

  // The sizes forward() works with, checked as multi_head_attention_forward checks them.
  struct Geometry {
    bool batched = true;
    Aliasing aliasing = Aliasing::none;
    std::size_t L = 0, S = 0, N = 0;
  };

  // (len, N, width) of an input as seen sequence-first and batched, without moving it.
  struct SeqShape {
    std::array<std::size_t, 3> dims;
    std::size_t shape(std::size_t i) const { return dims[i]; }
  };
  SeqShape seq_shape(const xt::xarray<T>& x, bool batched) const {
    if (!batched) return {{x.shape(0), 1, x.shape(1)}};                       // (L, E) -> (L, 1, E)
    if (options_.batch_first) return {{x.shape(1), x.shape(0), x.shape(2)}};  // (N, L, E) -> (L, N, E)
    return {{x.shape(0), x.shape(1), x.shape(2)}};
  }

  Geometry geometry(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                    const ForwardOptions<T>& opts) const {
    Geometry g;
    g.batched = shape_check(query, key, value, opts);
    g.aliasing = aliasing_of(query, key, value, g.batched);
    const SeqShape q = seq_shape(query, g.batched), k = seq_shape(key, g.batched), v = seq_shape(value, g.batched);
    check_inputs(q, k, v);
    g.L = q.shape(0), g.N = q.shape(1), g.S = k.shape(0);
    return g;
  }

  // The fast and memory-efficient paths: the same steps on raw buffers. The inputs are
  // read where they are (sequence-first, batch_first or unbatched: every layout is a
  // contiguous (rows, E) matrix), q, k and v stay in their projection buffers and a head
  // is a strided view into them, the heads land in the caller's layout and out_proj
  // writes straight into the returned tensor. Buffers are kept between calls.
  Output<T> fast_forward(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                         const Geometry& g, Masks masks, const ForwardOptions<T>& opts, AttentionPath path) {
    const std::size_t L = g.L, N = g.N, S = g.S;
    const std::size_t E = embed_dim(), H = num_heads(), D = head_dim(), B = N * H;
    // The library's own threads do the parallel work where OpenBLAS runs single-threaded
    // (set_num_threads): the GEMMs split their rows over them, each block a single-threaded
    // OpenBLAS call. Otherwise OpenBLAS threads each GEMM (:threads). Below ~20 MFLOP a
    // forward is over before a second thread would have started.
    const double flops = 8.0 * double(L * N) * double(E * E) + 4.0 * double(N * L * S) * double(E);
    const int threads = flops < 2e7 ? 1 : detail::engine_threads();
    // Rows of every input and buffer: (i, n) sequence-first, (n, i) batch_first.
    const bool batch_major = g.batched && options_.batch_first;

    // 3) in-projection: one GEMM (self-attention, packed), two (key is value) or three
    Workspace& workspace = this_thread_workspace();
    auto& ws = workspace.buffers;
    ws.clear_slots();
    const auto transposed = transposed_weights();  // W^T of this version of the weights
    Projection p =
        project(query, key, value, g, *transposed, batch_major, threads);  // q (L, N, E), k and v (S, N, E) as views
    scale_query(p, L, N);  // q / sqrt(D), as PyTorch scales q before q . k^T

    // 4), 6) bias_k/bias_v and the zero key: k and v copied once into (S', N, E), masks padded
    if (options_.add_bias_kv || options_.add_zero_attn) extend_keys(p, S, N, masks);
    const std::size_t S_total = S + options_.add_bias_kv + options_.add_zero_attn;  // S'

    // 7) the masks stay separate; the kernels add attn_mask(b, i, j) + key_padding_mask(n, j)
    if (masks.causal_hint) masks.attn_mask = causal_attn_mask(L, S_total);  // (1, L, S')
    detail::AttentionProblem<T> pb;
    pb.q = p.q, pb.k = p.k, pb.v = p.v;
    if (masks.attn_mask)
      pb.masks.attn_mask = masks.attn_mask->data(), pb.masks.attn_mask_per_head = masks.attn_mask->shape(0) > 1;
    if (masks.key_padding_mask) pb.masks.key_padding_mask = masks.key_padding_mask->data();
    pb.masks.L = L, pb.masks.S = S_total;
    pb.N = N, pb.H = H, pb.L = L, pb.S = S_total, pb.D = D;
    pb.dropout_p = training_ ? options_.dropout : 0.0;
    pb.generator = &dropout_generator_;
    pb.scratch = &workspace.scratch;
    pb.threads = threads;

    // 8) attention per head, into the heads' columns of one buffer in the query's layout
    T* heads = ws.get(L * N * E);  // (L, N, E), or (N, L, E) batch_first
    pb.out = {heads, batch_major ? E : N * E, batch_major ? L * E : E};
    Output<T> out;
    if (path == AttentionPath::memory_efficient) {
      detail::flash_attention(pb);
    } else if (!opts.need_weights) {
      detail::fast_attention(pb, static_cast<T*>(nullptr));
    } else {
      std::vector<std::size_t> shape{N, H, L, S_total};  // (N, H, L, S'): the (N*H, L, S') weights in order
      if (!g.batched) shape.erase(shape.begin());
      if (opts.average_attn_weights) {
        T* weights = ws.get(B * L * S_total);  // (N*H, L, S')
        detail::fast_attention(pb, weights);
        out.attn_output_weights = average_heads(weights, N, L, S_total, g.batched);
      } else {
        out.attn_output_weights = xt::xarray<T>::from_shape(shape);
        detail::fast_attention(pb, out.attn_output_weights->data());
      }
    }

    // 9) out_proj: one GEMM, (L*N, E) x (E, E) -> (L*N, E), into the returned tensor, whose
    //    layout is the query's: (L, N, E), (N, L, E) batch_first or (L, E) unbatched
    out.attn_output = xt::xarray<T>::from_shape(query.shape());
    detail::parallel_linear_into(heads, L * N, E, transposed->out_proj.data(), E, E,
                                 out_proj_bias_ ? out_proj_bias_->data() : nullptr, out.attn_output.data(), threads);
    return out;
  }

  // Buffers of the fast paths, one set per calling thread, kept from one forward() to the
  // next so that their pages are not returned and faulted in again on every call. Being
  // the thread's and not the module's, they let any number of threads run forward() on
  // one module at once; they last as long as the thread.
  struct Buffers {
    std::vector<std::vector<T>> slots;
    std::size_t used = 0;
    void clear_slots() { used = 0; }
    T* get(std::size_t size) {  // the next slot, at least `size` long
      if (slots.size() <= used) slots.emplace_back();
      auto& slot = slots[used++];
      if (slot.size() < size) slot.resize(size);
      return slot.data();
    }
  };
  // The projection weights transposed, W^T (in, out), for the fast paths: y = x W^T + b is
  // then the plain GEMM x . (W^T), which OpenBLAS runs without repacking W on every call
  // (about 30% faster at E = 64, 7% at E = 1024). Made on the first forward() after the
  // weights change; they cost as much memory again as the weights.
  struct TransposedWeights {
    std::uint64_t version = 0;   // the weights_version_ they were made from; 0: not made
    xt::xtensor<T, 2> in_proj;   // (E, 3E): columns [0, E) W_q^T, [E, 2E) W_k^T, [2E, 3E) W_v^T
    xt::xtensor<T, 2> q, k, v;   // separate: W_q^T (E, E), W_k^T (kdim, E), W_v^T (vdim, E)
    xt::xtensor<T, 2> out_proj;  // (E, E)
  };
  struct Workspace {
    Buffers buffers;
    std::vector<std::vector<T>> scratch;  // per worker: (L, S') scores, or a (Tq, Tk) tile
  };
  static Workspace& this_thread_workspace() {
    thread_local Workspace workspace;
    return workspace;
  }
  // W^T, made once per version of the weights and shared by every thread's forward(). A
  // forward() holds its own reference, so it never reads W^T that another thread freed.
  // A copied module starts without: its weights may change apart from the original's.
  struct TransposedCache {
    std::mutex mutex;
    std::shared_ptr<const TransposedWeights> weights;
    TransposedCache() = default;
    TransposedCache(const TransposedCache& /*other*/) {}
    TransposedCache& operator=(const TransposedCache& other) {
      if (this != &other) {
        const std::lock_guard<std::mutex> lock(mutex);
        weights.reset();
      }
      return *this;
    }
    ~TransposedCache() = default;
  };

  // A number no other state of any module's weights has had: weights_version_ takes a new
  // one at every change, so equal numbers mean equal weights, even across copies.
  static std::uint64_t new_weights_version() {
    static std::atomic<std::uint64_t> last{0};
    return ++last;
  }
  void weights_changed() { weights_version_ = new_weights_version(); }

  std::shared_ptr<const TransposedWeights> transposed_weights() const {
    const std::lock_guard<std::mutex> lock(transposed_.mutex);
    if (transposed_.weights && transposed_.weights->version == weights_version_) return transposed_.weights;
    auto transposed = [](const xt::xtensor<T, 2>& w) { return xt::xtensor<T, 2>(xt::transpose(w)); };
    auto t = std::make_shared<TransposedWeights>();
    if (packed()) t->in_proj = transposed(in_proj_weight_);
    else t->q = transposed(separate_.w_q), t->k = transposed(separate_.w_k), t->v = transposed(separate_.w_v);
    t->out_proj = transposed(out_proj_weight_);
    t->version = weights_version_;
    transposed_.weights = t;
    return transposed_.weights;
  }

  // q, k, v after the in-projection, as strided views into the buffers that hold them.
  struct Projection {
    detail::StridedHeads<T> q, k, v;
    T* q_buffer = nullptr;  // where q's rows start, with q's strides
  };

  // The in-projection on the inputs as they are, with the fewest GEMMs: self-attention
  // with the packed weight is one (L*N, E) x (E, 3E) GEMM; key is value two; else three.
  // An input's rows are (i, n) or (n, i): row_stride and batch_stride say which.
  Projection project(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                     const Geometry& g, const TransposedWeights& wt, bool batch_major, int threads) {
    const std::size_t E = embed_dim(), N = g.N;
    Projection p;
    const T* bias = in_proj_bias_ ? in_proj_bias_->data() : nullptr;
    // y (len*N, width) = x W^T + b, for `width` columns of a W^T starting at column `first`
    auto project_into = [&](const xt::xarray<T>& x, std::size_t len, const T* weight_t, std::size_t ldw,
                            std::size_t first, std::size_t width) -> detail::StridedHeads<T> {
      const std::size_t rows = len * N, in = x.shape(x.dimension() - 1);
      T* y = this_thread_workspace().buffers.get(rows * width);  // (len, N, width) or (N, len, width)
      detail::parallel_linear_into(x.data(), rows, in, weight_t, ldw, width, bias ? bias + first : nullptr, y, threads);
      return batch_major ? detail::StridedHeads<T>{y, width, len * width}
                         : detail::StridedHeads<T>{y, N * width, width};
    };
    // A view `offset` columns further on; an empty buffer (no rows) stays null, since adding
    // an offset to a null pointer is undefined.
    auto shifted = [](detail::StridedHeads<T> h, std::size_t offset) {
      if (h.data != nullptr) h.data += offset;
      return h;
    };
    if (packed()) {
      const T* w = wt.in_proj.data();  // (E, 3E): columns [0, E) W_q^T, [E, 2E) W_k^T, [2E, 3E) W_v^T
      if (g.aliasing == Aliasing::self_attention) {
        p.q = project_into(query, g.L, w, 3 * E, 0, 3 * E);  // (L, N, 3E)
        p.k = shifted(p.q, E), p.v = shifted(p.q, 2 * E);
      } else if (g.aliasing == Aliasing::key_is_value) {
        p.q = project_into(query, g.L, w, 3 * E, 0, E);        // (L, N, E)
        p.k = project_into(key, g.S, w + E, 3 * E, E, 2 * E);  // (S, N, 2E)
        p.v = shifted(p.k, E);
      } else {
        p.q = project_into(query, g.L, w, 3 * E, 0, E);              // (L, N, E)
        p.k = project_into(key, g.S, w + E, 3 * E, E, E);            // (S, N, E)
        p.v = project_into(value, g.S, w + 2 * E, 3 * E, 2 * E, E);  // (S, N, E)
      }
    } else {
      p.q = project_into(query, g.L, wt.q.data(), E, 0, E);      // (L, N, E)
      p.k = project_into(key, g.S, wt.k.data(), E, E, E);        // (S, N, E)
      p.v = project_into(value, g.S, wt.v.data(), E, 2 * E, E);  // (S, N, E)
    }
    p.q_buffer = const_cast<T*>(p.q.data);  // q's buffer is ours (workspace), written in place
    return p;
  }

  // q *= 1/sqrt(D) in place, over the E columns of q for every position and batch entry.
  void scale_query(Projection& p, std::size_t L, std::size_t N) {
    const T scale = static_cast<T>(std::sqrt(1.0 / static_cast<double>(head_dim())));
    const std::size_t E = embed_dim();
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t n = 0; n < N; ++n) {
        T* row = p.q_buffer + i * p.q.row_stride + n * p.q.batch_stride;
        for (std::size_t e = 0; e < E; ++e) row[e] *= scale;
      }
  }

  // k and v with bias_k/bias_v and then the zero key appended: (S, N, E) -> (S', N, E),
  // one copy of each instead of PyTorch's cat and pad; the masks get a 0 column per key.
  void extend_keys(Projection& p, std::size_t S, std::size_t N, Masks& masks) {
    const std::size_t E = embed_dim(), S_total = S + options_.add_bias_kv + options_.add_zero_attn;
    auto extend = [&](const detail::StridedHeads<T>& x, const std::optional<xt::xtensor<T, 3>>& bias) {
      T* y = this_thread_workspace().buffers.get(S_total * N * E);  // (S', N, E)
      std::fill(y, y + S_total * N * E, T(0));                      // the zero key, and what is copied over
      for (std::size_t j = 0; j < S; ++j)
        for (std::size_t n = 0; n < N; ++n) {
          const T* from = x.data + j * x.row_stride + n * x.batch_stride;
          std::copy(from, from + E, y + (j * N + n) * E);
        }
      if (options_.add_bias_kv)
        for (std::size_t n = 0; n < N; ++n) std::copy(bias->data(), bias->data() + E, y + (S * N + n) * E);
      return detail::StridedHeads<T>{y, N * E, E};
    };
    p.k = extend(p.k, bias_k_);
    p.v = extend(p.v, bias_v_);
    for (int extra = 0; extra < options_.add_bias_kv + options_.add_zero_attn; ++extra) {
      if (masks.attn_mask) masks.attn_mask = pad_last(*masks.attn_mask);
      if (masks.key_padding_mask) masks.key_padding_mask = pad_last(*masks.key_padding_mask);
    }
  }

  // (N*H, L, S) weights averaged over heads: (N, L, S), or (L, S) unbatched. Sum, then
  // divide by H, as attn_output_weights.mean(dim=1).
  xt::xarray<T> average_heads(const T* w, std::size_t N, std::size_t L, std::size_t S, bool batched) const {
    const std::size_t H = num_heads(), LS = L * S;
    xt::xarray<T> out = batched ? xt::xarray<T>(xt::zeros<T>({N, L, S})) : xt::xarray<T>(xt::zeros<T>({L, S}));
    for (std::size_t n = 0; n < N; ++n) {
      T* sum = out.data() + n * LS;
      for (std::size_t h = 0; h < H; ++h) {
        const T* head = w + (n * H + h) * LS;
        for (std::size_t x = 0; x < LS; ++x) sum[x] += head[x];
      }
      for (std::size_t x = 0; x < LS; ++x) sum[x] /= static_cast<T>(H);
    }
    return out;
  }

  // The causal mask of the is_causal hint as an additive (1, L, S') mask.
  static xt::xtensor<T, 3> causal_attn_mask(std::size_t L, std::size_t S) {
    return xt::xtensor<T, 3>(
        xt::view(canonical_mask<T>(xt::xarray<bool>(causal_mask(L, S))), xt::newaxis(), xt::all(), xt::all()));
  }

  // (L, N, E) -> the caller's layout: (N, L, E) batch_first, (L, E) unbatched.
  xt::xarray<T> caller_layout(const xt::xtensor<T, 3>& x, bool batched) const {
    if (!batched) return xt::xarray<T>(xt::view(x, xt::all(), 0, xt::all()));     // (L, E)
    if (options_.batch_first) return xt::xarray<T>(xt::transpose(x, {1, 0, 2}));  // (N, L, E)
    return xt::xarray<T>(x);
  }

  // The inputs as multi_head_attention_forward works on them.
  struct Inputs {
    xt::xtensor<T, 3> query;  // (L, N, E)
    xt::xtensor<T, 3> key;    // (S, N, Ek)
    xt::xtensor<T, 3> value;  // (S, N, Ev)
    bool batched;
    Aliasing aliasing;
  };

  Inputs inputs(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                const ForwardOptions<T>& opts) const {
    const bool batched = shape_check(query, key, value, opts);
    const bool transpose = options_.batch_first && batched;
    const Aliasing aliasing = aliasing_of(query, key, value, batched);
    Inputs in{to_seq_first_batched(query, transpose), to_seq_first_batched(key, transpose),
              to_seq_first_batched(value, transpose), batched, aliasing};
    check_inputs(in.query, in.key, in.value);
    return in;
  }

  // Unbatched inputs lose their identity in PyTorch (each is unsqueezed on its own), so
  // only batched inputs take the one-GEMM or two-GEMM path.
  static Aliasing aliasing_of(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                              bool batched) {
    if (!batched) return Aliasing::none;
    if (&query == &key && &key == &value) return Aliasing::self_attention;
    return &key == &value ? Aliasing::key_is_value : Aliasing::none;
  }

  void validate_options() const {
    check(options_.embed_dim > 0 && options_.num_heads > 0, "embed_dim, num_heads",
          "embed_dim and num_heads must be greater than 0, got embed_dim={} and num_heads={} instead",
          options_.embed_dim, options_.num_heads);
    check(options_.embed_dim % options_.num_heads == 0, "embed_dim",
          "embed_dim must be divisible by num_heads, got embed_dim={} and num_heads={}", options_.embed_dim,
          options_.num_heads);
    check(options_.kdim.value_or(1) > 0, "kdim", "kdim must be greater than 0, got {}", options_.kdim.value_or(0));
    check(options_.vdim.value_or(1) > 0, "vdim", "vdim must be greater than 0, got {}", options_.vdim.value_or(0));
    check(options_.dropout >= 0.0 && options_.dropout <= 1.0, "dropout",
          "dropout probability has to be between 0 and 1, but got {}", options_.dropout);
  }

  void require_parameter(std::string_view name) const {
    const auto names = parameter_names();
    check(std::find(names.begin(), names.end(), name) != names.end(), name,
          "no such parameter in this module (its parameters: {})", fmt::join(names, ", "));
  }

  void allocate_parameters() {
    const std::size_t E = embed_dim();
    auto zeros2 = [](std::size_t rows, std::size_t cols) { return xt::xtensor<T, 2>(xt::zeros<T>({rows, cols})); };
    if (packed()) in_proj_weight_ = zeros2(3 * E, E);
    else separate_ = {zeros2(E, E), zeros2(E, kdim()), zeros2(E, vdim()), std::nullopt, std::nullopt, std::nullopt};
    out_proj_weight_ = zeros2(E, E);
    if (options_.bias) {
      in_proj_bias_ = xt::xtensor<T, 1>(xt::zeros<T>({3 * E}));
      out_proj_bias_ = xt::xtensor<T, 1>(xt::zeros<T>({E}));
    }
    if (options_.add_bias_kv) {
      bias_k_ = xt::xtensor<T, 3>(xt::zeros<T>({std::size_t{1}, std::size_t{1}, E}));
      bias_v_ = bias_k_;
    }
    weights_changed();
  }

  // PyTorch's MultiheadAttention._reset_parameters, and Linear's init for out_proj:
  //   in_proj_weight   xavier_uniform over the whole (3E, E): fan_in = E, fan_out = 3E,
  //                    so the bound is sqrt(6 / (E + 3E)), not sqrt(6 / 2E);
  //   q/k/v_proj       xavier_uniform, each on its own (E, E), (E, kdim), (E, vdim);
  //   out_proj.weight  kaiming_uniform(a = sqrt(5)): bound 1 / sqrt(fan_in) = 1 / sqrt(E);
  //   in_proj_bias, out_proj.bias   zeros;
  //   bias_k, bias_v   xavier_normal on (1, 1, E): fan_in = fan_out = E, std = sqrt(1 / E).
  void reset_parameters(Generator& g) {
    auto xavier_uniform = [&g](xt::xtensor<T, 2>& w) {
      const double bound = std::sqrt(6.0 / static_cast<double>(w.shape(0) + w.shape(1)));
      for (auto& x : w) x = static_cast<T>(g.uniform(-bound, bound));
    };
    if (packed()) xavier_uniform(in_proj_weight_);
    else xavier_uniform(separate_.w_q), xavier_uniform(separate_.w_k), xavier_uniform(separate_.w_v);
    const double out_bound = 1.0 / std::sqrt(static_cast<double>(embed_dim()));
    for (auto& x : out_proj_weight_) x = static_cast<T>(g.uniform(-out_bound, out_bound));
    const double std = std::sqrt(1.0 / static_cast<double>(embed_dim()));
    for (auto* b : {&bias_k_, &bias_v_})
      if (*b)
        for (auto& x : **b) x = static_cast<T>(g.normal(0.0, std));
    weights_changed();
  }

  MultiheadAttention converted(const Options& options) const {
    MultiheadAttention m(*this);
    m.options_ = options;
    const auto p = separate_projections();
    if (m.packed()) m.in_proj_weight_ = pack(p).in_proj_weight, m.separate_ = {};
    else m.separate_ = {p.w_q, p.w_k, p.w_v, {}, {}, {}}, m.in_proj_weight_ = {};
    m.weights_changed();
    return m;
  }

  // _mha_shape_check: batched (3-D) or unbatched (2-D) query, and the ranks that go with it.
  bool shape_check(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                   const ForwardOptions<T>& opts) const {
    check(!opts.is_causal || opts.attn_mask, "is_causal",
          "Need attn_mask if specifying the is_causal hint. You may use "
          "generate_square_subsequent_mask to create this mask.");
    const std::size_t qd = query.dimension();
    check(qd == 2 || qd == 3, "query",
          "query should be unbatched 2D or batched 3D tensor but received {}-D query tensor", qd);
    const bool batched = qd == 3;
    const char* kind = batched ? "batched (3-D)" : "unbatched (2-D)";
    check(key.dimension() == qd && value.dimension() == qd, "key, value",
          "For {} `query`, expected `key` and `value` to be {}-D but found {}-D and {}-D tensors respectively", kind,
          qd, key.dimension(), value.dimension());
    if (opts.key_padding_mask) {
      const std::size_t d = mask_dimension(*opts.key_padding_mask);
      check(d == qd - 1, "key_padding_mask",
            "For {} `query`, expected `key_padding_mask` to be `None` or {}-D but found {}-D tensor instead", kind,
            qd - 1, d);
    }
    if (opts.attn_mask) {
      const std::size_t d = mask_dimension(*opts.attn_mask);
      check(d == 2 || d == 3, "attn_mask",
            "For {} `query`, expected `attn_mask` to be `None`, 2-D or 3-D but found {}-D tensor instead", kind, d);
      if (!batched && d == 3) {
        const std::vector<std::size_t> expected{num_heads(), query.shape(0), key.shape(0)};
        const auto got = mask_shape(*opts.attn_mask);
        check(std::equal(expected.begin(), expected.end(), got.begin(), got.end()), "attn_mask",
              "Expected `attn_mask` shape to be {} but got {}", shape_string(expected), shape_string(got));
      }
    }
    return batched;
  }

  // The checks of multi_head_attention_forward on the sequence-first inputs.
  template <class Shaped>
  void check_inputs(const Shaped& q, const Shaped& k, const Shaped& v) const {
    check(q.shape(2) == embed_dim(), "query", "was expecting embedding dimension of {}, but got {}", embed_dim(),
          q.shape(2));
    check(k.shape(1) == q.shape(1), "key", "expected batch size {} (the query's), but got {}", q.shape(1), k.shape(1));
    check(k.shape(0) == v.shape(0) && k.shape(1) == v.shape(1), "value",
          "key's sequence and batch dims ({}, {}) do not match value's ({}, {})", k.shape(0), k.shape(1), v.shape(0),
          v.shape(1));
    check(k.shape(2) == kdim(), "key", "expected embedding dimension kdim = {}, but got {}", kdim(), k.shape(2));
    check(v.shape(2) == vdim(), "value", "expected embedding dimension vdim = {}, but got {}", vdim(), v.shape(2));
  }

  // key_padding_mask as a float (N, S) mask; unbatched (S) becomes (1, S).
  std::optional<xt::xtensor<T, 2>> prepare_key_padding_mask(const std::optional<Mask<T>>& m, bool batched,
                                                            std::size_t N, std::size_t S) const {
    if (!m) return std::nullopt;
    xt::xarray<T> mask = canonical_mask(*m);
    if (!batched) mask = xt::view(mask, xt::newaxis(), xt::all());
    check(mask.shape(0) == N && mask.shape(1) == S, "key_padding_mask",
          "expecting key_padding_mask shape of {}, but got {}", shape_string({N, S}), shape_string(mask.shape()));
    return xt::xtensor<T, 2>(mask);
  }

  // attn_mask as a float (1, L, S) or (N*H, L, S) mask, with PyTorch's shape checks.
  std::optional<xt::xtensor<T, 3>> prepare_attn_mask(const std::optional<Mask<T>>& m, bool batched, std::size_t L,
                                                     std::size_t N, std::size_t S) const {
    if (!m) return std::nullopt;
    const xt::xarray<T> mask = canonical_mask(*m);
    if (mask.dimension() == 2) {
      check(mask.shape(0) == L && mask.shape(1) == S, "attn_mask",
            "The shape of the 2D attn_mask is {}, but should be {}.", shape_string(mask.shape()), shape_string({L, S}));
      return xt::xtensor<T, 3>(xt::view(mask, xt::newaxis(), xt::all(), xt::all()));  // (1, L, S)
    }
    const std::size_t B = (batched ? N : 1) * num_heads();
    check(mask.shape(0) == B && mask.shape(1) == L && mask.shape(2) == S, "attn_mask",
          "The shape of the 3D attn_mask is {}, but should be {}.", shape_string(mask.shape()),
          shape_string({B, L, S}));
    return xt::xtensor<T, 3>(mask);
  }

  // Appends bias_k to k and bias_v to v as one more position for every batch entry.
  void append_bias_kv(xt::xtensor<T, 3>& k, xt::xtensor<T, 3>& v, std::optional<xt::xtensor<T, 3>>& attn_mask,
                      std::optional<xt::xtensor<T, 2>>& key_padding_mask) const {
    auto append = [](const xt::xtensor<T, 3>& x, const xt::xtensor<T, 3>& bias) {
      const std::size_t S = x.shape(0), N = x.shape(1), E = x.shape(2);
      xt::xtensor<T, 3> out({S + 1, N, E});
      xt::view(out, xt::range(0, S), xt::all(), xt::all()) = x;
      for (std::size_t n = 0; n < N; ++n) xt::view(out, S, n, xt::all()) = xt::view(bias, 0, 0, xt::all());
      return out;
    };
    // add_bias_kv=true gives a module both parameters, and set_parameter cannot remove them.
    if (!bias_k_ || !bias_v_) throw Error("add_bias_kv: expected the parameters bias_k and bias_v, found none");
    k = append(k, *bias_k_);  // (S+1, N, E)
    v = append(v, *bias_v_);
    if (attn_mask) attn_mask = pad_last(*attn_mask);
    if (key_padding_mask) key_padding_mask = pad_last(*key_padding_mask);
  }

  // (N*H, L, S) -> (N, H, L, S), or its mean over heads (N, L, S); unbatched without N.
  xt::xarray<T> output_weights(const xt::xtensor<T, 3>& w, std::size_t N, std::size_t L, std::size_t S, bool average,
                               bool batched) const {
    xt::xarray<T> weights = xt::reshape_view(w, {N, num_heads(), L, S});                    // (N, H, L, S)
    if (average) weights = xt::mean(weights, {1});                                          // (N, L, S)
    if (!batched) weights = xt::xarray<T>(xt::strided_view(weights, {0, xt::ellipsis()}));  // drop N
    return weights;
  }

  Options options_;
  bool training_ = true;
  AttentionPath attention_path_ = AttentionPath::automatic;
  mutable TransposedCache transposed_;
  detail::OwnMutex dropout_mutex_;     // one forward() at a time draws from dropout_generator_
  std::uint64_t weights_version_ = 0;  // see weights_changed()
  Generator dropout_generator_;
  xt::xtensor<T, 2> in_proj_weight_;                  // (3E, E) packed
  SeparateProjections<T> separate_;                   // W_q (E, E), W_k (E, kdim), W_v (E, vdim); biases unused
  std::optional<xt::xtensor<T, 1>> in_proj_bias_;     // (3E)
  xt::xtensor<T, 2> out_proj_weight_;                 // (E, E)
  std::optional<xt::xtensor<T, 1>> out_proj_bias_;    // (E)
  std::optional<xt::xtensor<T, 3>> bias_k_, bias_v_;  // (1, 1, E)
};

}  // namespace mha

// The module is compiled once, in the library, for float and double (instantiations.cpp):
// code that imports mha calls those instead of compiling the whole forward again.
namespace mha {
extern template class MultiheadAttention<float>;
extern template class MultiheadAttention<double>;
}  // namespace mha
