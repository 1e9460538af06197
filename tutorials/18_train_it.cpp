// tutorials/18_train_it.cpp — Tutorial 18: train it. A model built on the module learns to reverse sequences.
//
// The task: a sequence of L = 8 tokens, each one of V = 8, and its reverse as the target
// ("3 1 4 1 5 0 2 6" -> "6 2 0 5 1 4 1 3"). The model, golden/generator/training.py's
// Reverser, in float64:
//   x      = embedding[tokens] + position       (L, N, E)  a learned row per token and per place
//   y      = MultiheadAttention(x, x, x)        (L, N, E)  E = 16, H = 2, bias=False
//   logits = y W_r^T + b_r                      (L, N, V)  the readout
//   loss   = mean over the N*L tokens of -log softmax(logits)[target]
// Position i must look at position L-1-i and copy its token: attention, steered by the
// position rows. The attention's gradients come from the module's backward(); those of the
// embedding, the readout and the cross-entropy are written here, with Adam, in a few lines
// each (docs/18-train-it.md derives them).
//
// PyTorch trained the same model from the same initialisation on the same 20 batches
// (golden/training/reverse/): the program follows those steps and checks every loss and
// the parameters after the last. Then it goes on with batches of its own until at least
// 99% of sequences it never trained on come out with every token right, and draws the
// loss curve.
//
// Legend: V = vocabulary, L = sequence length, N = batch, E = embed_dim, H = heads.
#include "arguments.hpp"
#include <xtensor/xadapt.hpp>
#include <xtensor/xsort.hpp>

#include <array>
#include <cstdint>
#include <cstring>

#include "drawing.hpp"
#include "tutorial.hpp"

import mha.io;

namespace {

using T = double;
using Tokens = xt::xtensor<std::int32_t, 2>;  // (N, L): N sequences of L tokens
using Parameters = mha::StateDict<T>;         // by PyTorch's state_dict names

// The task, the model and the optimizer, as golden/generator/training.py's REVERSE.
constexpr std::size_t V = 8, L = 8, E = 16, H = 2, N = 32;
constexpr double kLearningRate = 0.01;
// Training after PyTorch's steps: held-out sequences, a check of them every 10 steps, and
// the goal: that share of them reversed with every token right.
constexpr std::size_t kHeldOut = 1000, kEvery = 10, kMaxSteps = 1000;
constexpr double kTargetAccuracy = 0.99;

// ---- the model ---------------------------------------------------------------------------

// The parameters, and the attention layer that runs with the "attention." ones (a copy:
// load_attention() hands it the current values).
struct Reverser {
  Parameters parameters;  // embedding.weight, position, attention.*, readout.weight, readout.bias
  mha::MultiheadAttention<T> attention{mha::Options{.embed_dim = E, .num_heads = H, .bias = false}};

  void load_attention() {
    Parameters own;  // the names without "attention.": the module's state_dict
    for (const auto& [name, value] : parameters)
      if (name.starts_with("attention.")) own.emplace(name.substr(std::string("attention.").size()), value);
    attention.load_state_dict(own);
  }
};

// x = embedding[tokens] + position. tokens (N, L) -> (L, N, E), sequence first.
xt::xtensor<T, 3> embed(const Parameters& p, const Tokens& tokens) {
  const auto &embedding = p.at("embedding.weight"), &position = p.at("position");  // (V, E), (L, E)
  xt::xtensor<T, 3> x = xt::xtensor<T, 3>::from_shape({L, tokens.shape(0), E});
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t n = 0; n < tokens.shape(0); ++n)
      for (std::size_t e = 0; e < E; ++e) x(i, n, e) = embedding(tokens(n, i), e) + position(i, e);
  return x;
}

// logits = y W_r^T + b_r. (L, N, E) -> (L, N, V)
xt::xtensor<T, 3> readout(const Parameters& p, const xt::xtensor<T, 3>& y) {
  const xt::xtensor<T, 2> weight = p.at("readout.weight");  // (V, E)
  const std::optional<xt::xtensor<T, 1>> bias = xt::xtensor<T, 1>(p.at("readout.bias"));
  return mha::textbook::linear(y, weight, bias);
}

// The forward pass, and what its backward needs: the attention's output y (the readout's
// input) and the record of the attention's forward.
struct Pass {
  xt::xtensor<T, 3> y, logits;  // (L, N, E), (L, N, V)
  mha::ForwardRecord<T> record;
};

