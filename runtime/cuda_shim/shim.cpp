// tli CUDA memory shim: per-device memory facts for the host, seen the way
// libtorch sees them (the same CUDA runtime, context and caching allocator
// that every plugin in the process shares).
//
// * device count, free/total device memory, device name;
// * the caching allocator's allocated/reserved bytes (current and peak),
//   emptying its cache and resetting its peaks.
//
// Every entry point is `extern "C"` and no C++ exception escapes: all work
// runs inside try/catch, and a failure is returned as a status code with a
// message written (NUL-terminated, truncated to fit) into the caller's buffer.
//
// Only libtorch's own headers and libraries are used, no CUDA runtime header
// and no direct libcudart symbol:
//
// * the PyPI CUDA runtime wheel ships cuda_runtime_api.h without the crt/
//   headers it includes, so those headers cannot be compiled with plain g++;
// * libtorch's libraries sit in its lib directory, which every tli artifact
//   has an rpath to, and they find libcudart through their own RPATH. A
//   direct libcudart reference would make every binary that links tli-host
//   (including other crates' test binaries) need an rpath to nvidia/cu13/lib.
//
// The calls: device count from libtorch's CUDA hooks (cudaGetDeviceCount,
// respecting CUDA_VISIBLE_DEVICES; 0 without a driver); free/total from the
// CUDA caching allocator's getMemoryInfo (cudaMemGetInfo under a device
// guard); stats, emptyCache and resetPeakStats from the same allocator
// (c10::cuda::CUDACachingAllocator, reached as c10::getDeviceAllocator(CUDA),
// whose stats are c10::CachingDeviceAllocator::DeviceStats); the device name
// from at::cuda::getDeviceProperties (libtorch_cuda).
//
// Built by runtime/build.rs with the `cc` crate (g++ -std=c++17
// -D_GLIBCXX_USE_CXX11_ABI=1, libtorch's include dirs) only when libtorch has
// CUDA (libtorch_cuda.so present); no nvcc is needed.

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <string>

// The CUDA runtime's device-properties struct, opaque here (see above for why
// its header is not included). Its first member has always been
// `char name[256]`, which is all this shim reads.
struct cudaDeviceProp;

namespace at::cuda {
// Defined in libtorch_cuda (ATen/cuda/CUDAContextLight.h declares it, but that
// header needs the CUDA headers). Initializes the properties on first use.
cudaDeviceProp* getDeviceProperties(c10::DeviceIndex device);
}  // namespace at::cuda

namespace {

// Status codes shared with host/src/orchestrator/cuda.rs.
constexpr int TLI_CUDA_OK = 0;
constexpr int TLI_CUDA_NO_DEVICE = 1;
constexpr int TLI_CUDA_ERROR = 2;

void write_message(char* buf, size_t len, const std::string& msg) {
  if (buf == nullptr || len == 0) {
    return;
  }
  size_t n = msg.size() < len - 1 ? msg.size() : len - 1;
  std::memcpy(buf, msg.data(), n);
  buf[n] = '\0';
}

// The number of CUDA devices libtorch sees, 0 on any error (no driver, no
// device, a libtorch without CUDA). c10 caches the count after the first
// query, so it stays consistent with what every plugin sees.
int device_count_or_zero() noexcept {
  try {
    int count = static_cast<int>(at::detail::getCUDAHooks().deviceCount());
    return count < 0 ? 0 : count;
  } catch (...) {
    return 0;
  }
}

// Returns TLI_CUDA_OK when `dev` names an existing device, else writes why.
int check_device(int dev, char* err, size_t err_len) {
  int count = device_count_or_zero();
  if (count == 0) {
    write_message(err, err_len, "no CUDA devices are visible to this process");
    return TLI_CUDA_NO_DEVICE;
  }
  if (dev < 0 || dev >= count) {
    write_message(err, err_len,
                  "cuda:" + std::to_string(dev) + " does not exist (this machine has " +
                      std::to_string(count) + " CUDA device(s))");
    return TLI_CUDA_NO_DEVICE;
  }
  return TLI_CUDA_OK;
}

// libtorch initializes its CUDA state (including the caching allocator's
// per-device tables) lazily; the allocator throws "did you call init?" until
// then. This is the same call `torch.cuda.memory_stats` makes first. It is
// idempotent and thread-safe (call_once).
void ensure_torch_cuda_initialized() {
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
}

// libtorch's CUDA caching allocator (c10::cuda::CUDACachingAllocator::get()),
// through the device-generic interface that needs no CUDA header.
c10::DeviceAllocator* allocator() {
  c10::DeviceAllocator* a = c10::getDeviceAllocator(c10::DeviceType::CUDA);
  TORCH_CHECK(a != nullptr, "libtorch's CUDA caching allocator is not installed");
  return a;
}

uint64_t non_negative(int64_t v) { return v < 0 ? 0 : static_cast<uint64_t>(v); }

template <typename F>
int guarded(char* err, size_t err_len, F&& body) {
  try {
    body();
    return TLI_CUDA_OK;
  } catch (const c10::Error& e) {
    // what_without_backtrace: the message without libtorch's C++ stack.
    write_message(err, err_len, e.what_without_backtrace());
  } catch (const std::exception& e) {
    write_message(err, err_len, e.what());
  } catch (...) {
    write_message(err, err_len, "unknown C++ exception in the CUDA shim");
  }
  return TLI_CUDA_ERROR;
}

}  // namespace

