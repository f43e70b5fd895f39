// The eager fast path of helion_ops.matmul and helion_ops.addmm in C++ (issue 16).
//
// A Python autograd Function costs host time that torch's own mm does not: its forward and
// backward run Python, and the backward runs it on autograd's device thread, where each call
// also pays for the hand-over of the GIL (NOTES 72). Here a specialization that the Python
// path has already run (checked, compiled, planned) is replayed without Python: the operands'
// key finds the forward's launches, a C++ autograd Function saves what the backward needs,
// and the backward replays the launches that the Python backward made for the same key (its
// "recipe"), through the CUDA driver. What the Python path does not hand over (a call that
// compiles, a CUDA graph capture, a functorch transform, a double backward, fp16/bf16
// operands it copied, a forward split otherwise than by matmul's split-K) stays on the Python
// path. fp32 keys replay the copies that lay their operands out for their dots too: a launch
// may read an earlier launch's output.
// helion_ops.native builds this file and teaches it each key.

// Only the headers used (not <torch/extension.h>, which brings all of libtorch's C++ API):
// the build takes 25 s instead of 40 on a 2-core CPU.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/stl.h>

#include <ATen/ExpandUtils.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/python_variable.h>
#include <dlfcn.h>

#include <array>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace py = pybind11;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// The driver entry points used, resolved from the driver library as Triton does.
using LaunchKernel = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, void*, void**, void**);
using StreamIsCapturing = int (*)(void*, int*);
// cuTensorMapEncodeTiled, its enums as ints (CUtensorMapDataType, CUtensorMapInterleave,
// CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill).
using EncodeTiled = int (*)(void*, int, uint32_t, void*, const uint64_t*, const uint64_t*,
                            const uint32_t*, const uint32_t*, int, int, int, int);

struct Driver {
  LaunchKernel launch = nullptr;
  StreamIsCapturing is_capturing = nullptr;
  EncodeTiled encode_tiled = nullptr;  // null on a driver without tensor maps
};

const Driver& driver() {
  static const Driver resolved = [] {
    Driver d;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    TORCH_CHECK(lib != nullptr, "helion_ops native: cannot open libcuda.so.1");
    d.launch = reinterpret_cast<LaunchKernel>(dlsym(lib, "cuLaunchKernel"));
    d.is_capturing = reinterpret_cast<StreamIsCapturing>(dlsym(lib, "cuStreamIsCapturing"));
    d.encode_tiled = reinterpret_cast<EncodeTiled>(dlsym(lib, "cuTensorMapEncodeTiled"));
    TORCH_CHECK(d.launch && d.is_capturing, "helion_ops native: libcuda.so.1 lacks a symbol");
    return d;
  }();
  return resolved;
}

// Where a kernel parameter's value comes from.
enum Source : int8_t { kTensor = 0, kOutput = 1, kScalar = 2, kConstant = 3, kDescriptor = 4 };
// How a scalar from the call is stored (Triton passes Python floats as fp32).
enum Storage : int8_t { kBits = 0, kFloat32 = 1, kFloat64 = 2 };

struct Param {
  Source source;
  Storage storage;
  // The tensor's, output's, scalar's or descriptor's index, or the constant's bits. Tensors
  // are the call's three (a, b, bias; a backward's grad_out, mat1, mat2), then the outputs of
  // the launches before this one, in order (Recipe::run).
  int64_t value;
};

// A TMA descriptor (CUtensorMap, 128 bytes) that a kernel takes by value, encoded for each
// launch over this call's tensor as Triton's launcher encodes a host-built TensorDescriptor
// (fill_tma_descriptor: element strides of 1, no interleave, L2 promotion to 128-byte lines).
// Every field but the address is the specialization's, in the driver's order (the innermost
// dimension first); helion_ops.native lays them out.
struct alignas(64) TensorMap {
  unsigned char bytes[128];
};

struct Descriptor {
  Source base;  // kTensor or kOutput
  int64_t index;
  int data_type;
  std::vector<uint64_t> dims;
  std::vector<uint64_t> strides;  // bytes, of all dimensions but the innermost
  std::vector<uint32_t> box;
  int swizzle;
  int fill;  // 1: NaN out of bounds (Triton's padding="nan"), 0: zeros

