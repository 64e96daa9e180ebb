// Routed products without Python on the way: PyTorch's kernels of aten::mm, bmm and mv (with
// their bias-adding, out= and in-place forms: addmm, baddbmm, addmv, ...), replaced for a
// dispatch key while this library is registered for it.
//
// A call is routed when a gemmlab routing context is on in its thread for its dtype
// (gemmlab.torch.routing keeps the context's state in PyTorch's thread-local Python
// objects, which autograd copies into its threads; Python tells this library the routes of
// each such object: gemmlab_set_routes).  A routed call whose exact signature -- operation,
// route, dtype, device, shapes, strides, addresses of every operand and of the result,
// alpha and beta -- was seen before, and then ran as the launches and memsets of one prepared
// call, is enqueued from here with the bytes of those launches.  The same addresses make the
// same launches, so nothing in the bytes needs changing.  A call that used a stream's kept
// workspaces (split-K's partial sums, staging copies, fp32_tc's parts) is repeated only on
// that stream, outside graph capture, holding the workspaces' locks as Python's call did.
// Every other routed call goes to Python (the operator gemmlab_routed::slow, defined there),
// which runs it and, where it was such a call, hands this library its steps
// (gemmlab_learn_*).  A call that is not routed goes to the kernel PyTorch had registered.
//
// Built at run time by gemmlab.torch.native, which says why it matters
// (benchmarks/NOTES.md has the figures).

#include <dlfcn.h>
#include <pthread.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/ThreadLocalPythonObjects.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <cmath>
#include <torch/library.h>

#ifdef GEMMLAB_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace {

// -- the driver's launch, declared as cuda.h declares it, found in libcuda at run time -------

struct LaunchAttribute {  // CUlaunchAttribute
  int id;
  char pad[4];
  union {
    char bytes[64];
    struct {
      unsigned x, y, z;
    } cluster;
    int serialization;
  } value;
};
static_assert(sizeof(LaunchAttribute) == 72, "CUlaunchAttribute's layout");

struct LaunchConfig {  // CUlaunchConfig
  unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, smem;
  void* stream;
  LaunchAttribute* attrs;
  unsigned num_attrs;
};

constexpr int ATTRIBUTE_CLUSTER = 4;        // CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
constexpr int ATTRIBUTE_SERIALIZATION = 6;  // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION

using LaunchFn = int (*)(const LaunchConfig*, void*, void**, void**);
using MemsetFn = int (*)(uint64_t, unsigned char, size_t, void*);  // cuMemsetD8Async
using CapturingFn = int (*)(void*, int*);                            // cuStreamIsCapturing
using ErrorNameFn = int (*)(int, const char**);

struct Driver {
  LaunchFn launch = nullptr;
  MemsetFn memset = nullptr;
  CapturingFn capturing = nullptr;
  ErrorNameFn error_name = nullptr;
};

const Driver& driver() {
  static Driver d = [] {
    Driver out;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      out.launch = reinterpret_cast<LaunchFn>(dlsym(lib, "cuLaunchKernelEx"));
      out.memset = reinterpret_cast<MemsetFn>(dlsym(lib, "cuMemsetD8Async_v2"));
      if (out.memset == nullptr) out.memset = reinterpret_cast<MemsetFn>(dlsym(lib, "cuMemsetD8Async"));
      out.capturing = reinterpret_cast<CapturingFn>(dlsym(lib, "cuStreamIsCapturing"));
      out.error_name = reinterpret_cast<ErrorNameFn>(dlsym(lib, "cuGetErrorName"));
    }
    return out;
  }();
  return d;
}

void check(int err, const char* what) {
  if (err == 0) return;
  const char* name = "an unknown error";
  const Driver& d = driver();
  if (d.error_name != nullptr) d.error_name(err, &name);
  TORCH_CHECK(false, "gemmlab: ", what, " failed: ", name);
}

// -- calls taught by Python --------------------------------------------------------------------

