// drawing.hpp — what the tutorials that write PNG files (07 and 12) draw with: filled
// rectangles, and labels in a 3x5 bitmap font, on png++ images.
//
// Include it before tutorial.hpp, which ends with `import mha;`.
#pragma once

#include <png++/png.hpp>

#include <array>
#include <cstddef>
#include <map>
#include <string_view>

namespace drawing {

using Image = png::image<png::rgb_pixel>;

// A font pixel is kScale x kScale pixels of the image; a glyph is 3 font pixels wide, 5
// high, and the next one starts 4 font pixels further right.
constexpr std::size_t kScale = 2;

// Five rows of three pixels per glyph, '#' = ink: the digits, and the letters and signs
// the tutorials' labels use.
inline const std::map<char, std::array<const char*, 5>> font = {
    {'0', {"###", "#.#", "#.#", "#.#", "###"}}, {'1', {".#.", "##.", ".#.", ".#.", "###"}},
    {'2', {"###", "..#", "###", "#..", "###"}}, {'3', {"###", "..#", "###", "..#", "###"}},
    {'4', {"#.#", "#.#", "###", "..#", "..#"}}, {'5', {"###", "#..", "###", "..#", "###"}},
    {'6', {"###", "#..", "###", "#.#", "###"}}, {'7', {"###", "..#", "..#", "..#", "..#"}},
    {'8', {"###", "#.#", "###", "#.#", "###"}}, {'9', {"###", "#.#", "###", "..#", "###"}},
    {'.', {"...", "...", "...", "...", ".#."}}, {'+', {"...", ".#.", "###", ".#.", "..."}},
    {'a', {"...", "##.", "..#", "###", "###"}}, {'c', {"...", "###", "#..", "#..", "###"}},
    {'d', {"..#", "..#", "###", "#.#", "###"}}, {'e', {"...", "###", "###", "#..", "###"}},
    {'h', {"#..", "#..", "###", "#.#", "#.#"}}, {'k', {"#..", "#.#", "##.", "#.#", "#.#"}},
    {'l', {".#.", ".#.", ".#.", ".#.", ".#."}}, {'m', {"...", "###", "###", "#.#", "#.#"}},
    {'n', {"...", "##.", "#.#", "#.#", "#.#"}}, {'o', {"...", "###", "#.#", "#.#", "###"}},
    {'p', {"...", "###", "#.#", "###", "#.."}}, {'q', {"...", "###", "#.#", "###", "..#"}},
    {'r', {"...", "#.#", "##.", "#..", "#.."}}, {'s', {".##", "#..", ".#.", "..#", "##."}},
    {'t', {".#.", "###", ".#.", ".#.", ".##"}}, {'u', {"...", "#.#", "#.#", "#.#", "###"}},
    {'y', {"...", "#.#", "###", "..#", "##."}}, {' ', {"...", "...", "...", "...", "..."}},
};

// The w x h rectangle with its top left corner at (x0, y0), in colour c.
inline void fill(Image& img, std::size_t x0, std::size_t y0, std::size_t w, std::size_t h, png::rgb_pixel c) {
  for (std::size_t y = y0; y < y0 + h; ++y)
    for (std::size_t x = x0; x < x0 + w; ++x) img[y][x] = c;
}

// `s` with its top left corner at (x, y).
inline void text(Image& img, std::size_t x, std::size_t y, std::string_view s, png::rgb_pixel ink = {0, 0, 0}) {
  for (char ch : s) {
    const auto& glyph = font.at(ch);
    for (std::size_t r = 0; r < 5; ++r)
      for (std::size_t col = 0; col < 3; ++col)
        if (glyph[r][col] == '#') fill(img, x + col * kScale, y + r * kScale, kScale, kScale, ink);
    x += 4 * kScale;
  }
}

}  // namespace drawing
