// mha:extra_keys — add_bias_kv: one more key and value, learned, for every batch entry.
//
// With add_bias_kv=True, multi_head_attention_forward appends bias_k (1, 1, E) to k and
// bias_v to v as position S, repeated over the batch, after the in-projection and before
// the head split (torch.cat([k, bias_k.repeat(1, bsz, 1)])), and pads both masks with an
// unmasked column (PreparedMasks::pad_for_extra_key in :masks). add_zero_attn appends an
// all-zero key after the head split (append_zero_row in :attention). The fast paths do
// both in one copy, with extend_keys_into below.
//
// Legend: S = source length, N = batch, E = embed_dim.
//
// Included by modules/textbook.cppm, in its module purview: no module line of its own.
// Uses mha.core.

namespace mha::detail {

// y (S + [bias] + zero_keys, N, E): the S keys of x, whose position j of batch entry n
// starts at x + j*row_stride + n*batch_stride, then `bias` (E) for every n if there is one,
// then `zero_keys` positions of zeros.
template <class T>
void extend_keys_into(const T* x, std::size_t row_stride, std::size_t batch_stride, std::size_t S, std::size_t N,
                      std::size_t E, const T* bias, std::size_t zero_keys, T* y) {
  for (std::size_t j = 0; j < S; ++j)
    for (std::size_t n = 0; n < N; ++n) std::copy_n(x + j * row_stride + n * batch_stride, E, y + (j * N + n) * E);
  std::size_t next = S;  // the first position after the keys copied so far
  if (bias != nullptr) {
    for (std::size_t n = 0; n < N; ++n) std::copy_n(bias, E, y + (next * N + n) * E);
    ++next;
  }
  std::fill_n(y + next * N * E, zero_keys * N * E, T(0));
}

}  // namespace mha::detail

export namespace mha {

// bias (1, 1, E) appended to x as one more position of every batch entry:
// torch.cat([x, bias.repeat(1, N, 1)]). (S, N, E) -> (S+1, N, E)
template <class T>
xt::xtensor<T, 3> append_bias(const xt::xtensor<T, 3>& x, const xt::xtensor<T, 3>& bias) {
  const std::size_t S = x.shape(0), N = x.shape(1), E = x.shape(2);
  check(bias.shape(0) == 1 && bias.shape(1) == 1 && bias.shape(2) == E, "bias", "expected shape {}, got {}",
        shape_string({1, 1, E}), shape_string(bias.shape()));
  xt::xtensor<T, 3> y({S + 1, N, E});
  detail::extend_keys_into(x.data(), N * E, E, S, N, E, bias.data(), /*zero_keys=*/0, y.data());
  return y;
}

}  // namespace mha