// One step of a call: a launch, or (function null and memset_bytes > 0) nbytes set to zero.
struct Step {
  void* function = nullptr;  // null with memset_bytes 0: a test's launch, counted and not run
  unsigned grid[3], block[3], smem, cluster[3];
  bool pdl = false;
  std::unique_ptr<uint64_t[]> blob;  // every argument's bytes, 64-byte aligned where 128 long
  std::vector<void*> params;         // kernelParams: a pointer to each argument in blob
  LaunchAttribute attrs[2];
  unsigned num_attrs = 0;
  uint64_t memset_at = 0;  // 0 with memset_bytes > 0: a test's memset
  size_t memset_bytes = 0;
};

struct Record {
  std::vector<std::unique_ptr<Step>> steps;
  // The kept workspaces' locks (POSIX mutexes, gemmlab.runtime.launch.SlotLock) in the order
  // Python took them, and their stream; none: any stream.
  std::vector<pthread_mutex_t*> locks;
  void* stream = nullptr;
  uint64_t generation = 0;          // forget()'s count when learned: a lock-holding repeat checks it
  double add_after = std::nan("");  // the bias's multiple added after the steps; NaN: none
  int64_t plan = 0;                 // Python's token for the call's plan (gemmlab.last_plan)
  bool test = false;                // a test's record: its steps are counted, nothing runs
};

using Key = std::vector<int64_t>;

struct KeyHash {
  size_t operator()(const Key& k) const noexcept {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (int64_t v : k) {
      h ^= static_cast<uint64_t>(v);
      h *= 1099511628211ull;
    }
    return h;
  }
};

constexpr size_t RECORDS_KEPT = 16384;  // a program of more signatures starts again

std::shared_mutex records_mutex;
std::unordered_map<Key, std::shared_ptr<const Record>, KeyHash> records;

// The key of the call this thread has handed to Python, which gemmlab_learn_call files
// under, and the steps gemmlab_learn_launch and gemmlab_learn_memset have given so far.
thread_local Key* pending = nullptr;
thread_local uint64_t pending_generation = 0;  // forget()'s count when the call went to Python
thread_local std::vector<std::unique_ptr<Step>> learning;

// Bumped by every forget: a workspace replaced, new tables.  A repeat that holds workspace
// locks checks it under them, as the workspace may have been replaced since it found its record.
std::atomic<uint64_t> generation{0};

std::atomic<int64_t> counts[4];  // hits, calls handed to Python, launches learned, test records hit

// This thread's last repeat: its plan's token and when (CLOCK_MONOTONIC ns), for gemmlab.last_plan.
thread_local int64_t last_plan = 0, last_repeat_ns = 0;

int64_t monotonic_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// -- routes ---------------------------------------------------------------------------------

const std::string& slot_key() {
  static const std::string key = "gemmlab.torch.routing";
  return key;
}

struct Route {
  int64_t key, dtype, id;
};

std::shared_mutex routes_mutex;
std::unordered_map<const void*, std::vector<Route>> routes;  // slot object -> its routes

// What a registration for one dispatch key keeps: PyTorch's kernels it replaced, the
// device type and autocast key of its tensors, the torch::Library holding its kernels.
struct Original {
  c10::OperatorHandle handle;
  c10::SafeKernelFunction kernel;
};

struct Registration {
  c10::DispatchKey key;
  c10::DeviceType device;
  c10::DispatchKey autocast;
  std::unordered_map<std::string, std::unique_ptr<Original>> originals;
  std::unique_ptr<torch::Library> library;
};

// Registrations by slot: each slot's kernels are their own instantiations (kernels<slot>), so
// that a kernel knows its registration without reading the keys it is called with.
constexpr int SLOTS = 4;
std::atomic<Registration*> registrations[SLOTS];  // null: free

// The route (>= 1) of a product of dtype ``dtype`` for dispatch key ``key`` in this thread;
// 0: not routed.
int64_t route_of(c10::DispatchKey key, c10::ScalarType dtype) {
  if (!at::impl::ThreadLocalPythonObjects::contains(slot_key())) {
    return 0;
  }
  const auto& obj = at::impl::ThreadLocalPythonObjects::get(slot_key());
  const void* slot = obj->ptr(&obj->pyinterpreter());
  std::shared_lock<std::shared_mutex> lock(routes_mutex);
  auto it = routes.find(slot);
  if (it == routes.end()) {
    return 0;
  }
  for (const Route& r : it->second) {
    if (r.key == static_cast<int64_t>(key) && r.dtype == static_cast<int64_t>(dtype)) {
      return r.id;
    }
  }
  return 0;
}

