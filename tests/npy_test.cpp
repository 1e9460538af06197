// tests/npy_test.cpp — io/npy.hpp: reading and writing NumPy .npy files, and what a malformed one gives.
#include "support.hpp"

#include <fstream>
#include <iterator>

import mha.io;

using Catch::Matchers::ContainsSubstring;

namespace {

// A .npy file's bytes: magic, version 1.0, the header padded to 64 bytes, then the data.
std::vector<char> npy_bytes(const std::string& dict, std::size_t data_bytes) {
  std::string header = dict;
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::vector<char> bytes = {'\x93', 'N', 'U', 'M', 'P', 'Y', '\x01', '\x00'};
  bytes.push_back(static_cast<char>(header.size() & 0xff));
  bytes.push_back(static_cast<char>(header.size() >> 8));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.resize(bytes.size() + data_bytes, '\0');
  return bytes;
}

}  // namespace

TEST_CASE("the npy reader rejects malformed files", "[npy][errors]") {
  const auto dir = std::filesystem::temp_directory_path() / "mha-errors-test";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return dir / name;
  };
  const auto good = dir / "good.npy";
  mha::save_npy<float>(good, xt::xarray<float>{{1, 2, 3}, {4, 5, 6}});
  std::ifstream in(good, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(mha_test::same(mha::load_npy<float>(good), xt::xarray<float>{{1, 2, 3}, {4, 5, 6}}));

  CHECK_MHA_ERROR(mha::read_npy(dir / "missing.npy"),
                  ContainsSubstring("missing.npy") && ContainsSubstring("cannot open"));
  CHECK_MHA_ERROR(mha::read_npy(write("magic.npy", "NUMPY" + bytes)), ContainsSubstring("bad magic"));
  CHECK_MHA_ERROR(
      mha::read_npy(write("short.npy", bytes.substr(0, bytes.size() - 4))),
      ContainsSubstring("short.npy") && ContainsSubstring("expected 24 data bytes") && ContainsSubstring("got 20"));
  CHECK_MHA_ERROR(mha::read_npy(write("header.npy", bytes.substr(0, 40))), ContainsSubstring("truncated .npy header"));
  std::string fortran = bytes;
  fortran.replace(fortran.find("False"), 5, "True ");
  CHECK_MHA_ERROR(mha::read_npy(write("fortran.npy", fortran)), ContainsSubstring("Fortran"));
  std::string big_endian = bytes;
  big_endian[big_endian.find("<f4")] = '>';
  CHECK_MHA_ERROR(mha::read_npy(write("big.npy", big_endian)), ContainsSubstring("'>f4'"));
  CHECK_MHA_ERROR(mha::load_npy<double>(good), ContainsSubstring("expected dtype float64, got float32"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("parse_npy reads a well-formed file and rejects malformed shapes", "[npy][errors]") {
  const auto ok = mha::parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24), "a");
  CHECK(ok.shape == std::vector<std::size_t>{2, 3});
  CHECK(mha::to_xarray<float>(ok, "a").size() == 6);
  const auto empty = mha::parse_npy(npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (0, 5), }", 0), "e");
  CHECK(mha::to_xarray<double>(empty, "e").size() == 0);

  // Python writes tuples with commas: "(2 3)" is not a shape.
  CHECK_MHA_ERROR(mha::parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }", 24), "a"),
                  ContainsSubstring("not a tuple of integers"));
  CHECK_MHA_ERROR(mha::parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,,3), }", 24), "a"),
                  ContainsSubstring("not a tuple of integers"));
  // Fuzzer finding: a zero dimension beside huge ones overflowed xtensor's strides (UB).
  CHECK_MHA_ERROR(
      mha::parse_npy(npy_bytes("{'descr': '|b1', 'fortran_order': False, 'shape': (0, 18446744073709, 512154), }", 0),
                     "z"),
      ContainsSubstring("too large"));
  CHECK_MHA_ERROR(mha::parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 23), "t"),
                  ContainsSubstring("expected 24 data bytes"));
}