  void encode(TensorMap* map, void* address) const {
    static constexpr uint32_t kUnitStrides[5] = {1, 1, 1, 1, 1};
    constexpr int kInterleaveNone = 0, kL2Promotion128B = 2;
    const int status = driver().encode_tiled(
        map, data_type, static_cast<uint32_t>(dims.size()), address, dims.data(),
        strides.data(), box.data(), kUnitStrides, kInterleaveNone, swizzle, kL2Promotion128B,
        fill);
    TORCH_CHECK(status == 0, "helion_ops native: cuTensorMapEncodeTiled failed with CUresult ",
                status);
  }
};

// One launch of a compiled Triton kernel whose arguments are laid out in advance
// (helion_ops.plans.LaunchPlan, converted by helion_ops.native).
struct Launch {
  void* function;
  std::array<unsigned, 3> grid;
  unsigned block;
  unsigned shared;
  int64_t scratch;  // bytes of global scratch memory a launch allocates (0: none)
  std::vector<Param> params;
  std::vector<Descriptor> descriptors;          // the kDescriptor params' sources
  std::vector<std::array<int64_t, 2>> outputs;  // each a new tensor of the first operand's kind
  // The split-K kernel's launch: it adds fp32 partial sums into zeroed outputs with atomics;
  // each is then scaled by the call's alpha and rounded once to the first operand's dtype
  // (helion_ops.kernel._finish_split_k).
  bool split_k = false;

  std::vector<at::Tensor> run(const at::Tensor* tensors, const double* scalars) const {
    // Outputs of the first operand's dtype and device (a forward's a, a backward's grad_out),
    // as every plan made for this path allocates them, or the split-K kernel's fp32 sums.
    const at::TensorOptions options = tensors[0].options();
    std::vector<at::Tensor> outs;
    outs.reserve(outputs.size());
    for (const auto& shape : outputs) {
      outs.push_back(split_k ? at::zeros({shape[0], shape[1]}, options.dtype(at::kFloat))
                             : at::empty({shape[0], shape[1]}, options));
    }
    constexpr size_t kMax = 64, kMaxMaps = 8;
    TORCH_CHECK(params.size() + 2 <= kMax, "helion_ops native: too many kernel parameters");
    TORCH_CHECK(descriptors.size() <= kMaxMaps, "helion_ops native: too many descriptors");
    uint64_t values[kMax];
    void* pointers[kMax];
    TensorMap maps[kMaxMaps];
    size_t i = 0;
    for (const Param& p : params) {
      if (p.source == kDescriptor) {
        const Descriptor& d = descriptors[p.value];
        const at::Tensor& base = d.base == kOutput ? outs[d.index] : tensors[d.index];
        d.encode(&maps[p.value], base.data_ptr());
        pointers[i++] = &maps[p.value];
        continue;
      }
      uint64_t v = 0;
      switch (p.source) {
        case kTensor:
          v = reinterpret_cast<uint64_t>(tensors[p.value].data_ptr());
          break;
        case kOutput:
          v = reinterpret_cast<uint64_t>(outs[p.value].data_ptr());
          break;
        case kScalar:
          if (p.storage == kFloat32) {
            const float f = static_cast<float>(scalars[p.value]);
            uint32_t bits;
            std::memcpy(&bits, &f, sizeof bits);
            v = bits;
          } else {
            std::memcpy(&v, &scalars[p.value], sizeof v);
          }
          break;
        case kConstant:
          v = static_cast<uint64_t>(p.value);
          break;
        case kDescriptor:  // (encoded above)
          break;
      }
      values[i] = v;  // little-endian: a narrower parameter reads the low bytes
      pointers[i] = &values[i];
      ++i;
    }
    at::Tensor scratch_memory;
    values[i] = 0;
    if (scratch > 0) {
      scratch_memory = at::empty({scratch}, options.dtype(at::kByte));
      values[i] = reinterpret_cast<uint64_t>(scratch_memory.data_ptr());
    }
    pointers[i] = &values[i];
    values[i + 1] = 0;  // no profile scratch memory
    pointers[i + 1] = &values[i + 1];
    const c10::Device device = options.device();
    c10::impl::VirtualGuardImpl guard(device.type());
    // The driver launches on the current device's context, which must be the kernel's (the
    // operands'), as torch runs an op on its tensors' device whatever the current one is.
    c10::OptionalDeviceGuard device_guard;
    if (guard.getDevice() != device) {
      device_guard.reset_device(device);
    }
    void* stream = guard.getStreamNativeHandle(guard.getStream(device));
    if (grid[0] != 0 && grid[1] != 0 && grid[2] != 0) {
      const int status = driver().launch(function, grid[0], grid[1], grid[2], block, 1, 1,
                                         shared, stream, pointers, nullptr);
      TORCH_CHECK(status == 0, "helion_ops native: cuLaunchKernel failed with CUresult ", status);
    }
    if (split_k) {
      for (at::Tensor& out : outs) {
        if (scalars[0] != 1) {
          out.mul_(scalars[0]);
        }
        out = out.to(options.dtype());
      }
    }
    return outs;
  }
};

