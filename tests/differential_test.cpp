// tests/differential_test.cpp — the randomised differential suite: every way of computing the same forward agrees.
//
// Each trial draws a random module and call from one seed: every construction option
// (embed_dim, num_heads, dropout, bias, add_bias_kv, add_zero_attn, kdim, vdim,
// batch_first), every forward option (bool or float key_padding_mask and attn_mask, 2-D
// or 3-D, fully masked rows and fully padded batch entries, is_causal, need_weights,
// average_attn_weights, training), every layout (seq-first, batch_first, unbatched),
// self / encoder-decoder / cross attention, and degenerate sizes (L or S of 0 or 1, a
// batch of 1, head_dim 1). The call runs in float64 through every path of AttentionPath and in both
// variants (packed, and to_separate()); all must agree with the reference path of the
// packed variant at 1e-10, with NaN in the same places. This proves agreement between
// the implementations, not agreement with PyTorch: the goldens do that.
//
// The second test holds backward() to central finite differences of the forward on the
// same random trials: every gradient, of every input object and every parameter; and the
// fast backward (engine/engine_backward.hpp, the default) to the reference at 1e-10.
//
// Reproducible: trial i uses seed MHA_DIFF_SEED + i (default base 20240601). A failure
// prints the seed and every option of the trial.
//   MHA_DIFF_SEED=123 MHA_DIFF_TRIALS=5000 ./differential_test
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads,
// D = head_dim.
#include "support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace {

using T = double;
using Mask = mha::Mask<T>;

constexpr double tolerance = 1e-10;  // |a - b| <= tolerance * (1 + |b|)
constexpr std::uint64_t default_seed = 20240601;
constexpr int default_trials = 1200;

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* text = std::getenv(name);
  return text ? std::strtoull(text, nullptr, 10) : fallback;
}

// The random source of one trial.
class Draw {
public:
  explicit Draw(std::uint64_t seed) : engine_(seed) {}
  std::size_t size(std::size_t low, std::size_t high) {  // uniform on [low, high]
    return low + static_cast<std::size_t>(engine_() % (high - low + 1));
  }
  bool chance(double p) { return uniform() < p; }
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  double normal() {  // Box-Muller, the two draws taken in a fixed order
    const double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  template <class V>
  V pick(std::initializer_list<V> values) {
    return *(values.begin() + size(0, values.size() - 1));
  }

private:
  std::mt19937_64 engine_;
};

enum class Inputs { self, enc_dec, cross };
enum class MaskKind { none, bool_2d, float_2d, bool_3d, float_3d, causal };

std::string_view name(Inputs i) { return i == Inputs::self ? "self" : i == Inputs::enc_dec ? "enc_dec" : "cross"; }
std::string_view name(MaskKind m) {
  constexpr std::string_view names[] = {"none", "bool_2d", "float_2d", "bool_3d", "float_3d", "causal"};
  return names[static_cast<int>(m)];
}

// One trial: the module, the call and the tensors.
struct Trial {
  std::uint64_t seed = 0;
  mha::Options options;
  bool unbatched = false, training = false;
  std::size_t L = 0, S = 0, N = 0;
  Inputs inputs = Inputs::cross;
  MaskKind attn_mask = MaskKind::none;
  int key_padding_mask = 0;  // 0 none, 1 bool, 2 float
  bool fully_masked_row = false, fully_padded_batch = false;
  mha::ForwardOptions<T> forward;
  xt::xarray<T> query, key, value;
  mha::StateDict<T> parameters;

