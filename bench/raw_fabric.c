/* SPDX-License-Identifier: Apache-2.0 */
/* raw_fabric.c - libfabric alone, the baseline the fabric transport is measured against
 * (bench/transport.sh runs both): tagged messages on one RDM endpoint per process, blocking
 * waits of the provider's own kind, no Floe code.
 *
 *   tcp;ofi_rxm: CQ with FI_WAIT_FD; read the CQ, then fi_trywait, then poll() the fd.
 *                After -FI_EAGAIN (rxm connects on demand): read the CQ and retry, sleeping
 *                at most 1 ms in between (a finished connection announces nothing).
 *   shm:         no FI_WAIT_FD in libfabric 1.17: fi_cq_sread (which yields in a loop inside
 *                libfabric until a completion arrives).
 *
 * Sends of at most the provider's inject size go by fi_tinject, as the plugin's do.
 *
 * Usage: raw_fabric [PROVIDER] [MAX_BYTES]   (default tcp;ofi_rxm, 64 MiB; FLOE_FABRIC_HOST
 * pins the address, default 127.0.0.1). Prints "raw <provider> lat|bw <bytes> <value>" lines
 * (transport_bench.h), and on stderr the CPU seconds each process used.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "transport_bench.h"

typedef struct Op {
  struct fi_context2 ctx; /* first: FI_CONTEXT2 */
  volatile int done;
} Op;

typedef struct Raw {
  struct fi_info *info;
  struct fid_fabric *fabric;
  struct fid_domain *domain;
  struct fid_cq *cq;
  struct fid_av *av;
  struct fid_ep *ep;
  int fd;                 /* FI_WAIT_FD's, or -1: fi_cq_sread */
  fi_addr_t peer;
  Op ops[2 * BENCH_WINDOW + 4];
  int next_op;
} Raw;

static void die(const char *what, int ret) {
  fprintf(stderr, "raw_fabric: %s: %s\n", what, fi_strerror(ret < 0 ? -ret : ret));
  exit(1);
}

#define TRY(call)                       \
  do {                                  \
    int ret_ = (int)(call);             \
    if (ret_) die(#call, ret_);         \
  } while (0)

static void on_entries(struct fi_cq_tagged_entry *e, ssize_t n) {
  for (ssize_t i = 0; i < n; i++) ((Op *)e[i].op_context)->done = 1;
}

/* Reads what the CQ holds; true when it read something. */
static bool poll_cq(Raw *r) {
  struct fi_cq_tagged_entry e[16];
  ssize_t n = fi_cq_read(r->cq, e, 16);
  if (n > 0) {
    on_entries(e, n);
    return true;
  }
  if (n == -FI_EAVAIL) {
    struct fi_cq_err_entry err;
    memset(&err, 0, sizeof err);
    fi_cq_readerr(r->cq, &err, 0);
    die("completion error", err.err);
  }
  if (n != -FI_EAGAIN) die("fi_cq_read", (int)n);
  return false;
}

/* After -FI_EAGAIN: progress and retry; between retries sleep 1 ms at most (a connection
 * that rxm set up inside fi_cq_read makes no completion and wakes no fd). */
static void backoff(Raw *r) {
  if (poll_cq(r)) return;
  if (r->fd >= 0) {
    struct pollfd p = {.fd = r->fd, .events = POLLIN};
    poll(&p, 1, 1);
  } else {
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
}

/* Sleeps until the CQ may hold something. */
static void block(Raw *r) {
  if (r->fd >= 0) {
    struct fid *fids[1] = {&r->cq->fid};
    if (fi_trywait(r->fabric, fids, 1) == FI_SUCCESS) {
      struct pollfd p = {.fd = r->fd, .events = POLLIN};
      poll(&p, 1, -1);
    }
    return;
  }
  struct fi_cq_tagged_entry e[16];
  ssize_t n = fi_cq_sread(r->cq, e, 16, NULL, -1);
  if (n > 0) on_entries(e, n);
  else if (n != -FI_EAGAIN && n != -FI_EAVAIL) die("fi_cq_sread", (int)n);
}

static Op *new_op(Raw *r) {
  Op *op = &r->ops[r->next_op];
  r->next_op = (r->next_op + 1) % (int)(sizeof r->ops / sizeof r->ops[0]);
  op->done = 0;
  return op;
}

static void *raw_isend(void *self, const void *buf, size_t len, uint64_t tag) {
  Raw *r = self;
  Op *op = new_op(r);
  ssize_t ret;
  if (len <= r->info->tx_attr->inject_size) { /* complete at once, no completion entry */
    while ((ret = fi_tinject(r->ep, buf, len, r->peer, tag)) == -FI_EAGAIN) backoff(r);
    if (ret) die("fi_tinject", (int)ret);
    op->done = 1;
    return op;
  }
  while ((ret = fi_tsend(r->ep, buf, len, NULL, r->peer, tag, op)) == -FI_EAGAIN) backoff(r);
  if (ret) die("fi_tsend", (int)ret);
  return op;
}

static void *raw_irecv(void *self, void *buf, size_t len, uint64_t tag) {
  Raw *r = self;
  Op *op = new_op(r);
  ssize_t ret;
  while ((ret = fi_trecv(r->ep, buf, len, NULL, r->peer, tag, 0, op)) == -FI_EAGAIN) backoff(r);
  if (ret) die("fi_trecv", (int)ret);
  return op;
}

static void raw_wait(void *self, void **h, int n) {
  Raw *r = self;
  for (;;) {
    while (poll_cq(r)) {
    }
    int left = 0;
    for (int i = 0; i < n; i++) left += !((Op *)h[i])->done;
    if (!left) return;
    block(r);
  }
}

static void raw_open(Raw *r, const char *prov) {
  struct fi_info *hints = fi_allocinfo();
  hints->caps = FI_TAGGED | FI_SEND | FI_RECV | FI_DIRECTED_RECV;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->threading = FI_THREAD_SAFE; /* as the plugin asks */
  hints->domain_attr->av_type = FI_AV_TABLE;
  hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->tx_attr->msg_order = FI_ORDER_SAS;
  hints->rx_attr->msg_order = FI_ORDER_SAS;
  hints->fabric_attr->prov_name = strdup(prov);
  const char *node = NULL, *service = NULL;
  uint64_t flags = 0;
  if (strstr(prov, "tcp") || strstr(prov, "verbs")) {
    node = getenv("FLOE_FABRIC_HOST");
    if (!node || !*node) node = "127.0.0.1";
    service = "0";
    flags = FI_SOURCE;
  }
  TRY(fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), node, service, flags, hints,
                 &r->info));
  fi_freeinfo(hints);
  TRY(fi_fabric(r->info->fabric_attr, &r->fabric, NULL));
  TRY(fi_domain(r->fabric, r->info, &r->domain, NULL));
  struct fi_cq_attr cqa;
  memset(&cqa, 0, sizeof cqa);
  cqa.format = FI_CQ_FORMAT_TAGGED;
  cqa.size = 4096;
  cqa.wait_obj = FI_WAIT_FD;
  r->fd = -1;
  if (fi_cq_open(r->domain, &cqa, &r->cq, NULL) == 0) {
    TRY(fi_control(&r->cq->fid, FI_GETWAIT, &r->fd));
  } else {
    cqa.wait_obj = FI_WAIT_UNSPEC; /* shm of 1.17 */
    TRY(fi_cq_open(r->domain, &cqa, &r->cq, NULL));
  }
  struct fi_av_attr ava;
  memset(&ava, 0, sizeof ava);
  ava.type = FI_AV_TABLE;
  TRY(fi_av_open(r->domain, &ava, &r->av, NULL));
  TRY(fi_endpoint(r->domain, r->info, &r->ep, NULL));
  TRY(fi_ep_bind(r->ep, &r->av->fid, 0));
  TRY(fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV));
  TRY(fi_enable(r->ep));
}

