// Async file I/O between host tensors and files, as torch ops on torch's stable ABI (the registration unit;
// the I/O engine is aio_engine.cpp).
//
// The stable ABI registers functions, not classes, so a handle (DeepSpeed's aio_handle) is an integer: the
// id of an Engine (a worker-thread pool) in this library's registry. The Python front end
// (anyaccel/ops/aio/handle.py) wraps the id in a class with DeepSpeed's aio_handle API. The schemas, the
// scalar ranges and the argument names are the op spec's (anyaccel/ops/aio/spec.py), compiled in through
// the generated anyaccel_op.h; the validating fakes (anyaccel/ops/aio/fakes.py) raise the same messages as
// check_buffer() and check_file() below for the same bad calls.
//
// Errors are std::runtime_error (RuntimeError in Python) whose message starts with the tag
// "[anyaccel.aio kind=<os|short_file|conflict|handle|not_regular> errno=<n> ...]"; the front end turns it into a typed
// error (anyaccel/ops/aio/errors.py). Messages of argument checks carry no tag: they are the fakes' words.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "aio_engine.h"
#include "anyaccel_op.h"

namespace anyaccel {
namespace aio {
namespace {

// Open handles of this process. Allocated once and never destroyed: engines hold worker threads, which
// must not be joined (or destroyed unjoined) by static destructors at exit, after torch is torn down.
struct Registry {
  std::mutex mu;
  std::unordered_map<int64_t, std::shared_ptr<Engine>> engines;
  int64_t next = 1;
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

std::string handle_text(int64_t handle) { return "handle=" + std::to_string(handle); }

// The engine of `handle`, shared so that aio_close() racing this call cannot free it underneath.
std::shared_ptr<Engine> lookup(const char* op, int64_t handle) {
  std::shared_ptr<Engine> engine;
  {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    const auto it = reg.engines.find(handle);
    if (it != reg.engines.end()) engine = it->second;
  }
  if (!engine) {
    throw_error(ErrorKind::kHandle, 0, std::string(op) + ": " + handle_text(handle) +
                                           " is not an open handle (it was closed, or never opened)");
  }
  if (engine->owner() != ::getpid()) {
    throw_error(ErrorKind::kHandle, 0, std::string(op) + ": " + handle_text(handle) + " was opened in process " +
                                           std::to_string(engine->owner()) +
                                           "; its worker threads do not exist in this fork()ed child: open a new "
                                           "handle in the child");
  }
  return engine;
}

int64_t aio_open(int64_t block_size, int64_t queue_depth, int64_t intra_op_parallelism) {
  auto engine = std::make_shared<Engine>(block_size, queue_depth * intra_op_parallelism);
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  const int64_t id = reg.next++;
  reg.engines.emplace(id, std::move(engine));
  return id;
}

void aio_close(int64_t handle) {
  std::shared_ptr<Engine> engine;
  {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    const auto it = reg.engines.find(handle);
    if (it == reg.engines.end()) return;  // closing twice is harmless
    engine = std::move(it->second);
    reg.engines.erase(it);
  }
  if (engine->owner() != ::getpid()) {
    // A fork()ed child: the engine's threads exist only in the parent, so it can be neither joined nor
    // destroyed here; leaking its memory is the only safe choice.
    new std::shared_ptr<Engine>(std::move(engine));
    return;
  }
  engine->shutdown();  // waits for pieces in flight; the last reference may be a concurrent call's
}

// The buffer checks of the fakes (anyaccel/ops/aio/fakes.py: check_buffer), with the same words.
void check_buffer(const char* op, const stable::TensorView& buffer) {
  if (!buffer.is_strided()) {
    checks::fail(std::string(op) + ": buffer has a non-strided layout; pass a dense (strided) tensor");
  }
  if (!buffer.is_contiguous()) {
    checks::fail(std::string(op) + ": buffer is not contiguous (sizes " + buffer.shape_text() + ", strides " +
                 buffer.strides_text() + "); pass a contiguous tensor (a .contiguous() copy would not receive what "
                 "is read)");
  }
}

// The file checks of the fakes (fakes.py: check_file): exactly one of path and fd; no NUL in the path (open()
// would read the path only up to it: "ckpt.pt\0.tmp" would open ckpt.pt).
void check_file(const char* op, const std::string& path, int64_t fd) {
  if (path.empty() == (fd < 0)) {
    checks::fail(std::string(op) + ": pass either a non-empty path or an fd >= 0, not " +
                 (path.empty() ? "neither" : "both"));
  }
  if (path.find('\0') != std::string::npos) {
    checks::fail(std::string(op) + ": the path contains a NUL character, which no file name can hold (the system "
                 "would cut the path there and open another file); pass the path without it");
  }
}

void submit(const char* op, bool read, int64_t handle, const stable::Tensor& buffer, const std::string& path,
            int64_t fd, int64_t file_offset) {
  check_buffer(op, buffer);
  check_file(op, path, fd);
  std::shared_ptr<Engine> engine = lookup(op, handle);
  Transfer t;
  t.read = read;
  t.nbytes = buffer.numel() * static_cast<int64_t>(buffer.element_size());
  t.buf = t.nbytes == 0 ? nullptr
                        : static_cast<char*>(read ? buffer.data_ptr() : const_cast<void*>(buffer.const_data_ptr()));
  t.offset = file_offset;
  t.path = path;
  t.fd = static_cast<int>(fd);
  // A second handle to the same tensor keeps its memory alive until wait() reaps the transfer, whatever
  // the caller does with its own reference meanwhile.
  AtenTensorHandle alias = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_new_tensor_handle(buffer.handle(), &alias));
  t.keepalive = std::shared_ptr<void>(alias, [](void* h) {
    aoti_torch_delete_tensor_object(static_cast<AtenTensorHandle>(h));
  });
  engine->submit(std::move(t));
}

void aio_submit_read(int64_t handle, const stable::Tensor& buffer, std::string path, int64_t fd,
                     int64_t file_offset) {
  submit("aio_submit_read", true, handle, buffer, path, fd, file_offset);
}

void aio_submit_write(int64_t handle, const stable::Tensor& buffer, std::string path, int64_t fd,
                      int64_t file_offset) {
  submit("aio_submit_write", false, handle, buffer, path, fd, file_offset);
}

int64_t aio_wait(int64_t handle, double timeout_s) { return lookup("aio_wait", handle)->wait(timeout_s); }

int64_t aio_pending(int64_t handle) { return lookup("aio_pending", handle)->pending(); }

// mlock/munlock of [address, address + nbytes): 0, or the errno (EPERM/ENOMEM past RLIMIT_MEMLOCK).
int64_t aio_page_lock(int64_t address, int64_t nbytes, bool lock) {
  void* p = reinterpret_cast<void*>(static_cast<uintptr_t>(address));
  const int rc = lock ? ::mlock(p, static_cast<size_t>(nbytes)) : ::munlock(p, static_cast<size_t>(nbytes));
  return rc == 0 ? 0 : errno;
}

}  // namespace
}  // namespace aio
}  // namespace anyaccel

ANYACCEL_LIBRARY(m) { ANYACCEL_DEFINE_OPS(m); }
ANYACCEL_LIBRARY_IMPL(CPU, m) {
  ANYACCEL_IMPL(m, aio_submit_read, anyaccel::aio::aio_submit_read);
  ANYACCEL_IMPL(m, aio_submit_write, anyaccel::aio::aio_submit_write);
}
ANYACCEL_LIBRARY_IMPL(CompositeExplicitAutograd, m) {
  ANYACCEL_IMPL(m, aio_open, anyaccel::aio::aio_open);
  ANYACCEL_IMPL(m, aio_close, anyaccel::aio::aio_close);
  ANYACCEL_IMPL(m, aio_wait, anyaccel::aio::aio_wait);
  ANYACCEL_IMPL(m, aio_pending, anyaccel::aio::aio_pending);
  ANYACCEL_IMPL(m, aio_page_lock, anyaccel::aio::aio_page_lock);
}
