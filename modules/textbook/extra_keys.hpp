// modules/textbook/extra_keys.hpp — add_bias_kv: one more key and value, learned, for every batch entry.
//
// With add_bias_kv=True, multi_head_attention_forward appends bias_k (1, 1, E) to k and
// bias_v to v as position S, repeated over the batch, after the in-projection and before
// the head split (torch.cat([k, bias_k.repeat(1, bsz, 1)])), and pads both masks with an
// unmasked column (PreparedMasks::pad_for_extra_key in masks.hpp, which merged_mask calls
// for every path). add_zero_attn appends an
// all-zero key after the head split (append_zero_row in attention.hpp). The engine does
// both in one copy (extend_keys_into, modules/engine/attention_problem.hpp).
//
// Legend: S = source length, N = batch, E = embed_dim.
//
// Included by modules/textbook.cppm, in its module purview: no module line of its own.
// Uses mha.core.

export namespace mha::textbook {

// bias (1, 1, E) appended to x as one more position of every batch entry:
// torch.cat([x, bias.repeat(1, N, 1)]). (S, N, E) -> (S+1, N, E)
template <class T>
xt::xtensor<T, 3> append_bias(const xt::xtensor<T, 3>& x, const xt::xtensor<T, 3>& bias) {
  const std::size_t S = x.shape(0), N = x.shape(1), E = x.shape(2);
  check(bias.shape(0) == 1 && bias.shape(1) == 1 && bias.shape(2) == E, "bias", "expected shape {}, got {}",
        shape_string({1, 1, E}), shape_string(bias.shape()));
  xt::xtensor<T, 3> y({S + 1, N, E});
  std::copy_n(x.data(), S * N * E, y.data());  // positions [0, S): x as it is
  for (std::size_t n = 0; n < N; ++n) std::copy_n(bias.data(), E, y.data() + (S * N + n) * E);  // position S
  return y;
}

}  // namespace mha::textbook
