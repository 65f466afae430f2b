#include "arrays.h"

#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace qkvpy {

namespace {

std::string dtype_str(nb::dlpack::dtype dt) {
  const char* kind = "unknown";
  switch (static_cast<nb::dlpack::dtype_code>(dt.code)) {
    case nb::dlpack::dtype_code::Int: kind = "int"; break;
    case nb::dlpack::dtype_code::UInt: kind = "uint"; break;
    case nb::dlpack::dtype_code::Float: kind = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: kind = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: kind = "complex"; break;
    case nb::dlpack::dtype_code::Bool: return "bool";
    default: break;
  }
  return kind + std::to_string(dt.bits);
}

// Results the caller has dropped, newest first; bounded in count and bytes so
// the pool never holds more than a few outputs' worth of memory.
constexpr size_t kPoolTensors = 8;
constexpr size_t kPoolBytes = size_t{256} << 20;
std::mutex g_pool_mutex;  // a torch tensor's deleter may run on another thread
std::deque<qkv::Tensor> g_pool;
size_t g_pool_bytes = 0;

void recycle(qkv::Tensor* t) noexcept {
  try {
    std::lock_guard<std::mutex> lock(g_pool_mutex);
    if (t->nbytes() > 0 && t->nbytes() <= kPoolBytes) {
      g_pool_bytes += t->nbytes();
      g_pool.push_front(std::move(*t));
      while (g_pool.size() > kPoolTensors || g_pool_bytes > kPoolBytes) {
        g_pool_bytes -= g_pool.back().nbytes();
        g_pool.pop_back();
      }
    }
  } catch (...) {  // a full deque: the tensor is simply freed
  }
  delete t;
}

}  // namespace

qkv::Tensor reuse(qkv::DType dtype, const qkv::Shape& shape) {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  for (auto it = g_pool.begin(); it != g_pool.end(); ++it) {
    if (it->dtype() == dtype && it->shape() == shape) {
      qkv::Tensor t = std::move(*it);
      g_pool_bytes -= t.nbytes();
      g_pool.erase(it);
      return t;
    }
  }
  return {};
}

qkv::TensorView view_of(const Array& a, const char* what) {
  if (a.device_type() != nb::device::cpu::value)
    throw nb::type_error((std::string(what) + ": the tensor is not in CPU memory (DLPack device " +
                          std::to_string(a.device_type()) +
                          "); qkv runs on the CPU, move it there first (.cpu())")
                             .c_str());
  const nb::dlpack::dtype dt = a.dtype();
  qkv::DType d;
  if (dt == nb::dtype<float>()) {
    d = qkv::DType::f32;
  } else if (dt == nb::dtype<double>()) {
    d = qkv::DType::f64;
  } else if (dt == nb::dtype<bool>()) {
    d = qkv::DType::boolean;
  } else if (dt.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat) && dt.bits == 16) {
    d = qkv::DType::bf16;  // torch.bfloat16: the kernels accumulate in float32
  } else {
    throw nb::type_error((std::string(what) + ": dtype " + dtype_str(dt) +
                          " is not supported (expected float32, float64 or bfloat16" +
                          (std::string(what) == "attn_mask" ? ", or bool" : "") + ")")
                             .c_str());
  }
  qkv::Shape shape(a.ndim());
  qkv::Strides strides(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) {
    shape[i] = static_cast<int64_t>(a.shape(i));
    strides[i] = a.stride(i);
  }
  return qkv::TensorView(a.data(), d, std::move(shape), std::move(strides));
}

nb::object wrap(qkv::Tensor&& t, Framework fw) {
  auto* owned = new qkv::Tensor(std::move(t));
  nb::capsule owner(owned, [](void* p) noexcept { recycle(static_cast<qkv::Tensor*>(p)); });
  std::vector<size_t> shape(owned->shape().begin(), owned->shape().end());
  const nb::dlpack::dtype bf16{static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
  nb::dlpack::dtype dt = owned->dtype() == qkv::DType::f32    ? nb::dtype<float>()
                         : owned->dtype() == qkv::DType::f64  ? nb::dtype<double>()
                         : owned->dtype() == qkv::DType::bf16 ? bf16
                                                              : nb::dtype<bool>();
  void* data = owned->raw();
  if (fw == Framework::torch)
    return nb::ndarray<nb::pytorch>(data, shape.size(), shape.data(), owner, nullptr, dt).cast();
  return nb::ndarray<nb::numpy>(data, shape.size(), shape.data(), owner, nullptr, dt).cast();
}

}  // namespace qkvpy
