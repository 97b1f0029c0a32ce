// The I/O engine of the async I/O op (see aio_engine.h for the mechanism and its guarantees).
#include "aio_engine.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace anyaccel {
namespace aio {
namespace {

constexpr int kEndOfFile = -1;  // transfer(): a read met the end of the file

int64_t align_up(int64_t x) { return (x + kDirectAlignment - 1) / kDirectAlignment * kDirectAlignment; }
int64_t align_down(int64_t x) { return x / kDirectAlignment * kDirectAlignment; }

const char* kind_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::kOs: return "os";
    case ErrorKind::kShortFile: return "short_file";
    case ErrorKind::kConflict: return "conflict";
    case ErrorKind::kHandle: return "handle";
    case ErrorKind::kNotRegular: return "not_regular";
  }
  return "os";
}

std::string os_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

// "'<path>'" or "fd <n>", for messages.
std::string file_name(const Transfer& t) { return t.path.empty() ? "fd " + std::to_string(t.fd) : "'" + t.path + "'"; }

// Moves bytes [done, len) of one piece between `mem` and the file at `off`, restarting after EINTR and short
// transfers. With `direct`, stops early (returning 0) once `done` is no longer a multiple of the O_DIRECT
// alignment, so the caller finishes the piece through the buffered fd. Returns 0, an errno, or kEndOfFile.
int transfer(bool read, int fd, char* mem, int64_t len, int64_t off, int64_t& done, bool direct) {
  while (done < len) {
    const ssize_t r = read ? ::pread(fd, mem + done, static_cast<size_t>(len - done), off + done)
                           : ::pwrite(fd, mem + done, static_cast<size_t>(len - done), off + done);
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (r == 0) return read ? kEndOfFile : EIO;
    done += r;
    if (direct && done % kDirectAlignment != 0) return 0;
  }
  return 0;
}

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

}  // namespace

void throw_error(ErrorKind kind, int err, const std::string& message, const std::string& extra_tags) {
  throw std::runtime_error(std::string("[anyaccel.aio kind=") + kind_name(kind) + " errno=" + std::to_string(err) +
                           extra_tags + "] " + message);
}

struct Engine::Piece {
  enum Mode { kBuffered, kDirect, kBounce };
  int64_t off;   // file offset
  int64_t len;   // bytes
  char* mem;     // caller memory of the piece's first byte
  Mode mode;
};

struct Engine::Request {
  Transfer t;
  int buffered_fd = -1;
  int direct_fd = -1;  // -1: the file system has no O_DIRECT; everything goes through buffered_fd
  dev_t dev = 0;
  ino_t ino = 0;
  bool congruent = false;  // caller memory and file offsets agree modulo kDirectAlignment
  int64_t end = 0;         // t.offset + t.nbytes
  int64_t cursor = 0;      // next file offset to hand to a worker
  int64_t restore_size = -1;  // a write that extended the file at submission: its size before (else -1)
  int running = 0;         // pieces being transferred now
  int err = 0;             // first failure: errno (0: none)
  ErrorKind kind = ErrorKind::kOs;
  std::string error;

  ~Request() { close_files(); }

  // Closed as soon as the transfer finishes, so a long queue of finished transfers holds no descriptors.
  void close_files() {
    if (buffered_fd >= 0) ::close(buffered_fd);
    if (direct_fd >= 0) ::close(direct_fd);
    buffered_fd = direct_fd = -1;
  }

  std::string what() const {
    return std::string(t.read ? "read of " : "write of ") + std::to_string(t.nbytes) + " bytes at offset " +
           std::to_string(t.offset) + (t.read ? " from " : " to ") + file_name(t);
  }

  void fail(ErrorKind k, int e, const std::string& message) {
    if (err != 0) return;
    err = e == 0 ? EIO : e;
    kind = k;
    error = message;
  }
};