static void raw_close(Raw *r) {
  fi_close(&r->ep->fid);
  fi_close(&r->av->fid);
  fi_close(&r->cq->fid);
  fi_close(&r->domain->fid);
  fi_close(&r->fabric->fid);
  fi_freeinfo(r->info);
}

static void xfer(int fd, void *buf, size_t len, bool out) {
  char *p = buf;
  while (len) {
    ssize_t n = out ? write(fd, p, len) : read(fd, p, len);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      fprintf(stderr, "raw_fabric: the other process went away\n");
      exit(1);
    }
    p += n;
    len -= (size_t)n;
  }
}

static void run(int rank, int in, int out, const char *prov, size_t max) {
  Raw r;
  memset(&r, 0, sizeof r);
  raw_open(&r, prov);
  unsigned char name[256], peer[256];
  size_t len = sizeof name;
  TRY(fi_getname(&r.ep->fid, name, &len));
  uint32_t n = (uint32_t)len, pn = 0;
  xfer(out, &n, sizeof n, true);
  xfer(out, name, len, true);
  xfer(in, &pn, sizeof pn, false);
  if (pn > sizeof peer - 1) exit(1);
  xfer(in, peer, pn, false);
  peer[pn] = 0;
  if (fi_av_insert(r.av, peer, 1, &r.peer, 0, NULL) != 1) die("fi_av_insert", FI_EINVAL);
  BenchOps o = {&r, raw_isend, raw_irecv, raw_wait};
  bench_run(&o, rank, "raw", r.info->fabric_attr->prov_name, max);
  char bye = 'z';
  xfer(out, &bye, 1, true); /* leave together: the peer may still need our progress */
  xfer(in, &bye, 1, false);
  raw_close(&r);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  fprintf(stderr, "raw %s rank %d: %.2f s CPU\n", prov, rank,
          ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
              ru.ru_stime.tv_usec * 1e-6);
}

int main(int argc, char **argv) {
  const char *prov = argc > 1 ? argv[1] : "tcp;ofi_rxm";
  size_t max = argc > 2 ? strtoull(argv[2], NULL, 10) : (size_t)64 << 20;
  int ab[2], ba[2];
  if (pipe(ab) || pipe(ba)) return 1;
  fflush(stdout);
  pid_t pid[2];
  for (int rank = 0; rank < 2; rank++) {
    if ((pid[rank] = fork()) == 0) { /* before any libfabric call */
      run(rank, rank ? ab[0] : ba[0], rank ? ba[1] : ab[1], prov, max);
      exit(0);
    }
  }
  int bad = 0;
  for (int rank = 0; rank < 2; rank++) {
    int st = 0;
    waitpid(pid[rank], &st, 0);
    bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
  }
  return bad;
}
