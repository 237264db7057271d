# The installable library: libein.so holding every layer (core, dsl, runtime, compiler, exec,
# api, script), the public headers under include/ein-<version>/ein/ (the umbrella is
# <ein/ein.h>), the `ein` CLI, the .ein standard library under share/ein/stdlib, and a CMake
# package so an outside project can `find_package(ein CONFIG)` and link `ein::ein`.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The target is ein_library (the CLI executable is `ein`); installed it is ein::ein, libein.so.
add_library(ein_library SHARED ${PROJECT_SOURCE_DIR}/cmake/ein_version.cpp)
add_library(ein::ein ALIAS ein_library)
# Whole archives, so every symbol of every layer is in the .so; CMake's WHOLE_ARCHIVE feature
# refuses libraries that also appear as ordinary dependencies, hence the linker flags.
target_link_libraries(ein_library PRIVATE
  -Wl,--whole-archive ein_script ein_api ein_exec ein_compiler ein_runtime ein_dsl ein_core -Wl,--no-whole-archive)
set(EIN_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/ein-${PROJECT_VERSION})
target_include_directories(ein_library PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${EIN_INSTALL_INCLUDEDIR}>)
target_compile_features(ein_library PUBLIC cxx_std_20)
# A sanitized libein.so needs the sanitizer runtime first in the executable's library list:
# consumers link with the same -fsanitize (without it, a plain executable crashes at startup).
if(EIN_SANITIZE)
  target_link_options(ein_library INTERFACE -fsanitize=${EIN_SANITIZE})
endif()
# INSTALL_RPATH_USE_LINK_PATH keeps /usr/lib/llvm-19/lib (libMLIR, libLLVM) on the installed
# library's runpath, so consumers neither need nor see LLVM's directory.
set_target_properties(ein_library PROPERTIES OUTPUT_NAME ein EXPORT_NAME ein
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR} INSTALL_RPATH_USE_LINK_PATH TRUE)

install(TARGETS ein_library EXPORT einTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# Only the public API: every header under include/ein/ includes nothing but <ein/...> and the
# standard library (tests/install builds an outside project against this tree alone).
install(DIRECTORY include/ein DESTINATION ${EIN_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(EXPORT einTargets NAMESPACE ein:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ein)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/einConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/einConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ein)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/einConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/einConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/einConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ein)