  std::string describe() const {
    std::ostringstream s;
    s << "seed=" << seed << " embed_dim=" << options.embed_dim << " num_heads=" << options.num_heads
      << " kdim=" << options.kdim.value_or(options.embed_dim) << " vdim=" << options.vdim.value_or(options.embed_dim)
      << " bias=" << options.bias << " add_bias_kv=" << options.add_bias_kv
      << " add_zero_attn=" << options.add_zero_attn << " dropout=" << options.dropout << " training=" << training
      << " batch_first=" << options.batch_first << " unbatched=" << unbatched << " L=" << L << " S=" << S << " N=" << N
      << " inputs=" << name(inputs) << " attn_mask=" << name(attn_mask) << " key_padding_mask="
      << (key_padding_mask == 0   ? "none"
          : key_padding_mask == 1 ? "bool"
                                  : "float")
      << " fully_masked_row=" << fully_masked_row << " fully_padded_batch=" << fully_padded_batch
      << " is_causal=" << forward.is_causal << " need_weights=" << forward.need_weights
      << " average_attn_weights=" << forward.average_attn_weights;
    return s.str();
  }
};

xt::xarray<T> random_tensor(Draw& draw, const std::vector<std::size_t>& shape) {
  return mha_test::random_tensor<T>(shape, draw);
}

// (L, N, dim), (N, L, dim) batch_first, or (L, dim) unbatched.
std::vector<std::size_t> input_shape(const Trial& t, std::size_t length, std::size_t dim) {
  if (t.unbatched) return {length, dim};
  if (t.options.batch_first) return {t.N, length, dim};
  return {length, t.N, dim};
}

// A bool mask (True = masked) with about a third masked, or a float mask of normal
// values with about a quarter -inf.
Mask random_mask(Draw& draw, const std::vector<std::size_t>& shape, bool boolean) {
  if (boolean) {
    xt::xarray<bool> m = xt::zeros<bool>(shape);
    for (auto& v : m) v = draw.chance(0.35);
    return m;
  }
  xt::xarray<T> m = xt::zeros<T>(shape);
  for (auto& v : m) v = draw.chance(0.25) ? -std::numeric_limits<T>::infinity() : draw.normal();
  return m;
}

// Masks every key of the last row (of every leading index): a fully masked query row of
// an attn_mask, or a fully padded batch entry of a key_padding_mask. A 1-D mask is one row.
void mask_last_row(Mask& mask) {
  std::visit(
      [](auto& m) {
        using V = typename std::decay_t<decltype(m)>::value_type;
        const std::size_t S = m.shape(m.dimension() - 1), rows = m.dimension() == 1 ? 1 : m.shape(m.dimension() - 2);
        if (S == 0 || rows == 0) return;
        const V masked = std::is_same_v<V, bool> ? V(1) : -std::numeric_limits<V>::infinity();
        for (std::size_t i = 0; i < m.size(); ++i)
          if ((i / S) % rows == rows - 1) m.data()[i] = masked;
      },
      mask);
}

// 1) the module
void draw_module(Trial& t, Draw& draw) {
  const std::size_t H = draw.size(1, 4), D = draw.size(1, 3), E = H * D;
  t.options.embed_dim = static_cast<std::int64_t>(E);
  t.options.num_heads = static_cast<std::int64_t>(H);
  t.options.bias = draw.chance(0.7);
  t.options.add_bias_kv = draw.chance(0.3);
  t.options.add_zero_attn = draw.chance(0.3);
  t.options.batch_first = draw.chance(0.5);
  t.options.dropout = draw.pick({0.0, 0.0, 0.25, 0.5, 1.0});
  t.training = draw.chance(0.3);
  t.inputs = draw.pick({Inputs::self, Inputs::enc_dec, Inputs::cross});
  if (t.inputs != Inputs::self && draw.chance(0.4)) {
    t.options.kdim = static_cast<std::int64_t>(draw.size(1, 6));
    t.options.vdim = t.inputs == Inputs::enc_dec ? t.options.kdim : static_cast<std::int64_t>(draw.size(1, 6));
  } else if (draw.chance(0.3)) {
    t.options.kdim = t.options.vdim = t.options.embed_dim;  // given explicitly, still packed
  }
}

// 2) sizes and 3) inputs
void draw_inputs(Trial& t, Draw& draw) {
  const auto E = static_cast<std::size_t>(t.options.embed_dim);
  // 2) sizes: empty sequences, no key at all (S' = S + add_bias_kv + add_zero_attn = 0,
  // where PyTorch returns out_proj.bias), an empty batch and single positions included.
  t.unbatched = draw.chance(0.25);
  t.N = t.unbatched ? 1 : draw.pick<std::size_t>({0, 1, 1, 2, 3});
  t.L = draw.pick<std::size_t>({0, 1, 2, 3, 4, 5});
  t.S = t.inputs == Inputs::self ? t.L : draw.pick<std::size_t>({0, 1, 2, 3, 5});

  // 3) inputs
  const std::size_t kdim = static_cast<std::size_t>(t.options.kdim.value_or(t.options.embed_dim));
  const std::size_t vdim = static_cast<std::size_t>(t.options.vdim.value_or(t.options.embed_dim));
  t.query = random_tensor(draw, input_shape(t, t.L, E));
  if (t.inputs == Inputs::self) {
    t.key = t.value = t.query;
  } else {
    t.key = random_tensor(draw, input_shape(t, t.S, kdim));
    t.value = t.inputs == Inputs::cross ? random_tensor(draw, input_shape(t, t.S, vdim)) : t.key;
  }
}

// 4) masks
void draw_masks(Trial& t, Draw& draw) {
  const auto H = static_cast<std::size_t>(t.options.num_heads);
  // with dropout in training too: a fully masked row is NaN, and dropout keeps a
  // dropped NaN NaN (it multiplies by 0, as PyTorch's does) in every path.
  const bool masks = true;
  t.key_padding_mask = masks ? static_cast<int>(draw.size(0, 2)) : 0;
  if (t.key_padding_mask != 0) {
    const std::vector<std::size_t> shape =
        t.unbatched ? std::vector<std::size_t>{t.S} : std::vector<std::size_t>{t.N, t.S};
    Mask m = random_mask(draw, shape, t.key_padding_mask == 1);
    t.fully_padded_batch = draw.chance(0.3);
    if (t.fully_padded_batch) mask_last_row(m);  // the last batch entry: every key padded
    t.forward.key_padding_mask = std::move(m);
  }
  t.attn_mask = !masks ? MaskKind::none
                       : draw.pick({MaskKind::none, MaskKind::bool_2d, MaskKind::float_2d, MaskKind::bool_3d,
                                    MaskKind::float_3d, MaskKind::causal});
  if (t.attn_mask == MaskKind::causal) {
    t.forward.attn_mask = Mask(xt::xarray<bool>(mha::textbook::causal_mask(t.L, t.S)));
    t.forward.is_causal = draw.chance(0.7);
  } else if (t.attn_mask != MaskKind::none) {
    const bool three_d = t.attn_mask == MaskKind::bool_3d || t.attn_mask == MaskKind::float_3d;
    const std::size_t B = (t.unbatched ? 1 : t.N) * H;
    const auto shape = three_d ? std::vector<std::size_t>{B, t.L, t.S} : std::vector<std::size_t>{t.L, t.S};
    Mask m = random_mask(draw, shape, t.attn_mask == MaskKind::bool_2d || t.attn_mask == MaskKind::bool_3d);
    t.fully_masked_row = draw.chance(0.3);
    if (t.fully_masked_row) mask_last_row(m);
    t.forward.attn_mask = std::move(m);
  }
  t.forward.need_weights = draw.chance(0.6);
  t.forward.average_attn_weights = draw.chance(0.5);
}

Trial make_trial(std::uint64_t seed) {
  Draw draw(seed);
  Trial t;
  t.seed = seed;
  draw_module(t, draw);
  draw_inputs(t, draw);
  draw_masks(t, draw);
  // 5) parameters: every one random, biases included (PyTorch starts them at zero)
  const mha::MultiheadAttention<T> shapes(t.options);
  for (const auto& [name, p] : shapes.state_dict()) {
    const std::vector<std::size_t> shape(p.shape().begin(), p.shape().end());
    xt::xarray<T> value = xt::zeros<T>(shape);
    for (auto& v : value) v = draw.uniform() - 0.5;
    t.parameters.emplace(name, std::move(value));
  }
  return t;
}

// The result of one forward, or the message of the mha::Error it threw.
struct Result {
  std::optional<mha::Output<T>> output;
  std::string error;
};

Result run(const Trial& t, const mha::MultiheadAttention<T>& prototype, mha::AttentionPath path, bool need_weights) {
  mha::MultiheadAttention<T> module = prototype;
  module.set_attention_path(path);
  module.train(t.training);
  module.seed_dropout(t.seed);  // the same dropout draws in every run
  mha::ForwardOptions<T> forward = t.forward;
  forward.need_weights = need_weights;
  try {
    // Self-attention and encoder-decoder attention pass one object, as Python's `is`.
    if (t.inputs == Inputs::self) return {module.forward(t.query, t.query, t.query, forward), ""};
    if (t.inputs == Inputs::enc_dec) return {module.forward(t.query, t.key, t.key, forward), ""};
    return {module.forward(t.query, t.key, t.value, forward), ""};
  } catch (const mha::Error& e) {
    return {std::nullopt, e.what()};
  }
}

// "" when a and b agree: same shape, NaN in the same places, equal infinities, and
// |a - b| <= tolerance * (1 + |b|) elsewhere; else what differs and where first.
std::string difference(const xt::xarray<T>& a, const xt::xarray<T>& b) {
  if (!std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(), b.shape().end()))
    return "shape " + mha::shape_string(a.shape()) + " vs " + mha::shape_string(b.shape());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const T x = a.data()[i], y = b.data()[i];
    const bool same = std::isnan(x) || std::isnan(y)   ? std::isnan(x) && std::isnan(y)
                      : std::isinf(x) || std::isinf(y) ? x == y
                                                       : std::abs(x - y) <= tolerance * (1 + std::abs(y));
    if (!same) {
      std::ostringstream s;
      s.precision(17);
      s << "flat index " << i << ": " << x << " vs " << y;
      return s.str();
    }
  }
  return "";
}

