// The I/O engine of anyaccel's async I/O op (anyaccel/ops/aio/spec.py): plain POSIX, no torch headers, so
// this unit compiles in parallel with the registration unit (aio.cpp) and can be read on its own.
//
// Mechanism (chosen by measurement, docs/aio.md "Mechanism"): a pool of worker threads per handle, each
// issuing pread/pwrite on one piece of a transfer at a time. A transfer of `nbytes` at file offset `offset`
// is cut into pieces on 4096-byte file boundaries:
//
//   head   [offset, align_up(offset))        buffered fd (the page cache): O_DIRECT cannot start mid-block
//   body   [align_up(offset), align_down(end)) pieces of `block` bytes on an O_DIRECT fd; straight from the
//                                            caller's memory when it is congruent with the file offset
//                                            modulo 4096 (page-aligned buffers at aligned offsets), else
//                                            through a page-aligned staging buffer of the worker (a bounce)
//   tail   [align_down(end), end)            buffered fd: O_DIRECT cannot end mid-block
//
// so any size and offset gives the right bytes, and the bulk of a large transfer never touches the page
// cache. File systems without O_DIRECT (open fails with EINVAL) use the buffered fd for everything.
//
// Failures never pass silently: a read of a range the file does not hold is refused before anything is
// queued (the file is shorter than the tensor), a read that meets the end of the file later (the file
// shrank) fails as such, and every OS error is recorded with its errno and reported by wait().
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace anyaccel {
namespace aio {

// File offsets, lengths and buffer addresses of O_DIRECT pieces are multiples of this (bytes). 4096 is
// what every Linux block device and file system accepts (logical blocks are 512 or 4096 bytes).
constexpr int64_t kDirectAlignment = 4096;
// Worker threads of one handle at most, whatever queue_depth * intra_op_parallelism asks for.
constexpr int64_t kMaxThreads = 32;

// The kinds of error the Python front end tells apart (anyaccel/ops/aio/errors.py decodes the tag
// "[anyaccel.aio kind=<kind> errno=<n> ...]" that starts every message this op raises).
enum class ErrorKind { kOs, kShortFile, kConflict, kHandle, kNotRegular };

// Throws std::runtime_error (RuntimeError in Python) with the tagged message.
[[noreturn]] void throw_error(ErrorKind kind, int err, const std::string& message, const std::string& extra_tags = "");

// One whole-buffer read or write, as the caller asks for it.
struct Transfer {
  bool read = true;
  char* buf = nullptr;
  int64_t nbytes = 0;
  int64_t offset = 0;
  std::string path;                  // the file to open; empty when `fd` names an open file
  int fd = -1;                       // the caller's open file (duplicated: the caller may close it)
  std::shared_ptr<void> keepalive;   // keeps the caller's memory alive until the transfer is reaped
};

class Engine {
 public:
  // block: bytes per O_DIRECT piece (rounded up to a multiple of kDirectAlignment); threads: worker count.
  Engine(int64_t block, int64_t threads);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Opens the file and queues the transfer; returns at once. Throws (nothing queued, nothing opened left
  // open) when the file cannot be opened or is not a regular file (a FIFO, socket or device: paths are
  // opened O_NONBLOCK and checked with fstat, a caller's fd is checked before it is reopened, so this never
  // blocks), a read runs past its end, a write that extends the file finds no
  // room (fallocate; which also sets the file's final size, restored if the transfer fails), or the transfer
  // races a pending one (submitted and not yet reaped by wait(), finished or not): memory written by one and
  // touched by the other, or file bytes written by one and touched by the other.
  void submit(Transfer t);

  // Waits up to timeout_s for every submitted transfer. Returns -1 when some are still running (nothing is
  // reaped), else the number of transfers finished since the last reap, whose memory and files it then
  // releases. Throws, after reaping, when any of them failed (the first failure's errno in the tag).
  int64_t wait(double timeout_s);

  // Transfers submitted and not yet reaped by wait().
  int64_t pending() const;

  // Finishes or cancels what is queued (cancelled pieces fail with ECANCELED), waits for the pieces in
  // flight and joins the workers. Idempotent; the destructor calls it.
  void shutdown();

  // The process that made the engine: its worker threads do not exist in a fork()ed child.
  pid_t owner() const { return pid_; }

 private:
  struct Request;
  struct Piece;
  Piece next_piece(Request& r) const;
  void worker();
  void complete_locked(const std::shared_ptr<Request>& r);
  void check_conflicts_locked(const Request& r) const;

  const int64_t block_;
  const pid_t pid_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<std::shared_ptr<Request>> queue_;   // transfers with pieces left to claim, in submit order
  std::vector<std::shared_ptr<Request>> live_;   // submitted and not finished
  std::vector<std::shared_ptr<Request>> done_;   // finished and not yet reaped
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace aio
}  // namespace anyaccel
