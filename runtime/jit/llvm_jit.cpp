// MLIR -> LLVM IR -> host object -> ORC LLJIT. The only file of ein that includes MLIR or LLVM
// headers on the CPU side; everything it exports is plain std (llvm_jit.h).
//
// compile_mlir_to_object:
//   1. parse the text with the kernel dialects registered (verification included);
//   2. replace f32 tanh and erf by MLIR's rational approximations (within 5 ulps), and f32
//      exp/log/sin/cos by calls into SLEEF's 1-ulp vector functions (full range reduction,
//      subnormals and IEEE special values; the library PyTorch's CPU kernels call) in the
//      host's widest SIMD width, so all of them stay vectors (docs/numerics.md);
//   3. lower to the LLVM dialect (kLoweringPipeline below) and translate to LLVM IR;
//   4. run LLVM's O3 pipeline for the host CPU and emit an object file into memory.
// load_object adds the object to a fresh JITDylib of the one process-wide LLJIT, whose link
// order ends in the process' own symbols (libc, libm), and looks the symbol up.
#include "runtime/jit/llvm_jit.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <ein/errors.h>
#include <ein/scalar_convert.h>

#include "llvm/ADT/StringMap.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Index/IR/IndexDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/UB/IR/UBOps.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

// SLEEF's 1-ulp f32 functions: scalar, 4 lanes (SSE2/SSE4.1), 8 lanes (AVX/AVX2) and 16
// lanes (AVX-512F), the 4- and 8-lane ones dispatching on the CPU at their first call. They
// are declared here only for their addresses (sleef.h declares the vector ones only when the
// including file is compiled for AVX); the JIT defines each name as an absolute symbol.
#define EIN_SLEEF_FUNCTIONS(X) X(exp) X(log) X(sin) X(cos)
#define EIN_SLEEF_DECLARE(fn) \
  void Sleef_##fn##f_u10();   \
  void Sleef_##fn##f4_u10();  \
  void Sleef_##fn##f8_u10();  \
  void Sleef_##fn##f16_u10();
extern "C" {
EIN_SLEEF_FUNCTIONS(EIN_SLEEF_DECLARE)
}

namespace {

/// f32 → bf16 as the runtime rounds it (round_to<BFloat16>, as emit_mlir.cpp's f32_to_bf16):
/// to nearest even, a NaN to the quiet NaN with its sign. It is the libcall
/// LLVM makes of `fptrunc float to bfloat` on a CPU without AVX512_BF16 (a Zen 3, a Haswell);
/// compiler-rt defines it, GCC's libgcc (before 13) does not, so the JIT does. A bf16 travels
/// in an XMM register's low 16 bits (the x86-64 psABI, as _Float16), hence the return type.
extern "C" _Float16 ein_truncsfbf2(float x) {
  const uint16_t bits = ein::round_to<ein::BFloat16>(x).bits;
  _Float16 out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

}  // namespace

namespace ein::detail {
namespace {

/// The host as JITTargetMachineBuilder sees it, with features in a stable (sorted) order.
struct HostTarget {
  llvm::orc::JITTargetMachineBuilder builder{llvm::Triple()};
  std::string description;
  /// The widest SLEEF f32 vector the host runs: 16 with AVX-512F, 8 with AVX, else 4 (SSE2).
  int sleef_lanes = 4;
};

const HostTarget& host() {
  static const HostTarget target = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    HostTarget t;
    auto detected = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!detected)
      throw DeviceError("CPU JIT: cannot detect the host target: " +
                        llvm::toString(detected.takeError()));
    t.builder = std::move(*detected);
    std::vector<std::string> features;
    for (const auto& feature : llvm::sys::getHostCPUFeatures()) {
      features.push_back((feature.second ? "+" : "-") + feature.first().str());
      if (feature.first() == "avx" && feature.second) t.sleef_lanes = std::max(t.sleef_lanes, 8);
      if (feature.first() == "avx512f" && feature.second) t.sleef_lanes = 16;
    }
    std::sort(features.begin(), features.end());
    llvm::SubtargetFeatures subtarget;
    std::string list;
    for (const auto& f : features) {
      subtarget.AddFeature(f);
      list += (list.empty() ? "" : ",") + f;
    }
    t.builder.getFeatures() = subtarget;
    t.builder.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
    t.description = t.builder.getTargetTriple().str() + " " + t.builder.getCPU() + " " + list;
    return t;
  }();
  return target;
}

[[noreturn]] void fail(std::string_view what, std::string_view symbol,
                       const std::string& diagnostics, std::string_view source) {
  throw DeviceError("CPU JIT: " + std::string(what) + " for kernel '" + std::string(symbol) +
                    "':\n" + diagnostics + "--- MLIR source ---\n" + detail::numbered_lines(source));
}

/// Everything MLIR may print while handling one kernel, as "file:line:col: error: message".
class DiagnosticCollector {
 public:
  explicit DiagnosticCollector(mlir::MLIRContext& context)
      : handler_(&context, [this](mlir::Diagnostic& diag) {
          append(diag);
          return mlir::success();
        }) {}
  const std::string& text() const { return text_; }