Pass forward(Reverser& m, const Tokens& tokens) {
  const xt::xarray<T> x = embed(m.parameters, tokens);  // (L, N, E)
  // Self-attention: one object as query, key and value, so backward() sums its three uses.
  auto [out, record] = m.attention.forward_for_backward(x, x, x, {.need_weights = false});
  xt::xtensor<T, 3> y = out.attn_output;  // (L, N, E)
  auto logits = readout(m.parameters, y);
  return {std::move(y), std::move(logits), std::move(record)};
}

// The logits alone, for evaluation: the module's fast path, nothing recorded.
xt::xtensor<T, 3> predict(Reverser& m, const Tokens& tokens) {
  const xt::xarray<T> x = embed(m.parameters, tokens);
  const xt::xtensor<T, 3> y = m.attention.forward(x, x, x, {.need_weights = false}).attn_output;
  return readout(m.parameters, y);
}

// ---- the loss ----------------------------------------------------------------------------

// F.cross_entropy (mean): loss = mean over the N*L tokens of log(sum_v e^{z_v}) - z_target,
// with z a token's logits, and P = softmax(z), which its backward needs.
struct CrossEntropy {
  T loss;
  xt::xtensor<T, 3> probabilities;  // (L, N, V)
};

CrossEntropy cross_entropy(const xt::xtensor<T, 3>& logits, const Tokens& targets) {
  const std::size_t n_batch = logits.shape(1);
  CrossEntropy ce{0, xt::xtensor<T, 3>::from_shape(logits.shape())};
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t n = 0; n < n_batch; ++n) {
      auto z = xt::view(logits, i, n, xt::all());  // (V)
      const T top = xt::amax(z)();                 // subtracted first: e^{z - top} cannot overflow
      const T log_sum = top + std::log(xt::sum(xt::exp(z - top))());
      xt::view(ce.probabilities, i, n, xt::all()) = xt::exp(z - log_sum);
      ce.loss += log_sum - z(targets(n, i));
    }
  ce.loss /= static_cast<T>(L * n_batch);
  return ce;
}

// ---- the backward pass, from the loss back -------------------------------------------------

// cross-entropy backward: d logits = (P - onehot(target)) / (N*L). (L, N, V)
xt::xtensor<T, 3> cross_entropy_backward(const xt::xtensor<T, 3>& probabilities, const Tokens& targets) {
  xt::xtensor<T, 3> d_logits = probabilities;
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t n = 0; n < targets.shape(0); ++n) d_logits(i, n, targets(n, i)) -= 1;
  return d_logits / static_cast<T>(L * targets.shape(0));
}

// embedding backward: a token's row gets the gradient of every place the token was at,
// a position's row the gradient of that place in every sequence.
//   d embedding[v] = sum of dx(i, n) over (i, n) with tokens(n, i) = v     (V, E)
//   d position[i]  = sum of dx(i, n) over n                                (L, E)
void embed_backward(const Tokens& tokens, const xt::xtensor<T, 3>& dx, Parameters& grad) {
  xt::xtensor<T, 2> d_embedding = xt::zeros<T>({V, E}), d_position = xt::zeros<T>({L, E});
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t n = 0; n < tokens.shape(0); ++n)
      for (std::size_t e = 0; e < E; ++e) {
        d_embedding(tokens(n, i), e) += dx(i, n, e);
        d_position(i, e) += dx(i, n, e);
      }
  grad["embedding.weight"] = d_embedding;
  grad["position"] = d_position;
}

// A wrong gradient, to show that the check of the trajectory can fail.
enum class Mistake { none, swap_q_and_k };

// dL/d(every parameter), by state_dict name: readout, attention (backward()), embedding.
Parameters backward(const Reverser& m, const Pass& pass, const Tokens& tokens, const xt::xtensor<T, 3>& d_logits,
                    Mistake mistake) {
  Parameters grad;
  // readout: dy = d_logits W_r, dW_r = d_logits^T y, db_r = sum of d_logits (as out_proj's, tutorial 17)
  const auto r = mha::textbook::linear_backward(pass.y, xt::xtensor<T, 2>(m.parameters.at("readout.weight")), d_logits,
                                                /*has_bias=*/true);
  grad["readout.weight"] = r.weight, grad["readout.bias"] = *r.bias;
  // attention: the module's backward of the recorded forward, upstream gradient dy
  const auto g = m.attention.backward(pass.record, r.input);
  for (const auto& [name, value] : g.parameters) grad["attention." + name] = value;
  if (mistake == Mistake::swap_q_and_k) {           // dW_q's rows where dW_k's belong, and back
    auto& w = grad.at("attention.in_proj_weight");  // (3E, E) = [dW_q; dW_k; dW_v]
    const xt::xtensor<T, 2> dw_q = xt::view(w, xt::range(0, E), xt::all());
    xt::view(w, xt::range(0, E), xt::all()) = xt::view(w, xt::range(E, 2 * E), xt::all());
    xt::view(w, xt::range(E, 2 * E), xt::all()) = dw_q;
  }
  // embedding: g.query is dx, the sum of x's gradients as query, key and value
  embed_backward(tokens, tutorial::value_of(g.query, "grad of x"), grad);
  return grad;
}

