// Which kernel interface moves a big O_DIRECT transfer fastest, and at what CPU cost?
//
// The measurement behind the choice of mechanism of anyaccel's async I/O op (docs/aio.md "Mechanism"):
// one file of --mib MiB, read and written sequentially in --block byte requests from one page-aligned,
// page-locked buffer, by
//   pool      T threads, each issuing pread/pwrite (O_DIRECT) on the next block (an atomic counter);
//   libaio    one thread keeping Q requests in flight with io_submit/io_getevents   (needs libaio-dev);
//   io_uring  one thread keeping Q requests in flight with liburing                 (needs liburing-dev).
// Configurations run interleaved, round-robin, --reps times; the median MB/s (1e6 bytes/s) and the CPU
// seconds per GB (user+sys of the whole process) are printed. Mechanisms whose header is missing are left
// out (and said so).
//
// Build and run (from the repository root; the file lands in --dir, which must be on the disk to measure;
// drop -laio / -luring when libaio-dev / liburing-dev are not installed):
//   g++ -O2 -std=c++17 -pthread benchmarks/aio_mechanisms.cpp -o /tmp/aio_mechanisms -laio -luring
//   /tmp/aio_mechanisms --dir /var/tmp --mib 1024 --reps 3 [--block 1048576] [--fresh no|yes|fallocate]
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if __has_include(<libaio.h>)
#include <libaio.h>
#define HAVE_LIBAIO 1
#endif
#if __has_include(<liburing.h>)
#include <liburing.h>
#define HAVE_URING 1
#endif

namespace {

[[noreturn]] void die(const std::string& what, int err) {
  throw std::runtime_error(what + ": " + std::strerror(err));
}

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

struct Job {
  int fd;
  char* buf;
  int64_t bytes;
  int64_t block;
  bool read;
};

void run_pool(const Job& j, int threads) {
  std::atomic<int64_t> next{0};
  std::atomic<int> failed{0};
  auto worker = [&] {
    for (;;) {
      const int64_t off = next.fetch_add(j.block);
      if (off >= j.bytes) return;
      const int64_t n = std::min(j.block, j.bytes - off);
      int64_t done = 0;
      while (done < n) {
        const ssize_t r = j.read ? pread(j.fd, j.buf + off + done, n - done, off + done)
                                 : pwrite(j.fd, j.buf + off + done, n - done, off + done);
        if (r <= 0) {
          if (r < 0 && errno == EINTR) continue;
          failed = r < 0 ? errno : EIO;
          return;
        }
        done += r;
      }
    }
  };
  std::vector<std::thread> ts;
  for (int i = 0; i < threads; ++i) ts.emplace_back(worker);
  for (auto& t : ts) t.join();
  if (failed) die("pool", failed);
}

#ifdef HAVE_LIBAIO
void run_libaio(const Job& j, int depth) {
  io_context_t ctx = nullptr;
  if (int rc = io_setup(depth, &ctx); rc < 0) die("io_setup", -rc);
  std::vector<iocb> cbs(depth);
  std::vector<iocb*> free_cbs;
  for (auto& cb : cbs) free_cbs.push_back(&cb);
  std::vector<io_event> events(depth);
  int64_t off = 0;
  int inflight = 0;
  while (off < j.bytes || inflight > 0) {
    std::vector<iocb*> batch;
    while (off < j.bytes && !free_cbs.empty()) {
      iocb* cb = free_cbs.back();
      free_cbs.pop_back();
      const int64_t n = std::min(j.block, j.bytes - off);
      if (j.read) io_prep_pread(cb, j.fd, j.buf + off, n, off);
      else io_prep_pwrite(cb, j.fd, j.buf + off, n, off);
      batch.push_back(cb);
      off += n;
    }
    if (!batch.empty()) {
      int rc = io_submit(ctx, static_cast<long>(batch.size()), batch.data());
      if (rc != static_cast<int>(batch.size())) die("io_submit", rc < 0 ? -rc : EAGAIN);
      inflight += rc;
    }
    const int got = io_getevents(ctx, 1, depth, events.data(), nullptr);
    if (got < 0) die("io_getevents", -got);
    for (int i = 0; i < got; ++i) {
      if (static_cast<int64_t>(events[i].res) != static_cast<int64_t>(events[i].obj->u.c.nbytes)) {
        die("libaio short transfer", EIO);
      }
      free_cbs.push_back(events[i].obj);
    }
    inflight -= got;
  }
  io_destroy(ctx);
}
#endif

#ifdef HAVE_URING
void run_uring(const Job& j, int depth) {
  io_uring ring{};
  if (int rc = io_uring_queue_init(depth, &ring, 0); rc < 0) die("io_uring_queue_init", -rc);
  int64_t off = 0;
  int inflight = 0;
  std::map<uint64_t, int64_t> sizes;
  while (off < j.bytes || inflight > 0) {
    while (off < j.bytes && inflight < depth) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (sqe == nullptr) break;
      const int64_t n = std::min(j.block, j.bytes - off);
      if (j.read) io_uring_prep_read(sqe, j.fd, j.buf + off, n, off);
      else io_uring_prep_write(sqe, j.fd, j.buf + off, n, off);
      io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(n));
      off += n;
      ++inflight;
    }
    io_uring_submit(&ring);
    io_uring_cqe* cqe = nullptr;
    if (int rc = io_uring_wait_cqe(&ring, &cqe); rc < 0) die("io_uring_wait_cqe", -rc);
    do {
      if (cqe->res < 0 || static_cast<uint64_t>(cqe->res) != io_uring_cqe_get_data64(cqe)) {
        die("io_uring short transfer", cqe->res < 0 ? -cqe->res : EIO);
      }
      io_uring_cqe_seen(&ring, cqe);
      --inflight;
    } while (io_uring_peek_cqe(&ring, &cqe) == 0);
  }
  io_uring_queue_exit(&ring);
}
#endif

