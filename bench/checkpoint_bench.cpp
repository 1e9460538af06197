// bench/checkpoint_bench.cpp — mha-checkpoint-bench: listing the attention layers of a 1 GiB checkpoint, and loading one.
//
//   mha-checkpoint-bench [--size-mb 1024] [--layers 12] [--embed-dim 1024] [--runs 11] [--dir DIR]
//
// Writes a .safetensors checkpoint into a temporary folder: the state_dict of a
// torch.nn.TransformerEncoder of --layers layers of d_model --embed-dim (self_attn,
// linear1 and linear2 of dim_feedforward 4 * d_model, norm1, norm2) in float32, an
// int64 position_ids, and an embedding table that brings the file to --size-mb MiB. A
// child process writes it, so that the file's bytes never count in this process's memory.
// Then, in this process, with the file in the page cache:
//   1. list the attention layers: mha::open_checkpoint + mha::attention_layers;
//   2. load one layer as a module: mha::load_attention_layer<float> (its tensors only);
//   3. for comparison, read the whole file into memory once, as a reader without offsets
//      does for every read (mha-inspect did it N + 2 times to list N layers).
// Each is timed (the median of --runs runs for 1 and 2, one run for 3), and the process's
// peak resident set size (VmHWM of /proc/self/status) is printed before and after it. The
// folder is removed at the end.
//
// Legend: E = embed_dim (d_model), F = dim_feedforward = 4E.
#include "third_party_xtensor.hpp"

#include "arguments.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

import mha;
import mha.io;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Arguments {
  std::size_t size_mb = 1024, layers = 12, embed_dim = 1024, runs = 11;
  std::string dir;
};

