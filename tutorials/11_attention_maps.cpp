// tutorials/11_attention_maps.cpp — Tutorial 11: attention maps as pictures.
//
// attn_output_weights (N, H, L, S) with average_attn_weights=False holds, for every batch
// entry and head, one (L, S) map: row i is how query position i spreads its attention
// over the key positions. This program draws those maps as PNG heatmaps (one per head,
// plus the mean over heads that PyTorch returns by default) for a small self-attention
// input with a causal mask and a padded key. Rows are query positions, columns key
// positions; each cell is coloured from white (0) to dark blue (1) and holds its weight in
// two decimals; masked cells are grey. A legend shows the colour scale and the grey. The
// pictures are sized for a projector (80-pixel cells, a 5x7 bitmap font scaled up three
// times) and drawn deterministically, so CTest can compare them byte for byte with the
// committed docs/images/attention-maps/. The PNGs are written by libpng through png++;
// the numbers are checked against PyTorch's first.
//
// Legend: L = target length, S = source length, N = batch, H = heads.
#include "arguments.hpp"

#include <array>
#include <string>
#include <utility>

#include "drawing.hpp"
#include "tutorial.hpp"

namespace {

using drawing::fill;
using drawing::Image;
using drawing::Pen;
using drawing::text;
using drawing::text_height;
using drawing::text_width;

// Sizes in pixels, chosen for a projector: a cell holds its weight in digits 21 pixels
// high (the 5x7 font at scale 3), and the picture is about 800 pixels wide for L = S = 6.
constexpr std::size_t kCell = 80;    // one (query, key) cell, a 1-pixel grid line on each side
constexpr std::size_t kMargin = 24;  // around the picture
constexpr std::size_t kBar = 240, kBarWidth = 28, kSwatch = 28;  // the legend's colour bar, grey swatch

const png::rgb_pixel kWhite{255, 255, 255}, kInk{27, 27, 27}, kMasked{200, 200, 200};
const png::rgb_pixel kGridLine{225, 225, 225}, kFrame{160, 160, 160};  // kGridLine: a cell of weight 0 still shows
const Pen kTitlePen{&drawing::font_5x7, 4, kInk}, kLabelPen{&drawing::font_5x7, 3, kInk};

// 0 -> white, 1 -> dark blue, linearly.
png::rgb_pixel color(double w) {
  auto mix = [w](double a, double b) {
    return static_cast<png::byte>(std::lround(a + (b - a) * std::clamp(w, 0.0, 1.0)));
  };
  return {mix(255, 8), mix(255, 48), mix(255, 107)};
}

// Text that stays readable on a cell of colour c: white on dark cells, ink on light ones.
// Brightness as the eye weighs red, green and blue (ITU-R BT.601), in integers.
png::rgb_pixel ink_on(png::rgb_pixel c) {
  const unsigned brightness = (299u * c.red + 587u * c.green + 114u * c.blue) / 1000u;
  return brightness < 128 ? kWhite : kInk;
}

// `s` centred on the point (cx, cy): the part above the baseline is, so that digits sit
// in the middle of a cell and a g or a y hangs below.
void text_centred(Image& img, std::size_t cx, std::size_t cy, std::string_view s, const Pen& pen) {
  text(img, cx - text_width(s, pen) / 2, cy - drawing::text_ascent(pen) / 2, s, pen);
}

// Where the parts of an (L, S) map go. From the top: the title, the "key position" label,
// the key indices, the grid. From the left: the "query position" label (turned, as a y
// axis is), the query indices, the grid, then the legend. The *_cy are the heights at
// which a line of labels is centred.
struct Layout {
  std::size_t key_label_cy, key_index_cy;
  std::size_t grid_x, grid_y;  // top left corner of cell (0, 0)
  std::size_t legend_x;        // left edge of the legend
  std::size_t width, height;   // of the picture
};

Layout layout(std::size_t L, std::size_t S, std::string_view title) {
  const std::size_t ascent = drawing::text_ascent(kLabelPen), line = text_height(kLabelPen);  // line: with descenders
  Layout at{};
  at.key_label_cy = kMargin + text_height(kTitlePen) + 20 + ascent / 2;
  at.key_index_cy = at.key_label_cy - ascent / 2 + line + 8 + ascent / 2;
  at.grid_y = at.key_index_cy + ascent / 2 + 12;
  at.grid_x = kMargin + line + 12 + text_width(std::to_string(L - 1), kLabelPen) + 12;
  at.legend_x = at.grid_x + S * kCell + 40;
  const std::size_t legend_width =
      std::max({text_width("weight", kLabelPen), kBarWidth + 14 + text_width("0.5", kLabelPen),
                kSwatch + 10 + text_width("masked", kLabelPen)});
  at.width = std::max(at.legend_x + legend_width, kMargin + text_width(title, kTitlePen)) + kMargin;
  const std::size_t legend_bottom = at.grid_y + kBar + 32 + kSwatch;
  at.height = std::max(at.grid_y + L * kCell, legend_bottom) + kMargin;
  return at;
}

// The axes: what the rows and columns are, and their indices.
void axes(Image& img, const Layout& at, std::size_t L, std::size_t S) {
  text_centred(img, at.grid_x + S * kCell / 2, at.key_label_cy, "key position", kLabelPen);
  for (std::size_t j = 0; j < S; ++j)
    text_centred(img, at.grid_x + j * kCell + kCell / 2, at.key_index_cy, std::to_string(j), kLabelPen);
  const std::size_t up = text_width("query position", kLabelPen);  // the turned label's height
  drawing::text_up(img, kMargin, at.grid_y + L * kCell / 2 - up / 2, "query position", kLabelPen);
  for (std::size_t i = 0; i < L; ++i) {  // right-aligned against the grid
    const std::string index = std::to_string(i);
    text(img, at.grid_x - 12 - text_width(index, kLabelPen),
         at.grid_y + i * kCell + kCell / 2 - drawing::text_ascent(kLabelPen) / 2, index, kLabelPen);
  }
}

// The cells: colour by weight, and the weight itself in two decimals; masked cells grey
// and empty (their weight is 0 because the mask said so, not because of the scores).
void cells(Image& img, const Layout& at, const xt::xarray<double>& map, const xt::xarray<bool>& masked) {
  fill(img, at.grid_x, at.grid_y, map.shape(1) * kCell, map.shape(0) * kCell, kGridLine);
  for (std::size_t i = 0; i < map.shape(0); ++i)
    for (std::size_t j = 0; j < map.shape(1); ++j) {
      const std::size_t x = at.grid_x + j * kCell, y = at.grid_y + i * kCell;
      if (masked(i, j)) {
        fill(img, x + 1, y + 1, kCell - 2, kCell - 2, kMasked);
        continue;
      }
      const png::rgb_pixel c = color(map(i, j));
      fill(img, x + 1, y + 1, kCell - 2, kCell - 2, c);
      text_centred(img, x + kCell / 2, y + kCell / 2, fmt::format("{:.2f}", map(i, j)),
                   Pen{&drawing::font_5x7, 3, ink_on(c)});
    }
}

// The legend: the colour scale from 0 (bottom) to 1 (top) with its ends and middle
// marked, and the grey of a masked cell.
void legend(Image& img, const Layout& at) {
  const std::size_t x = at.legend_x, y = at.grid_y, ascent = drawing::text_ascent(kLabelPen);
  text_centred(img, x + text_width("weight", kLabelPen) / 2, at.key_label_cy, "weight", kLabelPen);
  fill(img, x - 1, y - 1, kBarWidth + 2, kBar + 2, kFrame);  // a frame, so that the white end shows
  for (std::size_t row = 0; row < kBar; ++row)
    fill(img, x, y + row, kBarWidth, 1, color(double(kBar - 1 - row) / double(kBar - 1)));
  const std::array<std::pair<std::size_t, const char*>, 3> ticks{{{0, "1"}, {kBar / 2, "0.5"}, {kBar - 1, "0"}}};
  for (const auto& [row, value] : ticks) {                // row of the bar, from its top
    fill(img, x + kBarWidth + 1, y + row, 6, 1, kFrame);  // a tick
    text(img, x + kBarWidth + 14, y + row - ascent / 2, value, kLabelPen);
  }
  const std::size_t swatch_y = y + kBar + 32;
  fill(img, x - 1, swatch_y - 1, kSwatch + 2, kSwatch + 2, kFrame);
  fill(img, x, swatch_y, kSwatch, kSwatch, kMasked);
  text(img, x + kSwatch + 10, swatch_y + kSwatch / 2 - ascent / 2, "masked", kLabelPen);
}

// One (L, S) map as a PNG; masked(i, j) cells are drawn grey.
void heatmap(const xt::xarray<double>& map, const xt::xarray<bool>& masked, std::string_view title,
             const std::filesystem::path& file) {
  const std::size_t L = map.shape(0), S = map.shape(1);
  const Layout at = layout(L, S, title);
  Image img(static_cast<png::uint_32>(at.width), static_cast<png::uint_32>(at.height));
  fill(img, 0, 0, at.width, at.height, kWhite);
  text(img, kMargin, kMargin, title, kTitlePen);
  axes(img, at, L, S);
  cells(img, at, map, masked);
  legend(img, at);
  img.write(file.string());
  fmt::print("  wrote {}\n", file.generic_string());
}

}  // namespace

