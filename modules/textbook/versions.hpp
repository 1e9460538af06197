// modules/textbook/versions.hpp — which generation of PyTorch the library behaves as: 1.13 or 2.x.
//
// PyTorch 1.13.1 and PyTorch 2.x compute some calls of nn.MultiheadAttention differently
// (docs/15-versions.md has the table): a fully masked row through 2.x's
// scaled_dot_product_attention, the is_causal hint (2.x only), uint8 and mismatched masks,
// and the native fast path's conditions. Options::pytorch and
// FunctionalArguments::pytorch choose; every difference follows the choice, rejections
// and warnings included. The default is 2.x, the generation users have. Not a version
// check of anything installed: the library has no PyTorch in it.
//
// PyTorch warns where the library's caller should be told something without an error
// (a deprecated mask type): the library returns those warnings in Output::warnings, as
// Python's warnings.catch_warnings(record=True) would list them, and prints nothing.
//
// Included by modules/textbook.cppm, in its module purview: no module line of its own.
// Uses mha.core.

export namespace mha {

// The generation of PyTorch a call behaves as. v2: PyTorch 2.6 (Debian 13's), and the
// later 2.x releases where nothing of this changed.
enum class PyTorchVersion { v1_13, v2 };

// A warning PyTorch would give: the argument it is about and PyTorch's own words.
struct Warning {
  std::string argument;
  std::string message;
};

}  // namespace mha