// The route of a product of these tensors (one dtype and device, elements to multiply,
// autocast off, as gemmlab.torch.routing._route asks), or 0.
int64_t routed(const Registration& reg, const at::Tensor& a, const at::Tensor& b, const at::Tensor* c,
               const at::Tensor* d) {
  if (a.device().type() != reg.device || b.device() != a.device() || b.scalar_type() != a.scalar_type()) {
    return 0;
  }
  for (const at::Tensor* t : {c, d}) {
    if (t != nullptr && (t->device() != a.device() || t->scalar_type() != a.scalar_type())) {
      return 0;
    }
  }
  if (a.numel() == 0 || b.numel() == 0 || a.is_neg() || b.is_neg()) {
    return 0;
  }
  if (reg.autocast != c10::DispatchKey::Undefined && !c10::impl::tls_is_dispatch_key_excluded(reg.autocast)) {
    return 0;
  }
  return route_of(reg.key, a.scalar_type());
}

// -- one product ------------------------------------------------------------------------------

enum Op : int64_t { MM = 0, ADDMM = 1, BMM = 2, BADDBMM = 3, MV = 4, ADDMV = 5 };

void add_tensor(Key& key, const at::Tensor& t) {
  key.push_back(t.dim());
  for (int64_t s : t.sizes()) key.push_back(s);
  for (int64_t s : t.strides()) key.push_back(s);
  key.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.const_data_ptr())));
}

int64_t bits(double x) {
  int64_t out;
  std::memcpy(&out, &x, sizeof out);
  return out;
}

void* current_stream(const at::Device& device) {
#ifdef GEMMLAB_WITH_CUDA
  return c10::cuda::getCurrentCUDAStream(device.index()).stream();
#else
  TORCH_CHECK(false, "gemmlab: this build of the routed kernels has no CUDA streams");
#endif
}

void run(const Step& r, void* stream) {
  if (r.function == nullptr) {
    if (r.memset_bytes == 0 || r.memset_at == 0) {
      counts[3]++;  // a test's step
      return;
    }
    const Driver& d = driver();
    TORCH_CHECK(d.memset != nullptr, "gemmlab: cuMemsetD8Async was not found in libcuda.so.1");
    check(d.memset(r.memset_at, 0, r.memset_bytes, stream), "cuMemsetD8Async");
    return;
  }
  const Driver& d = driver();
  TORCH_CHECK(d.launch != nullptr, "gemmlab: cuLaunchKernelEx was not found in libcuda.so.1");
  LaunchConfig cfg{r.grid[0], r.grid[1], r.grid[2], r.block[0], r.block[1], r.block[2], r.smem,
                   stream, const_cast<LaunchAttribute*>(r.attrs), r.num_attrs};
  check(d.launch(&cfg, r.function, const_cast<void**>(r.params.data()), nullptr), "cuLaunchKernelEx");
}

bool is_test(const std::vector<std::unique_ptr<Step>>& steps) {
  for (const auto& step : steps) {
    if (step->function != nullptr || step->memset_at != 0) return false;
  }
  return true;
}

// The workspace locks a repeat holds, given back when it leaves (also by an exception).
struct Held {
  const std::vector<pthread_mutex_t*>& locks;
  size_t n = 0;
  ~Held() {
    while (n > 0) pthread_mutex_unlock(locks[--n]);
  }
};