// Launches whose results are outputs of some of them: a forward's (its product, in
// grads[0]) or a backward's for one layout of grad_out (mat1's and mat2's gradients, each
// possibly transposed back: a column-major operand's gradient, as torch gives it).
struct Recipe {
  std::vector<Launch> launches;
  struct Grad {
    int launch = -1;  // -1: not needed
    int output = 0;
    bool transposed = false;
  };
  std::array<Grad, 2> grads;
  bool atomics = false;  // a split-K launch among them

  // The launches on the call's three tensors, each reading those and the outputs before it;
  // the results, undefined where not needed.
  std::array<at::Tensor, 2> run(std::vector<at::Tensor> tensors, const double* scalars) const {
    std::vector<std::vector<at::Tensor>> outs;
    outs.reserve(launches.size());
    for (const Launch& launch : launches) {
      outs.push_back(launch.run(tensors.data(), scalars));
      tensors.insert(tensors.end(), outs.back().begin(), outs.back().end());
    }
    std::array<at::Tensor, 2> results;
    for (int i = 0; i < 2; ++i) {
      const Grad& g = grads[i];
      if (g.launch >= 0) {
        const at::Tensor& t = outs[g.launch][g.output];
        results[i] = g.transposed ? t.t() : t;
      }
    }
    return results;
  }
};

// A key of the operands, as the Python fast path keys them: sizes, strides, dtype, device and
// 16-byte alignment of each tensor.
using Key = std::vector<int64_t>;

