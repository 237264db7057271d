// The one source file of libein.so itself; every layer is linked in whole from its static
// library. It exists so the shared library has a home for its version string.
namespace ein {
/// The library's version, for `ldd`-level debugging and bug reports.
extern const char* const kVersion;
const char* const kVersion = "0.1.0";
}  // namespace ein