namespace {

// What a file that is not a regular file is, for messages.
const char* file_type(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  return "not a regular file";
}

// Refuses anything but a regular file (a directory keeps its EISDIR error, as before). A FIFO has no file
// offsets and its open waits for a peer; a device has no bytes of its own (/dev/zero never ends).
void check_regular(const Transfer& t, mode_t mode) {
  if (S_ISDIR(mode)) throw_error(ErrorKind::kOs, EISDIR, "aio: " + file_name(t) + " is a directory, not a file");
  if (!S_ISREG(mode)) {
    throw_error(ErrorKind::kNotRegular, 0, "aio: " + file_name(t) + " is " + file_type(mode) +
                                               ", not a regular file; the async I/O op reads and writes regular "
                                               "files only (at file offsets): pass the path or fd of a regular file");
  }
}

// Opens `path` without blocking (O_NONBLOCK: a FIFO's open would wait for its other end) and checks it is a
// regular file before anything else, then clears O_NONBLOCK. Returns the descriptor; throws, leaving nothing
// open.
int open_regular(const Transfer& t, int flags, struct stat& st) {
  const char* verb = t.read ? "reading" : "writing";
  const int fd = ::open(t.path.c_str(), flags | O_CLOEXEC | O_NONBLOCK, 0600);
  if (fd < 0) {
    const int e = errno;
    struct stat ls {};
    // ENXIO: a FIFO without a reader opened for writing, or a device without its hardware
    if (e == ENXIO && ::stat(t.path.c_str(), &ls) == 0) check_regular(t, ls.st_mode);
    throw_error(ErrorKind::kOs, e, "aio: opening '" + t.path + "' for " + verb + " failed: " + os_text(e));
  }
  const int fl = ::fcntl(fd, F_GETFL);
  if (::fstat(fd, &st) != 0 || fl < 0) {
    const int e = errno;
    ::close(fd);
    throw_error(ErrorKind::kOs, e, "aio: fstat of " + file_name(t) + " failed: " + os_text(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    check_regular(t, st.st_mode);
  }
  ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);  // no effect on a regular file's I/O; cleared for clarity
  return fd;
}

// Opens (or, for a caller's fd, duplicates) the buffered and O_DIRECT descriptors of a transfer and reads
// the file's identity and size. Throws, leaving nothing open (the request's destructor closes what is).
void open_files(Transfer& t, int& buffered, int& direct, struct stat& st) {
  const int access = t.read ? O_RDONLY : O_WRONLY;
  const char* verb = t.read ? "reading" : "writing";
  if (!t.path.empty()) {
    buffered = open_regular(t, access | (t.read ? 0 : O_CREAT), st);
    // The O_DIRECT twin, through the same name: non-blocking too, and it must be the same file (the name
    // may have been replaced meanwhile, by a FIFO for example).
    struct stat dst {};
    direct = ::open(t.path.c_str(), access | O_CLOEXEC | O_DIRECT | O_NONBLOCK);
    if (direct < 0 && errno != EINVAL) {
      const int e = errno;
      throw_error(ErrorKind::kOs, e, "aio: opening " + file_name(t) + " with O_DIRECT for " + verb + " failed: " +
                                         os_text(e));
    }
    if (direct >= 0 && (::fstat(direct, &dst) != 0 || dst.st_dev != st.st_dev || dst.st_ino != st.st_ino)) {
      throw_error(ErrorKind::kOs, EAGAIN, "aio: " + file_name(t) + " was replaced by another file while it was "
                                          "opened; make sure nothing renames files over it during the transfer");
    }
    if (direct >= 0) ::fcntl(direct, F_SETFL, ::fcntl(direct, F_GETFL) & ~O_NONBLOCK);
    return;
  }
  const int flags = ::fcntl(t.fd, F_GETFL);
  if (flags < 0) {
    throw_error(ErrorKind::kOs, EBADF, "aio: fd " + std::to_string(t.fd) + " is not an open file descriptor");
  }
  const int mode = flags & O_ACCMODE;
  if ((t.read && mode == O_WRONLY) || (!t.read && mode == O_RDONLY)) {
    throw_error(ErrorKind::kOs, EBADF, "aio: fd " + std::to_string(t.fd) + " is open for " +
                                     (mode == O_WRONLY ? "writing" : "reading") + " only; " + verb +
                                     " needs it open for " + verb);
  }
  if (!t.read && (flags & O_APPEND)) {
    throw_error(ErrorKind::kOs, EINVAL, "aio: fd " + std::to_string(t.fd) + " was opened with O_APPEND, where "
                                  "pwrite ignores the file offset; open it without O_APPEND");
  }
  // Checked before the reopen through /proc below: reopening a FIFO waits for its other end.
  if (::fstat(t.fd, &st) != 0) {
    const int e = errno;
    throw_error(ErrorKind::kOs, e, "aio: fstat of " + file_name(t) + " failed: " + os_text(e));
  }
  check_regular(t, st.st_mode);
  const std::string proc = "/proc/self/fd/" + std::to_string(t.fd);
  buffered = (flags & O_DIRECT) ? ::open(proc.c_str(), access | O_CLOEXEC) : ::fcntl(t.fd, F_DUPFD_CLOEXEC, 0);
  if (buffered < 0) {
    const int e = errno;
    throw_error(ErrorKind::kOs, e, "aio: duplicating " + file_name(t) + " for " + verb + " failed: " + os_text(e));
  }
  // The O_DIRECT twin: the caller's own description when it is direct already, else a reopen through
  // /proc (without it the transfer runs buffered, correct but through the page cache).
  direct = (flags & O_DIRECT) ? ::fcntl(t.fd, F_DUPFD_CLOEXEC, 0)
                              : ::open(proc.c_str(), access | O_CLOEXEC | O_DIRECT);
  if (::fstat(buffered, &st) != 0) {
    const int e = errno;
    throw_error(ErrorKind::kOs, e, "aio: fstat of " + file_name(t) + " failed: " + os_text(e));
  }
}

// Reserves the blocks of a write that extends its file, and sets its final size, before any piece runs
// (fallocate, mode 0). Two reasons:
// - a disk without room fails here, before a byte is written, as DiskFullError;
// - the pieces then write inside the file, never past its end: ext4 serialises O_DIRECT writes that extend a
//   file (each waits for the last to complete), so with the size set first the workers write in parallel
//   (about 1.4x the throughput of writing into a file that grows; docs/aio.md "Mechanism").
// A transfer that then fails is truncated back to the size the file had (complete_locked), so a failed
// write never leaves a file that claims bytes it does not hold. Returns whether the size was set; file
// systems without fallocate (EOPNOTSUPP) return false and allocate as the pieces land.
bool reserve_space(int fd, const Transfer& t) {
  if (::fallocate(fd, 0, t.offset, t.nbytes) == 0) return true;
  const int e = errno;
  if (e == ENOSPC || e == EDQUOT || e == EFBIG) {
    throw_error(ErrorKind::kOs, e, "aio: reserving " + std::to_string(t.nbytes) + " bytes at offset " +
                                       std::to_string(t.offset) + " of " + file_name(t) + " for the write failed: " +
                                       os_text(e));
  }
  return false;
}

}  // namespace

Engine::Engine(int64_t block, int64_t threads)
    : block_(std::max(kDirectAlignment, align_up(block))), pid_(::getpid()) {
  const int64_t n = std::max<int64_t>(1, std::min(threads, kMaxThreads));
  threads_.reserve(static_cast<size_t>(n));
  try {
    for (int64_t i = 0; i < n; ++i) threads_.emplace_back([this] { worker(); });
  } catch (...) {
    shutdown();
    throw;
  }
}

Engine::~Engine() { shutdown(); }

void Engine::submit(Transfer t) {
  auto r = std::make_shared<Request>();
  struct stat st {};
  open_files(t, r->buffered_fd, r->direct_fd, st);
  r->dev = st.st_dev;
  r->ino = st.st_ino;
  r->end = t.offset + t.nbytes;
  r->cursor = t.offset;
  r->congruent = (reinterpret_cast<uintptr_t>(t.buf) - static_cast<uintptr_t>(t.offset)) % kDirectAlignment == 0;
  if (t.read && t.nbytes > 0 && S_ISREG(st.st_mode) && r->end > st.st_size) {
    throw_error(ErrorKind::kShortFile, 0,
          "aio: reading " + std::to_string(t.nbytes) + " bytes at offset " + std::to_string(t.offset) + " from " +
              file_name(t) + " needs a file of at least " + std::to_string(r->end) + " bytes, but it has " +
              std::to_string(static_cast<int64_t>(st.st_size)) +
              "; the file is shorter than the tensor: read into a smaller tensor (or narrow it), or check that the "
              "file was written completely");
  }
  r->t = std::move(t);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw_error(ErrorKind::kHandle, 0, "aio: the handle is closed");
    check_conflicts_locked(*r);
    if (!r->t.read && r->t.nbytes > 0 && S_ISREG(st.st_mode) && r->end > st.st_size) {
      // under the lock: a racing transfer cannot slip in between
      if (reserve_space(r->buffered_fd, r->t)) r->restore_size = static_cast<int64_t>(st.st_size);
    }
    if (r->t.nbytes == 0) {
      done_.push_back(std::move(r));
      return;
    }
    live_.push_back(r);
    queue_.push_back(std::move(r));
  }
  work_cv_.notify_all();
}