// "" when the two runs agree (both threw, or outputs and weights agree), else what differs.
std::string compare(const Result& got, const Result& expected, bool weights) {
  if (!got.output || !expected.output) {
    if (!got.output && !expected.output) return "";
    return "one threw, the other did not: '" + (got.output ? expected.error : got.error) + "'";
  }
  if (auto d = difference(got.output->attn_output, expected.output->attn_output); !d.empty())
    return "attn_output: " + d;
  if (!weights) return "";
  if (got.output->attn_output_weights.has_value() != expected.output->attn_output_weights.has_value())
    return "attn_output_weights returned by one and not the other";
  if (!got.output->attn_output_weights) return "";
  if (auto d = difference(*got.output->attn_output_weights, *expected.output->attn_output_weights); !d.empty())
    return "attn_output_weights: " + d;
  return "";
}

}  // namespace

TEST_CASE("every path and variant agree on random options, shapes and masks", "[differential]") {
  const std::uint64_t base = env_or("MHA_DIFF_SEED", default_seed);
  const auto trials = static_cast<int>(env_or("MHA_DIFF_TRIALS", default_trials));
  int compared = 0, with_nan = 0, rejected = 0;
  for (int i = 0; i < trials; ++i) {
    const Trial t = make_trial(base + static_cast<std::uint64_t>(i));
    mha::MultiheadAttention<T> packed(t.options);
    packed.load_state_dict(t.parameters);
    std::vector<std::pair<std::string, mha::MultiheadAttention<T>>> variants;
    variants.emplace_back(packed.packed() ? "packed" : "separate", packed);
    if (packed.packed()) variants.emplace_back("separate", packed.to_separate());

    // The reference: the readable path of the first variant, with and without weights.
    const Result reference = run(t, variants[0].second, mha::AttentionPath::reference, t.forward.need_weights);
    const Result reference_no_weights = run(t, variants[0].second, mha::AttentionPath::reference, false);
    if (!reference.output) ++rejected;
    else if (const auto& o = reference.output->attn_output;
             std::any_of(o.data(), o.data() + o.size(), [](T x) { return std::isnan(x); }))
      ++with_nan;

    for (const auto& [variant, module] : variants) {
      struct Run {
        mha::AttentionPath path;
        std::string_view name;
        bool need_weights;
      };
      // memory_efficient never forms the weights: it runs with need_weights=false.
      for (const Run r : {Run{mha::AttentionPath::reference, "reference", t.forward.need_weights},
                          Run{mha::AttentionPath::fast, "fast", t.forward.need_weights},
                          Run{mha::AttentionPath::memory_efficient, "memory_efficient", false},
                          Run{mha::AttentionPath::automatic, "automatic", t.forward.need_weights}}) {
        const Result& expected = r.need_weights == t.forward.need_weights ? reference : reference_no_weights;
        const std::string diff = compare(run(t, module, r.path, r.need_weights), expected, r.need_weights);
        if (!diff.empty()) FAIL("variant " << variant << ", path " << r.name << ": " << diff << "\n  " << t.describe());
        ++compared;
      }
    }
  }
  // The suite must exercise what it claims: NaN rows, and more runs than trials.
  INFO("trials " << trials << ", comparisons " << compared << ", with NaN " << with_nan << ", rejected " << rejected);
  CHECK(compared >= 4 * trials);
  CHECK(with_nan > 0);
  CHECK(rejected == 0);  // every trial is a valid call
}