 private:
  void append(mlir::Diagnostic& diag) {
    llvm::raw_string_ostream os(text_);
    if (auto loc = mlir::dyn_cast<mlir::FileLineColLoc>(diag.getLocation()))
      os << loc.getFilename().getValue() << ":" << loc.getLine() << ":" << loc.getColumn() << ": ";
    else
      os << diag.getLocation() << ": ";
    switch (diag.getSeverity()) {
      case mlir::DiagnosticSeverity::Error:
        os << "error: ";
        break;
      case mlir::DiagnosticSeverity::Warning:
        os << "warning: ";
        break;
      case mlir::DiagnosticSeverity::Note:
        os << "note: ";
        break;
      case mlir::DiagnosticSeverity::Remark:
        os << "remark: ";
        break;
    }
    os << diag << "\n";
    for (auto& note : diag.getNotes())
      append(note);
  }

  std::string text_;
  mlir::ScopedDiagnosticHandler handler_;
};

/// The SLEEF function for a math op on f32 (scalar or vector), or "" for any other op.
std::string_view sleef_function(mlir::Operation* op) {
  if (op->getNumResults() != 1 || !mlir::getElementTypeOrSelf(op->getResult(0).getType()).isF32())
    return {};
  if (mlir::isa<mlir::math::ExpOp>(op)) return "exp";
  if (mlir::isa<mlir::math::LogOp>(op)) return "log";
  if (mlir::isa<mlir::math::SinOp>(op)) return "sin";
  if (mlir::isa<mlir::math::CosOp>(op)) return "cos";
  return {};
}

/// Replaces every f32 exp/log/sin/cos by calls to SLEEF's 1-ulp functions: a
/// vector<N x f32> is cut into the widest slices the host runs (16, 8 or 4 lanes, at most
/// `lanes`), then single lanes; each slice is passed to Sleef_<fn>f<width>_u10 in one register,
/// and the results are put back together.
void call_sleef(mlir::ModuleOp module, int lanes) {
  std::vector<mlir::Operation*> ops;
  module.walk([&](mlir::Operation* op) {
    if (!sleef_function(op).empty()) ops.push_back(op);
  });
  mlir::OpBuilder b(module.getContext());
  auto call = [&](std::string_view fn, int width, mlir::Value x, mlir::Location loc) {
    const std::string name =
        "Sleef_" + std::string(fn) + "f" + (width > 1 ? std::to_string(width) : "") + "_u10";
    mlir::Type type = x.getType();
    if (!module.lookupSymbol<mlir::func::FuncOp>(name)) {
      mlir::OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(module.getBody());
      auto f = b.create<mlir::func::FuncOp>(loc, name, b.getFunctionType({type}, {type}));
      f.setPrivate();
    }
    return b.create<mlir::func::CallOp>(loc, name, mlir::TypeRange{type}, mlir::ValueRange{x})
        .getResult(0);
  };
  for (mlir::Operation* op : ops) {
    b.setInsertionPoint(op);
    const std::string_view fn = sleef_function(op);
    const mlir::Location loc = op->getLoc();
    mlir::Value x = op->getOperand(0);
    mlir::Value result;
    auto vector = mlir::dyn_cast<mlir::VectorType>(x.getType());
    if (!vector) {
      result = call(fn, 1, x, loc);
    } else {
      const int64_t n = vector.getNumElements();
      result = b.create<mlir::arith::ConstantOp>(loc, vector, b.getZeroAttr(vector));
      for (int64_t at = 0; at < n;) {
        int width = 1;
        for (int w : {16, 8, 4})
          if (w <= lanes && n - at >= w) {
            width = w;
            break;
          }
        if (width == 1) {
          mlir::Value lane = b.create<mlir::vector::ExtractOp>(loc, x, at);
          result = b.create<mlir::vector::InsertOp>(loc, call(fn, 1, lane, loc), result, at);
        } else {
          mlir::Value slice = b.create<mlir::vector::ExtractStridedSliceOp>(
              loc, x, llvm::ArrayRef<int64_t>{at}, llvm::ArrayRef<int64_t>{width},
              llvm::ArrayRef<int64_t>{1});
          result = b.create<mlir::vector::InsertStridedSliceOp>(
              loc, call(fn, width, slice, loc), result, llvm::ArrayRef<int64_t>{at},
              llvm::ArrayRef<int64_t>{1});
        }
        at += width;
      }
    }
    op->getResult(0).replaceAllUsesWith(result);
    op->erase();
  }
}

// Lowering to the LLVM dialect, in order (mlir-opt spelling; see add_lowering_passes):
// convert-math-to-llvm, convert-math-to-libm, convert-vector-to-scf, convert-scf-to-cf,
// expand-strided-metadata, convert-vector-to-llvm{reassociate-fp-reductions},
// finalize-memref-to-llvm, convert-arith-to-llvm, convert-index-to-llvm, convert-ub-to-llvm,
// convert-cf-to-llvm, convert-func-to-llvm, reconcile-unrealized-casts.
void add_lowering_passes(mlir::PassManager& pm) {
  // Math first: math-to-libm scalarizes vector ops LLVM has no intrinsic for (f64 tanh, erf)
  // into vector.extract/insert + calls, which the vector lowering below must still see.
  pm.addPass(mlir::createConvertMathToLLVMPass());
  pm.addPass(mlir::createConvertMathToLibmPass());
  pm.addPass(mlir::createConvertVectorToSCFPass());
  pm.addPass(mlir::createConvertSCFToCFPass());
  pm.addPass(mlir::memref::createExpandStridedMetadataPass());
  mlir::ConvertVectorToLLVMPassOptions vector_options;
  vector_options.reassociateFPReductions = true;  // tree reductions: vector.reduction stays fast
  pm.addPass(mlir::createConvertVectorToLLVMPass(vector_options));
  pm.addPass(mlir::createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(mlir::createArithToLLVMConversionPass());
  pm.addPass(mlir::createConvertIndexToLLVMPass());
  pm.addPass(mlir::createUBToLLVMConversionPass());
  pm.addPass(mlir::createConvertControlFlowToLLVMPass());
  pm.addPass(mlir::createConvertFuncToLLVMPass());
  pm.addPass(mlir::createReconcileUnrealizedCastsPass());
}

mlir::DialectRegistry kernel_dialects() {
  mlir::DialectRegistry registry;
  registry.insert<mlir::func::FuncDialect, mlir::arith::ArithDialect, mlir::math::MathDialect,
                  mlir::memref::MemRefDialect, mlir::vector::VectorDialect, mlir::scf::SCFDialect,
                  mlir::cf::ControlFlowDialect, mlir::LLVM::LLVMDialect, mlir::index::IndexDialect,
                  mlir::ub::UBDialect>();
  mlir::registerBuiltinDialectTranslation(registry);
  mlir::registerLLVMDialectTranslation(registry);
  return registry;
}

/// LLVM's O3 function and module pipeline, tuned for `machine`.
void optimize(llvm::Module& module, llvm::TargetMachine& machine) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder builder(&machine);
  builder.registerModuleAnalyses(mam);
  builder.registerCGSCCAnalyses(cgam);
  builder.registerFunctionAnalyses(fam);
  builder.registerLoopAnalyses(lam);
  builder.crossRegisterProxies(lam, fam, cgam, mam);
  builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(module, mam);
}

llvm::orc::LLJIT& lljit() {
  // Created once and never destroyed: kernels handed out stay callable until the process ends,
  // even from static destructors of other translation units.
  static llvm::orc::LLJIT* jit = [] {
    auto builder = llvm::orc::LLJITBuilder();
    builder.setJITTargetMachineBuilder(host().builder);
    auto created = builder.create();
    if (!created)
      throw DeviceError("CPU JIT: cannot create the LLJIT: " + llvm::toString(created.takeError()));
    llvm::orc::LLJIT* made = created->release();
    llvm::orc::SymbolMap sleef;
    auto define = [&](const char* name, void (*address)()) {
      sleef[made->mangleAndIntern(name)] = {llvm::orc::ExecutorAddr::fromPtr(address),
                                            llvm::JITSymbolFlags::Exported};
    };
#define EIN_SLEEF_DEFINE(fn)                         \
  define("Sleef_" #fn "f_u10", &Sleef_##fn##f_u10);   \
  define("Sleef_" #fn "f4_u10", &Sleef_##fn##f4_u10); \
  define("Sleef_" #fn "f8_u10", &Sleef_##fn##f8_u10);   \
  define("Sleef_" #fn "f16_u10", &Sleef_##fn##f16_u10);
    EIN_SLEEF_FUNCTIONS(EIN_SLEEF_DEFINE)
#undef EIN_SLEEF_DEFINE
    define("__truncsfbf2", reinterpret_cast<void (*)()>(&ein_truncsfbf2));
    if (llvm::Error err = made->getMainJITDylib().define(llvm::orc::absoluteSymbols(sleef)))
      throw DeviceError("CPU JIT: cannot define SLEEF's functions and __truncsfbf2: " +
                        llvm::toString(std::move(err)));
    return made;
  }();
  return *jit;
}

}  // namespace

const std::string& llvm_host_target() {
  return host().description;
}

std::string_view llvm_version() {
  return LLVM_VERSION_STRING;
}

std::string compile_mlir_to_object(std::string_view source, std::string_view symbol) {
  mlir::MLIRContext context(kernel_dialects(), mlir::MLIRContext::Threading::DISABLED);
  context.loadAllAvailableDialects();
  DiagnosticCollector diagnostics(context);

  const std::string name(symbol);
  auto module = mlir::parseSourceString<mlir::ModuleOp>(
      llvm::StringRef(source.data(), source.size()), mlir::ParserConfig(&context), name);
  if (!module) fail("MLIR parse or verification failed", symbol, diagnostics.text(), source);
  if (!module->lookupSymbol<mlir::func::FuncOp>(name))
    fail("no func.func @" + name + " in the module", symbol, diagnostics.text(), source);

  // f32 tanh and erf: MLIR's rational approximations, within 5 ulps at every f32
  // (bench/f32_ulps_sweep.cpp) and about three times faster than SLEEF's 1-ulp
  // tanhf/erff in a GELU; exp, log, sin and cos go to SLEEF.
  mlir::RewritePatternSet approximations(&context);
  mlir::populatePolynomialApproximateTanhPattern(approximations);
  mlir::populatePolynomialApproximateErfPattern(approximations);
  if (mlir::failed(
          mlir::applyPatternsAndFoldGreedily(module->getOperation(), std::move(approximations))))
    fail("math approximation did not converge", symbol, diagnostics.text(), source);
  call_sleef(*module, host().sleef_lanes);

  mlir::PassManager pm(&context);
  add_lowering_passes(pm);
  if (mlir::failed(pm.run(*module)))
    fail("lowering to the LLVM dialect failed", symbol, diagnostics.text(), source);

  llvm::LLVMContext llvm_context;
  auto llvm_module = mlir::translateModuleToLLVMIR(*module, llvm_context, name);
  if (!llvm_module) fail("translation to LLVM IR failed", symbol, diagnostics.text(), source);

  auto builder = host().builder;  // createTargetMachine is not const
  auto machine = builder.createTargetMachine();
  if (!machine)
    throw DeviceError("CPU JIT: no target machine: " + llvm::toString(machine.takeError()));
  // 512-bit vectors are legal values in every kernel function, so a vector<16xf32> reaches
  // Sleef_<fn>f16_u10 in one zmm register as its C ABI expects, also on CPUs whose tuning
  // prefers 256-bit vectors (which would otherwise split it into two ymm halves).
  if (host().sleef_lanes == 16)
    for (llvm::Function& f : *llvm_module)
      if (!f.isDeclaration()) f.addFnAttr("min-legal-vector-width", "512");
  llvm_module->setDataLayout((*machine)->createDataLayout());
  llvm_module->setTargetTriple((*machine)->getTargetTriple().str());
  optimize(*llvm_module, **machine);

  llvm::SmallVector<char, 0> object;
  llvm::raw_svector_ostream os(object);
  llvm::legacy::PassManager codegen;
  if ((*machine)->addPassesToEmitFile(codegen, os, nullptr, llvm::CodeGenFileType::ObjectFile))
    throw DeviceError("CPU JIT: the host target cannot emit object files");
  codegen.run(*llvm_module);
  return std::string(object.data(), object.size());
}

CpuKernelFn load_object(std::string_view object, std::string_view symbol, const std::string& dylib,
                        std::string* error) {
  auto& jit = lljit();
  auto dylib_or = jit.createJITDylib(dylib);
  if (!dylib_or) {
    *error = llvm::toString(dylib_or.takeError());
    return nullptr;
  }
  llvm::orc::JITDylib& jd = *dylib_or;
  jd.addToLinkOrder(jit.getMainJITDylib());  // SLEEF's functions and __truncsfbf2
  auto buffer =
      llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(object.data(), object.size()), dylib);
  llvm::Error err = jit.addObjectFile(jd, std::move(buffer));
  if (!err) {
    auto address = jit.lookup(jd, llvm::StringRef(symbol.data(), symbol.size()));
    if (address) return address->toPtr<CpuKernelFn>();
    err = address.takeError();
  }
  *error = llvm::toString(std::move(err));
  llvm::consumeError(jit.getExecutionSession().removeJITDylib(jd));
  return nullptr;
}

}  // namespace ein::detail