// ---- the optimizer -------------------------------------------------------------------------

// torch.optim.Adam (betas (0.9, 0.999), eps 1e-8), in the order of torch 1.13's
// _single_tensor_adam: moments m and v, each bias-corrected, then one step per value
//   m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2,
//   w = w - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
struct Adam {
  double lr, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  int t = 0;                  // steps taken
  Parameters m = {}, v = {};  // the moments, zero before the first step

  void step(Parameters& w, const Parameters& grad) {
    ++t;
    const double step_size = lr / (1 - std::pow(beta1, t)), bias_correction2_sqrt = std::sqrt(1 - std::pow(beta2, t));
    for (auto& [name, value] : w) {
      const auto& g = grad.at(name);
      auto& m_w = m.try_emplace(name, xt::zeros_like(g)).first->second;  // this parameter's m
      auto& v_w = v.try_emplace(name, xt::zeros_like(g)).first->second;  // and v
      m_w = m_w * beta1 + (1 - beta1) * g;
      v_w = v_w * beta2 + (1 - beta2) * g * g;
      value += -step_size * (m_w / (xt::sqrt(v_w) / bias_correction2_sqrt + eps));
    }
  }
};

// One step of training on a batch: forward, loss, backward, Adam. The loss before the step.
T train_step(Reverser& model, Adam& adam, const Tokens& tokens, const Tokens& targets,
             Mistake mistake = Mistake::none) {
  const Pass pass = forward(model, tokens);
  const auto ce = cross_entropy(pass.logits, targets);
  const auto grad = backward(model, pass, tokens, cross_entropy_backward(ce.probabilities, targets), mistake);
  adam.step(model.parameters, grad);
  model.load_attention();  // the module's copy of the new values (a new forward, a new record)
  return ce.loss;
}

// ---- data ----------------------------------------------------------------------------------

// The targets: each sequence reversed. (N, L)
Tokens reversed(const Tokens& tokens) { return xt::flip(tokens, 1); }

// `n` sequences of L tokens drawn uniformly from the vocabulary. (n, L)
Tokens draw_sequences(mha::Generator& generator, std::size_t n) {
  Tokens tokens = Tokens::from_shape({n, L});
  for (auto& token : tokens)
    token = static_cast<std::int32_t>(std::min<double>(V - 1, std::floor(generator.uniform() * V)));
  return tokens;
}

// The tokens of a golden .npy file: int32 (what training.py writes), of the shape expected.
xt::xtensor<std::int32_t, 3> load_tokens(const std::filesystem::path& path, std::array<std::size_t, 3> shape) {
  const mha::NpyArray array = mha::read_npy(path);
  tutorial::check(array.descr == "<i4", path.string(), "expected dtype int32, got {}", mha::dtype_name(array.descr));
  tutorial::check(std::ranges::equal(array.shape, shape), path.string(), "expected shape {}, got {}",
                  mha::shape_string(shape), mha::shape_string(array.shape));
  xt::xtensor<std::int32_t, 3> tokens = xt::xtensor<std::int32_t, 3>::from_shape(shape);
  std::memcpy(tokens.data(), array.bytes.data(), tokens.size() * sizeof(std::int32_t));
  tutorial::check(xt::all(tokens >= 0 && tokens < static_cast<std::int32_t>(V)), path.string(),
                  "expected tokens in [0, {}), got {} to {}", V, xt::amin(tokens)(), xt::amax(tokens)());
  return tokens;
}

