// modules/api/kv_cache.hpp — decoding one token at a time: the keys and values seen so far, kept.
//
// A decoder that generates token t attends with t's query to the keys and values of
// tokens 0..t. Those of 0..t-1 were projected when their tokens were decoded; a KV cache
// keeps them, already split into heads, and the next step projects only the new token.
// PyTorch feeds such a cache to its attention as static_k and static_v of
// F.multi_head_attention_forward (functional.hpp); fairseq's incremental decoding does so.
// A cached step equals the last row of the causal forward over the whole sequence: the
// causal mask lets row t see keys 0..t, exactly the cache (docs/19-decoding.md).
//
// Legend: N = batch, E = embed_dim, H = heads, D = head_dim, B = N*H, t = cached positions.
//
// Included by modules/api.cppm, in its module purview: no module line of its own.
// Uses mha.core, textbook/options.hpp, textbook/inputs.hpp, multihead_attention.hpp.

export namespace mha {

// The keys and values of the positions decoded so far, for one module: (B, t, D) each,
// with room for more (a step appends in place, the buffers double when full).
template <class T>
class KVCache {
public:
  KVCache() = default;

  // Positions cached so far: t.
  std::size_t length() const { return length_; }

  // One decoding step of `module`: `x` holds the new positions, (L_new, N, E) in the
  // module's layout ((N, L_new, E) batch_first, (L_new, E) unbatched; one token is
  // L_new = 1). Their k and v are appended, then they attend to the whole cache, causally
  // among themselves. Returns attn_output for the new positions, and the attention
  // weights over all t positions with need_weights. The same module at every step.
  Output<T> step(MultiheadAttention<T>& module, const xt::xarray<T>& x, bool need_weights = false) {
    return module.attend_to_cache(x, *this, need_weights);
  }

  // The cache as F.multi_head_attention_forward takes it: static_k, static_v (B, t, D).
  xt::xtensor<T, 3> static_k() const { return statics().k.tensor(); }
  xt::xtensor<T, 3> static_v() const { return statics().v.tensor(); }

  // Forget every position: the next step starts a new sequence (the memory is kept).
  void clear() { length_ = 0; }

  // Keep the first `length` positions, forget the rest (a rejected draft, a beam's fork).
  void truncate(std::size_t length) {
    check(length <= length_, "length", "expected at most the {} positions cached, got {}", length_, length);
    length_ = length;
  }

private:
  friend class MultiheadAttention<T>;
  using CacheView = detail::CacheView<T>;
  using Buffer = std::vector<T, detail::DefaultInit<T>>;  // its new elements left unwritten

  // Room for `added` more positions of a batch of B heads of D: a new sequence of another
  // batch starts anew. The caller writes them, then commit(added).
  CacheView make_room(std::size_t B, std::size_t D, std::size_t added) {
    if (length_ == 0 && (B != B_ || D != D_)) {  // a new sequence of another batch
      B_ = B, D_ = D, capacity_ = 0;
      k_.clear(), v_.clear();
    }
    check(B == B_ && D == D_, "x",
          "expected the cache's batch: (N*H, D) = ({}, {}) as in its first step, got ({}, {}); clear() starts anew", B_,
          D_, B, D);
    if (length_ + added > capacity_) grow(std::max(length_ + added, 2 * capacity_));
    return {k_.data(), v_.data(), capacity_, length_};
  }
  void commit(std::size_t added) { length_ += added; }

  // k and v of L_new new positions, (B, L_new, D) each, after the cached ones.
  void append(const xt::xtensor<T, 3>& k, const xt::xtensor<T, 3>& v) {
    const std::size_t added = k.shape(1);
    const CacheView room = make_room(k.shape(0), k.shape(2), added);
    for (std::size_t b = 0; b < B_; ++b) {
      std::copy_n(k.data() + b * added * D_, added * D_, room.k + (b * capacity_ + length_) * D_);
      std::copy_n(v.data() + b * added * D_, added * D_, room.v + (b * capacity_ + length_) * D_);
    }
    commit(added);
  }

  // Room for `capacity` positions per head: (B, capacity, D), the cached ones copied over.
  // The new room is left unwritten (DefaultInit): its pages are first touched as
  // positions are appended, step by step, not all at once here.
  void grow(std::size_t capacity) {
    Buffer k(B_ * capacity * D_), v(B_ * capacity * D_);
    for (std::size_t b = 0; b < B_; ++b) {
      std::copy_n(k_.data() + b * capacity_ * D_, length_ * D_, k.data() + b * capacity * D_);
      std::copy_n(v_.data() + b * capacity_ * D_, length_ * D_, v.data() + b * capacity * D_);
    }
    k_.swap(k), v_.swap(v), capacity_ = capacity;
  }

  // The cache as static_k and static_v, in place: head b at b * capacity * D.
  detail::StaticKV<T> statics() const {
    return {{k_.data(), B_, length_, D_, capacity_ * D_}, {v_.data(), B_, length_, D_, capacity_ * D_}};
  }

  std::size_t B_ = 0, D_ = 0, length_ = 0, capacity_ = 0;
  Buffer k_, v_;  // (B, capacity, D)
};

}  // namespace mha