void Engine::check_conflicts_locked(const Request& r) const {
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(r.t.buf);
  const uintptr_t a1 = a0 + static_cast<uintptr_t>(r.t.nbytes);
  // Against every transfer not yet reaped by wait(), finished or not: a race in the caller's program is
  // refused whether or not the earlier transfer happens to have finished (so the outcome never depends on
  // timing).
  std::vector<const Request*> pending;
  for (const auto& p : live_) pending.push_back(p.get());
  for (const auto& p : done_) pending.push_back(p.get());
  for (const Request* p : pending) {
    const uintptr_t b0 = reinterpret_cast<uintptr_t>(p->t.buf);
    const uintptr_t b1 = b0 + static_cast<uintptr_t>(p->t.nbytes);
    if ((r.t.read || p->t.read) && a0 < b1 && b0 < a1) {
      throw_error(ErrorKind::kConflict, 0,
            "aio: this " + r.what() + " uses memory that the pending " + p->what() + " also uses, and one of them "
            "writes it; call wait() between them, or use separate buffers");
    }
    if ((!r.t.read || !p->t.read) && r.dev == p->dev && r.ino == p->ino && r.t.offset < p->end &&
        p->t.offset < r.end) {
      throw_error(ErrorKind::kConflict, 0,
            "aio: this " + r.what() + " touches file bytes that the pending " + p->what() + " also touches, and one "
            "of them writes them, so the outcome would depend on timing; call wait() between them");
    }
  }
}