// The golden parameters of a folder (initial/, final/), of the shapes the model has.
Parameters load_parameters(const std::filesystem::path& folder) {
  Parameters p = mha::load_npy_folder<T>(folder);
  const std::map<std::string, std::vector<std::size_t>> shapes = {
      {"embedding.weight", {V, E}},          {"position", {L, E}},       {"attention.in_proj_weight", {3 * E, E}},
      {"attention.out_proj.weight", {E, E}}, {"readout.weight", {V, E}}, {"readout.bias", {V}}};
  for (const auto& [name, shape] : shapes) {
    tutorial::check(p.contains(name), folder.string(), "expected {}.npy, found none", name);
    tutorial::check(std::ranges::equal(p.at(name).shape(), shape), name, "expected shape {}, got {}",
                    mha::shape_string(shape), mha::shape_string(p.at(name).shape()));
  }
  tutorial::check(p.size() == shapes.size(), folder.string(), "expected {} parameters, got {}", shapes.size(),
                  p.size());
  return p;
}

// How much of `tokens` the model reverses: the share of tokens whose largest logit is the
// right one, and of sequences with every token right.
struct Accuracy {
  double tokens, sequences;
};

Accuracy accuracy(Reverser& model, const Tokens& tokens) {
  const auto logits = predict(model, tokens);                       // (L, n, V)
  const xt::xtensor<std::size_t, 2> guess = xt::argmax(logits, 2);  // (L, n)
  const Tokens targets = reversed(tokens);                          // (n, L)
  std::size_t right_tokens = 0, right_sequences = 0;
  for (std::size_t n = 0; n < targets.shape(0); ++n) {
    std::size_t right = 0;
    for (std::size_t i = 0; i < L; ++i) right += guess(i, n) == static_cast<std::size_t>(targets(n, i));
    right_tokens += right, right_sequences += right == L;
  }
  return {static_cast<double>(right_tokens) / static_cast<double>(targets.size()),
          static_cast<double>(right_sequences) / static_cast<double>(targets.shape(0))};
}

// ---- the loss curve ------------------------------------------------------------------------

using drawing::fill;
using drawing::Image;
using drawing::Pen;
using drawing::text;
using drawing::text_height;
using drawing::text_up;
using drawing::text_width;

// Sized for a projector: a 960 x 560 image, its text in the 5x7 font scaled 3 times
// (21-pixel letters), as tutorial 11's maps.
constexpr std::size_t kLeft = 120, kTop = 30, kWidth = 800, kHeight = 380;
const png::rgb_pixel kBlue{8, 48, 107}, kOrange{230, 120, 20}, kAxis{90, 90, 90}, kGrid{222, 222, 222};
const Pen kText{.font = &drawing::font_5x7, .scale = 3, .ink = {0, 0, 0}};

// The step between two labelled ticks: 1, 2 or 5 times a power of 10, the smallest that
// labels at most `most` ticks over `span`.
double tick_step(double span, std::size_t most) {
  for (double power = 1e-3;; power *= 10)
    for (double m : {1.0, 2.0, 5.0})
      if (span / (m * power) <= static_cast<double>(most)) return m * power;
}