// Enqueue a learned call on the current stream; false where it may not be repeated now (its
// workspaces belong to another stream, the stream is being captured, another thread holds a
// workspace, or the workspace was replaced since): Python's call then runs it.
bool repeat(const Record& r, const at::Tensor& out, const at::Tensor* bias) {
  void* stream = r.test ? nullptr : current_stream(out.device());
  {
    Held held{r.locks};
    if (!r.locks.empty()) {
      if (stream != r.stream) return false;
      if (!r.test) {
        const Driver& d = driver();
        int status = 0;
        if (d.capturing == nullptr || d.capturing(stream, &status) != 0 || status != 0) return false;
      }
      // Never wait here: a thread may hold a lock while it waits for the GIL this thread holds.
      for (; held.n < r.locks.size(); ++held.n) {
        if (pthread_mutex_trylock(r.locks[held.n]) != 0) return false;
      }
      if (r.generation != generation.load()) return false;
    }
    for (const auto& step : r.steps) run(*step, stream);
  }
  if (!std::isnan(r.add_after)) {
    TORCH_CHECK(bias != nullptr, "gemmlab: a learned call adds a bias it was not given");
    out.add_(*bias, r.add_after);
  }
  last_plan = r.plan;
  last_repeat_ns = monotonic_ns();
  return true;
}

using SlowFn = int64_t(int64_t, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                       const std::optional<at::Tensor>&, double, double);

const c10::TypedOperatorHandle<SlowFn>& slow_op() {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("gemmlab_routed::slow", "").typed<SlowFn>();
  return op;
}

// out = alpha * a @ b (+ beta * bias) through gemmlab: from a learned launch, else through
// Python.  False: Python did not route it (the caller runs PyTorch's kernel).
bool product(const Registration& reg, Op op, int64_t route, const at::Tensor& a, const at::Tensor& b, const at::Tensor& out,
             const at::Tensor* bias, double alpha, double beta) {
  // Built in this thread's own vector, so that a call launched from here allocates nothing.
  thread_local Key key;
  key.clear();
  key.push_back(op);
  key.push_back(route);
  key.push_back(static_cast<int64_t>(a.scalar_type()));
  key.push_back(a.get_device());
  add_tensor(key, a);
  add_tensor(key, b);
  add_tensor(key, out);
  if (bias != nullptr) {
    add_tensor(key, *bias);
  } else {
    key.push_back(-1);
  }
  key.push_back(bits(alpha));
  key.push_back(bits(beta));
  std::shared_ptr<const Record> found;
  {
    std::shared_lock<std::shared_mutex> lock(records_mutex);
    auto it = records.find(key);
    if (it != records.end()) found = it->second;
  }
  if (found) {
    c10::OptionalDeviceGuard guard(a.device());
    if (repeat(*found, out, bias)) {
      counts[0]++;
      return true;
    }
  }
  counts[1]++;
  Key mine(key);  // Python may route products of its own (nested calls reuse ``key``)
  Key* outer = pending;
  uint64_t outer_generation = pending_generation;
  pending = &mine;
  // Read before the call: a workspace replaced while it runs makes what it learns stale.
  pending_generation = generation.load();
  learning.clear();
  int64_t done;
  try {
    done = slow_op().redispatch(c10::DispatchKeySet(reg.key), op, a, b, out, bias ? std::optional<at::Tensor>(*bias) : std::nullopt, alpha, beta);
  } catch (...) {
    pending = outer;
    pending_generation = outer_generation;
    throw;
  }
  pending = outer;
  pending_generation = outer_generation;
  return done != 0;
}

// -- the kernels ------------------------------------------------------------------------------

void call_original(const Registration& reg, const char* name, c10::DispatchKeySet ks, torch::jit::Stack& stack) {
  const Original& o = *reg.originals.at(name);
  o.kernel.callBoxed(o.handle, ks, &stack);
}

bool fits_mm(const at::Tensor& a, const at::Tensor& b) {
  return a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0);
}

bool fits_bmm(const at::Tensor& a, const at::Tensor& b) {
  return a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0) && a.size(2) == b.size(1);
}

bool fits_mv(const at::Tensor& a, const at::Tensor& b) {
  return a.dim() == 2 && b.dim() == 1 && a.size(1) == b.size(0);
}

// a's shape but the last, then b's last but for a vector (mv's result).
std::vector<int64_t> result_shape(const at::Tensor& a, const at::Tensor& b) {
  std::vector<int64_t> shape(a.sizes().begin(), a.sizes().end() - 1);
  if (b.dim() > 1) shape.push_back(b.size(-1));
  return shape;
}

