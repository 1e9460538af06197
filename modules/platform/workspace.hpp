// modules/platform/workspace.hpp — the fast paths' buffers, kept per calling thread, and letting them go.
//
// A fast forward works in buffers of its own: q, k and v after the projection, the
// extended keys, the merged heads, the weights, and one block of scores or one tile per
// worker; the backward in the same for the gradients it only passes on (dO, [dq | dk | dv],
// one (L, S') dP per worker). Allocating them and faulting their pages in on every call
// would cost more than a small forward itself, so each calling thread keeps its buffers
// from one call to the next. Being the thread's and not the module's, they let any number
// of threads run forward() and backward() on one module at once. A training loop's record
// and gradients, let go at the end of each step, are left to the thread too (one set of
// each at most), and the next step writes into them.
//
// What a thread keeps is what its largest call needed, so a loop of calls, at one shape or
// at several, reuses the same memory and never touches fresh pages (about 2.7 ms per MiB
// on some machines, more than the call's own work at large shapes). A thread that once
// served an 8K sequence and wants that memory back calls release_thread_buffers(), which
// frees the calling thread's buffers at any time; set_kept_thread_buffer_bytes(n) has every
// call whose buffers come to more than n bytes free them as it returns (a server that
// prefers memory to time); thread_buffer_bytes() says how much the thread holds.

// This file is not the textbook: the reference forward allocates as it goes, like PyTorch.
//
// Included by modules/platform.cppm, in its module purview: no module line of its own.
// Uses mha.core.

namespace mha::detail {

// The most bytes a thread keeps after a forward: all of them unless set. inline for its
// static: see cpu_simd_level() in cpu.hpp.
inline std::atomic<std::size_t>& kept_bytes_limit() {
  static std::atomic<std::size_t> limit{std::numeric_limits<std::size_t>::max()};
  return limit;
}

// An allocator that leaves the new elements of a vector unwritten, as `new T[n]` does for a
// number: std::vector<T, DefaultInit<T>>(n) makes no pass over its memory, whose pages are
// then first touched where they are first written (a KV cache's room, filled step by step).
template <class T>
struct DefaultInit : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = DefaultInit<U>;
  };
  DefaultInit() = default;
  template <class U>
  explicit DefaultInit(const DefaultInit<U>& /*other*/) {}
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) ::new (static_cast<void*>(p)) U;
    else ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// One object a thread let go (a training record, a set of gradients) and kept for its next
// call to write into, with the bytes its tensors hold; of a type this layer need not know.
struct Spare {
  std::shared_ptr<void> object;
  std::size_t bytes = 0;

  // Keeps `kept` (holding `size` bytes) in place of what was kept before. Out of memory it
  // keeps nothing, and `kept` is freed by its owner as it would have been.
  template <class Object>
  void keep(Object&& kept, std::size_t size) noexcept {
    try {
      object = std::make_shared<std::remove_cvref_t<Object>>(std::forward<Object>(kept));
      bytes = size;
    } catch (const std::bad_alloc&) {
      clear();
    }
  }
  // What was kept, moved out and no longer kept (an empty Object when nothing was).
  template <class Object>
  Object take() {
    if (!object) return {};
    Object kept = std::move(*std::static_pointer_cast<Object>(object));
    clear();
    return kept;
  }
  void clear() noexcept {
    object.reset();
    bytes = 0;
  }
  std::size_t held() const { return object ? bytes : 0; }
};

// One calling thread's buffers for element type T.
template <class T>
struct Workspace {
  // Slots handed out in order by get(). A forward holds pointers into its slots' storage
  // while it asks for more; growing `slots` moves the vectors, never their storage.
  std::vector<std::vector<T>> slots;    // q, k, v, the extended keys, the heads, the weights
  std::size_t used = 0;                 // slots handed out in this forward()
  std::vector<std::vector<T>> scratch;  // per worker: (rows, S') scores, or a (Tq, Tk) tile
  // The last training record this thread let go, for the next training forward to write
  // into (engine/training_forward.hpp), and the last gradients, for the next backward
  // (engine/engine_backward.hpp).
  Spare spare_record, spare_gradients;

  // The calling thread's, as it stands; `of_this_thread` for a new forward.
  static Workspace& mine() {
    thread_local Workspace workspace;
    return workspace;
  }
  // Whether this thread's workspace is already destroyed (its thread is ending): a bool
  // with no destructor stays readable to the end.
  static bool& gone() {
    thread_local bool destroyed = false;
    return destroyed;
  }
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace() { gone() = true; }
  static Workspace& of_this_thread() {
    Workspace& workspace = mine();
    workspace.used = 0;
    return workspace;
  }
  T* get(std::size_t size) {  // the next slot, at least `size` long
    if (slots.size() <= used) slots.emplace_back();
    auto& slot = slots[used++];
    if (slot.size() < size) slot.resize(size);
    return slot.data();
  }
  std::size_t bytes() const {
    std::size_t n = 0;
    for (const auto& s : slots) n += s.capacity();
    for (const auto& s : scratch) n += s.capacity();
    return n * sizeof(T) + spare_record.held() + spare_gradients.held();
  }
  void release() {
    slots = {};
    scratch = {};
    used = 0;
    spare_record.clear();
    spare_gradients.clear();
  }
  // At the end of a forward or backward: everything goes if it holds more than the limit.
  void keep_within_limit() {
    if (bytes() > kept_bytes_limit()) release();
  }
};

}  // namespace mha::detail

export namespace mha {

// The bytes of fast-path buffers the calling thread holds between calls (forward, backward).
std::size_t thread_buffer_bytes() {
  return detail::Workspace<float>::mine().bytes() + detail::Workspace<double>::mine().bytes();
}

// Frees the calling thread's fast-path buffers; its next call allocates them again.
// Other threads' buffers are theirs: each thread releases its own.
void release_thread_buffers() {
  detail::Workspace<float>::mine().release();
  detail::Workspace<double>::mine().release();
}

// Sets the most bytes of buffers a thread keeps after a forward or backward (a call that
// needed more frees them as it returns); 0 keeps nothing. Process-wide. By default there
// is no limit: a thread keeps what its largest call needed.
void set_kept_thread_buffer_bytes(std::size_t bytes) { detail::kept_bytes_limit() = bytes; }

std::size_t kept_thread_buffer_bytes() { return detail::kept_bytes_limit(); }

}  // namespace mha
