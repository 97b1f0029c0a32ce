// A STREAM-style host memory bandwidth probe (McCalpin, "STREAM: Sustainable Memory Bandwidth in High
// Performance Computers", https://www.cs.virginia.edu/stream/), used by benchmarks/cpu_adam_scaling.py as
// the ceiling of the CPU optimizer step. Besides STREAM's copy and triad it runs "adam": 4 arrays read and 3
// written in place per element (28 bytes/element, fp32), the access pattern of an Adam step (p, g, m, v ->
// p, m, v). Arrays are first touched by the threads that use them (NUMA placement), work is split
// statically, and the best of `reps` repetitions is reported, as STREAM does.
//
// Usage: stream_probe <elements per array> <threads> <reps>
// Prints one JSON object: {"threads": t, "elements": n, "copy_gbs": ..., "triad_gbs": ..., "adam_gbs": ...}
// (GB/s = 1e9 bytes per second, counting every byte read and written once).
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

namespace {

struct Freer {
  void operator()(float* p) const { std::free(p); }
};
using Array = std::unique_ptr<float[], Freer>;

Array alloc(size_t n) {
  void* p = nullptr;
  if (posix_memalign(&p, 64, n * sizeof(float)) != 0) {
    std::fprintf(stderr, "stream_probe: cannot allocate %zu floats\n", n);
    std::exit(2);
  }
  return Array(static_cast<float*>(p));
}

template <class F>
double best_seconds(int reps, F&& body) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = omp_get_wtime();
    body();
    best = std::min(best, omp_get_wtime() - t0);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: stream_probe <elements per array> <threads> <reps>\n");
    return 2;
  }
  const long n = std::atol(argv[1]);
  const int threads = std::atoi(argv[2]);
  const int reps = std::max(1, std::atoi(argv[3]));
  if (n <= 0 || threads <= 0) {
    std::fprintf(stderr, "stream_probe: elements and threads must be positive\n");
    return 2;
  }
  omp_set_num_threads(threads);
  Array a = alloc(n), b = alloc(n), c = alloc(n), d = alloc(n);
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; ++i) {
    a[i] = 1.0f;
    b[i] = 2.0f;
    c[i] = 0.5f;
    d[i] = 0.25f;
  }
  float* pa = a.get();
  float* pb = b.get();
  float* pc = c.get();
  float* pd = d.get();
  const double copy = best_seconds(reps, [&] {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) pc[i] = pa[i];
  });
  const double triad = best_seconds(reps, [&] {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) pa[i] = pb[i] + 0.5f * pc[i];
  });
  // Adam's pattern: read p (a), g (b), m (c), v (d); write p, m, v in place.
  const double adam = best_seconds(reps, [&] {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) {
      const float g = pb[i];
      const float m = 0.9f * pc[i] + 0.1f * g;
      const float v = 0.999f * pd[i] + 0.001f * g * g;
      pc[i] = m;
      pd[i] = v;
      pa[i] -= 1e-3f * m / (v + 1e-8f);
    }
  });
  const double bytes = static_cast<double>(n) * sizeof(float);
  std::printf("{\"threads\": %d, \"elements\": %ld, \"copy_gbs\": %.2f, \"triad_gbs\": %.2f, \"adam_gbs\": %.2f}\n",
              threads, n, 2 * bytes / copy / 1e9, 3 * bytes / triad / 1e9, 7 * bytes / adam / 1e9);
  return 0;
}
