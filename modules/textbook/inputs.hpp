// modules/textbook/inputs.hpp — the first and last steps of forward(): the inputs' shapes and layout in,
// the caller's layout out.
//
// multi_head_attention_forward works sequence-first and batched: (L, N, E). A module made
// with batch_first=True takes (N, L, E), and an unbatched call takes (L, E). Step 1
// checks the shapes as PyTorch's _mha_shape_check and multi_head_attention_forward do,
// and says how an input's rows are laid out; step 10 gives the results back in the
// caller's layout, and the attention weights per head or averaged over heads.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads,
// Ek = kdim, Ev = vdim, B = N*H.
//
// Included by modules/textbook.cppm, in its module purview: no module line of its own.
// Uses mha.core, masks.hpp, options.hpp, in_projection.hpp.

export namespace mha::textbook {

// How the rows of an input lie in memory, seen as the sequence-first (len, N, width) tensor
// of multi_head_attention_forward. Every layout is a contiguous (len*N, width) matrix whose
// rows are (i, n) sequence-first and unbatched, or (n, i) batch_first.
struct SeqFirstLayout {
  std::size_t len = 0, N = 0, width = 0;
  bool batch_major = false;  // rows (n, i): batch_first
  // The row of position i of batch entry n.
  std::size_t row(std::size_t i, std::size_t n) const { return batch_major ? n * len + i : i * N + n; }
};

// The layout of a query, key or value: (L, E) unbatched is (L, 1, E); (N, L, E) with
// batch_first is (L, N, E) read batch-major.
template <class T>
SeqFirstLayout seq_first_layout(const xt::xarray<T>& x, bool batch_first) {
  check(x.dimension() == 2 || x.dimension() == 3, "input", "expected a 2-D or 3-D tensor, got {}-D", x.dimension());
  if (x.dimension() == 2) return {x.shape(0), 1, x.shape(1), false};   // (L, E) -> (L, 1, E)
  if (batch_first) return {x.shape(1), x.shape(0), x.shape(2), true};  // (N, L, E) -> (L, N, E)
  return {x.shape(0), x.shape(1), x.shape(2), false};                  // (L, N, E)
}

// A query, key or value made sequence-first and batched, as multi_head_attention_forward
// sees it: (N, L, E) batch_first is transposed, (L, E) unbatched gets a batch of 1.
template <class T>
xt::xtensor<T, 3> to_seq_first_batched(const xt::xarray<T>& x, bool batch_first) {
  const SeqFirstLayout layout = seq_first_layout(x, batch_first);
  xt::xtensor<T, 3> y({layout.len, layout.N, layout.width});  // (len, N, width)
  for (std::size_t i = 0; i < layout.len; ++i)
    for (std::size_t n = 0; n < layout.N; ++n)
      std::copy_n(x.data() + layout.row(i, n) * layout.width, layout.width,
                  y.data() + (i * layout.N + n) * layout.width);
  return y;
}

// (L, N, E) -> the caller's layout: (N, L, E) batch_first, (L, E) unbatched.
template <class T>
xt::xarray<T> caller_layout(const xt::xtensor<T, 3>& x, bool batched, bool batch_first) {
  if (!batched) return xt::xarray<T>(xt::view(x, xt::all(), 0, xt::all()));  // (L, E)
  if (batch_first) return xt::xarray<T>(xt::transpose(x, {1, 0, 2}));        // (N, L, E)
  return xt::xarray<T>(x);
}

// The shape of attn_output_weights: (N, H, L, S) per head or (N, L, S) averaged; without
// N unbatched.
std::vector<std::size_t> weights_shape(std::size_t N, std::size_t H, std::size_t L, std::size_t S, bool average,
                                       bool batched) {
  std::vector<std::size_t> shape{N, H, L, S};
  if (average) shape.erase(shape.begin() + 1);
  if (!batched) shape.erase(shape.begin());
  return shape;
}

// attn_output_weights from the (N*H, L, S) weights: as they are, (N, H, L, S), or their
// mean over heads, (N, L, S), summed then divided by H as attn_output_weights.mean(dim=1).
template <class T>
xt::xarray<T> output_weights(const T* w, std::size_t N, std::size_t H, std::size_t L, std::size_t S, bool average,
                             bool batched) {
  xt::xarray<T> out = xt::zeros<T>(weights_shape(N, H, L, S, average, batched));
  if (!average) {
    std::copy_n(w, out.size(), out.data());
    return out;
  }
  const std::size_t LS = L * S;
  for (std::size_t n = 0; n < N; ++n) {
    T* mean = out.data() + n * LS;
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t x = 0; x < LS; ++x) mean[x] += w[(n * H + h) * LS + x];
    for (std::size_t x = 0; x < LS; ++x) mean[x] /= static_cast<T>(H);
  }
  return out;
}

}  // namespace mha::textbook

