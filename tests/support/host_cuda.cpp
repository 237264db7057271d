// Host compilation of CUDA C++ under the emulation (tests/support/host_cuda.h).
#include "support/host_cuda.h"

#include <dlfcn.h>
#include <unistd.h>
#include <xxhash.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

namespace ein::testing {

bool host_cuda_available(std::string* why) {
  if (std::string(EIN_CUDA_HEADERS).empty()) {
    if (why) *why = "the CUDA headers (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h) are not installed";
    return false;
  }
  return true;
}

namespace {

/// Where `entry(` of extern "C" function `entry`'s definition is in `source`: after the first
/// `__global__` (a __launch_bounds__ may sit between).
size_t definition_of(const std::string& source, const std::string& entry) {
  const size_t global = source.find("__global__");
  const size_t at = source.find(entry + "(", global == std::string::npos ? 0 : global);
  if (at == std::string::npos)
    throw std::runtime_error("no definition of " + entry + " in the kernel source");
  return at;
}

/// The first argument of the __launch_bounds__ that `entry`'s definition carries, written
/// there or through a macro defined as one (`#define EIN_ROWS_BOUNDS __launch_bounds__(...)`),
/// as C++ for the unit to evaluate ("32 * EIN_WARPS"); "" when it has none.
std::string launch_bounds(const std::string& source, const std::string& entry) {
  const size_t at = definition_of(source, entry);
  const size_t global = source.rfind("__global__", at);
  std::string between = global == std::string::npos ? "" : source.substr(global, at - global);
  static const std::string bounds = "__launch_bounds__(";
  if (between.find(bounds) == std::string::npos) {
    // a macro: the word before the name, if it is defined as a __launch_bounds__
    const size_t end = between.find_last_not_of(" \n\t");
    if (end == std::string::npos) return "";
    size_t begin = end;
    while (begin > 0 && (std::isalnum(static_cast<unsigned char>(between[begin - 1])) ||
                         between[begin - 1] == '_'))
      --begin;
    const std::string define = "#define " + between.substr(begin, end + 1 - begin) + " ";
    const size_t d = source.find(define);
    if (d == std::string::npos) return "";
    between = source.substr(d + define.size(), source.find('\n', d) - d - define.size());
  }
  const size_t open = between.find(bounds);
  if (open == std::string::npos) return "";
  int depth = 0;
  for (size_t i = open + bounds.size(); i < between.size(); ++i) {
    const char c = between[i];
    if (depth == 0 && (c == ')' || c == ','))
      return between.substr(open + bounds.size(), i - open - bounds.size());
    depth += c == '(' ? 1 : c == ')' ? -1 : 0;
  }
  return "";
}

}  // namespace

std::vector<std::string> cuda_entry_parameters(const std::string& source,
                                               const std::string& entry) {
  const size_t open = definition_of(source, entry) + entry.size() + 1;
  const size_t close = source.find(')', open);
  std::vector<std::string> out;
  std::string list = source.substr(open, close - open);
  size_t start = 0;
  while (start < list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    std::string p = list.substr(start, comma - start);
    const size_t b = p.find_first_not_of(" \n\t"), e = p.find_last_not_of(" \n\t");
    if (b != std::string::npos) out.push_back(p.substr(b, e - b + 1));
    start = comma + 1;
  }
  return out;
}

namespace {

/// Runs a shell command; its exit status, and its output in `output`.
int run_command(const std::string& command_line, std::string& output) {
  const std::string command = command_line + " 2>&1";
  int status = -1;
  if (FILE* pipe = ::popen(command.c_str(), "r")) {
    char buffer[4096];
    while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe))
      output.append(buffer, n);
    status = ::pclose(pipe);
  }
  return status;
}

void run_compiler(const std::string& command_line) {
  std::string output;
  if (run_command(command_line, output) != 0)
    throw std::runtime_error(command_line + "\n" + output);
}