Engine::Piece Engine::next_piece(Request& r) const {
  const int64_t cur = r.cursor;
  Piece p{cur, 0, r.t.buf + (cur - r.t.offset), Piece::kBuffered};
  if (r.direct_fd < 0) {
    p.len = std::min(block_, r.end - cur);
  } else if (cur % kDirectAlignment != 0) {
    p.len = std::min(align_up(cur), r.end) - cur;
  } else if (r.end - cur >= kDirectAlignment) {
    p.len = std::min(block_, align_down(r.end) - cur);
    p.mode = r.congruent ? Piece::kDirect : Piece::kBounce;
  } else {
    p.len = r.end - cur;
  }
  r.cursor += p.len;
  return p;
}

void Engine::complete_locked(const std::shared_ptr<Request>& r) {
  if (r->err != 0 && r->restore_size >= 0) {
    // a failed write that set the file's size at submission: give the file back its former size, unless
    // something else has changed the size since (then it is no longer ours to set)
    struct stat st {};
    if (::fstat(r->buffered_fd, &st) == 0 && st.st_size == r->end) {
      if (::ftruncate(r->buffered_fd, r->restore_size) != 0) {
        r->error += "; restoring the file's former size of " + std::to_string(r->restore_size) +
                    " bytes failed too: " + os_text(errno);
      }
    }
  }
  r->close_files();
  live_.erase(std::find(live_.begin(), live_.end(), r));
  done_.push_back(r);
  done_cv_.notify_all();
}