struct KeyHash {
  size_t operator()(const Key& key) const {
    size_t h = key.size();
    for (int64_t v : key) {
      h ^= std::hash<int64_t>()(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    }
    return h;
  }
};

struct Entry {
  bool native = false;  // false: this key stays on the Python path
  Recipe forward;       // its product in grads[0]
  std::mutex mutex;  // recipes are read and made on autograd's device threads
  std::vector<std::pair<Key, std::shared_ptr<const Recipe>>> recipes;  // null: Python's
};

// Entries live as long as the process: a graph may outlive a reset of the tables.
std::vector<std::shared_ptr<Entry>> all_entries;
std::unordered_map<Key, Entry*, KeyHash> mm_entries;
std::unordered_map<Key, Entry*, KeyHash> addmm_entries;
PyObject* python_backward = nullptr;  // helion_ops.native.backward, never released

bool plain_cuda_tensor(PyObject* obj) {
  if (!THPVariable_Check(obj)) {
    return false;
  }
  const at::Tensor& t = THPVariable_Unpack(obj);
  // (A tensor with torch's negative bit reads as the negation of its memory, and a dual
  // tensor's tangent needs the Python Function's jvp: both take the Python path.)
  return t.defined() && t.is_cuda() && t.layout() == at::kStrided && !t.is_neg() &&
         !t._fw_grad(/*level=*/0).defined() &&
         !t.unsafeGetTensorImpl()->is_python_dispatch() && !t.is_nested() &&
         !t.key_set().has(c10::DispatchKey::FuncTorchGradWrapper) &&
         !t.key_set().has(c10::DispatchKey::FuncTorchBatched);
}

// Which of addmm's scales are 1: their kernels leave the multiplies out (the forward's where
// both are, the backward's where alpha is; helion_ops.kernel.scaled), so the plans an entry
// holds serve only calls with the same answer.
int64_t unit_scales(double alpha, double beta) {
  return (alpha == 1 ? 1 : 0) | (beta == 1 ? 2 : 0);
}

void add_to_key(Key& key, const at::Tensor& t) {
  const int64_t dim = t.dim();
  key.push_back(dim);
  for (int64_t d = 0; d < dim; ++d) {
    key.push_back(t.size(d));
    key.push_back(t.stride(d));
  }
  key.push_back(static_cast<int64_t>(t.scalar_type()));
  key.push_back(t.get_device());
  key.push_back(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16);
}

// Whether an fp32 product runs TF32 dots: torch's TF32 switch, which the Python path reads
// (helion_ops.kernel.tf32_dots) and fp32 keys hold, as kernels and copies differ with it.
int64_t tf32_dots(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat && at::globalContext().allowTF32CuBLAS();
}

// Why a call cannot take this path now, whatever its key: a CUDA graph capture (whose
// launches the Python path decides apart) or an active functorch transform. (torch's
// determinism switch is checked where atomics are: a split-K forward's entry and a
// backward's recipe.)
bool python_path_now(const at::Tensor& t) {
  const auto included = c10::impl::tls_local_dispatch_key_set().included_;
  if (included.has(c10::DispatchKey::FuncTorchDynamicLayerFrontMode) ||
      included.has(c10::DispatchKey::FuncTorchDynamicLayerBackMode)) {
    return true;
  }
  c10::impl::VirtualGuardImpl guard(t.device().type());
  void* stream = guard.getStreamNativeHandle(guard.getStream(t.device()));
  int status = 0;
  return driver().is_capturing(stream, &status) != 0 || status != 0;
}

bool column_major(const at::Tensor& t) {
  return t.stride(0) == 1 && t.stride(1) == t.size(0);
}

struct ProductFunction : public torch::autograd::Function<ProductFunction> {
  // beta * bias + alpha * (a @ b); no bias for matmul. (needs_input_grad counts tensor
  // inputs only: a is the first for matmul, the second for addmm; backward returns one value
  // per argument.)
  static at::Tensor forward(AutogradContext* ctx, const std::optional<at::Tensor>& bias,
                            const at::Tensor& a, const at::Tensor& b, double alpha, double beta,
                            Entry* entry) {
    const double scalars[2] = {alpha, beta};
    at::Tensor out = entry->forward.run({a, b, bias.value_or(at::Tensor())}, scalars)[0];
    const size_t first = bias.has_value() ? 1 : 0;
    const bool need_a = ctx->needs_input_grad(first), need_b = ctx->needs_input_grad(first + 1);
    ctx->save_for_backward({need_b ? a : at::Tensor(), need_a ? b : at::Tensor()});
    ctx->saved_data["entry"] = reinterpret_cast<int64_t>(entry);
    ctx->saved_data["alpha"] = alpha;
    ctx->saved_data["beta"] = beta;
    ctx->saved_data["columns"] =
        static_cast<int64_t>(column_major(a)) | static_cast<int64_t>(column_major(b)) << 1;
    ctx->saved_data["need"] = static_cast<int64_t>(need_a) | static_cast<int64_t>(need_b) << 1;
    if (bias.has_value()) {
      ctx->saved_data["bias"] = bias->sizes();
    }
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor grad_out = grads[0];
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &a = saved[0], &b = saved[1];
    auto* entry = reinterpret_cast<Entry*>(ctx->saved_data["entry"].toInt());
    const double alpha = ctx->saved_data["alpha"].toDouble();
    const double beta = ctx->saved_data["beta"].toDouble();
    const int64_t columns = ctx->saved_data["columns"].toInt();
    const int64_t need = ctx->saved_data["need"].toInt();
    const bool need_a = need & 1, need_b = need & 2;
    const bool with_bias = ctx->saved_data.count("bias") > 0;
    variable_list result(6);
    if (with_bias && ctx->needs_input_grad(0)) {
      // Scaled, then summed, as in Python's addmm_backward.
      result[0] = at::sum_to(beta != 1 ? grad_out * beta : grad_out,
                             ctx->saved_data["bias"].toIntVector());
    }
    if (!need_a && !need_b) {
      return result;
    }
    std::shared_ptr<const Recipe> recipe;
    Key key;
    // A double backward (autograd records this backward) takes Python's differentiable path.
    // So do a capture and a functorch transform, as in the forward.
    const bool replayable = !torch::autograd::GradMode::is_enabled() &&
                            grad_out.layout() == at::kStrided && !grad_out.is_neg() &&
                            !grad_out.unsafeGetTensorImpl()->is_python_dispatch() &&
                            !python_path_now(grad_out);
    if (replayable) {
      key = {need_a, need_b, grad_out.stride(0), grad_out.stride(1),
             static_cast<int64_t>(reinterpret_cast<uintptr_t>(grad_out.data_ptr()) % 16),
             tf32_dots(grad_out)};
      std::lock_guard<std::mutex> lock(entry->mutex);
      for (const auto& [k, r] : entry->recipes) {
        if (k == key) {
          if (r == nullptr) {
            key.clear();  // known: Python's
          }
          recipe = r;
          break;
        }
      }
      if (recipe != nullptr && recipe->atomics &&
          at::globalContext().deterministicAlgorithms()) {
        // Under torch's determinism switch the Python path runs its products without atomics.
        recipe = nullptr;
        key.clear();
      }
    }
    if (recipe != nullptr) {
      const double scalars[2] = {alpha, beta};
      const auto grads_of = recipe->run({grad_out, a, b}, scalars);
      result[1] = grads_of[0];
      result[2] = grads_of[1];
      return result;
    }
    py::gil_scoped_acquire gil;
    py::tuple answer = py::reinterpret_borrow<py::object>(python_backward)(grad_out, a, b, need_a, need_b, alpha,
                                       static_cast<bool>(columns & 1),
                                       static_cast<bool>(columns & 2), replayable && !key.empty());
    if (!answer[0].is_none()) {
      result[1] = THPVariable_Unpack(answer[0].ptr());
    }
    if (!answer[1].is_none()) {
      result[2] = THPVariable_Unpack(answer[1].ptr());
    }
    // The recipe; None: Python's for good; False: record again next time (this backward
    // compiled a kernel, whose first launch was no plan's).
    if (replayable && !key.empty() && !py::isinstance<py::bool_>(answer[2])) {
      std::shared_ptr<const Recipe> made;
      if (!answer[2].is_none()) {
        made = std::make_shared<const Recipe>(answer[2].cast<Recipe>());
      }
      std::lock_guard<std::mutex> lock(entry->mutex);
      entry->recipes.emplace_back(std::move(key), std::move(made));
    }
    return result;
  }
};

// An entry's key: a's, b's and (addmm) the bias's layout and which of the scales are 1. The
// one definition for the look-up (product) and for the entries learned (learn_*).
Key key_of(const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias, double alpha,
           double beta) {
  Key key;
  key.reserve(24);
  add_to_key(key, a);
  add_to_key(key, b);
  if (bias.defined()) {
    add_to_key(key, bias);
    key.push_back(unit_scales(alpha, beta));
  }
  key.push_back(tf32_dots(a));
  return key;
}

// Each call's answer: a tensor, None where the key is new (the caller runs the Python path and
// then teaches it), or False where the Python path must run and there is nothing to learn.
py::object product(std::unordered_map<Key, Entry*, KeyHash>& entries, PyObject* bias_obj,
                   PyObject* a_obj, PyObject* b_obj, double alpha, double beta) {
  const bool with_bias = bias_obj != nullptr;
  if (!plain_cuda_tensor(a_obj) || !plain_cuda_tensor(b_obj) ||
      (with_bias && !plain_cuda_tensor(bias_obj))) {
    return py::bool_(false);
  }
  const at::Tensor& a = THPVariable_Unpack(a_obj);
  const at::Tensor& b = THPVariable_Unpack(b_obj);
  const at::Tensor bias = with_bias ? THPVariable_Unpack(bias_obj) : at::Tensor();
  // Only fp16, bf16 and fp32 keys have plans this path can take: others go back at once.
  if (a.scalar_type() != at::kHalf && a.scalar_type() != at::kBFloat16 &&
      a.scalar_type() != at::kFloat) {
    return py::bool_(false);
  }
  if (python_path_now(a)) {
    return py::bool_(false);
  }
  const auto found = entries.find(key_of(a, b, bias, alpha, beta));
  if (found == entries.end()) {
    return py::none();
  }
  Entry* entry = found->second;
  if (!entry->native) {
    return py::bool_(false);
  }
  if (entry->forward.atomics && at::globalContext().deterministicAlgorithms()) {
    return py::bool_(false);  // the Python path runs the split in pieces under the switch
  }
  const bool grad = torch::autograd::GradMode::is_enabled() &&
                    (a.requires_grad() || b.requires_grad() || (with_bias && bias.requires_grad()));
  if (!grad) {
    const double scalars[2] = {alpha, beta};
    return py::reinterpret_steal<py::object>(
        THPVariable_Wrap(entry->forward.run({a, b, bias}, scalars)[0]));
  }
  const std::optional<at::Tensor> maybe_bias =
      with_bias ? std::optional<at::Tensor>(bias) : std::nullopt;
  return py::reinterpret_steal<py::object>(
      THPVariable_Wrap(ProductFunction::apply(maybe_bias, a, b, alpha, beta, entry)));
}

void learn(std::unordered_map<Key, Entry*, KeyHash>& entries, Key key, const py::object& forward) {
  auto entry = std::make_shared<Entry>();
  if (!forward.is_none()) {
    entry->native = true;
    entry->forward = forward.cast<Recipe>();
  }
  all_entries.push_back(entry);
  entries[std::move(key)] = entry.get();
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<Launch>(m, "Launch")
      .def(py::init([](uint64_t function, std::array<unsigned, 3> grid, unsigned block,
                       unsigned shared, int64_t scratch,
                       const std::vector<std::tuple<int, int, int64_t>>& params,
                       const std::vector<std::tuple<int, int64_t, int, std::vector<uint64_t>,
                                                    std::vector<uint64_t>, std::vector<uint32_t>,
                                                    int, int>>& descriptors,
                       const std::vector<std::array<int64_t, 2>>& outputs, bool split_k) {
        Launch l;
        l.function = reinterpret_cast<void*>(function);
        l.grid = grid;
        l.block = block;
        l.shared = shared;
        l.scratch = scratch;
        for (const auto& [source, storage, value] : params) {
          l.params.push_back({static_cast<Source>(source), static_cast<Storage>(storage), value});
        }
        l.outputs = outputs;
        l.split_k = split_k;
        for (const auto& [base, index, data_type, dims, strides, box, swizzle, fill] :
             descriptors) {
          TORCH_CHECK(driver().encode_tiled != nullptr,
                      "helion_ops native: the driver has no cuTensorMapEncodeTiled");
          l.descriptors.push_back({static_cast<Source>(base), index, data_type, dims, strides,
                                   box, swizzle, fill});
        }
        return l;
      }));
  py::class_<Recipe>(m, "Recipe")
      .def(py::init([](std::vector<Launch> launches,
                       const std::vector<std::tuple<int, int, bool>>& grads) {
        Recipe r;
        r.launches = std::move(launches);
        for (const Launch& launch : r.launches) {
          r.atomics = r.atomics || launch.split_k;
        }
        for (size_t i = 0; i < 2; ++i) {
          const auto& [launch, output, transposed] = grads.at(i);
          r.grads[i] = {launch, output, transposed};
        }
        return r;
      }));
  m.def("matmul", [](py::handle a, py::handle b) {
    return product(mm_entries, nullptr, a.ptr(), b.ptr(), 1.0, 0.0);
  });
  m.def("addmm", [](py::handle bias, py::handle a, py::handle b, double alpha, double beta) {
    if (alpha == 0 || beta == 0) {  // torch's semantics (no product, no bias) are Python's
      return py::object(py::bool_(false));
    }
    return product(addmm_entries, bias.ptr(), a.ptr(), b.ptr(), alpha, beta);
  });
  m.def("learn_matmul", [](const at::Tensor& a, const at::Tensor& b, py::object forward) {
    learn(mm_entries, key_of(a, b, at::Tensor(), 1.0, 1.0), forward);
  });
  m.def("learn_addmm", [](const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b,
                          double alpha, double beta, py::object forward) {
    learn(addmm_entries, key_of(a, b, bias, alpha, beta), forward);
  });
  m.def("set_backward", [](py::object fn) { python_backward = fn.release().ptr(); });
  m.def("reset", [] {
    mm_entries.clear();
    addmm_entries.clear();
  });
  m.def("entries", [] { return mm_entries.size() + addmm_entries.size(); });
}