// Step 1's result and step 1 itself, geometry() below, are exported for the API and the
// engine, which are outside mha.textbook; the checks geometry() runs are not.
export namespace mha::detail {

// The sizes of one forward(), checked as multi_head_attention_forward checks them.
struct Geometry {
  bool batched = true;
  textbook::Aliasing aliasing = textbook::Aliasing::none;
  textbook::SeqFirstLayout query, key, value;  // (L, N, E), (S, N, Ek), (S, N, Ev)
  std::size_t L = 0, S = 0, N = 0;
};

}  // namespace mha::detail

namespace mha::detail {

// _mha_shape_check's mask ranks: key_padding_mask one less than query, attn_mask 2-D or
// 3-D, and an unbatched 3-D attn_mask (H, L, S).
template <class T>
void check_mask_ranks(const ForwardOptions<T>& opts, std::size_t qd, std::size_t H, std::size_t L, std::size_t S) {
  const char* kind = qd == 3 ? "batched (3-D)" : "unbatched (2-D)";
  if (opts.key_padding_mask) {
    const std::size_t d = textbook::mask_dimension(*opts.key_padding_mask);
    check(d == qd - 1, "key_padding_mask",
          "For {} `query`, expected `key_padding_mask` to be `None` or {}-D but found {}-D tensor instead", kind,
          qd - 1, d);
  }
  if (!opts.attn_mask) return;
  const std::size_t d = textbook::mask_dimension(*opts.attn_mask);
  check(d == 2 || d == 3, "attn_mask",
        "For {} `query`, expected `attn_mask` to be `None`, 2-D or 3-D but found {}-D tensor instead", kind, d);
  if (qd == 2 && d == 3) {
    const std::vector<std::size_t> expected{H, L, S};
    const auto got = textbook::mask_shape(*opts.attn_mask);
    check(std::equal(expected.begin(), expected.end(), got.begin(), got.end()), "attn_mask",
          "Expected `attn_mask` shape to be {} but got {}", shape_string(expected), shape_string(got));
  }
}

// _mha_shape_check: batched (3-D) or unbatched (2-D) query, and the ranks that go with it.
template <class T>
bool shape_check(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                 const ForwardOptions<T>& opts, std::size_t H) {
  const std::size_t qd = query.dimension();
  check(qd == 2 || qd == 3, "query", "query should be unbatched 2D or batched 3D tensor but received {}-D query tensor",
        qd);
  check(key.dimension() == qd && value.dimension() == qd, "key, value",
        "For {} `query`, expected `key` and `value` to be {}-D but found {}-D and {}-D tensors respectively",
        qd == 3 ? "batched (3-D)" : "unbatched (2-D)", qd, key.dimension(), value.dimension());
  check_mask_ranks(opts, qd, H, query.shape(0), key.shape(0));
  return qd == 3;
}

// The checks of multi_head_attention_forward on the sequence-first inputs.
void check_sizes(const textbook::SeqFirstLayout& q, const textbook::SeqFirstLayout& k,
                 const textbook::SeqFirstLayout& v, const Sizes& sizes) {
  check(q.width == sizes.E, "query", "was expecting embedding dimension of {}, but got {}", sizes.E, q.width);
  check(k.N == q.N, "key", "expected batch size {} (the query's), but got {}", q.N, k.N);
  check(k.len == v.len && k.N == v.N, "value", "key's sequence and batch dims ({}, {}) do not match value's ({}, {})",
        k.len, k.N, v.len, v.N);
  check(k.width == sizes.kdim, "key", "expected embedding dimension kdim = {}, but got {}", sizes.kdim, k.width);
  check(v.width == sizes.vdim, "value", "expected embedding dimension vdim = {}, but got {}", sizes.vdim, v.width);
}

// Unbatched inputs lose their identity in PyTorch (each is unsqueezed on its own), so
// only batched inputs take the one-GEMM or two-GEMM path.
template <class T>
textbook::Aliasing aliasing_of(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                               bool batched) {
  if (!batched) return textbook::Aliasing::none;
  if (&query == &key && &key == &value) return textbook::Aliasing::self_attention;
  return &key == &value ? textbook::Aliasing::key_is_value : textbook::Aliasing::none;
}

}  // namespace mha::detail

export namespace mha::detail {

// Step 1 of forward(): every shape checked once, the sizes and layouts that follow.
template <class T>
Geometry geometry(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                  const ForwardOptions<T>& opts, const Options& options) {
  const Sizes sizes(options);
  Geometry g;
  g.batched = shape_check(query, key, value, opts, sizes.H);
  g.aliasing = aliasing_of(query, key, value, g.batched);
  const bool batch_first = options.batch_first && g.batched;
  g.query = textbook::seq_first_layout(query, batch_first), g.key = textbook::seq_first_layout(key, batch_first);
  g.value = textbook::seq_first_layout(value, batch_first);
  check_sizes(g.query, g.key, g.value, sizes);
  g.L = g.query.len, g.N = g.query.N, g.S = g.key.len;
  return g;
}

}  // namespace mha::detail
