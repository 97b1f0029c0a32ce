// Page-aligned host allocations, optionally page-locked with mlock, as torch ops on torch's stable ABI: the
// native part of DeepSpeed's PinMemoryBuilder (the registration unit and the whole op).
//
// An allocation is a region of whole pages from posix_memalign, remembered in this library's table by its
// base address until pin_free. The Python front end (anyaccel/ops/pin_memory/handle.py) wraps a region in a
// tensor whose storage owns it, and calls pin_free when that storage dies, so the memory lives exactly as
// long as the last tensor or view using it. pin_release ends the pinning of a region early (munlock; the
// region is no longer found nor counted) but leaves the memory to pin_free, so a tensor still using it never
// points at freed memory. Registration with a device runtime (cudaHostRegister) is not done here: CPU ops
// never link device libraries; the accelerator does it from Python through the runtime torch exposes.
// The schemas and scalar ranges are the op spec's (anyaccel/ops/pin_memory/spec.py), compiled in through
// the generated anyaccel_op.h.

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "anyaccel_op.h"

namespace anyaccel {
namespace pin_memory {
namespace {

struct Region {
  int64_t span = 0;      // bytes allocated: the request rounded up to whole pages
  int64_t lock_err = -1; // -1: not asked to lock; 0: mlock-ed; > 0: mlock's errno
  bool released = false; // pin_release ran: no longer pinned, memory kept until pin_free
};

struct Table {
  std::mutex mu;
  std::map<int64_t, Region> regions;  // base address -> region, ordered for range lookups
};

Table& table() {
  static Table* t = new Table();  // never destroyed: finalizers may run during interpreter shutdown
  return *t;
}

int64_t page_size() {
  static const int64_t page = static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
  return page > 0 ? page : 4096;
}

int64_t pin_alloc(int64_t nbytes, bool lock) {
  const int64_t page = page_size();
  const int64_t span = (nbytes + page - 1) / page * page;
  void* p = nullptr;
  const int rc = ::posix_memalign(&p, static_cast<size_t>(page), static_cast<size_t>(span));
  if (rc != 0 || p == nullptr) {
    checks::fail("pin_alloc: could not allocate " + std::to_string(span) + " bytes of page-aligned host memory (" +
                 std::strerror(rc) + "); free host memory or pin less");
  }
  Region region;
  region.span = span;
  if (lock) region.lock_err = ::mlock(p, static_cast<size_t>(span)) == 0 ? 0 : errno;
  const int64_t address = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p));
  Table& t = table();
  std::lock_guard<std::mutex> guard(t.mu);
  t.regions[address] = region;
  return address;
}

// The base address of the pinned (not released) region holding bytes [address, address + nbytes); 0 if none.
int64_t pin_find(int64_t address, int64_t nbytes) {
  Table& t = table();
  std::lock_guard<std::mutex> guard(t.mu);
  auto it = t.regions.upper_bound(address);
  if (it == t.regions.begin()) return 0;
  --it;
  const Region& r = it->second;
  if (r.released || address + nbytes > it->first + r.span) return 0;
  return it->first;
}

// How the region at base address `base` is locked: -1 not asked to, 0 mlock-ed, > 0 mlock's errno; -2 when
// `base` is no pinned region's base.
int64_t pin_lock_state(int64_t base) {
  Table& t = table();
  std::lock_guard<std::mutex> guard(t.mu);
  const auto it = t.regions.find(base);
  if (it == t.regions.end() || it->second.released) return -2;
  return it->second.lock_err;
}

void unlock(int64_t address, Region& r) {
  if (r.lock_err == 0) ::munlock(reinterpret_cast<void*>(static_cast<uintptr_t>(address)), static_cast<size_t>(r.span));
  r.lock_err = -1;
}

int64_t pin_release(int64_t address) {
  Table& t = table();
  std::lock_guard<std::mutex> guard(t.mu);
  const auto it = t.regions.find(address);
  if (it == t.regions.end() || it->second.released) return 0;
  unlock(address, it->second);
  it->second.released = true;
  return 1;
}

int64_t pin_free(int64_t address) {
  Table& t = table();
  std::lock_guard<std::mutex> guard(t.mu);
  const auto it = t.regions.find(address);
  if (it == t.regions.end()) return 0;  // not ours, or freed before: never hand a foreign pointer to free()
  unlock(address, it->second);
  t.regions.erase(it);
  std::free(reinterpret_cast<void*>(static_cast<uintptr_t>(address)));
  return 1;
}

// One figure of the table, by `which`: 0 pinned regions, 1 their bytes, 2 mlock-ed regions, 3 their bytes,
// 4 released regions not yet freed, 5 their bytes (pinned counts include the mlock-ed ones).
int64_t pin_stats(int64_t which) {
  int64_t out[6] = {0, 0, 0, 0, 0, 0};
  Table& t = table();
  std::lock_guard<std::mutex> guard(t.mu);
  for (const auto& entry : t.regions) {
    const Region& r = entry.second;
    const int at = r.released ? 4 : 0;
    out[at] += 1;
    out[at + 1] += r.span;
    if (!r.released && r.lock_err == 0) {
      out[2] += 1;
      out[3] += r.span;
    }
  }
  return out[which];
}

}  // namespace
}  // namespace pin_memory
}  // namespace anyaccel

ANYACCEL_LIBRARY(m) { ANYACCEL_DEFINE_OPS(m); }
ANYACCEL_LIBRARY_IMPL(CompositeExplicitAutograd, m) {
  ANYACCEL_IMPL(m, pin_alloc, anyaccel::pin_memory::pin_alloc);
  ANYACCEL_IMPL(m, pin_find, anyaccel::pin_memory::pin_find);
  ANYACCEL_IMPL(m, pin_lock_state, anyaccel::pin_memory::pin_lock_state);
  ANYACCEL_IMPL(m, pin_release, anyaccel::pin_memory::pin_release);
  ANYACCEL_IMPL(m, pin_free, anyaccel::pin_memory::pin_free);
  ANYACCEL_IMPL(m, pin_stats, anyaccel::pin_memory::pin_stats);
}