bool broadcasts(const at::Tensor& bias, c10::IntArrayRef shape) {
  if (bias.dim() > static_cast<int64_t>(shape.size())) return false;
  for (int64_t i = 1; i <= bias.dim(); ++i) {
    int64_t s = bias.size(-i), n = shape[shape.size() - i];
    if (s != 1 && s != n) return false;
  }
  return true;
}

bool same_storage(const at::Tensor& x, const at::Tensor& y) {
  return x.storage().is_alias_of(y.storage());
}

bool real_scalars(const c10::Scalar& beta, const c10::Scalar& alpha) {
  return !beta.isComplex() && !alpha.isComplex() && !beta.isBoolean() && !alpha.isBoolean();
}

bool same_view(const at::Tensor& x, const at::Tensor& y) {
  return x.const_data_ptr() == y.const_data_ptr() && x.sizes() == y.sizes() && x.strides() == y.strides();
}

// One family of operators (mm's, bmm's or mv's): the op code of its plain and its scaled
// (bias-adding) forms, and the operands it takes.
struct Family {
  Op plain, scaled;
  bool (*fits)(const at::Tensor&, const at::Tensor&);
};

constexpr Family MM_FAMILY{MM, ADDMM, fits_mm};
constexpr Family BMM_FAMILY{BMM, BADDBMM, fits_bmm};
constexpr Family MV_FAMILY{MV, ADDMV, fits_mv};

// mm, bmm, mv
at::Tensor functional(const Registration& reg, const char* name, const Family& f, c10::DispatchKeySet ks,
                      const at::Tensor& a, const at::Tensor& b) {
  int64_t route = routed(reg, a, b, nullptr, nullptr);
  if (route != 0 && f.fits(a, b)) {
    at::Tensor out = at::empty(result_shape(a, b), a.options());
    if (product(reg, f.plain, route, a, b, out, nullptr, 1.0, 0.0)) return out;
  }
  torch::jit::Stack stack{a, b};
  call_original(reg, name, ks, stack);
  return stack[0].toTensor();
}

// mm.out, bmm.out, mv.out
at::Tensor& into(const Registration& reg, const char* name, const Family& f, c10::DispatchKeySet ks,
                 const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  int64_t route = routed(reg, a, b, &out, nullptr);
  if (route != 0 && f.fits(a, b) && out.sizes() == c10::IntArrayRef(result_shape(a, b))) {
    if (product(reg, f.plain, route, a, b, out, nullptr, 1.0, 0.0)) return out;
  }
  torch::jit::Stack stack{a, b, out};
  call_original(reg, name, ks, stack);
  return out;
}

// addmm, baddbmm, addmv: beta * bias + alpha * a @ b, with the bias in the product's epilogue
// where the rung can (beta == 1, nn.Linear's); Python adds it after the product otherwise.
at::Tensor scaled(const Registration& reg, const char* name, const Family& f, c10::DispatchKeySet ks,
                  const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                  const c10::Scalar& alpha) {
  int64_t route = routed(reg, a, b, &bias, nullptr);
  if (route != 0 && f.fits(a, b) && real_scalars(beta, alpha)) {
    auto shape = result_shape(a, b);
    if (broadcasts(bias, shape)) {
      at::Tensor out = at::empty(shape, a.options());
      if (product(reg, f.scaled, route, a, b, out, &bias, alpha.toDouble(), beta.toDouble())) return out;
    }
  }
  torch::jit::Stack stack{bias, a, b, beta, alpha};
  call_original(reg, name, ks, stack);
  return stack[0].toTensor();
}

// Their out= forms; out may be the bias itself (beta * out, read by the kernel), not another
// view of its memory.
at::Tensor& scaled_into(const Registration& reg, const char* name, const Family& f, c10::DispatchKeySet ks,
                        const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                        const c10::Scalar& alpha, at::Tensor& out) {
  int64_t route = routed(reg, a, b, &bias, &out);
  if (route != 0 && f.fits(a, b) && real_scalars(beta, alpha)) {
    auto shape = result_shape(a, b);
    if (out.sizes() == c10::IntArrayRef(shape) && broadcasts(bias, shape) &&
        (same_view(out, bias) || !same_storage(out, bias))) {
      if (product(reg, f.scaled, route, a, b, out, &bias, alpha.toDouble(), beta.toDouble())) return out;
    }
  }
  torch::jit::Stack stack{bias, a, b, beta, alpha, out};
  call_original(reg, name, ks, stack);
  return out;
}

