// SPDX-License-Identifier: Apache-2.0
// gloo_direct.cc - Gloo's ring allreduce called directly (no Floe): the baseline of the Gloo
// collective backend (plugins/collective/gloo) and of the core's built-in ring.
//
// Ranks are threads of this process (default; a gloo::rendezvous::HashStore joins them) or
// processes of this machine (--rank R, all meeting in a gloo::rendezvous::FileStore folder:
// start N of them with the same --store DIR, which must be empty or absent). Every rank uses
// Gloo's tcp transport on --host (default 127.0.0.1). For each size from --min-bytes to
// --max-bytes (doubling; f32 elements) rank 0 prints one JSON line:
//   {"bench":"gloo_direct","ranks":4,"bytes":4096,"dtype":"f32","iters":1000,
//    "us_per_op":85.2,"p50_us":70.3,"min_us":61.0,"algbw_gbps":0.048,"busbw_gbps":0.072}
// us_per_op is the mean over iters timed operations after warm-up (a barrier before each
// size), p50_us their median (steadier on a shared machine); algbw is bytes / us_per_op and
// busbw algbw * 2 (n - 1) / n, NCCL-tests' convention for allreduce.
//
//   bench/gloo_direct --ranks 4
//   for r in 0 1 2 3; do bench/gloo_direct --ranks 4 --rank $r --store /tmp/gs & done; wait
#include <getopt.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

namespace {

struct Options {
  int ranks = 2;
  int rank = -1;  // >= 0: this process is that rank (--store needed)
  std::string store;
  std::string host = "127.0.0.1";
  size_t min_bytes = 4096;
  size_t max_bytes = (size_t)64 << 20;
  double seconds = 0.5;  // per size, roughly
  int timeout_ms = 60000;
};

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void run_rank(const Options &o, int rank, gloo::rendezvous::Store &store) {
  gloo::transport::tcp::attr attr(o.host.c_str());
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, o.ranks);
  ctx->setTimeout(std::chrono::milliseconds(o.timeout_ms));
  ctx->connectFullMesh(store, dev);

  std::vector<float> buf(o.max_bytes / sizeof(float));
  uint32_t tag = 1;
  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
    const size_t n = bytes / sizeof(float);
    for (size_t i = 0; i < n; i++) buf[i] = (float)((i + (size_t)rank) % 7);
    auto once = [&] {
      gloo::AllreduceOptions a(ctx);
      a.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      a.setOutput(buf.data(), n);
      a.setReduceFunction(
          static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
      a.setTag(tag);
      gloo::allreduce(a);
    };
    // Warm-up, which also decides the count: every rank must run the same number, so rank
    // 0's choice travels in an allreduce of its own (others contribute 0).
    gloo::BarrierOptions b(ctx);
    b.setTag(tag);
    gloo::barrier(b);
    double t0 = now_us();
    for (int i = 0; i < 3; i++) once();
    double per = (now_us() - t0) / 3;
    float want = rank == 0 ? (float)std::clamp((int)(o.seconds * 1e6 / std::max(per, 1.0)), 5, 2000)
                           : 0.0f;
    {
      gloo::AllreduceOptions a(ctx);
      a.setOutput(&want, 1);
      a.setReduceFunction(
          static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
      a.setTag(tag + 1);
      gloo::allreduce(a);
    }
    const int iters = (int)want;
    std::vector<double> times(iters);
    t0 = now_us();
    for (int i = 0; i < iters; i++) {
      double s = now_us();
      once();
      times[i] = now_us() - s;
    }
    double mean = (now_us() - t0) / iters;
    std::sort(times.begin(), times.end());
    double best = times[0], p50 = times[iters / 2];
    if (rank == 0) {
      double algbw = bytes / mean / 1e3;  // bytes per us = MB/s; / 1e3 = GB/s
      printf("{\"bench\":\"gloo_direct\",\"ranks\":%d,\"bytes\":%zu,\"dtype\":\"f32\","
             "\"iters\":%d,\"us_per_op\":%.1f,\"p50_us\":%.1f,\"min_us\":%.1f,"
             "\"algbw_gbps\":%.3f,\"busbw_gbps\":%.3f}\n",
             o.ranks, bytes, iters, mean, p50, best, algbw, algbw * 2 * (o.ranks - 1) / o.ranks);
      fflush(stdout);
    }
    tag += 2;
  }
}

void usage(FILE *f) {
  fprintf(f,
          "usage: gloo_direct [--ranks N] [--rank R --store DIR] [--host ADDR]\n"
          "                   [--min-bytes B] [--max-bytes B] [--seconds S] [--timeout-ms MS]\n"
          "Gloo's ring allreduce (f32 sum) on N ranks: threads of this process, or with --rank\n"
          "one of N processes meeting in the FileStore folder DIR. Rank 0 prints a JSON line\n"
          "per size (doubling from --min-bytes 4096 to --max-bytes 67108864).\n");
}

}  // namespace

int main(int argc, char **argv) {
  Options o;
  static const struct option longopts[] = {
      {"ranks", required_argument, nullptr, 'n'},     {"rank", required_argument, nullptr, 'r'},
      {"store", required_argument, nullptr, 's'},     {"host", required_argument, nullptr, 'H'},
      {"min-bytes", required_argument, nullptr, 'm'}, {"max-bytes", required_argument, nullptr, 'M'},
      {"seconds", required_argument, nullptr, 't'},   {"timeout-ms", required_argument, nullptr, 'T'},
      {"help", no_argument, nullptr, 'h'},            {nullptr, 0, nullptr, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, nullptr)) != -1) {
    switch (c) {
      case 'n': o.ranks = atoi(optarg); break;
      case 'r': o.rank = atoi(optarg); break;
      case 's': o.store = optarg; break;
      case 'H': o.host = optarg; break;
      case 'm': o.min_bytes = strtoull(optarg, nullptr, 0); break;
      case 'M': o.max_bytes = strtoull(optarg, nullptr, 0); break;
      case 't': o.seconds = atof(optarg); break;
      case 'T': o.timeout_ms = atoi(optarg); break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (o.ranks < 2 || o.ranks > 64 || o.min_bytes < 4 || o.min_bytes > o.max_bytes ||
      (o.rank >= 0 && (o.rank >= o.ranks || o.store.empty()))) {
    fprintf(stderr, "gloo_direct: need 2 <= --ranks <= 64, 4 <= --min-bytes <= --max-bytes, "
                    "and --store DIR with a --rank below --ranks\n");
    return 2;
  }
  try {
    if (o.rank >= 0) {
      mkdir(o.store.c_str(), 0700);  // FileStore wants the folder; an existing one is fine
      gloo::rendezvous::FileStore fs(o.store);
      gloo::rendezvous::PrefixStore ps("gloo_direct", fs);
      run_rank(o, o.rank, ps);
      return 0;
    }
    gloo::rendezvous::HashStore hs;
    std::vector<std::thread> th;
    std::vector<std::string> errors(o.ranks);
    for (int r = 0; r < o.ranks; r++)
      th.emplace_back([&, r] {
        try {
          run_rank(o, r, hs);
        } catch (const std::exception &e) {
          errors[r] = e.what();
        }
      });
    for (auto &t : th) t.join();
    for (int r = 0; r < o.ranks; r++)
      if (!errors[r].empty()) {
        fprintf(stderr, "gloo_direct: rank %d: %s\n", r, errors[r].c_str());
        return 1;
      }
  } catch (const std::exception &e) {
    fprintf(stderr, "gloo_direct: %s\n", e.what());
    return 1;
  }
  return 0;
}
