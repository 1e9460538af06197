// tests/parameters_test.cpp — textbook/parameters.hpp: the parameters by state_dict name and shape, and PyTorch's initialisation.
#include "support.hpp"

using Catch::Matchers::ContainsSubstring;
using namespace mha_test::small;

TEST_CASE("parameters are checked by name and shape", "[errors][state_dict]") {
  mha::MultiheadAttention<float> m(options());
  CHECK_MHA_ERROR(m.set_parameter("in_proj_weight", zeros({3 * E, E + 1})),
                  ContainsSubstring("in_proj_weight:") && ContainsSubstring("expected shape (24, 8), got (24, 9)"));
  CHECK_MHA_ERROR(m.set_parameter("in_proj_bias", zeros({E})),
                  ContainsSubstring("in_proj_bias:") && ContainsSubstring("(24,)"));
  CHECK_MHA_ERROR(m.set_parameter("q_proj_weight", zeros({E, E})),
                  ContainsSubstring("q_proj_weight:") && ContainsSubstring("no such parameter"));
  CHECK_MHA_ERROR(m.parameter("bias_k"), ContainsSubstring("bias_k:"));

  auto dict = m.state_dict();
  dict.erase("out_proj.bias");
  CHECK_MHA_ERROR(m.load_state_dict(dict),
                  ContainsSubstring("state_dict:") && ContainsSubstring("missing key 'out_proj.bias'"));
  dict = m.state_dict();
  dict.emplace("in_proj.weight", zeros({3 * E, E}));
  CHECK_MHA_ERROR(m.load_state_dict(dict),
                  ContainsSubstring("state_dict:") && ContainsSubstring("unexpected key 'in_proj.weight'"));

  // add_bias_kv: bias_k and bias_v are required parameters.
  auto o = options();
  o.add_bias_kv = true;
  mha::MultiheadAttention<float> with_bias_kv(o);
  dict = m.state_dict();  // from a module without bias_k/bias_v
  CHECK_MHA_ERROR(with_bias_kv.load_state_dict(dict), ContainsSubstring("missing key 'bias_k'"));
  CHECK_MHA_ERROR(with_bias_kv.set_parameter("bias_v", zeros({E})),
                  ContainsSubstring("bias_v:") && ContainsSubstring("(1, 1, 8)"));
}

namespace init {

// A wider module: enough draws for the initialisation bounds to be reached.
constexpr std::size_t E = 64, H = 4;

mha::Options options() {
  mha::Options o;
  o.embed_dim = static_cast<std::int64_t>(E);
  o.num_heads = static_cast<std::int64_t>(H);
  return o;
}

TEST_CASE("default initialisation follows PyTorch's _reset_parameters", "[module][init]") {
  auto o = options();
  o.add_bias_kv = true;
  const mha::MultiheadAttention<double> m(o, /*seed=*/7);
  // xavier_uniform over the whole packed (3E, E): fan_in = E, fan_out = 3E, so the bound
  // is sqrt(6 / (E + 3E)) = sqrt(6 / 256) = 0.153..., not sqrt(6 / 2E) = 0.216...
  const double xavier_bound = std::sqrt(6.0 / (4.0 * E));
  const auto w = m.parameter("in_proj_weight");
  CHECK(xt::amax(xt::abs(w))() <= xavier_bound);
  CHECK(xt::amax(xt::abs(w))() > 0.99 * xavier_bound);  // 12288 uniform draws reach the edge
  // out_proj.weight: Linear's kaiming_uniform(a = sqrt(5)), bound 1 / sqrt(E) = 0.125.
  const auto out = m.parameter("out_proj.weight");
  CHECK(xt::amax(xt::abs(out))() <= 1.0 / std::sqrt(double(E)));
  CHECK(xt::amax(xt::abs(out))() > 0.98 / std::sqrt(double(E)));
  // Biases start at zero.
  CHECK(xt::all(xt::equal(m.parameter("in_proj_bias"), 0.0)));
  CHECK(xt::all(xt::equal(m.parameter("out_proj.bias"), 0.0)));
  // bias_k, bias_v: xavier_normal on (1, 1, E), fan_in = fan_out = E: std = sqrt(1 / E).
  const auto bk = m.parameter("bias_k");
  const double std = std::sqrt(xt::mean(bk * bk)());
  CHECK(std > 0.5 / std::sqrt(double(E)));
  CHECK(std < 1.5 / std::sqrt(double(E)));
  // kdim/vdim: each projection gets its own xavier bound, sqrt(6 / (E + kdim)).
  auto ok = options();
  ok.kdim = 32;
  const mha::MultiheadAttention<double> mk(ok, 7);
  CHECK(xt::amax(xt::abs(mk.parameter("k_proj_weight")))() <= std::sqrt(6.0 / (E + 32)));
  CHECK(xt::amax(xt::abs(mk.parameter("k_proj_weight")))() > 0.99 * std::sqrt(6.0 / (E + 32)) * 0.98);
}

TEST_CASE("initialisation is reproducible from its seed", "[module][init]") {
  const mha::MultiheadAttention<float> a(options(), 1), b(options(), 1), c(options(), 2);
  CHECK(mha_test::same(a.parameter("in_proj_weight"), b.parameter("in_proj_weight")));
  CHECK(!mha_test::same(a.parameter("in_proj_weight"), c.parameter("in_proj_weight")));
}

}  // namespace init

std::uint64_t weights_version_made_in_another_unit();  // tests/weights_version_elsewhere.cpp

TEST_CASE("weights versions are one sequence across the library and every translation unit", "[module][version]") {
  // Versions are made by the library (a module's parameters), by Parameters in this unit
  // and in another test unit: one counter, so each new one is larger than all before.
  mha::MultiheadAttention<double> m(mha::Options{.embed_dim = 4, .num_heads = 2});
  const std::uint64_t library = m.weights_version();
  const std::uint64_t here = mha::textbook::Parameters<double>(m.options()).version();
  const std::uint64_t elsewhere = weights_version_made_in_another_unit();
  m.set_parameter("out_proj.bias", xt::xarray<double>{1.0, 2.0, 3.0, 4.0});
  const std::uint64_t library_again = m.weights_version();
  CHECK(library < here);
  CHECK(here < elsewhere);
  CHECK(elsewhere < library_again);
}

// What the engine's cache of W^T is keyed by can be read from outside, never written: only
// set(), reset() and repacked() give a new version. Both sides asserted: reading compiles,
// writing does not (a requires-expression on a template parameter is false, not an error).
template <class P>
concept version_readable = requires(const P& p) {
  { p.version() } -> std::same_as<std::uint64_t>;
};
template <class P>
concept version_writable = requires(P& p) { p.version_ = 1; } || requires(P& p) { p.version = 1; };
static_assert(version_readable<mha::textbook::Parameters<float>>);
static_assert(!version_writable<mha::textbook::Parameters<float>>);

TEST_CASE("a change of the weights is a new version, and a copy keeps the version of its equal weights",
          "[parameters]") {
  mha::textbook::Parameters<float> p(options());
  const auto first = p.version();
  const mha::textbook::Parameters<float> copy = p;
  CHECK(copy.version() == first);
  p.set("out_proj.bias", zeros({E}));
  CHECK(p.version() != first);
  CHECK(p.repacked(/*to_packed=*/false).version() != p.version());
}
