// NVRTC through dlopen, the compile call and its two caches (runtime/cuda/nvrtc.h). The NVRTC
// entry points are declared here, as nvrtc.h declares them, so this file builds without the
// CUDA toolkit: nothing links libnvrtc. Steps of CudaCompiler::compile():
//   1. load NVRTC (once) or throw DeviceError with what was tried;
//   2. pick the target (cubin for a supported sm_XX, else PTX, see the header) and the options;
//   3. key = XXH3-128(source, options + name, target, NVRTC version + payload format);
//   4. memory cache, then disk cache (a checked entry: image + log), then NVRTC;
//   5. a failed compile throws DeviceError with the status, the log and the numbered source.
#include "runtime/cuda/nvrtc.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <regex>
#include <unordered_map>

#include "runtime/dynamic_library.h"
#include "runtime/cache_dir.h"
#include "runtime/jit/disk_cache.h"

namespace ein {
namespace {

// The NVRTC C API (nvrtc.h, CUDA 11–13): every call returns nvrtcResult, 0 = NVRTC_SUCCESS.
using NvrtcProgram = struct NvrtcProgramOpaque*;
struct NvrtcApi {
  const char* (*get_error_string)(int) = nullptr;
  int (*version)(int*, int*) = nullptr;
  int (*get_num_supported_archs)(int*) = nullptr;
  int (*get_supported_archs)(int*) = nullptr;
  int (*create_program)(NvrtcProgram*, const char*, const char*, int, const char* const*,
                        const char* const*) = nullptr;
  int (*destroy_program)(NvrtcProgram*) = nullptr;
  int (*compile_program)(NvrtcProgram, int, const char* const*) = nullptr;
  int (*get_program_log_size)(NvrtcProgram, size_t*) = nullptr;
  int (*get_program_log)(NvrtcProgram, char*) = nullptr;
  int (*get_cubin_size)(NvrtcProgram, size_t*) = nullptr;
  int (*get_cubin)(NvrtcProgram, char*) = nullptr;
  int (*get_ptx_size)(NvrtcProgram, size_t*) = nullptr;
  int (*get_ptx)(NvrtcProgram, char*) = nullptr;
};

NvrtcApi g_api;  // filled once by load_nvrtc() under nvrtc_info()'s static initialisation

std::vector<std::string> default_candidates() {
  std::vector<std::string> out;
  if (const char* path = std::getenv("EIN_NVRTC"); path && *path) out.push_back(path);
  out.insert(out.end(), {"libnvrtc.so.13", "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so.13",
                         "/usr/local/cuda/lib64/libnvrtc.so"});
  return out;
}

/// The folders find_cuda_headers() looks in (the header comment's list).
std::vector<std::filesystem::path> include_candidates(const std::string& library) {
  std::vector<std::filesystem::path> dirs;
  if (!library.empty())
    dirs.push_back(std::filesystem::path(library).parent_path().parent_path() / "include");
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(var); v && *v) dirs.push_back(std::filesystem::path(v) / "include");
#ifdef EIN_CUDA_INCLUDE_HINT
  dirs.push_back(EIN_CUDA_INCLUDE_HINT);
#endif
  dirs.push_back("/usr/local/cuda/include");
  return dirs;
}

std::filesystem::path default_disk_cache_dir() {
  const std::filesystem::path root = cache_root();
  return root.empty() ? root : root / "cuda";
}

// The disk entry's payload: u8 ptx, u32 arch, u64 log size, the log, the image (little-endian).
constexpr std::string_view kPayloadFormat = "ein-cuda-payload-1";

std::string encode(const CudaBinary& b) {
  std::string out(13, '\0');
  out[0] = b.ptx ? 1 : 0;
  const uint64_t fields[2] = {static_cast<uint64_t>(b.arch), b.log.size()};
  for (int i = 0; i < 4; ++i)
    out[1 + i] = static_cast<char>((fields[0] >> (8 * i)) & 0xff);
  for (int i = 0; i < 8; ++i)
    out[5 + i] = static_cast<char>((fields[1] >> (8 * i)) & 0xff);
  return out + b.log + b.image;
}

std::optional<CudaBinary> decode(std::string_view in) {
  if (in.size() < 13) return std::nullopt;
  auto get = [&](size_t at, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i)
      v |= uint64_t{static_cast<unsigned char>(in[at + i])} << (8 * i);
    return v;
  };
  const uint64_t log_size = get(5, 8);
  if (log_size > in.size() - 13) return std::nullopt;
  CudaBinary b;
  b.ptx = in[0] != 0;
  b.arch = static_cast<int>(get(1, 4));
  b.log = std::string(in.substr(13, log_size));
  b.image = std::string(in.substr(13 + log_size));
  return b;
}

struct KeyHash {
  size_t operator()(const detail::JitCacheKey& k) const { return static_cast<size_t>(k.low); }
};

}  // namespace