/// ThreadSanitizer on the emulated kernels, with EIN_EMULATION_RACECHECK=1: TSan is told only of
/// the orderings the block's barriers give (host_emulation_runtime.cpp), so a read of shared or
/// global memory that no barrier orders after another thread's write is a data race TSan
/// reports, as compute-sanitizer's racecheck does on a GPU, whichever thread ran first. The test
/// process must have TSan's runtime (scripts/racecheck.sh preloads it); without it, an error says
/// so. Empty otherwise.
const std::string& race_check() {
  static const std::string flags = [] {
    const char* env = std::getenv("EIN_EMULATION_RACECHECK");
    if (!env || std::string(env) != "1") return std::string();
    if (!::dlsym(RTLD_DEFAULT, "__tsan_init"))
      throw std::runtime_error(
          "EIN_EMULATION_RACECHECK=1 needs ThreadSanitizer's runtime in the test process: run "
          "the suite through scripts/racecheck.sh, which preloads it");
    ::unsetenv("LD_PRELOAD");  // loaded here; the shell and compiler this runs are not TSan's
    return std::string("-fsanitize=thread -g");  // -g: reports name the kernel source's lines
  }();
  return flags;
}

/// UBSan's alignment check, when the host compiler has its runtime: a misaligned access through
/// a type (a 16-byte ein_vec, a uint4 row word, a half2), which x86 forgives and a GPU faults
/// on, stops the test with UBSan's message ("load of misaligned address ... requires 16 byte
/// alignment") instead of passing. Empty where the compiler cannot link it (a GPU machine's
/// bare toolchain), so the emulation still runs there.
const std::string& alignment_check() {
  static const std::string flags = [] {
    (void)race_check();  // takes TSan's preload, if any, off the probe's compiler
    const std::string check = "-fsanitize=alignment -fno-sanitize-recover=alignment";
    std::string output;
    const int status =
        run_command(fmt::format("echo 'int f(int* p) {{ return *p; }}' | {} -x c++ -shared "
                                "-fPIC {} - -o /dev/null",
                                EIN_HOST_CXX, check),
                    output);
    return status == 0 ? check : std::string();
  }();
  return flags;
}

/// The host compiler with the flags every emulated unit and the precompiled header share.
std::string compiler_flags() {
  return fmt::format("{} -std=c++20 -O1 -w -fPIC -pthread {} {} -I{}", EIN_HOST_CXX,
                     alignment_check(), race_check(), EIN_CUDA_HEADERS);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// Writes `path` through a file of this process's own, renamed into place (atomic: a test process
/// building the same file at once sees all or nothing); `build` makes the file at the path given.
void build_in_place(const std::filesystem::path& path,
                    const std::function<void(const std::filesystem::path&)>& build) {
  if (std::filesystem::exists(path)) return;
  const std::filesystem::path own =
      path.parent_path() /
      fmt::format("{}.{}{}", path.stem().string(), ::getpid(), path.extension().string());
  build(own);
  std::filesystem::rename(own, path);
}

/// What every kernel's unit is compiled against, made once in a folder and named by a hash of
/// the emulation's sources and the flags: host_emulation.h with the CUDA headers it includes,
/// precompiled (`header`, to -include; its .gch sits next to it), and host_emulation_runtime.cpp
/// as a shared library (`runtime`, in the same folder) that each kernel links to. A unit then
/// compiles only the kernel: 0.20 s of g++, against 0.94 s with the runtime compiled into each
/// unit and its headers precompiled (medians over the same 12 kernels, alternated, on a 2-core
/// Zen 3, 2026-12-02).
struct Emulation {
  std::filesystem::path header;
  std::string runtime;  // the library's file name
};

const Emulation& emulation(const std::filesystem::path& dir) {
  static const Emulation made = [&] {
    std::filesystem::create_directories(dir);
    const std::filesystem::path runtime_source =
        std::filesystem::path(EIN_CUDA_HOST_EMULATION)
            .replace_filename("host_emulation_runtime.cpp");
    const std::string header = read_file(EIN_CUDA_HOST_EMULATION);
    const std::string keyed = header + read_file(runtime_source) + compiler_flags();
    const std::string stem =
        fmt::format("host_emulation_{:016x}", XXH3_64bits(keyed.data(), keyed.size()));
    Emulation e{dir / (stem + ".h"), stem + ".so"};
    build_in_place(e.header, [&](const std::filesystem::path& h) { std::ofstream(h) << header; });
    build_in_place(dir / (stem + ".h.gch"), [&](const std::filesystem::path& gch) {
      run_compiler(fmt::format("{} -x c++-header {} -o {}", compiler_flags(), e.header.string(),
                               gch.string()));
    });
    build_in_place(dir / e.runtime, [&](const std::filesystem::path& lib) {
      run_compiler(fmt::format("{} -shared -Wl,-soname,{} {} -o {}", compiler_flags(), e.runtime,
                               runtime_source.string(), lib.string()));
    });
    return e;
  }();
  return made;
}

}  // namespace

