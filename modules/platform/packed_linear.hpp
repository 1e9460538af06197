// modules/platform/packed_linear.hpp (internal) — a float linear layer on oneDNN's matmul primitive, its
// weight reordered once into the layout that the matmul's kernel reads.
//
// dnnl_sgemm (gemm_library.hpp) packs W^T into its own layout again on every call, and reads
// back a y that the bias was first copied into (linear_into in linear.hpp). The matmul
// primitive does neither: W^T is reordered once per version of the weights (PackedWeight,
// kept with W^T by mha:engine), and the bias is added to each tile of y as the kernel stores
// it. Measured on the machine of docs/performance.md, one GEMM per core on 2 cores, the
// in-projection of (128, 8, 512, 8), (1024, 512) x (512, 1536): 4.50 ms against 4.83 for
// dnnl_sgemm (356 against 333 GFLOP/s), and its out-projection, (1024, 512) x (512, 512),
// 1.43 ms against 1.55 (a one-off program around the same calls). The whole forward, before
// and after: docs/performance.md, "The projections on oneDNN's matmul".
//
// The sum is the same, y(i, j) = b(j) + sum_k x(i, k) W^T(k, j), with b added after the
// products instead of before them: like two GEMM libraries, the two orders differ in the
// last bits. The readable path (textbook/in_projection.hpp) keeps PyTorch's addmm order.
//
// A matmul is made for each number of rows and each leading dimension of y that it is
// called with, and kept. Its scratch memory comes from the calling thread
// (scratchpad_mode::user), so threads can run one matmul at the same time, and OpenMP is
// held to one thread per call, as for dnnl_sgemm.
//
// Legend: rows = every position of every batch entry, in = input width, out = output width.
//
// Included by modules/platform.cppm, in its module purview: no module line of its own.
// Uses mha.core, gemm_library.hpp.

namespace mha::detail {

#if MHA_ONEDNN
// oneDNN's CPU engine, made at first use.
inline const dnnl::engine& onednn_cpu() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// A row-major f32 matrix (rows, columns), rows ld apart, as oneDNN describes it.
inline dnnl::memory::desc row_major(std::size_t rows, std::size_t columns, std::size_t ld) {
  const auto dim = [](std::size_t x) { return static_cast<dnnl::memory::dim>(x); };
  return dnnl::memory::desc({dim(rows), dim(columns)}, dnnl::memory::data_type::f32, {dim(ld), 1});
}

// The matmul y (rows, out) = x (rows, in) . W^T (in, out) + b, W^T in `weights`
// (format_tag::any: the layout the kernel prefers), its scratch memory the caller's.
inline dnnl::matmul::primitive_desc matmul_desc(std::size_t rows, std::size_t in, std::size_t out,
                                                const dnnl::memory::desc& weights, bool bias, std::size_t ldy) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::memory::desc x = row_major(rows, in, in), y = row_major(rows, out, ldy);
  const dnnl::memory::desc b = bias ? row_major(1, out, out) : dnnl::memory::desc();
#if DNNL_VERSION_MAJOR >= 3
  return dnnl::matmul::primitive_desc(onednn_cpu(), x, weights, b, y, attr);
#else
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(x, weights, b, y), attr, onednn_cpu());
#endif
}
#endif

// A block of W^T (in, out), reordered once for oneDNN's matmul, and the matmuls made with it.
class PackedWeight {
public:
  // W^T's block at w, rows ld apart. usable() is false when oneDNN picks no kernel of its
  // own for it (only its reference one) or fails: then linear_into keeps dnnl_sgemm.
  PackedWeight(const float* w, std::size_t ld, std::size_t in, std::size_t out) {
#if MHA_ONEDNN
    in_ = in, out_ = out;
    try {
      const OpenmpHeldToOne one_thread;
      const auto any = dnnl::memory::desc({static_cast<dnnl::memory::dim>(in), static_cast<dnnl::memory::dim>(out)},
                                          dnnl::memory::data_type::f32, dnnl::memory::format_tag::any);
      const auto desc = matmul_desc(nominal_rows, in, out, any, /*bias=*/true, out);
      if (!own_kernel(desc)) return;
      layout_ = desc.weights_desc();
      packed_ = dnnl::memory(layout_, onednn_cpu());
      dnnl::stream stream(onednn_cpu());
      dnnl::memory source(row_major(in, out, ld), onednn_cpu(), const_cast<float*>(w));
      dnnl::reorder(source, packed_).execute(stream, source, packed_);
      stream.wait();
      usable_ = true;
    } catch (const dnnl::error&) {
      usable_ = false;
    }
#else
    (void)w, (void)ld, (void)in, (void)out;
#endif
  }
  PackedWeight(const PackedWeight&) = delete;
  PackedWeight& operator=(const PackedWeight&) = delete;
  ~PackedWeight() = default;

  bool usable() const { return usable_; }