// addmm_, baddbmm_, addmv_: acc = beta * acc + alpha * a @ b, acc read by the kernel.
at::Tensor& in_place(const Registration& reg, const char* name, const Family& f, c10::DispatchKeySet ks,
                     at::Tensor& acc, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                     const c10::Scalar& alpha) {
  int64_t route = routed(reg, a, b, &acc, nullptr);
  if (route != 0 && f.fits(a, b) && real_scalars(beta, alpha) &&
      acc.sizes() == c10::IntArrayRef(result_shape(a, b))) {
    if (product(reg, f.scaled, route, a, b, acc, &acc, alpha.toDouble(), beta.toDouble())) return acc;
  }
  torch::jit::Stack stack{acc, a, b, beta, alpha};
  call_original(reg, name, ks, stack);
  return acc;
}

// The kernels PyTorch calls, one instantiation per registration slot, for the families' forms.
template <int S>
struct Kernels {
  static const Registration& reg() { return *registrations[S].load(); }
  template <const Family& F, const char* const* N>
  struct Forms {
    static at::Tensor plain(c10::DispatchKeySet ks, const at::Tensor& a, const at::Tensor& b) {
      return functional(reg(), N[0], F, ks, a, b);
    }
    static at::Tensor& plain_out(c10::DispatchKeySet ks, const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
      return into(reg(), N[1], F, ks, a, b, out);
    }
    static at::Tensor add(c10::DispatchKeySet ks, const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b,
                          const c10::Scalar& beta, const c10::Scalar& alpha) {
      return scaled(reg(), N[2], F, ks, bias, a, b, beta, alpha);
    }
    static at::Tensor& add_out(c10::DispatchKeySet ks, const at::Tensor& bias, const at::Tensor& a,
                               const at::Tensor& b, const c10::Scalar& beta, const c10::Scalar& alpha,
                               at::Tensor& out) {
      return scaled_into(reg(), N[3], F, ks, bias, a, b, beta, alpha, out);
    }
    static at::Tensor& add_(c10::DispatchKeySet ks, at::Tensor& acc, const at::Tensor& a, const at::Tensor& b,
                            const c10::Scalar& beta, const c10::Scalar& alpha) {
      return in_place(reg(), N[4], F, ks, acc, a, b, beta, alpha);
    }
    static void impl(torch::Library& lib) {
      lib.impl(N[0], TORCH_FN(plain));
      lib.impl(N[1], TORCH_FN(plain_out));
      lib.impl(N[2], TORCH_FN(add));
      lib.impl(N[3], TORCH_FN(add_out));
      lib.impl(N[4], TORCH_FN(add_));
    }
  };
  static void impl(torch::Library& lib);
};

// Each family's operator names: plain, plain out=, scaled, scaled out=, in place.
constexpr const char* MM_NAMES[] = {"mm", "mm.out", "addmm", "addmm.out", "addmm_"};
constexpr const char* BMM_NAMES[] = {"bmm", "bmm.out", "baddbmm", "baddbmm.out", "baddbmm_"};
constexpr const char* MV_NAMES[] = {"mv", "mv.out", "addmv", "addmv.out", "addmv_"};

template <int S>
void Kernels<S>::impl(torch::Library& lib) {
  Forms<MM_FAMILY, MM_NAMES>::impl(lib);
  Forms<BMM_FAMILY, BMM_NAMES>::impl(lib);
  Forms<MV_FAMILY, MV_NAMES>::impl(lib);
}

void (*const IMPLS[SLOTS])(torch::Library&) = {Kernels<0>::impl, Kernels<1>::impl, Kernels<2>::impl,
                                                Kernels<3>::impl};

