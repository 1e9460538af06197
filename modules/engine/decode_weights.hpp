// modules/engine/decode_weights.hpp (internal) — the decoding step's copy of the weights: each
// weight's rows interleaved four at a time, so that four rows read as one stream.
//
// The decoding step (decode_step.hpp) dots every row of a weight W (out, in) with the new
// rows of x, four rows of W at a time, so that each load of x serves four rows. Read where
// they are, in the module's row-major W, those four rows are four streams 4·in bytes
// apart, and each 4 KiB row (E = 1024) starts on a page of its own: the hardware's
// prefetchers start over at every row, four times at once. Interleaved, the four rows are
// one stream, read from start to end. Measured on the machine of docs/performance.md, 2
// threads each dotting 8 MiB of rows with one x (a one-off program): 106-115 µs read
// where they are, 84-95 µs interleaved, 73-83 µs for a plain sum of the same bytes.
//
// The layout, with C = 64 / sizeof(T) elements (one 64-byte cache line: 16 floats):
//
//   block b, rows 4b .. 4b + 3, at element 4b * in:
//     [row 4b, columns 0..C-1][row 4b+1, 0..C-1][row 4b+2, 0..C-1][row 4b+3, 0..C-1]
//     [row 4b, columns C..2C-1][row 4b+1, C..2C-1] ...            (in / C such groups)
//     then the last in % C columns of each row, row 4b first.
//
// A last block of fewer than four rows is filled up with rows of zeros, which no result
// ever reads. The copy moves the weights, it changes no value: the step sums each row's
// products chunk by chunk, in column order, its last in % C columns one by one.
//
// The copy costs as much memory again as the weights (16 MiB at E = 1024), made once per
// version of the weights (textbook/parameters.hpp), like the forward's W^T (engine.hpp).
//
// Included by modules/engine.cppm, in its module purview: no module line of its own.
// Uses textbook/parameters.hpp, textbook/in_projection.hpp.

namespace mha::detail {

// W (rows, in), row-major, with its rows interleaved in blocks of four (the layout above).
template <class T>
class InterleavedRows {
public:
  static constexpr std::size_t rows_per_block = 4;
  static constexpr std::size_t chunk = 64 / sizeof(T);  // C: one cache line of a row

  InterleavedRows() = default;
  InterleavedRows(const T* w, std::size_t rows, std::size_t in)
      : rows_(rows), in_(in), data_(blocks() * rows_per_block * in, T(0)) {
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t k = 0; k < in; ++k) data_[offset(r, k)] = w[r * in + k];
  }

  std::size_t rows() const { return rows_; }
  std::size_t in() const { return in_; }
  std::size_t chunks() const { return in_ / chunk; }  // whole chunks of C columns in a row
  // The first element of row r's block.
  const T* block_of(std::size_t r) const { return data_.data() + r / rows_per_block * rows_per_block * in_; }

  // Where W(r, k) is in the copy.
  std::size_t offset(std::size_t r, std::size_t k) const {
    const std::size_t i = r % rows_per_block, c = k / chunk;  // row i of its block, chunk c
    const std::size_t block = r / rows_per_block * rows_per_block * in_;
    if (c < chunks()) return block + (c * rows_per_block + i) * chunk + k % chunk;
    const std::size_t tail = in_ - chunks() * chunk;  // the columns after the whole chunks
    return block + chunks() * rows_per_block * chunk + i * tail + (k - chunks() * chunk);
  }

private:
  std::size_t blocks() const { return (rows_ + rows_per_block - 1) / rows_per_block; }

  std::size_t rows_ = 0, in_ = 0;
  std::vector<T> data_;
};

// The four weights of a decoding step, each interleaved: W_q, W_k, W_v (the blocks of
// in_proj_weight, or q/k/v_proj_weight) and out_proj_weight.
template <class T>
struct DecodeWeights {
  std::uint64_t version = 0;  // the Parameters::version they were made from
  InterleavedRows<T> q, k, v, out_proj;

  explicit DecodeWeights(const textbook::Parameters<T>& p) : version(p.version()) {
    const std::size_t E = p.out_proj_weight.shape(0);
    auto interleaved = [](const xt::xtensor<T, 2>& w) { return InterleavedRows<T>(w.data(), w.shape(0), w.shape(1)); };
    if (p.packed) {  // rows [0, E) W_q, [E, 2E) W_k, [2E, 3E) W_v of (3E, E)
      auto block = [&](std::size_t b) {
        return InterleavedRows<T>(p.in_proj_weight.data() + textbook::qkv_rows(b, E).first * E, E, E);
      };
      q = block(0), k = block(1), v = block(2);
    } else {
      q = interleaved(p.separate.w_q), k = interleaved(p.separate.w_k), v = interleaved(p.separate.w_v);
    }
    out_proj = interleaved(p.out_proj_weight);
  }

  // Block 0 (q), 1 (k) or 2 (v) of the in-projection.
  const InterleavedRows<T>& in_projection(std::size_t block) const { return block == 0 ? q : block == 1 ? k : v; }
};

}  // namespace mha::detail