// A folder of this process's own, removed with everything in it at the end.
struct ScratchDir {
  fs::path path;
  explicit ScratchDir(const fs::path& parent) : path(parent / fmt::format("mha-checkpoint-bench-{}", ::getpid())) {
    fs::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

// The process's peak resident set size so far, in MiB (VmHWM, kB in /proc/self/status).
double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.starts_with("VmHWM:")) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

// ---- the checkpoint ------------------------------------------------------------------

// `count` float32 values of a small seeded pattern (not zeros, which a file system may
// store as holes), as raw bytes.
std::vector<char> float_bytes(std::size_t count, mha::Generator& generator) {
  std::vector<float> block(4096);
  for (auto& v : block) v = static_cast<float>(0.02 * generator.normal());
  std::vector<char> bytes(count * sizeof(float));
  for (std::size_t i = 0; i < count; ++i)
    std::memcpy(bytes.data() + i * sizeof(float), &block[i % block.size()], sizeof(float));
  return bytes;
}

// One nn.TransformerEncoderLayer's state_dict under "layers.i.", in float32.
void add_encoder_layer(std::map<std::string, mha::SafetensorsTensor>& file, std::size_t i, std::size_t E,
                       mha::Generator& generator) {
  const std::size_t F = 4 * E;
  const std::vector<std::pair<std::string, std::vector<std::size_t>>> shapes = {
      {"self_attn.in_proj_weight", {3 * E, E}},
      {"self_attn.in_proj_bias", {3 * E}},
      {"self_attn.out_proj.weight", {E, E}},
      {"self_attn.out_proj.bias", {E}},
      {"linear1.weight", {F, E}},
      {"linear1.bias", {F}},
      {"linear2.weight", {E, F}},
      {"linear2.bias", {E}},
      {"norm1.weight", {E}},
      {"norm1.bias", {E}},
      {"norm2.weight", {E}},
      {"norm2.bias", {E}}};
  for (const auto& [name, shape] : shapes) {
    std::size_t count = 1;
    for (auto d : shape) count *= d;
    file.emplace(fmt::format("layers.{}.{}", i, name),
                 mha::SafetensorsTensor{"F32", shape, float_bytes(count, generator)});
  }
}

// The whole checkpoint, written with the library's writer.
void write_checkpoint(const fs::path& path, const Arguments& args) {
  mha::Generator generator(0);
  std::map<std::string, mha::SafetensorsTensor> file;
  for (std::size_t i = 0; i < args.layers; ++i) add_encoder_layer(file, i, args.embed_dim, generator);
  std::vector<char> ids;  // position_ids (1, 512), int64 0..511, little-endian
  for (std::int64_t p = 0; p < 512; ++p)
    for (std::size_t b = 0; b < 8; ++b) ids.push_back(static_cast<char>((p >> (8 * b)) & 0xff));
  file.emplace("embeddings.position_ids", mha::SafetensorsTensor{"I64", {1, 512}, ids});
  std::size_t bytes = 0;
  for (const auto& [_, t] : file) bytes += t.bytes.size();
  const std::size_t target = args.size_mb << 20, row = args.embed_dim * sizeof(float);
  const std::size_t rows = target > bytes ? (target - bytes) / row : 0;  // (V, E): the rest of the file
  file.emplace("embeddings.word_embeddings.weight",
               mha::SafetensorsTensor{"F32", {rows, args.embed_dim}, float_bytes(rows * args.embed_dim, generator)});
  mha::save_safetensors(path, file, {{"format", "pt"}});
}

// Writes the checkpoint in a child process: its memory is not this process's.
void write_checkpoint_in_child(const fs::path& path, const Arguments& args) {
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0) throw mha::Error("fork: cannot start the process that writes the checkpoint");
  if (child == 0) {
    try {
      write_checkpoint(path, args);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mha-checkpoint-bench: writing %s: %s\n", path.c_str(), e.what());
      ::_exit(1);
    }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw mha::Error(fmt::format("{}: the process writing the checkpoint failed", path.string()));
}

// ---- the measurements ----------------------------------------------------------------

// The median time of `runs` calls of `f`, in milliseconds.
template <class F>
double median_ms(std::size_t runs, F&& f) {
  std::vector<double> ms;
  for (std::size_t r = 0; r < runs; ++r) {
    const auto start = Clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// One measurement: what it is, its median time, and the peak RSS before and after it.
template <class F>
void measure(const std::string& what, std::size_t runs, F&& f) {
  const double before = peak_rss_mib();
  const double ms = median_ms(runs, f);
  const double after = peak_rss_mib();
  fmt::print("{}\n  {:.3f} ms ({} of {} run{}); peak RSS {:.1f} MiB before, {:.1f} MiB after\n", what, ms,
             runs == 1 ? "one" : "median", runs, runs == 1 ? "" : "s", before, after);
}

int run(const Arguments& args) {
  const ScratchDir scratch(args.dir.empty() ? fs::temp_directory_path() : fs::path(args.dir));
  const fs::path path = scratch.path / "model.safetensors";
  const auto start = Clock::now();
  write_checkpoint_in_child(path, args);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

  const auto checkpoint = mha::open_checkpoint(path);
  const auto layers = mha::attention_layers(checkpoint);
  fmt::print("{}: {:.1f} MiB, {} tensors, {} attention layers of embed_dim {} ({}), header {} bytes\n", path.string(),
             static_cast<double>(fs::file_size(path)) / (1 << 20), checkpoint.tensors.size(), layers.size(),
             layers.front().embed_dim, layers.front().dtype, checkpoint.safetensors->data_start);
  fmt::print("written by a child process in {:.2f} s; the file is in the page cache\n\n", seconds);

  measure("list the attention layers (mha::open_checkpoint + mha::attention_layers)", args.runs, [&] {
    if (mha::attention_layers(mha::open_checkpoint(path)).size() != args.layers)
      throw mha::Error("layers: the listing lost a layer");
  });
  const std::string prefix = layers[layers.size() / 2].prefix;
  const auto E = static_cast<double>(args.embed_dim);
  measure(fmt::format("load one layer ({}: {:.1f} MiB of weights) as a module (mha::load_attention_layer<float>)",
                      prefix, (4 * E * E + 4 * E) * sizeof(float) / (1 << 20)),
          args.runs, [&] { (void)mha::load_attention_layer<float>(checkpoint, prefix, /*num_heads=*/16); });
  measure("for comparison: the whole file into memory once, as read_safetensors did before it read by offset", 1, [&] {
    std::ifstream in(path, std::ios::binary);
    const std::vector<char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (file.size() != fs::file_size(path)) throw mha::Error("the whole-file read came short");
  });
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cli::Arguments arguments{
      "Time listing the attention layers of a large .safetensors checkpoint, and loading one layer."};
  Arguments args;
  arguments.option("--size-mb", args.size_mb, "Size of the checkpoint in MiB (its layers, then an embedding table)")
      .show_default();
  arguments.option("--layers", args.layers, "Encoder layers").positive().show_default();
  arguments
      .option("--embed-dim", args.embed_dim, "d_model of each layer (a multiple of 16: the loaded layer has 16 heads)")
      .positive()
      .show_default();
  arguments.option("--runs", args.runs, "Runs of each measurement; the median is printed").positive().show_default();
  arguments.option("--dir", args.dir, "Folder for the temporary checkpoint (default: the system's temporary folder)")
      .existing_directory();
  if (const auto stop = arguments.parse(argc, argv)) return *stop;  // --help, or a bad option
  mha::use_best_blas_kernel();  // OpenBLAS's best kernel for this CPU (README: the BLAS kernel)
  try {
    return run(args);
  } catch (const mha::Error& e) {
    fmt::print(stderr, "mha-checkpoint-bench: error: {}\n", e.what());
    return 1;
  }
}
