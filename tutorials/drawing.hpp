// tutorials/drawing.hpp — what the tutorials that write PNG files (11 and 18) draw with: filled
// rectangles, and text in a bitmap font, on png++ images: 5x7 glyphs (tutorial 11's
// attention maps and tutorial 18's loss curve), drawn large enough for a projector. A
// glyph is a table of '#' (ink) and '.', drawn scaled up: each font pixel becomes a
// scale x scale square. Everything is integer arithmetic, so the same text gives
// the same pixels, and the PNG the same bytes, on every run.
//
// Include it before tutorial.hpp, which ends with `import mha;`.
#pragma once

#include <png++/png.hpp>

#include <cstddef>
#include <cstring>
#include <map>
#include <string_view>
#include <vector>

namespace drawing {

using Image = png::image<png::rgb_pixel>;

// A bitmap font. A glyph lists its rows from the top: `ascent` rows down to the baseline,
// and more only for a letter that reaches below it (g, p, q, y); rows left out are blank.
// A glyph's width is the length of its rows, so a narrow sign ('.') takes less room than a
// digit. The next glyph starts one font pixel after the previous one ends.
struct Font {
  std::size_t ascent, height;  // rows above the baseline; rows in all, with those below it
  std::map<char, std::vector<const char*>> glyphs;
};

// 5x7: the digits, the decimal point, and the lower-case letters and signs of tutorial 11's
// titles, axis labels and legend ("head", "mean over heads", "query position", "weight",
// "masked") and of tutorial 18's ("loss", "training step", "c++, every step", "pytorch,
// steps 1-20 only", "log 8 = 2.08"); g, p, q, y and the comma reach below the seventh
// row, the baseline.
inline const Font font_5x7{.ascent = 7,
                           .height = 9,
                           .glyphs = {
                               {'0', {".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."}},
                               {'1', {"..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."}},
                               {'2', {".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"}},
                               {'3', {"#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###."}},
                               {'4', {"...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."}},
                               {'5', {"#####", "#....", "####.", "....#", "....#", "#...#", ".###."}},
                               {'6', {"..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."}},
                               {'7', {"#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."}},
                               {'8', {".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."}},
                               {'9', {".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."}},
                               {'.', {"..", "..", "..", "..", "..", "##", "##"}},
                               {' ', {"...", "...", "...", "...", "...", "...", "..."}},
                               {',', {"..", "..", "..", "..", "..", "##", "##", ".#", "#."}},
                               {'+', {".....", "..#..", "..#..", "#####", "..#..", "..#..", "....."}},
                               {'-', {"....", "....", "....", "####", "....", "....", "...."}},
                               {'=', {".....", ".....", "#####", ".....", "#####", ".....", "....."}},
                               {'a', {".....", ".....", ".###.", "....#", ".####", "#...#", ".####"}},
                               {'c', {".....", ".....", ".####", "#....", "#....", "#....", ".####"}},
                               {'d', {"....#", "....#", ".##.#", "#..##", "#...#", "#...#", ".####"}},
                               {'e', {".....", ".....", ".###.", "#...#", "#####", "#....", ".###."}},
                               {'g', {".....", ".....", ".####", "#...#", "#...#", "#...#", ".####", "....#", ".###."}},
                               {'h', {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "#...#"}},
                               {'i', {"..#..", ".....", ".##..", "..#..", "..#..", "..#..", ".###."}},
                               {'k', {"#....", "#....", "#..#.", "#.#..", "##...", "#.#..", "#..#."}},
                               {'l', {".##..", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."}},
                               {'m', {".....", ".....", "##.#.", "#.#.#", "#.#.#", "#...#", "#...#"}},
                               {'n', {".....", ".....", "#.##.", "##..#", "#...#", "#...#", "#...#"}},
                               {'o', {".....", ".....", ".###.", "#...#", "#...#", "#...#", ".###."}},
                               {'p', {".....", ".....", "####.", "#...#", "#...#", "#...#", "####.", "#....", "#...."}},
                               {'q', {".....", ".....", ".####", "#...#", "#...#", "#...#", ".####", "....#", "....#"}},
                               {'r', {".....", ".....", "#.##.", "##..#", "#....", "#....", "#...."}},
                               {'s', {".....", ".....", ".####", "#....", ".###.", "....#", "####."}},
                               {'t', {".#...", ".#...", "###..", ".#...", ".#...", ".#..#", "..##."}},
                               {'u', {".....", ".....", "#...#", "#...#", "#...#", "#..##", ".##.#"}},
                               {'v', {".....", ".....", "#...#", "#...#", "#...#", ".#.#.", "..#.."}},
                               {'w', {".....", ".....", "#...#", "#...#", "#.#.#", "#.#.#", ".#.#."}},
                               {'y', {".....", ".....", "#...#", "#...#", "#...#", "#...#", ".####", "....#", ".###."}},
                           }};

// How text is drawn: in which font, how many image pixels per font pixel, in which colour.
struct Pen {
  const Font* font = &font_5x7;
  std::size_t scale = 3;
  png::rgb_pixel ink{0, 0, 0};
};

// The w x h rectangle with its top left corner at (x0, y0), in colour c.
inline void fill(Image& img, std::size_t x0, std::size_t y0, std::size_t w, std::size_t h, png::rgb_pixel c) {
  for (std::size_t y = y0; y < y0 + h; ++y)
    for (std::size_t x = x0; x < x0 + w; ++x) img[y][x] = c;
}

// How many pixels `s` takes along its line, and across it.
inline std::size_t text_width(std::string_view s, const Pen& pen = {}) {
  std::size_t font_pixels = 0;
  for (char ch : s) font_pixels += std::strlen(pen.font->glyphs.at(ch)[0]) + 1;
  return font_pixels == 0 ? 0 : (font_pixels - 1) * pen.scale;  // no gap after the last glyph
}
inline std::size_t text_height(const Pen& pen = {}) { return pen.font->height * pen.scale; }
inline std::size_t text_ascent(const Pen& pen = {}) { return pen.font->ascent * pen.scale; }

// `s` with its top left corner at (x, y), read left to right.
inline void text(Image& img, std::size_t x, std::size_t y, std::string_view s, const Pen& pen = {}) {
  for (char ch : s) {
    const auto& glyph = pen.font->glyphs.at(ch);
    const std::size_t width = std::strlen(glyph[0]);
    for (std::size_t r = 0; r < glyph.size(); ++r)
      for (std::size_t col = 0; col < width; ++col)
        if (glyph[r][col] == '#') fill(img, x + col * pen.scale, y + r * pen.scale, pen.scale, pen.scale, pen.ink);
    x += (width + 1) * pen.scale;
  }
}

// `s` turned a quarter left, read bottom to top, as a y axis is labelled: it fills the
// text_height(pen) x text_width(s, pen) box whose top left corner is (x, y). A glyph's top
// row is the box's left column, and its first glyph is at the bottom.
inline void text_up(Image& img, std::size_t x, std::size_t y, std::string_view s, const Pen& pen = {}) {
  std::size_t along = 0;  // pixels read so far, from the box's bottom edge up
  const std::size_t bottom = y + text_width(s, pen);
  for (char ch : s) {
    const auto& glyph = pen.font->glyphs.at(ch);
    const std::size_t width = std::strlen(glyph[0]);
    for (std::size_t r = 0; r < glyph.size(); ++r)
      for (std::size_t col = 0; col < width; ++col)
        if (glyph[r][col] == '#')
          fill(img, x + r * pen.scale, bottom - along - (col + 1) * pen.scale, pen.scale, pen.scale, pen.ink);
    along += (width + 1) * pen.scale;
  }
}

}  // namespace drawing