namespace detail {

NvrtcInfo load_nvrtc(const std::vector<std::string>& candidates) {
  NvrtcInfo info;
  DynamicLibrary lib = DynamicLibrary::open(candidates);
  if (!lib.handle) {
    info.reason = "CUDA compilation needs NVRTC (libnvrtc from the CUDA toolkit), which could not "
                  "be loaded; tried:" + lib.tried;
    return info;
  }
  NvrtcApi api;
  const auto sym = [&](auto& fn, const char* name) { lib.bind(fn, name); };
  sym(api.get_error_string, "nvrtcGetErrorString");
  sym(api.version, "nvrtcVersion");
  sym(api.get_num_supported_archs, "nvrtcGetNumSupportedArchs");
  sym(api.get_supported_archs, "nvrtcGetSupportedArchs");
  sym(api.create_program, "nvrtcCreateProgram");
  sym(api.destroy_program, "nvrtcDestroyProgram");
  sym(api.compile_program, "nvrtcCompileProgram");
  sym(api.get_program_log_size, "nvrtcGetProgramLogSize");
  sym(api.get_program_log, "nvrtcGetProgramLog");
  sym(api.get_cubin_size, "nvrtcGetCUBINSize");
  sym(api.get_cubin, "nvrtcGetCUBIN");
  sym(api.get_ptx_size, "nvrtcGetPTXSize");
  sym(api.get_ptx, "nvrtcGetPTX");
  Dl_info where{};
  if (::dladdr(reinterpret_cast<void*>(api.version), &where) && where.dli_fname)
    info.library = where.dli_fname;
  if (!lib.missing.empty()) {
    info.reason = "the NVRTC library " + (info.library.empty() ? lib.name : info.library) + " lacks " + lib.missing;
    return info;
  }
  api.version(&info.major, &info.minor);
  int count = 0;
  if (api.get_num_supported_archs(&count) == 0 && count > 0) {
    info.archs.resize(count);
    api.get_supported_archs(info.archs.data());
    std::sort(info.archs.begin(), info.archs.end());
  }
  const CudaHeaders headers = find_cuda_headers(include_candidates(info.library));
  info.include_dir = headers.dir;
  info.mma_headers = headers.mma;
  info.available = true;
  g_api = api;
  return info;
}

CudaHeaders find_cuda_headers(const std::vector<std::filesystem::path>& dirs) {
  std::error_code ec;
  const auto has = [&](const std::filesystem::path& d, const char* file) {
    return std::filesystem::exists(d / file, ec);
  };
  CudaHeaders found;
  for (const auto& d : dirs) {
    if (!has(d, "cuda_fp16.h")) continue;
    if (has(d, "mma.h") && has(d, "crt/mma.h")) return {d.lexically_normal().string(), true};
    if (found.dir.empty()) found.dir = d.lexically_normal().string();
  }
  return found;
}

}  // namespace detail

const NvrtcInfo& nvrtc_info() {
  static const NvrtcInfo info = detail::load_nvrtc(default_candidates());
  return info;
}

