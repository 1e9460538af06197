// tests/inputs_test.cpp — textbook/inputs.hpp: step 1 of forward (shapes and layouts) and step 10 (the caller's layout, the
// weights per head or averaged).
#include "support.hpp"

using Catch::Matchers::ContainsSubstring;
using namespace mha_test::small;

TEST_CASE("forward rejects inputs of the wrong rank or size", "[errors][forward]") {
  mha::MultiheadAttention<float> m(options());
  const auto q = zeros({L, N, E}), kv = zeros({S, N, E});
  const mha::ForwardOptions<float> none;
  require_rejected(m, zeros({L, N, E, 1}), kv, kv, none, "query", "4-D");
  require_rejected(m, zeros({L}), zeros({S}), zeros({S}), none, "query", "1-D");
  require_rejected(m, q, zeros({S, E}), zeros({S, E}), none, "key, value", "3-D");
  require_rejected(m, zeros({L, E}), kv, kv, none, "key, value", "2-D");
  require_rejected(m, zeros({L, N, E + 1}), kv, kv, none, "query", "was expecting embedding dimension of 8, but got 9");
  require_rejected(m, q, zeros({S, N + 1, E}), zeros({S, N + 1, E}), none, "key", "batch size 2");
  require_rejected(m, q, kv, zeros({S + 1, N, E}), none, "value", "(4, 2)");
  require_rejected(m, q, zeros({S, N, E + 1}), zeros({S, N, E + 1}), none, "key", "kdim = 8");
  require_rejected(m, q, kv, zeros({S, N, E + 2}), none, "value", "vdim = 8");
}

TEST_CASE("seq_first_layout reads every layout as (len, N, width) rows", "[inputs]") {
  const auto seq_first = mha::textbook::seq_first_layout(zeros({L, N, E}), /*batch_first=*/false);
  CHECK((seq_first.len == L && seq_first.N == N && seq_first.width == E && !seq_first.batch_major));
  const auto batch_first = mha::textbook::seq_first_layout(zeros({N, L, E}), /*batch_first=*/true);
  CHECK((batch_first.len == L && batch_first.N == N && batch_first.batch_major));
  // Position i of batch entry n: row i*N + n sequence-first, row n*L + i batch-first.
  CHECK(seq_first.row(2, 1) == 2 * N + 1);
  CHECK(batch_first.row(2, 1) == 1 * L + 2);
  const auto unbatched = mha::textbook::seq_first_layout(zeros({L, E}), /*batch_first=*/true);  // (L, E) -> (L, 1, E)
  CHECK((unbatched.len == L && unbatched.N == 1 && !unbatched.batch_major));
  CHECK_MHA_ERROR(mha::textbook::seq_first_layout(zeros({E}), false),
                  ContainsSubstring("input:") && ContainsSubstring("1-D"));
}

TEST_CASE("to_seq_first_batched transposes batch_first and caller_layout undoes it", "[inputs]") {
  // (N=2, L=3, E=1) batch-first holding 10*n + i: sequence-first (i, n) must hold 10*n + i.
  xt::xarray<double> x = xt::zeros<double>({std::size_t{2}, std::size_t{3}, std::size_t{1}});
  for (std::size_t n = 0; n < 2; ++n)
    for (std::size_t i = 0; i < 3; ++i) x(n, i, 0) = 10.0 * double(n) + double(i);
  const auto seq = mha::textbook::to_seq_first_batched(x, /*batch_first=*/true);  // (3, 2, 1)
  REQUIRE(mha_test::shape_of(seq) == std::vector<std::size_t>{3, 2, 1});
  CHECK(seq(2, 1, 0) == 12.0);
  CHECK(seq(1, 0, 0) == 1.0);
  CHECK(mha_test::same(mha::textbook::caller_layout(seq, /*batched=*/true, /*batch_first=*/true), x));
  const auto unbatched = mha::textbook::caller_layout(seq, /*batched=*/false, false);  // batch entry 0 only
  const xt::xtensor<double, 2> expected{{0.0}, {1.0}, {2.0}};                          // (L, E): batch entry 0
  CHECK(mha_test::same(unbatched, expected));
}

TEST_CASE("attn_output_weights are per head or their mean, without N unbatched", "[inputs]") {
  CHECK(mha::textbook::weights_shape(2, 3, 4, 5, /*average=*/false, /*batched=*/true) ==
        std::vector<std::size_t>{2, 3, 4, 5});
  CHECK(mha::textbook::weights_shape(2, 3, 4, 5, /*average=*/true, /*batched=*/true) ==
        std::vector<std::size_t>{2, 4, 5});
  CHECK(mha::textbook::weights_shape(1, 3, 4, 5, /*average=*/true, /*batched=*/false) ==
        std::vector<std::size_t>{4, 5});
  CHECK(mha::textbook::weights_shape(1, 3, 4, 5, /*average=*/false, /*batched=*/false) ==
        std::vector<std::size_t>{3, 4, 5});
  // N = 1, H = 2, L = 1, S = 2: heads [0.25, 0.75] and [0.75, 0.25]; their mean is [0.5, 0.5].
  const std::vector<double> w{0.25, 0.75, 0.75, 0.25};
  CHECK(mha_test::same(mha::textbook::output_weights(w.data(), 1, 2, 1, 2, /*average=*/true, /*batched=*/true),
                       xt::xarray<double>{{{0.5, 0.5}}}));
  CHECK(mha_test::same(mha::textbook::output_weights(w.data(), 1, 2, 1, 2, /*average=*/false, /*batched=*/false),
                       xt::xarray<double>{{{0.25, 0.75}}, {{0.75, 0.25}}}));
}