namespace {

// ---- backward() against finite differences --------------------------------------------

// The loss of golden/FORMAT.md: sum(attn_output * g_out) [+ sum(attn_output_weights * g_w)].
T loss(const mha::Output<T>& out, const xt::xarray<T>& g_out, const std::optional<xt::xarray<T>>& g_w) {
  T sum = xt::sum(out.attn_output * g_out)();
  if (g_w) sum += xt::sum(*out.attn_output_weights * *g_w)();
  return sum;
}

// The trial's forward with the inputs given, passed as the trial passes them (one object
// for self-attention, key as value for encoder-decoder).
mha::Output<T> forward_of(const Trial& t, mha::MultiheadAttention<T>& m, const xt::xarray<T>& q, const xt::xarray<T>& k,
                          const xt::xarray<T>& v, const mha::ForwardOptions<T>& opts) {
  if (t.inputs == Inputs::self) return m.forward(q, q, q, opts);
  if (t.inputs == Inputs::enc_dec) return m.forward(q, k, k, opts);
  return m.forward(q, k, v, opts);
}

// forward_for_backward on the trial's own inputs.
std::pair<mha::Output<T>, mha::ForwardRecord<T>> forward_of_record(const Trial& t, mha::MultiheadAttention<T>& m) {
  if (t.inputs == Inputs::self) return m.forward_for_backward(t.query, t.query, t.query, t.forward);
  if (t.inputs == Inputs::enc_dec) return m.forward_for_backward(t.query, t.key, t.key, t.forward);
  return m.forward_for_backward(t.query, t.key, t.value, t.forward);
}

// Central differences (f(x + h) - f(x - h)) / 2h of the loss in every entry of `x`, which
// `forward` reads; "" when each is within fd_tolerance of `analytic`, else where not.
// h = 1e-5: the truncation error, about h^2 times the third derivative, is near 1e-10
// here (inputs, parameters and upstream gradients of order 1), and the rounding error,
// about 1e-16 |loss| / h, near 1e-10 too; 1e-6 leaves a factor of 1e4 above both, and
// a gradient off by any factor, a missing term or a transposed block is off by far more.
constexpr T fd_step = 1e-5, fd_tolerance = 1e-6;

// Every value finite. Read from the raw values: xtensor's iterators over an empty tensor
// offset its null data pointer, which UBSan reports.
bool all_finite(const xt::xarray<T>& x) {
  return std::all_of(x.data(), x.data() + x.size(), [](T v) { return std::isfinite(v); });
}

template <class F>
std::string finite_difference(xt::xarray<T>& x, const xt::xarray<T>& analytic, F&& loss_of) {
  if (!std::equal(x.shape().begin(), x.shape().end(), analytic.shape().begin(), analytic.shape().end()))
    return "shape " + mha::shape_string(analytic.shape()) + ", expected " + mha::shape_string(x.shape());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const T saved = x.data()[i];
    x.data()[i] = saved + fd_step;
    const T up = loss_of();
    x.data()[i] = saved - fd_step;
    const T down = loss_of();
    x.data()[i] = saved;
    const T numeric = (up - down) / (2 * fd_step), exact = analytic.data()[i];
    if (!(std::abs(numeric - exact) <= fd_tolerance * (1 + std::abs(exact)))) {
      std::ostringstream s;
      s.precision(12);
      s << "flat index " << i << ": backward " << exact << ", finite difference " << numeric;
      return s.str();
    }
  }
  return "";
}

}  // namespace