std::optional<PtxasUsage> parse_ptxas_usage(std::string_view log, std::string_view entry) {
  const std::string head = "Function properties for " + std::string(entry) + "\n";
  const size_t at = log.find(head);
  if (at == std::string_view::npos) return std::nullopt;
  const std::string rest(log.substr(at + head.size(), 400));
  static const std::regex frame(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex regs(R"(Used (\d+) registers[^\n]*)");
  static const std::regex smem(R"((\d+) bytes smem)");
  std::smatch m, r, s;
  if (!std::regex_search(rest, m, frame) || !std::regex_search(rest, r, regs)) return std::nullopt;
  const std::string used = r[0];  // "Used 40 registers, used 1 barriers, 4096 bytes smem, ..."
  const int64_t shared = std::regex_search(used, s, smem) ? std::stoll(s[1]) : 0;
  return PtxasUsage{std::stoi(r[1]), std::stoll(m[1]), std::stoll(m[2]), std::stoll(m[3]), shared};
}

struct CudaCompiler::Impl {
  mutable std::mutex mutex;
  std::unordered_map<detail::JitCacheKey, std::shared_ptr<const CudaBinary>, KeyHash> binaries;
  NvrtcStats stats;
  std::filesystem::path disk_dir = default_disk_cache_dir();
};

CudaCompiler::CudaCompiler() : impl_(std::make_unique<Impl>()) {}
CudaCompiler::~CudaCompiler() = default;

CudaCompiler& CudaCompiler::instance() {
  static CudaCompiler compiler;
  return compiler;
}

std::shared_ptr<const CudaBinary> CudaCompiler::compile(std::string_view source,
                                                        std::string_view name,
                                                        const CudaCompileOptions& options) {
  const NvrtcInfo& info = nvrtc_info();
  if (!info.available) throw DeviceError(info.reason);

  // 2. The target: a cubin for a supported architecture, else PTX for the newest older one.
  CudaBinary result;
  result.arch = options.arch;
  const bool known = std::binary_search(info.archs.begin(), info.archs.end(), options.arch);
  if (!known && options.arch_specific)
    throw DeviceError("NVRTC " + std::to_string(info.major) + "." + std::to_string(info.minor) +
                      " cannot compile for sm_" + std::to_string(options.arch) +
                      "a: it does not know sm_" + std::to_string(options.arch));
  if (!known) {
    auto older = std::upper_bound(info.archs.begin(), info.archs.end(), options.arch);
    if (older == info.archs.begin())
      throw DeviceError("NVRTC " + std::to_string(info.major) + "." + std::to_string(info.minor) +
                        " cannot compile for sm_" + std::to_string(options.arch) +
                        ": it supports sm_" + std::to_string(info.archs.empty() ? 0 : info.archs.front()) +
                        " and newer");
    result.ptx = true;
    result.arch = *std::prev(older);
  }
  const std::string target = (result.ptx ? "compute_" : "sm_") + std::to_string(result.arch) +
                             (options.arch_specific ? "a" : "");
  std::vector<std::string> opts = {"--gpu-architecture=" + target, "-std=c++17"};
  // Without the runtime API's device-side declarations (textures, cudadevrt, device launches),
  // which no ein kernel uses: 3 ms less of a small kernel's front end (NVRTC 12.4 and newer).
  if (info.major > 12 || (info.major == 12 && info.minor >= 4)) opts.push_back("-minimal");
  if (!info.include_dir.empty()) opts.push_back("-I" + info.include_dir);
  if (options.verbose && !result.ptx) opts.push_back("--ptxas-options=-v");
  opts.insert(opts.end(), options.extra.begin(), options.extra.end());
  std::string joined(name);
  for (const std::string& o : opts)
    joined += '\n' + o;

  // 3–4. The caches.
  const std::string version = "nvrtc " + std::to_string(info.major) + "." +
                              std::to_string(info.minor) + " " + std::string(kPayloadFormat);
  const detail::JitCacheKey key = detail::jit_cache_key(source, joined, target, version);
  std::filesystem::path dir;
  {
    std::lock_guard lock(impl_->mutex);
    if (auto it = impl_->binaries.find(key); it != impl_->binaries.end()) {
      ++impl_->stats.memory_hits;
      return it->second;
    }
    dir = impl_->disk_dir;
  }
  if (!dir.empty()) {
    const detail::JitCacheRead read = detail::read_jit_cache(dir, key);
    std::optional<CudaBinary> cached;
    if (read.status == detail::JitCacheRead::Status::kLoaded) cached = decode(read.payload);
    std::lock_guard lock(impl_->mutex);
    if (cached) {
      ++impl_->stats.disk_hits;
      auto shared = std::make_shared<const CudaBinary>(std::move(*cached));
      impl_->binaries.emplace(key, shared);
      return shared;
    }
    if (read.status != detail::JitCacheRead::Status::kMissing) ++impl_->stats.disk_rejected;
  }

  // NVRTC.
  std::vector<const char*> argv;
  for (const std::string& o : opts)
    argv.push_back(o.c_str());
  const std::string src(source), prog_name(name);
  NvrtcProgram prog = nullptr;
  int status = g_api.create_program(&prog, src.c_str(), prog_name.c_str(), 0, nullptr, nullptr);
  if (status != 0)
    throw DeviceError("NVRTC could not create a program for " + prog_name + ": " +
                      g_api.get_error_string(status));
  status = g_api.compile_program(prog, static_cast<int>(argv.size()), argv.data());
  size_t size = 0;
  g_api.get_program_log_size(prog, &size);
  result.log.assign(size, '\0');
  if (size) g_api.get_program_log(prog, result.log.data());
  result.log.resize(std::strlen(result.log.c_str()));
  if (status == 0) {
    size = 0;
    (result.ptx ? g_api.get_ptx_size : g_api.get_cubin_size)(prog, &size);
    result.image.assign(size, '\0');
    (result.ptx ? g_api.get_ptx : g_api.get_cubin)(prog, result.image.data());
  }
  g_api.destroy_program(&prog);
  if (status != 0) {
    std::string opts_text;
    for (const std::string& o : opts)
      opts_text += " " + o;
    throw DeviceError("NVRTC " + std::to_string(info.major) + "." + std::to_string(info.minor) +
                      " could not compile " + prog_name + " for " + target + " (" +
                      g_api.get_error_string(status) + ", options:" + opts_text + "):\n" +
                      result.log + "--- CUDA source ---\n" + detail::numbered_lines(source));
  }
  if (!dir.empty()) (void)detail::write_jit_cache(dir, key, encode(result));
  auto shared = std::make_shared<const CudaBinary>(std::move(result));
  std::lock_guard lock(impl_->mutex);
  ++impl_->stats.compiled;
  impl_->binaries.emplace(key, shared);
  return shared;
}

NvrtcStats CudaCompiler::stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stats;
}

void CudaCompiler::set_disk_cache_dir(std::filesystem::path dir) {
  std::lock_guard lock(impl_->mutex);
  impl_->disk_dir = std::move(dir);
}

std::filesystem::path CudaCompiler::disk_cache_dir() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->disk_dir;
}

void CudaCompiler::clear_memory_cache() {
  std::lock_guard lock(impl_->mutex);
  impl_->binaries.clear();
}

}  // namespace ein
