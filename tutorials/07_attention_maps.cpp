// Tutorial 07: attention maps as pictures.
//
// attn_output_weights (N, H, L, S) with average_attn_weights=False holds, for every batch
// entry and head, one (L, S) map: row i is how query position i spreads its attention
// over the key positions. This program draws those maps as PNG heatmaps (one per head,
// plus the mean over heads that PyTorch returns by default) for a small self-attention
// input with a causal mask and a padded key. Rows are query positions, columns key
// positions, white = 0 and dark blue = 1; masked cells are grey. The PNGs are written by
// libpng through png++; the numbers are checked against PyTorch's first.
//
// Legend: L = target length, S = source length, N = batch, H = heads.
#include <CLI/CLI.hpp>

#include <array>

#include "drawing.hpp"
#include "tutorial.hpp"

namespace {

using drawing::fill;
using drawing::Image;
using drawing::text;

constexpr std::size_t kCell = 32, kLeft = 48, kTop = 44;

// 0 -> white, 1 -> dark blue, linearly.
png::rgb_pixel color(double w) {
  auto mix = [w](double a, double b) {
    return static_cast<png::byte>(std::lround(a + (b - a) * std::clamp(w, 0.0, 1.0)));
  };
  return {mix(255, 8), mix(255, 48), mix(255, 107)};
}

// One (L, S) map; masked(i, j) cells are drawn grey. Axis labels are token positions.
void heatmap(const xt::xarray<double>& map, const xt::xarray<bool>& masked, std::string_view title,
             const std::filesystem::path& file) {
  const std::size_t L = map.shape(0), S = map.shape(1);
  Image img(static_cast<png::uint_32>(kLeft + S * kCell + 56), static_cast<png::uint_32>(kTop + L * kCell + 8));
  fill(img, 0, 0, img.get_width(), img.get_height(), {255, 255, 255});
  text(img, 4, 4, title);
  text(img, 4, kTop - 14, "query");
  text(img, kLeft + S * kCell + 4, kTop - 14, "key");
  for (std::size_t j = 0; j < S; ++j) text(img, kLeft + j * kCell + kCell / 2 - 3, kTop - 14, std::to_string(j));
  for (std::size_t i = 0; i < L; ++i) {
    text(img, kLeft - 16, kTop + i * kCell + kCell / 2 - 5, std::to_string(i));
    for (std::size_t j = 0; j < S; ++j)
      fill(img, kLeft + j * kCell + 1, kTop + i * kCell + 1, kCell - 2, kCell - 2,
           masked(i, j) ? png::rgb_pixel{200, 200, 200} : color(map(i, j)));
  }
  const std::size_t bar = kLeft + S * kCell + 30;  // colour bar: 0 at the top, 1 at the bottom
  fill(img, bar - 1, kTop - 1, 14, L * kCell + 2, {160, 160, 160});
  for (std::size_t y = 0; y < L * kCell; ++y) fill(img, bar, kTop + y, 12, 1, color(double(y) / double(L * kCell - 1)));
  text(img, bar + 16, kTop, "0");
  text(img, bar + 16, kTop + L * kCell - 10, "1");
  img.write(file.string());
  fmt::print("  wrote {}\n", file.generic_string());
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"Tutorial 07: attention maps as PNG heatmaps"};
  std::string case_name = "is_causal_batchfirst_key_padding_mask_f64";
  std::filesystem::path out_dir = std::filesystem::path(argv[0]).parent_path() / "attention-maps";
  std::size_t n = 1;
  app.add_option("--case", case_name, "golden case (float64, batched, need_weights)");
  app.add_option("--out", out_dir, "folder for the PNG files (default: next to this program)");
  app.add_option("--batch", n, "which batch entry to draw");
  CLI11_PARSE(app, argc, argv);

