// The fake CUDA device's memory (tests/support/fake_cuda.h), kept apart from the host as a
// GPU's is, so that what faults or goes wrong on a GPU fails here too:
//  - the host cannot touch it: every allocation is mapped without access, and only the fake's
//    own copies, launches and GEMMs open the allocations they are given, for as long as they
//    run (host code reading a device pointer segfaults on a GPU's machine; here it stops with a
//    message, as does a kernel reaching a buffer that is not among its arguments);
//  - an access past either end stops with a message, as compute-sanitizer's memcheck reports
//    it: each allocation ends (rounded up to 64 bytes, the alignment ein asks for) where an
//    inaccessible page begins, and an inaccessible page comes before the page it starts in;
//    the bytes between are filled with a canary that each operation checks once it is done, so
//    a write into them is named with the operation that made it.
// A fault in a guard page, or in an allocation nothing opened, prints what was touched and
// which operation was running, then aborts; any other fault goes to the handler before ours.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace ein::testing {

/// `nbytes` (0 is taken as 1) of fake device memory, 64-byte aligned, filled with 0xA5 (fresh
/// device memory holds garbage: a kernel that reads before writing is caught) and closed to the
/// host; nullptr when it cannot be mapped.
void* allocate_device_memory(int64_t nbytes);

/// Unmaps memory from allocate_device_memory, after checking that nothing wrote beside it.
void free_device_memory(void* ptr);

/// Opens, for its lifetime, the allocations holding `pointers` (each may point anywhere inside
/// one, or be null or host memory, which is left as it is) to the host: what the fake does in
/// `operation` (a kernel's name, "a GEMM", "a copy to the host") reads and writes them then.
/// On leaving, checks the canaries beside each and stops with a message naming `operation`
/// when one was overwritten. Allocations opened by several at once stay open until the last
/// closes.
class DeviceMemoryAccess {
 public:
  DeviceMemoryAccess(std::string operation, std::initializer_list<const void*> pointers);
  DeviceMemoryAccess(std::string operation, const std::vector<const void*>& pointers);
  ~DeviceMemoryAccess();
  DeviceMemoryAccess(const DeviceMemoryAccess&) = delete;
  DeviceMemoryAccess& operator=(const DeviceMemoryAccess&) = delete;

 private:
  std::string operation_;
  std::vector<uintptr_t> opened_;  // the allocations' starts
};

}  // namespace ein::testing