const char* const NAMES[] = {"mm",          "mm.out", "addmm", "addmm.out",   "addmm_", "bmm",   "bmm.out",
                             "baddbmm",     "baddbmm.out", "baddbmm_", "mv", "mv.out", "addmv", "addmv.out",
                             "addmv_"};

}  // namespace

// -- what Python calls (ctypes) ---------------------------------------------------------------

extern "C" {

// Replace PyTorch's kernels of NAMES for dispatch key ``key`` (its name, as "CUDA"): the
// key's number (> 0), else -1 and ``error`` filled.
int gemmlab_register(const char* key, char* error, int error_len) {
  try {
    c10::DispatchKey k = c10::parseDispatchKey(key);
    int slot = -1;
    for (int i = 0; i < SLOTS; ++i) {
      Registration* r = registrations[i].load();
      TORCH_CHECK(r == nullptr || r->key != k, "already registered for ", key);
      if (r == nullptr && slot < 0) slot = i;
    }
    TORCH_CHECK(slot >= 0, "no free registration slot (", SLOTS, " dispatch keys at most)");
    auto reg = std::make_unique<Registration>();
    reg->key = k;
    reg->device = c10::dispatchKeyToDeviceType(k);
    reg->autocast = reg->device == c10::DeviceType::CUDA  ? c10::DispatchKey::AutocastCUDA
                    : reg->device == c10::DeviceType::CPU ? c10::DispatchKey::AutocastCPU
                                                          : c10::DispatchKey::Undefined;
    for (const char* full : NAMES) {
      std::string name(full), overload;
      auto dot = name.find('.');
      if (dot != std::string::npos) {
        overload = name.substr(dot + 1);
        name = name.substr(0, dot);
      }
      auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(("aten::" + name).c_str(), overload.c_str());
      TORCH_CHECK(handle.hasComputedKernelForDispatchKey(k), "aten::", full, " has no kernel for ", key);
      reg->originals.emplace(full,
                             std::make_unique<Original>(Original{handle, handle.getComputedKernelForDispatchKey(k)}));
    }
    // PyTorch warns that a kernel is overridden: that is the point.
    struct Quiet : c10::WarningHandler {
      void process(const c10::Warning&) override {}
    } quiet;
    c10::WarningUtils::WarningHandlerGuard guard(&quiet);
    // Published before the kernels are: a kernel may run as soon as it is registered.
    Registration* raw = reg.release();
    registrations[slot].store(raw);
    raw->library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", k, __FILE__, __LINE__);
    IMPLS[slot](*raw->library);
    return static_cast<int>(k);
  } catch (const std::exception& e) {
    std::snprintf(error, error_len, "%s", e.what());
    return -1;
  }
}

// PyTorch's kernels back for every key.  The registrations are kept (not freed): a kernel
// entered just before may still read them.
void gemmlab_unregister() {
  for (auto& slot : registrations) {
    Registration* r = slot.load();
    if (r != nullptr) {
      r->library.reset();
      slot.store(nullptr);
    }
  }
}

// The routes of the slot object ``slot``: ``n`` (dispatch key's number, dtype as
// c10::ScalarType, route id) triples.
void gemmlab_set_routes(const void* slot, int n, const int64_t* triples) {
  std::vector<Route> mine;
  for (int i = 0; i < n; ++i) mine.push_back(Route{triples[3 * i], triples[3 * i + 1], triples[3 * i + 2]});
  std::unique_lock<std::shared_mutex> lock(routes_mutex);
  if (mine.empty()) {
    routes.erase(slot);
  } else {
    routes[slot] = std::move(mine);
  }
}

// The next step of the call now in Python: a launch of ``function`` with its shape and ``n``
// arguments, the i-th ``sizes[i]`` bytes at ``params[i]``.
void gemmlab_learn_launch(void* function, const unsigned* grid, const unsigned* block, unsigned smem,
                          const unsigned* cluster, int pdl, int n, void* const* params, const int64_t* sizes) {
  auto r = std::make_unique<Step>();
  r->function = function;
  std::memcpy(r->grid, grid, sizeof r->grid);
  std::memcpy(r->block, block, sizeof r->block);
  std::memcpy(r->cluster, cluster, sizeof r->cluster);
  r->smem = smem;
  r->pdl = pdl != 0;
  std::vector<size_t> at(n);
  size_t total = 0;
  for (int i = 0; i < n; ++i) {
    size_t align = sizes[i] >= 64 ? 64 : 8;  // tensor maps: 64-byte aligned
    total = (total + align - 1) / align * align;
    at[i] = total;
    total += static_cast<size_t>(sizes[i]);
  }
  size_t words = (total + 7) / 8 + 8;
  r->blob.reset(new uint64_t[words]());
  auto base = reinterpret_cast<uintptr_t>(r->blob.get());
  uintptr_t shift = (64 - base % 64) % 64;
  auto* bytes = reinterpret_cast<char*>(base + shift);
  for (int i = 0; i < n; ++i) {
    std::memcpy(bytes + at[i], params[i], static_cast<size_t>(sizes[i]));
    r->params.push_back(bytes + at[i]);
  }
  if (cluster[0] * cluster[1] * cluster[2] != 1) {
    LaunchAttribute& a = r->attrs[r->num_attrs++];
    std::memset(&a, 0, sizeof a);
    a.id = ATTRIBUTE_CLUSTER;
    a.value.cluster = {cluster[0], cluster[1], cluster[2]};
  }
  if (r->pdl) {
    LaunchAttribute& a = r->attrs[r->num_attrs++];
    std::memset(&a, 0, sizeof a);
    a.id = ATTRIBUTE_SERIALIZATION;
    a.value.serialization = 1;
  }
  learning.push_back(std::move(r));
}

// The next step of the call now in Python: ``nbytes`` at device address ``at`` set to zero.
void gemmlab_learn_memset(uint64_t at, uint64_t nbytes) {
  auto r = std::make_unique<Step>();
  r->memset_at = at;
  r->memset_bytes = nbytes;
  learning.push_back(std::move(r));
}

// Keep the steps given since the last call of this for the call now in Python: with ``n``
// workspace locks taken in that order on ``stream`` (n = 0: any stream), the bias's multiple
// added after them (``adds`` = 0: none) and Python's token for its plan.  0: kept; 1: no call
// is waiting (not one from this library) or no steps.
int gemmlab_learn_call(void* stream, int n, void* const* locks, int adds, double add_after, int64_t plan) {
  std::vector<std::unique_ptr<Step>> steps;
  steps.swap(learning);
  if (pending == nullptr || steps.empty()) return 1;
  auto r = std::make_shared<Record>();
  r->test = is_test(steps);
  r->steps = std::move(steps);
  for (int i = 0; i < n; ++i) r->locks.push_back(static_cast<pthread_mutex_t*>(locks[i]));
  r->stream = n > 0 ? stream : nullptr;
  if (adds != 0) r->add_after = add_after;
  r->plan = plan;
  r->generation = pending_generation;
  std::unique_lock<std::shared_mutex> lock(records_mutex);
  if (r->generation != generation.load()) return 1;  // forgotten while the call ran
  if (records.size() >= RECORDS_KEPT) records.clear();
  records[*pending] = std::move(r);
  counts[2]++;
  return 0;
}

// Forget every call learned (gemmlab's prepared calls were cleared, or a kept workspace was
// replaced: plans or addresses may change).
void gemmlab_forget() {
  std::unique_lock<std::shared_mutex> lock(records_mutex);
  generation++;
  records.clear();
}

// out[0..1] = the plan token of this thread's last repeat and when it was made (CLOCK_MONOTONIC
// ns; 0 and 0 before any).
void gemmlab_last_repeat(int64_t* out) {
  out[0] = last_plan;
  out[1] = last_repeat_ns;
}

// out[0..4] = hits, calls handed to Python, launches learned, test records hit; records kept.
void gemmlab_counts(int64_t* out) {
  for (int i = 0; i < 4; ++i) out[i] = counts[i].load();
  std::shared_lock<std::shared_mutex> lock(records_mutex);
  out[4] = static_cast<int64_t>(records.size());
}

}  // extern "C"