void Engine::worker() {
  std::unique_ptr<char, FreeDeleter> staging;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to claim
    std::shared_ptr<Request> r = queue_.front();
    const Piece p = next_piece(*r);
    if (r->cursor >= r->end) queue_.pop_front();
    ++r->running;
    lock.unlock();

    const bool read = r->t.read;
    int64_t done = 0;
    int e = 0;
    if (p.mode == Piece::kBounce && !staging) {
      void* mem = nullptr;
      if (::posix_memalign(&mem, kDirectAlignment, static_cast<size_t>(block_)) != 0) e = ENOMEM;
      staging.reset(static_cast<char*>(mem));
    }
    if (e == 0 && p.mode == Piece::kDirect) {
      e = transfer(read, r->direct_fd, p.mem, p.len, p.off, done, true);
    } else if (e == 0 && p.mode == Piece::kBounce) {
      if (!read) std::memcpy(staging.get(), p.mem, static_cast<size_t>(p.len));
      e = transfer(read, r->direct_fd, staging.get(), p.len, p.off, done, true);
      if (read) std::memcpy(p.mem, staging.get(), static_cast<size_t>(done));
    }
    if (e == 0 && done < p.len) e = transfer(read, r->buffered_fd, p.mem, p.len, p.off, done, false);

    lock.lock();
    --r->running;
    if (e == kEndOfFile) {
      r->fail(ErrorKind::kShortFile, 0,
              r->what() + " met the end of the file at byte " + std::to_string(p.off + done) +
                  ": the file shrank while it was read");
    } else if (e != 0) {
      r->fail(ErrorKind::kOs, e, r->what() + " failed at byte " + std::to_string(p.off + done) + ": " + os_text(e));
    }
    if (r->err != 0 && r->cursor < r->end) {  // claim nothing more of a failed transfer
      r->cursor = r->end;
      queue_.erase(std::find(queue_.begin(), queue_.end(), r));
    }
    if (r->cursor >= r->end && r->running == 0) complete_locked(r);
    r.reset();  // under the lock: the last reference is always dropped by wait() or shutdown(), never here
  }
}

int64_t Engine::wait(double timeout_s) {
  std::vector<std::shared_ptr<Request>> done;
  {
    std::unique_lock<std::mutex> lock(mu_);
    const auto all_finished = [this] { return live_.empty(); };
    if (!all_finished()) {
      if (!(timeout_s > 0)) return -1;
      const std::chrono::duration<double> limit(std::min(timeout_s, 1e6));
      if (!done_cv_.wait_for(lock, limit, all_finished)) return -1;
    }
    done.swap(done_);
  }
  int64_t failed = 0;
  const Request* first = nullptr;
  std::string detail;
  for (const auto& r : done) {
    if (r->err == 0) continue;
    if (++failed == 1) first = r.get();
    if (failed <= 3) detail += (failed > 1 ? "; " : "") + r->error;
  }
  if (failed == 0) return static_cast<int64_t>(done.size());
  const std::string tags = " failed=" + std::to_string(failed) + " ops=" + std::to_string(done.size());
  const std::string message = "aio: " + std::to_string(failed) + " of " + std::to_string(done.size()) +
                              " operations failed: " + detail + (failed > 3 ? "; ..." : "");
  const ErrorKind kind = first->kind;
  const int err = first->err;
  done.clear();  // release files and memory before raising
  throw_error(kind, err, message, tags);
}

int64_t Engine::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(live_.size() + done_.size());
}

void Engine::shutdown() {
  std::vector<std::shared_ptr<Request>> release;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && threads_.empty()) return;
    for (auto& r : queue_) {
      r->fail(ErrorKind::kOs, ECANCELED, r->what() + " was cancelled: the handle was closed before it ran");
      r->cursor = r->end;
      if (r->running == 0) complete_locked(r);
    }
    queue_.clear();
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (auto& th : threads_) th.join();
  threads_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  release.swap(done_);
  release.insert(release.end(), live_.begin(), live_.end());
  live_.clear();
}

}  // namespace aio
}  // namespace anyaccel
