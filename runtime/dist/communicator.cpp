// world(), the one-process group, the watchdog and the conveniences over the primitives
// (communicator.h). The MPI group is in mpi_communicator.cpp, built where MPI was found.
#include "runtime/dist/communicator.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include <ein/errors.h>
#include <fmt/format.h>

#include "runtime/dist/mpi_communicator.h"

namespace ein::dist {
namespace {

/// A group of one: every collective is a local copy.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  std::string_view backend() const override { return "single"; }

  void all_to_all_v(const void* send, const std::vector<int64_t>& send_counts,
                    const std::vector<int64_t>& send_offsets, void* recv,
                    const std::vector<int64_t>&, const std::vector<int64_t>& recv_offsets,
                    std::string_view) override {
    ++stats.collectives;
    copy(recv, recv_offsets.at(0), send, send_offsets.at(0), send_counts.at(0));
  }
  void all_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts,
                    const std::vector<int64_t>& offsets, std::string_view) override {
    ++stats.collectives;
    copy(recv, offsets.at(0), send, 0, counts.at(0));
  }
  void broadcast(void*, int64_t, int, std::string_view) override { ++stats.collectives; }
  void barrier(std::string_view) override {}
  [[noreturn]] void abort(const std::string& why) override {
    std::fprintf(stderr, "ein: %s\n", why.c_str());
    std::_Exit(1);
  }

 private:
  static void copy(void* to, int64_t to_offset, const void* from, int64_t from_offset, int64_t n) {
    if (n > 0 && static_cast<char*>(to) + to_offset != static_cast<const char*>(from) + from_offset)
      std::memmove(static_cast<char*>(to) + to_offset, static_cast<const char*>(from) + from_offset,
                   static_cast<size_t>(n));
  }
};

/// EIN_DIST_TIMEOUT in seconds, when set to a positive number.
double timeout_from_environment(double fallback) {
  const char* s = std::getenv("EIN_DIST_TIMEOUT");
  if (!s || !*s) return fallback;
  char* end = nullptr;
  const double t = std::strtod(s, &end);
  if (end == s || *end != '\0' || !(t > 0))
    throw RuntimeError(fmt::format("EIN_DIST_TIMEOUT='{}': expected a positive number of seconds", s));
  return t;
}

}  // namespace

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"})
    if (const char* v = std::getenv(name); v && *v) return true;
  return std::getenv("PMIX_RANK") != nullptr;
}

Communicator& world() {
  static std::unique_ptr<Communicator> w = [] {
    std::unique_ptr<Communicator> c;
    if (launched_by_mpi()) {
      c = make_mpi_communicator();
      if (!c)
        throw RuntimeError(
            "this process was started by mpirun, but this ein was built without MPI (install "
            "libopenmpi-dev, as scripts/install_deps.sh does, and rebuild)");
    } else {
      c = std::make_unique<SingleProcess>();
    }
    c->timeout_seconds = timeout_from_environment(c->timeout_seconds);
    return c;
  }();
  return *w;
}

namespace {

/// One `value` per rank, in rank order (a fixed-size all-gather).
template <class T>
std::vector<T> gather_values(Communicator& comm, T value, std::string_view what) {
  std::vector<T> out(static_cast<size_t>(comm.size()));
  std::vector<int64_t> counts(out.size(), sizeof(T)), offsets(out.size());
  for (size_t i = 0; i < out.size(); ++i)
    offsets[i] = static_cast<int64_t>(i * sizeof(T));
  comm.all_gather_v(&value, out.data(), counts, offsets, what);
  return out;
}

}  // namespace

std::vector<double> Communicator::all_gather(double value, std::string_view what) {
  return gather_values(*this, value, what);
}

std::vector<uint64_t> Communicator::all_gather(uint64_t value, std::string_view what) {
  return gather_values(*this, value, what);
}

double Communicator::sum(double value, std::string_view what) {
  double total = 0;
  for (double v : all_gather(value, what))
    total += v;
  return total;
}

}  // namespace ein::dist