int main(int argc, char** argv) try {
  cli::Arguments arguments{"Tutorial 11: attention maps as PNG heatmaps"};
  std::string case_name = "is_causal_batchfirst_key_padding_mask_f64";
  std::filesystem::path out_dir = "attention-maps";  // in the folder the program runs from
  std::size_t n = 1;
  arguments.option("--case", case_name, "golden case (float64, batched, need_weights)");
  arguments.option("--out", out_dir, "folder for the PNG files (default: attention-maps/ in the current folder)");
  arguments.option("--batch", n, "which batch entry to draw");
  if (const auto stop = arguments.parse(argc, argv)) return *stop;  // --help, or a bad option
  mha::use_best_blas_kernel();  // OpenBLAS's best kernel for this CPU (README: the BLAS kernel)

  tutorial::title("11", "attention maps as pictures",
                  "Demonstrates: one (L, S) attention map per head and their mean, drawn as PNG\n"
                  "              heatmaps; causal mask and padded key visible as grey cells.");
  auto c = tutorial::load<double>(case_name);
  const auto& o = c.info.options;
  tutorial::refuse_unless(!o.add_bias_kv && !o.add_zero_attn && c.query.dimension() == 3 && c.info.need_weights, c.info,
                          "is not a batched case with need_weights and without add_bias_kv / add_zero_attn");
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
  tutorial::refuse_unless(n < per_head.shape(0), c.info,
                          fmt::format("has N = {}: no batch entry {} to draw (--batch)", per_head.shape(0), n));

  tutorial::step(2, "which cells are masked: attn_mask + key_padding_mask (tutorial 09)");
  // Step 2 of forward() (mha::textbook::prepare_masks), then the merge of step 7.
  const auto masks = mha::textbook::prepare_masks(c.forward.attn_mask, c.forward.key_padding_mask, c.forward.is_causal,
                                                  c.forward.need_weights, /*batched=*/true, L, per_head.shape(0), S, H);
  const auto mask = mha::textbook::merge_masks(masks.attn_mask, masks.key_padding_mask, H, L);  // (1 or N*H, L, S)
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
  heatmap(xt::view(mean, n), masked_all, "mean over heads", out_dir / "mean.png");
  fmt::print(
      "  rows = query positions, columns = key positions; each cell holds its weight,\n"
      "  white 0 to dark blue 1; grey = masked (weight 0)\n");

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