// The loss of every step, a line (C++), with PyTorch's losses of the first K steps as
// dots; a grid, labelled ticks, and a dashed line at log 8, the loss of a uniform guess.
// x: step 1 to the last; y: loss 0 to the largest loss rounded up to a half.
void loss_curve(const std::vector<T>& losses, const xt::xarray<T>& pytorch, const std::filesystem::path& file) {
  const double top = std::ceil(2 * std::max(xt::amax(pytorch)(), *std::ranges::max_element(losses))) / 2;
  const std::size_t steps = losses.size();
  auto px = [&](double step) {  // step 1 .. steps -> column
    return kLeft + static_cast<std::size_t>(std::lround((step - 1) / double(steps - 1) * (kWidth - 1)));
  };
  auto py = [&](double loss) {
    return kTop + static_cast<std::size_t>(std::lround((1 - std::clamp(loss / top, 0.0, 1.0)) * (kHeight - 1)));
  };
  Image img(static_cast<png::uint_32>(kLeft + kWidth + 40), static_cast<png::uint_32>(kTop + kHeight + 150));
  fill(img, 0, 0, img.get_width(), img.get_height(), {255, 255, 255});

  // 1) grid and ticks: the loss every 0.5, the steps at 1 and every 10 (for 50 steps)
  const std::size_t tick = 8, gap = 10;
  for (double loss = 0; loss <= top + 1e-9; loss += tick_step(top, 6)) {
    fill(img, kLeft, py(loss), kWidth, 1, kGrid);
    fill(img, kLeft - tick, py(loss), tick, 2, kAxis);
    const std::string label = fmt::format("{:.1f}", loss);
    text(img, kLeft - tick - gap - text_width(label, kText), py(loss) - 10, label, kText);
  }
  const auto every = static_cast<std::size_t>(tick_step(double(steps), 6));
  for (std::size_t step = 1; step <= steps; step = (step == 1 && every > 1) ? every : step + every) {
    fill(img, px(double(step)), kTop, 1, kHeight, kGrid);
    fill(img, px(double(step)), kTop + kHeight, 2, tick, kAxis);
    const std::string label = fmt::format("{}", step);
    text(img, px(double(step)) - text_width(label, kText) / 2, kTop + kHeight + tick + gap, label, kText);
  }
  fill(img, kLeft - 2, kTop, 2, kHeight + 1, kAxis);           // the loss axis
  fill(img, kLeft - 2, kTop + kHeight, kWidth + 2, 2, kAxis);  // the step axis
  text_up(img, 14, kTop + (kHeight - text_width("loss", kText)) / 2, "loss", kText);
  text(img, kLeft + (kWidth - text_width("training step", kText)) / 2, kTop + kHeight + 56, "training step", kText);

  // 2) log 8 = 2.08, the loss of a uniform guess among 8 tokens: a dashed line
  const std::size_t uniform = py(std::log(8.0));
  for (std::size_t x = kLeft; x + 12 < kLeft + kWidth; x += 24) fill(img, x, uniform, 12, 2, kAxis);
  text(img, kLeft + kWidth - text_width("log 8 = 2.08", kText) - 8, uniform - text_height(kText) - 2, "log 8 = 2.08",
       kText);

  // 3) the line, column by column: from the previous column's height to this one's, so
  // that a steep fall stays connected; then PyTorch's dots over it
  std::size_t previous = py(losses[0]);
  for (std::size_t s = 0; s + 1 < steps; ++s)
    for (std::size_t x = px(double(s + 1)); x < px(double(s + 2)); ++x) {
      const double f = double(x - px(double(s + 1))) / double(px(double(s + 2)) - px(double(s + 1)));
      const auto y =
          static_cast<std::size_t>(std::lround((1 - f) * double(py(losses[s])) + f * double(py(losses[s + 1]))));
      fill(img, x, std::min(previous, y) - 1, 3, std::max(previous, y) - std::min(previous, y) + 3, kBlue);
      previous = y;
    }
  for (std::size_t s = 0; s < pytorch.size(); ++s)
    fill(img, px(double(s + 1)) - 5, py(pytorch(s)) - 5, 11, 11, kOrange);

  // 4) the legend, under the plot: what the line and the dots are, and which steps have dots
  const std::size_t legend = kTop + kHeight + 100;
  fill(img, kLeft, legend + 8, 40, 4, kBlue);
  text(img, kLeft + 52, legend, "c++, every step", kText);
  const std::size_t second = kLeft + 52 + text_width("c++, every step", kText) + 60;
  fill(img, second + 14, legend + 5, 11, 11, kOrange);
  text(img, second + 40, legend, fmt::format("pytorch, steps 1-{} only", pytorch.size()), kText);
  img.write(file.string());
  fmt::print("  wrote {}\n", file.generic_string());
}

}  // namespace