  tutorial::title("07", "attention maps as pictures",
                  "Demonstrates: one (L, S) attention map per head and their mean, drawn as PNG\n"
                  "              heatmaps; causal mask and padded key visible as grey cells.");
  auto c = tutorial::load<double>(case_name);
  const auto& o = c.info.options;
  if (o.add_bias_kv || o.add_zero_attn || c.query.dimension() != 3 || !c.info.need_weights)
    return fmt::print("This tutorial takes batched cases with need_weights, no add_bias_kv / add_zero_attn.\n"), 2;
  tutorial::Verdict verdict(c);
  auto module = tutorial::reference_module(c);

  tutorial::step(1, "the weights per head: average_attn_weights=False");
  c.forward.average_attn_weights = false;
  const auto out = mha::run_forward(module, c);
  const auto& per_head = tutorial::weights(out);  // (N, H, L, S)
  const std::size_t H = per_head.shape(1), L = per_head.shape(2), S = per_head.shape(3);
  tutorial::shape("attn_output_weights (N, H, L, S)", per_head);
  const xt::xarray<double> mean = xt::mean(per_head, {1});  // (N, L, S)
  tutorial::shape("mean over heads (N, L, S)", mean);
  if (n >= per_head.shape(0)) return fmt::print("--batch {}: the case has N = {}\n", n, per_head.shape(0)), 2;

  tutorial::step(2, "which cells are masked: attn_mask + key_padding_mask (tutorial 05)");
  // Step 2 of forward() (mha::prepare_masks), then the merge of step 7.
  const auto masks = mha::prepare_masks(c.forward.attn_mask, c.forward.key_padding_mask, c.forward.is_causal,
                                        c.forward.need_weights, /*batched=*/true, L, per_head.shape(0), S, H);
  const auto mask = mha::merge_masks(masks.attn_mask, masks.key_padding_mask, H, L);  // (1 or N*H, L, S)
  auto masked = [&](std::size_t h) {  // (L, S): true where head h of batch n may not look
    if (!mask) return xt::xarray<bool>(xt::zeros<bool>({L, S}));
    return xt::xarray<bool>(xt::isinf(xt::view(*mask, mask->shape(0) == 1 ? 0 : n * H + h)));
  };
  xt::xarray<bool> masked_all = masked(0);  // masked for every head: grey in the mean map
  for (std::size_t h = 1; h < H; ++h) masked_all = masked_all && masked(h);
  for (std::size_t i = 0; i < L; ++i) {
    std::string row;
    for (std::size_t j = 0; j < S; ++j) row += masked_all(i, j) ? " x" : " .";
    fmt::print("    query {}{}\n", i, row);
  }
  const bool attn = c.forward.attn_mask.has_value(), padding = c.forward.key_padding_mask.has_value();
  fmt::print("  x = -inf in every head: {}{}\n",
             attn && padding ? "attn_mask, plus key_padding_mask"
             : attn          ? "attn_mask"
             : padding       ? "key_padding_mask"
                             : "(no mask in this case)",
             padding ? fmt::format(" of batch entry {}", n) : "");
  tutorial::values(fmt::format("mean map, batch {}", n), xt::view(mean, n), L, S);

  tutorial::step(3, "one PNG per head, and the mean");
  std::filesystem::create_directories(out_dir);
  for (std::size_t h = 0; h < H; ++h)
    heatmap(xt::view(per_head, n, h), masked(h), fmt::format("head {}", h), out_dir / fmt::format("head{}.png", h));
  heatmap(xt::view(mean, n), masked_all, "mean", out_dir / "mean.png");
  fmt::print("  rows = query positions, columns = key positions; white 0, dark blue 1, grey masked\n");

  tutorial::step(4, "check against PyTorch");
  if (c.info.average_attn_weights)
    verdict.matches("mean of the heads vs PyTorch's weights", mean, c.expected.at("attn_output_weights"));
  else verdict.matches("per-head weights vs PyTorch's", per_head, c.expected.at("attn_output_weights"));
  verdict.matches("attn_output vs PyTorch's", out.attn_output, c.expected.at("attn_output"));
  return verdict.finish();
} catch (const std::exception& e) {  // a case this tutorial cannot take, or a file it cannot read
  fmt::print("error: {}\n", e.what());
  return 2;
}