TEST_CASE(
    "backward() agrees with central finite differences on random options, float64, and the fast with the reference",
    "[differential][backward]") {
  const std::uint64_t base = env_or("MHA_DIFF_SEED", default_seed);
  int checked = 0, with_dropout = 0, with_weights = 0, skipped = 0;
  for (int i = 0; i < 400 && checked < 60; ++i) {
    Trial t = make_trial(base + static_cast<std::uint64_t>(i));
    mha::MultiheadAttention<T> module(t.options);
    module.load_state_dict(t.parameters);
    module.train(t.training);
    module.seed_dropout(t.seed);
    auto [out, record] = forward_of_record(t, module);
    // A NaN (a fully masked row) has no finite difference; an empty sequence or batch no entries.
    if (!all_finite(out.attn_output) || out.attn_output.size() == 0 ||
        (out.attn_output_weights && !all_finite(*out.attn_output_weights))) {
      // Still a valid call: both backward paths run on it (empty tensors, NaN rows) and agree.
      const xt::xarray<T> g_out = xt::ones<T>(mha_test::shape_of(out.attn_output));
      mha::MultiheadAttention<T> reference = module;
      reference.set_attention_path(mha::AttentionPath::reference);
      const auto fast = module.backward(record, g_out), slow = reference.backward(record, g_out);
      CHECK(fast.parameters.size() == slow.parameters.size());
      for (const auto& [name, g] : fast.parameters) {
        const std::string d = difference(g, slow.parameters.at(name));
        if (!d.empty()) FAIL_CHECK("gradient of " << name << ", fast vs reference: " << d << "\n  " << t.describe());
      }
      ++skipped;
      continue;
    }
    // The same dropout in every perturbed forward: the one the recorded forward drew.
    mha::ForwardOptions<T> opts = t.forward;
    opts.dropout_mask = record.dropout_mask();
    Draw draw(t.seed + 1);
    const xt::xarray<T> g_out = random_tensor(draw, mha_test::shape_of(out.attn_output));
    std::optional<xt::xarray<T>> g_w;
    if (out.attn_output_weights) g_w = random_tensor(draw, mha_test::shape_of(*out.attn_output_weights));
    const auto grads = module.backward(record, g_out, g_w);

    // Inputs: one per object, perturbed where every use reads it.
    xt::xarray<T> q = t.query, k = t.key, v = t.value;
    auto loss_now = [&] { return loss(forward_of(t, module, q, k, v, opts), g_out, g_w); };
    std::vector<std::pair<std::string, std::string>> failures;
    auto check_input = [&](const char* name, xt::xarray<T>& x, const std::optional<xt::xarray<T>>& g) {
      if (!g) return failures.emplace_back(name, "no gradient returned"), void();
      if (auto d = finite_difference(x, *g, loss_now); !d.empty()) failures.emplace_back(name, d);
    };
    check_input("query", q, grads.query);
    if (t.inputs != Inputs::self) check_input("key", k, grads.key);
    if (t.inputs == Inputs::cross) check_input("value", v, grads.value);
    CHECK((t.inputs == Inputs::self ? !grads.key && !grads.value : t.inputs == Inputs::enc_dec ? !grads.value : true));

    // Parameters: each entry of each, set through set_parameter as a user would.
    for (const auto& name : module.parameter_names()) {
      xt::xarray<T> p = t.parameters.at(name);
      auto loss_with = [&] {
        mha::MultiheadAttention<T> m = module;
        m.set_parameter(name, p);
        return loss(forward_of(t, m, t.query, t.key, t.value, opts), g_out, g_w);
      };
      if (!grads.parameters.contains(name)) failures.emplace_back(name, "no gradient returned");
      else if (auto d = finite_difference(p, grads.parameters.at(name), loss_with); !d.empty())
        failures.emplace_back(name, d);
    }
    CHECK(grads.parameters.size() == module.parameter_names().size());

    // The fast backward (GEMMs, the default) and the reference (loops) agree at 1e-10.
    mha::MultiheadAttention<T> reference = module;
    reference.set_attention_path(mha::AttentionPath::reference);
    const auto slow = reference.backward(record, g_out, g_w);
    auto agree = [&](const std::string& name, const std::optional<xt::xarray<T>>& a,
                     const std::optional<xt::xarray<T>>& b) {
      if (a.has_value() != b.has_value())
        return failures.emplace_back(name, "fast and reference differ in presence"), void();
      if (a)
        if (auto d = difference(*a, *b); !d.empty()) failures.emplace_back(name, "fast vs reference: " + d);
    };
    agree("query", grads.query, slow.query), agree("key", grads.key, slow.key);
    agree("value", grads.value, slow.value);
    for (const auto& [name, g] : grads.parameters)
      agree(name, g, slow.parameters.contains(name) ? std::optional(slow.parameters.at(name)) : std::nullopt);
    for (const auto& [name, what] : failures)
      FAIL_CHECK("gradient of " << name << ": " << what << "\n  " << t.describe());
    ++checked, with_dropout += opts.dropout_mask.has_value(), with_weights += g_w.has_value();
  }
  INFO("checked " << checked << ", with dropout " << with_dropout << ", with weights in the loss " << with_weights
                  << ", skipped (NaN or empty) " << skipped);
  CHECK(checked == 60);
  CHECK(with_dropout > 0);
  CHECK(with_weights > 0);
}