int main(int argc, char** argv) try {
  cli::Arguments arguments{"Tutorial 18: train a model built on the module, step for step as PyTorch"};
  std::filesystem::path out_dir = "train-it";  // in the folder the program runs from
  arguments.option("--out", out_dir, "folder for loss.png, the loss curve (default: train-it/ in the current folder)");
  if (const auto stop = arguments.parse(argc, argv)) return *stop;  // --help, or a bad option
  mha::use_best_blas_kernel();  // OpenBLAS's best kernel for this CPU (README: the BLAS kernel)

  tutorial::title("18", "train it",
                  "Demonstrates: a model built on the module learns to reverse sequences; its first\n"
                  "              steps are PyTorch's, loss for loss, parameter for parameter.");
  const auto golden = tutorial::project_path("golden/training/reverse");
  fmt::print("Golden training run: {}\n", "golden/training/reverse");

  tutorial::step(1, "the model PyTorch initialised");
  Reverser model{load_parameters(golden / "initial")};
  model.load_attention();
  for (const auto& [name, value] : model.parameters) tutorial::shape(name, value);

  tutorial::step(2, "PyTorch's batches, step by step: the loss of each, before its update");
  const auto loss_pytorch = mha::load_npy<T>(golden / "loss.npy");  // (K)
  const std::size_t K = loss_pytorch.size();
  const auto tokens = load_tokens(golden / "tokens.npy", {K, N, L});    // (K, N, L)
  const auto targets = load_tokens(golden / "targets.npy", {K, N, L});  // (K, N, L)
  tutorial::shape("tokens (K, N, L)", tokens);
  tutorial::Verdict verdict;
  verdict.holds("the targets are the tokens reversed", targets == xt::flip(tokens, 2));
  // Float64 sums taken in another order than PyTorch's: after 20 steps no loss and no
  // parameter differs from PyTorch's by more than 1.3e-15 (measured under OpenBLAS's
  // Prescott, Haswell and SkylakeX kernels). 1e-12 leaves a factor of 750 for other CPUs
  // and compilers, and is 10^11 times smaller than what a wrong gradient does (step 3).
  verdict.tolerance(/*rtol=*/1e-12, /*atol=*/1e-12);
  Adam adam{kLearningRate};
  std::vector<T> losses;
  fmt::print("  {:>4}  {:>8}  {:>8}\n", "step", "C++", "PyTorch");
  for (std::size_t k = 0; k < K; ++k) {
    losses.push_back(train_step(model, adam, xt::view(tokens, k), xt::view(targets, k)));
    fmt::print("  {:>4}  {}  {}\n", k + 1, tutorial::number(losses[k]), tutorial::number(loss_pytorch(k)));
  }
  verdict.matches(fmt::format("the {} losses vs PyTorch's", K), xt::adapt(losses), loss_pytorch);
  const auto final_pytorch = load_parameters(golden / "final");
  for (const auto& [name, value] : model.parameters)
    verdict.matches(fmt::format("{} after {} steps", name, K), value, final_pytorch.at(name));

  tutorial::step(3, "the same steps with a wrong gradient: dW_q and dW_k swapped");
  Reverser wrong{load_parameters(golden / "initial")};
  wrong.load_attention();
  Adam wrong_adam{kLearningRate};
  std::vector<T> wrong_losses;
  for (std::size_t k = 0; k < K; ++k)
    wrong_losses.push_back(
        train_step(wrong, wrong_adam, xt::view(tokens, k), xt::view(targets, k), Mistake::swap_q_and_k));
  verdict.differs(fmt::format("the {} losses, Q and K blocks swapped", K), xt::adapt(wrong_losses), loss_pytorch);
  verdict.differs("in_proj_weight after them", wrong.parameters.at("attention.in_proj_weight"),
                  final_pytorch.at("attention.in_proj_weight"));

  tutorial::step(4, "training on, until 99% of held-out sequences come out right");
  // Batches and held-out sequences of its own, from seeded generators: the same every run.
  // Of the 8^8 = 16.8M sequences training sees 32 a step: the held-out ones are, all but
  // surely, new to it.
  mha::Generator batches(12), held_out_draws(1212);
  const Tokens held_out = draw_sequences(held_out_draws, kHeldOut);  // (1000, L)
  // Accuracies in percent with one decimal: a token or a sequence that another CPU's last
  // bits tipped the other way would move the last digit by one at most.
  auto report = [&](const Accuracy& a) {
    fmt::print("  {:>4}  {}  {:>7.1f}%  {:>8.1f}%\n", losses.size(), tutorial::number(losses.back()), 100 * a.tokens,
               100 * a.sequences);
  };
  fmt::print("  {:>4}  {:>8}  {:>8}  {:>9}\n", "step", "loss", "tokens", "sequences");
  Accuracy held_out_accuracy = accuracy(model, held_out);
  report(held_out_accuracy);
  while (held_out_accuracy.sequences < kTargetAccuracy && losses.size() < kMaxSteps) {
    const Tokens batch = draw_sequences(batches, N);
    losses.push_back(train_step(model, adam, batch, reversed(batch)));
    if (losses.size() % kEvery == 0) report(held_out_accuracy = accuracy(model, held_out));
  }
  verdict.holds(fmt::format("held-out sequences all right >= {:.0f}%", 100 * kTargetAccuracy),
                held_out_accuracy.sequences >= kTargetAccuracy);

  tutorial::step(5, "the loss curve");
  std::filesystem::create_directories(out_dir);
  loss_curve(losses, loss_pytorch, out_dir / "loss.png");
  return verdict.finish();
} catch (const std::exception& e) {
  fmt::print(stderr, "tutorial-18-train-it: {}\n", e.what());
  return EXIT_FAILURE;
}