extern "C" {

int tli_cuda_device_count(void) { return device_count_or_zero(); }

int tli_cuda_mem_get_info(int dev, uint64_t* free_bytes, uint64_t* total_bytes, char* err,
                          size_t err_len) {
  int rc = check_device(dev, err, err_len);
  if (rc != TLI_CUDA_OK) {
    return rc;
  }
  return guarded(err, err_len, [&] {
    // CUDAAllocator::getMemoryInfo: cudaMemGetInfo under a device guard, so
    // the calling thread's current device is restored afterwards. Like any
    // CUDA call it creates the device's primary context if there is none.
    ensure_torch_cuda_initialized();
    auto info = allocator()->getMemoryInfo(static_cast<c10::DeviceIndex>(dev));
    if (free_bytes != nullptr) *free_bytes = static_cast<uint64_t>(info.first);
    if (total_bytes != nullptr) *total_bytes = static_cast<uint64_t>(info.second);
  });
}

int tli_cuda_device_name(int dev, char* name, size_t name_len, char* err, size_t err_len) {
  int rc = check_device(dev, err, err_len);
  if (rc != TLI_CUDA_OK) {
    return rc;
  }
  return guarded(err, err_len, [&] {
    ensure_torch_cuda_initialized();
    cudaDeviceProp* prop = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(dev));
    TORCH_CHECK(prop != nullptr, "no device properties for cuda:", dev);
    // `char name[256]` is the struct's first member.
    const char* raw = reinterpret_cast<const char*>(prop);
    write_message(name, name_len, std::string(raw, strnlen(raw, 256)));
  });
}

int tli_cuda_allocator_stats(int dev, uint64_t* allocated, uint64_t* allocated_peak,
                             uint64_t* reserved, uint64_t* reserved_peak, char* err,
                             size_t err_len) {
  int rc = check_device(dev, err, err_len);
  if (rc != TLI_CUDA_OK) {
    return rc;
  }
  return guarded(err, err_len, [&] {
    ensure_torch_cuda_initialized();
    auto stats = allocator()->getDeviceStats(static_cast<c10::DeviceIndex>(dev));
    constexpr auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    if (allocated != nullptr) *allocated = non_negative(stats.allocated_bytes[agg].current);
    if (allocated_peak != nullptr) *allocated_peak = non_negative(stats.allocated_bytes[agg].peak);
    if (reserved != nullptr) *reserved = non_negative(stats.reserved_bytes[agg].current);
    if (reserved_peak != nullptr) *reserved_peak = non_negative(stats.reserved_bytes[agg].peak);
  });
}

int tli_cuda_empty_cache(char* err, size_t err_len) {
  if (device_count_or_zero() == 0) {
    write_message(err, err_len, "no CUDA devices are visible to this process");
    return TLI_CUDA_NO_DEVICE;
  }
  return guarded(err, err_len, [&] {
    ensure_torch_cuda_initialized();
    // Releases every unused cached block on every device back to CUDA.
    allocator()->emptyCache();
  });
}

int tli_cuda_reset_peak(int dev, char* err, size_t err_len) {
  int rc = check_device(dev, err, err_len);
  if (rc != TLI_CUDA_OK) {
    return rc;
  }
  return guarded(err, err_len, [&] {
    ensure_torch_cuda_initialized();
    allocator()->resetPeakStats(static_cast<c10::DeviceIndex>(dev));
  });
}

}  // extern "C"