void EmulatedLaunch::operator()(void* const* args, unsigned grid, unsigned block,
                                unsigned shared_bytes) const {
  entry_(args, grid, block, shared_bytes);
}

std::string thread_sanitizer_runtime() {
  std::string output;
  if (run_command(fmt::format("{} -print-file-name=libtsan.so", EIN_HOST_CXX), output) != 0)
    return "";
  while (!output.empty() && std::isspace(static_cast<unsigned char>(output.back())))
    output.pop_back();
  // without the runtime, the compiler prints the name it was given
  return output.find('/') != std::string::npos && std::filesystem::exists(output) ? output : "";
}

bool host_cuda_checks_alignment() {
  return !alignment_check().empty();
}

EmulatedLaunch build_emulated(const std::string& source, const std::string& entry) {
  std::string call;
  const std::vector<std::string> params = cuda_entry_parameters(source, entry);
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string type = params[i].substr(0, params[i].rfind(' '));
    call += (i ? ", " : "") + (type == "double"
                                   ? fmt::format("*static_cast<const double*>(args[{}])", i)
                                   : fmt::format("static_cast<{}>(args[{}])", type, i));
  }
  // A block above the kernel's __launch_bounds__ (or 1024) is refused, as cuLaunchKernel does.
  const std::string bounds = launch_bounds(source, entry);
  const std::string unit = fmt::format(
      "{}extern \"C\" void ein_emulated_launch(void* const* args, unsigned grid, unsigned "
      "block, unsigned shared_bytes) {{\n  "
      "ein_emulate_launch(\"{}\", {}, grid, block, shared_bytes, [](void* const* "
      "args) {{ {}({}); }}, args);\n}}\n",
      source, entry, bounds.empty() ? "1024" : "(" + bounds + ")", entry, call);
  static std::mutex mutex;  // one compile at a time writes a given file
  std::lock_guard lock(mutex);
  const std::filesystem::path dir = EIN_EMULATED_KERNEL_DIR;
  const Emulation& e = emulation(dir);
  // keyed by the unit and the emulation it is compiled against (whose files' names hold its hash)
  const std::string keyed = unit + e.runtime;
  const std::string stem = fmt::format("{:016x}", XXH3_64bits(keyed.data(), keyed.size()));
  const std::filesystem::path src = dir / (stem + ".cpp"), lib = dir / (stem + ".so");
  // Test processes share the folder and may build one kernel at once: each writes and compiles
  // files of its own (build_in_place). One shared source file would be truncated under a
  // compiler reading it, which then builds a library without the entry.
  build_in_place(lib, [&](const std::filesystem::path& own_lib) {
    const std::filesystem::path own_src = std::filesystem::path(own_lib).replace_extension(".cpp");
    std::ofstream(own_src) << unit;
    // the runtime is found next to the kernel's library, wherever the folder is
    run_compiler(fmt::format("{} -shared -include {} {} -L{} -l:{} -Wl,-rpath,'$ORIGIN' -o {}",
                             compiler_flags(), e.header.string(), own_src.string(), dir.string(),
                             e.runtime, own_lib.string()));
    std::filesystem::rename(own_src, src);  // kept to read what a library was built from
  });
  void* handle = ::dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw std::runtime_error(std::string("dlopen: ") + ::dlerror());
  void* launch = ::dlsym(handle, "ein_emulated_launch");
  if (!launch)
    throw std::runtime_error(lib.string() + " has no ein_emulated_launch (" + entry + ")");
  return EmulatedLaunch(reinterpret_cast<EmulatedLaunch::Entry>(launch));
}

}  // namespace ein::testing