struct Config {
  std::string name;
  std::function<void(const Job&)> run;
};

}  // namespace

int main(int argc, char** argv) {
  std::string dir = ".";
  int64_t mib = 1024, block = 1 << 20;
  int reps = 3;
  // "no": writes overwrite the file; "yes": each write goes to a new file; "fallocate": a new file whose
  // blocks are allocated first (fallocate, as fio does).
  std::string fresh = "no";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--dir") dir = argv[i + 1];
    else if (a == "--mib") mib = std::atoll(argv[i + 1]);
    else if (a == "--block") block = std::atoll(argv[i + 1]);
    else if (a == "--reps") reps = std::atoi(argv[i + 1]);
    else if (a == "--fresh") fresh = std::string(argv[i + 1]);
  }
  const int64_t bytes = mib << 20;
  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, bytes) != 0) die("posix_memalign", ENOMEM);
  char* buf = static_cast<char*>(mem);
  for (int64_t i = 0; i < bytes; i += 4096) buf[i] = static_cast<char>(i / 4096);
  const bool locked = mlock(buf, bytes) == 0;
  const std::string path = dir + "/aio_mechanisms.dat";

  std::vector<Config> configs;
  for (int t : {1, 2, 4, 8, 16}) {
    configs.push_back({"pool T=" + std::to_string(t), [t](const Job& j) { run_pool(j, t); }});
  }
#ifdef HAVE_LIBAIO
  for (int q : {8, 32}) configs.push_back({"libaio Q=" + std::to_string(q), [q](const Job& j) { run_libaio(j, q); }});
#else
  std::printf("libaio: <libaio.h> missing, left out\n");
#endif
#ifdef HAVE_URING
  for (int q : {8, 32}) configs.push_back({"io_uring Q=" + std::to_string(q), [q](const Job& j) { run_uring(j, q); }});
#else
  std::printf("io_uring: <liburing.h> missing, left out\n");
#endif

  std::map<std::string, std::vector<double>> mbps, cpu;
  for (int r = 0; r < reps; ++r) {
    for (const bool read : {false, true}) {
      for (const auto& c : configs) {
        if (!read && fresh != "no") unlink(path.c_str());
        const int fd = open(path.c_str(), read ? O_RDONLY | O_DIRECT : O_WRONLY | O_CREAT | O_DIRECT, 0600);
        if (fd < 0) die("open " + path, errno);
        const double c0 = cpu_seconds();
        const auto t0 = std::chrono::steady_clock::now();
        if (!read && fresh == "fallocate" && fallocate(fd, 0, 0, bytes) != 0) die("fallocate", errno);
        c.run(Job{fd, buf, bytes, block, read});
        if (!read) fdatasync(fd);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double cs = cpu_seconds() - c0;
        close(fd);
        const std::string key = std::string(read ? "read  " : "write ") + c.name;
        mbps[key].push_back(bytes / s / 1e6);
        cpu[key].push_back(cs / (bytes / 1e9));
      }
    }
  }
  unlink(path.c_str());
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("file %s, %lld MiB, block %lld bytes, buffer %s, fresh files for writes: %s, %d reps (median; "
              "min-max)\n", path.c_str(), static_cast<long long>(mib), static_cast<long long>(block),
              locked ? "mlocked" : "not locked", fresh.c_str(), reps);
  std::printf("%-22s %10s %17s %12s\n", "mechanism", "MB/s", "range", "CPU s/GB");
  for (const auto& [k, v] : mbps) {
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    std::printf("%-22s %10.0f %8.0f-%-8.0f %12.3f\n", k.c_str(), median(v), *lo, *hi, median(cpu[k]));
  }
  return 0;
}