  // y (rows, out), rows ldy apart = x (rows, in) . W^T + bias (out, or nullptr), on the
  // calling thread. False, with y untouched, where there is no matmul for this call, or
  // in and out are not this weight's.
  bool multiply([[maybe_unused]] const float* x, [[maybe_unused]] std::size_t rows, [[maybe_unused]] std::size_t in,
                [[maybe_unused]] std::size_t out, [[maybe_unused]] const float* bias, [[maybe_unused]] float* y,
                [[maybe_unused]] std::size_t ldy) const {
#if MHA_ONEDNN
    if (!usable_ || rows == 0 || in != in_ || out != out_) return false;
    const Matmul* m = matmul_for(rows, bias != nullptr, ldy);
    if (!m) return false;
    thread_local std::vector<std::byte> scratch;
    if (scratch.size() < m->scratch.get_size()) scratch.resize(m->scratch.get_size());
    try {
      const OpenmpHeldToOne one_thread;
      const dnnl::engine& cpu = onednn_cpu();
      dnnl::stream stream(cpu);
      std::unordered_map<int, dnnl::memory> args{
          {DNNL_ARG_SRC, dnnl::memory(row_major(rows, in_, in_), cpu, const_cast<float*>(x))},
          {DNNL_ARG_WEIGHTS, packed_},
          {DNNL_ARG_DST, dnnl::memory(row_major(rows, out_, ldy), cpu, y)},
          {DNNL_ARG_SCRATCHPAD, dnnl::memory(m->scratch, cpu, scratch.data())}};
      if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(row_major(1, out_, out_), cpu, const_cast<float*>(bias)));
      m->primitive.execute(stream, args);
      stream.wait();
    } catch (const dnnl::error& e) {
      // only shapes made valid by the caller reach here: a failure is a library fault
      throw Error(fmt::format("linear: expected oneDNN's matmul to succeed, got \"{}\"", e.what()));
    }
    return true;
#else
    return false;
#endif
  }

private:
#if MHA_ONEDNN
  // The row count the layout is chosen for; measured here, oneDNN picks the same layout
  // for every row count from 1 to 4096.
  static constexpr std::size_t nominal_rows = 256;
  // At most this many matmuls (row counts x leading dimensions) are kept; further calls
  // run on dnnl_sgemm.
  static constexpr std::size_t most_matmuls = 64;

  struct Matmul {
    std::size_t rows;
    bool bias;
    std::size_t ldy;
    dnnl::matmul primitive;
    dnnl::memory::desc scratch;
  };

  // Whether oneDNN chose one of its own kernels, not its slow reference one.
  static bool own_kernel(const dnnl::matmul::primitive_desc& desc) {
    return std::string_view(desc.impl_info_str()).substr(0, 3) != "ref";
  }

  // The matmul for this call, made now if it is the first of its kind; nullptr if there
  // is none with the packed layout, or too many are kept.
  const Matmul* matmul_for(std::size_t rows, bool bias, std::size_t ldy) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (const Matmul& m : matmuls_)
      if (m.rows == rows && m.bias == bias && m.ldy == ldy) return &m;
    if (matmuls_.size() >= most_matmuls) return nullptr;
    try {
      const OpenmpHeldToOne one_thread;  // the kernel is blocked for the threads it is made with
      const auto desc = matmul_desc(rows, in_, out_, layout_, bias, ldy);
      if (!own_kernel(desc)) return nullptr;
      matmuls_.push_back({rows, bias, ldy, dnnl::matmul(desc), desc.scratchpad_desc()});
      return &matmuls_.back();
    } catch (const dnnl::error&) {
      return nullptr;
    }
  }

  dnnl::memory::desc layout_;
  dnnl::memory packed_;
  mutable std::mutex mutex_;
  mutable std::deque<Matmul> matmuls_;  // a deque: a Matmul stays where it is as more are made
  std::size_t in_ = 0, out_ = 0;
#endif
  bool usable_ = false;
};

// The PackedWeight of each block of W^T that a linear layer multiplies by, made at its
// first use and kept for as long as that W^T (mha:engine keeps one per version of the weights).
class PackedWeights {
public:
  // W^T's block at w (in, out), rows ld apart, reordered; nullptr where there is no matmul
  // for it (or no oneDNN in the build).
  const PackedWeight* of(const float* w, std::size_t ld, std::size_t in, std::size_t out) {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (const Block& b : blocks_)
      if (b.w == w && b.ld == ld && b.in == in && b.out == out) return b.packed.usable() ? &b.packed : nullptr;
    const Block& b = blocks_.emplace_back(w, ld, in, out);
    return b.packed.usable() ? &b.packed : nullptr;
  }

private:
  struct Block {
    Block(const float* w_, std::size_t ld_, std::size_t in_, std::size_t out_)
        : w(w_), ld(ld_), in(in_), out(out_), packed(w_, ld_, in_, out_) {}
    const float* w;
    std::size_t ld, in, out;
    PackedWeight packed;
  };
  std::mutex mutex_;
  std::deque<Block> blocks_;
};

}  // namespace mha::detail
