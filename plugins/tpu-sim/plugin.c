/* SPDX-License-Identifier: Apache-2.0 */
/* plugin.c - entry point of the tpu-sim plugin: configuration from the environment, the
 * chips (devices with their own memory), and what every kernel shares (placement checks of
 * its tensors, outputs and scratch on the chip, the pool). */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim.h"

const FloeHostApi *tpu_host;

#define TPU_MAX_CHIPS 64

/* ------------------------------------------------------------------------------------ */
/* Configuration. */

/* "16G", "512M", "4096", "1.5G" (binary units K, M, G, T; an optional trailing "B" or "iB").
 * Returns false for anything else, zero, or more than 2^48 bytes. */
static bool parse_bytes(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || errno || !isfinite(v) || v <= 0) return false;
  double unit = 1;
  switch (*end) {
    case 'k': case 'K': unit = 1024.0; end++; break;
    case 'm': case 'M': unit = 1024.0 * 1024; end++; break;
    case 'g': case 'G': unit = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': unit = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
  }
  if (unit > 1 && (end[0] == 'i' || end[0] == 'I') && (end[1] == 'B' || end[1] == 'b')) end += 2;
  else if (end[0] == 'B' || end[0] == 'b') end++;
  if (*end) return false;
  double bytes = v * unit;
  if (bytes < 1 || bytes > 281474976710656.0) return false;
  *out = (uint64_t)bytes;
  return true;
}

/* A finite number ("940e6") above zero, or at zero when zero_ok. */
static bool parse_number(const char *s, bool zero_ok, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !isfinite(v) || v < 0 || (v == 0 && !zero_ok)) return false;
  *out = v;
  return true;
}

/* Reads the FLOE_TPUSIM_* variables into *c. On a bad value returns FLOE_INVALID_ARGUMENT
 * (FLOE_UNAVAILABLE for FLOE_TPUSIM_DEVICES=0) with the reason on reg. */
static floe_code read_config(FloePluginRegistrar *reg, TpuConfig *c) {
  *c = (TpuConfig){.devices = 1, .memory = 16ull << 30, .clock_hz = 940e6, .hbm_bw = 600e9,
                   .launch_ns = 2000, .host_bw = 16e9};
  const char *v = getenv("FLOE_TPUSIM_DEVICES");
  if (v && *v) {
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (end == v || *end || errno || n < 0 || n > TPU_MAX_CHIPS) {
      reg->set_message(reg, "FLOE_TPUSIM_DEVICES=\"%s\" is not a number of chips from 0 to %d",
                       v, TPU_MAX_CHIPS);
      return FLOE_INVALID_ARGUMENT;
    }
    if (n == 0) {
      reg->set_message(reg, "FLOE_TPUSIM_DEVICES=0: no tpu-sim chip presented");
      return FLOE_UNAVAILABLE;
    }
    c->devices = (int)n;
  }
  if ((v = getenv("FLOE_TPUSIM_MEMORY")) && *v && !parse_bytes(v, &c->memory)) {
    reg->set_message(reg,
                     "FLOE_TPUSIM_MEMORY=\"%s\" is not a size in bytes (e.g. \"16G\", \"512M\", "
                     "\"1048576\"; at most 256T)",
                     v);
    return FLOE_INVALID_ARGUMENT;
  }
  if (c->memory < 65536) {
    reg->set_message(reg, "FLOE_TPUSIM_MEMORY=\"%s\" is below the 64K a chip needs", v);
    return FLOE_INVALID_ARGUMENT;
  }
  static const struct {
    const char *name, *example;
    size_t offset;
    bool zero_ok;
  } nums[] = {
      {"FLOE_TPUSIM_CLOCK_HZ", "940e6", offsetof(TpuConfig, clock_hz), false},
      {"FLOE_TPUSIM_HBM_BW", "600e9", offsetof(TpuConfig, hbm_bw), false},
      {"FLOE_TPUSIM_LAUNCH_NS", "2000", offsetof(TpuConfig, launch_ns), true},
      {"FLOE_TPUSIM_HOST_BW", "16e9", offsetof(TpuConfig, host_bw), false},
  };
  for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
    if (!(v = getenv(nums[i].name)) || !*v) continue;
    double d;
    if (!parse_number(v, nums[i].zero_ok, &d)) {
      reg->set_message(reg, "%s=\"%s\" is not a %s number (e.g. %s)", nums[i].name, v,
                       nums[i].zero_ok ? "non-negative" : "positive", nums[i].example);
      return FLOE_INVALID_ARGUMENT;
    }
    *(double *)((char *)c + nums[i].offset) = d;
  }
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Device slots. */

static floe_code chip_props(void *state, FloeDeviceProps *p) {
  const TpuChip *chip = state;
  const TpuConfig *c = chip->cfg;
  snprintf(p->type, sizeof p->type, "TPU_SIM");
  snprintf(p->description, sizeof p->description,
           "simulated TPU chip %d: 128x128 bf16 systolic array at %.0f MHz, %.0f GB/s HBM",
           chip->ordinal, c->clock_hz / 1e6, c->hbm_bw / 1e9);
  p->memory_bytes = chip->arena.capacity;
  p->peak_flops[FLOE_F32] = tpu_cost_peak_matrix_flops(c); /* f32 inputs run as bf16 */
  p->peak_flops[FLOE_BF16] = tpu_cost_peak_matrix_flops(c);
  p->memory_bandwidth = c->hbm_bw;
  p->host_to_device_bandwidth = c->host_bw;
  p->device_to_host_bandwidth = c->host_bw;
  p->peer_bandwidth = c->host_bw / 2; /* chip to chip is staged through the host: two hops */
  p->flags = 0;                       /* its own memory: never FLOE_DEVICE_HOST_MEMORY */
  p->ordinal = chip->ordinal;
  if (FLOE_HAS_FIELD(p, FloeDeviceProps, launch_overhead)) {
    p->vector_flops = tpu_cost_peak_vector_flops(c);
    p->launch_overhead = c->launch_ns * 1e-9;
  }
  return FLOE_OK;
}

static floe_code chip_allocate(void *state, size_t bytes, size_t alignment, void **ptr) {
  TpuChip *chip = state;
  void *p = tpu_arena_alloc(&chip->arena, bytes, alignment);
  if (!p) return FLOE_RESOURCE_EXHAUSTED;
  *ptr = p;
  return FLOE_OK;
}

static void chip_deallocate(void *state, void *ptr, size_t bytes) {
  TpuChip *chip = state;
  tpu_arena_free(&chip->arena, ptr, bytes);
}

/* The copy slots are the only way in or out: each checks that the device side lies in this
 * chip's arena and the host side does not, so a mixed-up pointer fails instead of copying. */
static floe_code chip_copy_h2d(void *state, void *dst, const void *src, size_t n) {
  TpuChip *chip = state;
  if (!tpu_arena_holds(&chip->arena, dst, n) || tpu_arena_holds(&chip->arena, src, 1))
    return FLOE_INVALID_ARGUMENT;
  memcpy(dst, src, n);
  return FLOE_OK;
}

static floe_code chip_copy_d2h(void *state, void *dst, const void *src, size_t n) {
  TpuChip *chip = state;
  if (!tpu_arena_holds(&chip->arena, src, n) || tpu_arena_holds(&chip->arena, dst, 1))
    return FLOE_INVALID_ARGUMENT;
  memcpy(dst, src, n);
  return FLOE_OK;
}

static floe_code chip_copy_d2d(void *state, void *dst, const void *src, size_t n) {
  TpuChip *chip = state;
  if (!tpu_arena_holds(&chip->arena, src, n) || !tpu_arena_holds(&chip->arena, dst, n))
    return FLOE_INVALID_ARGUMENT;
  memmove(dst, src, n);
  return FLOE_OK;
}

static floe_code chip_memset(void *state, void *dst, int value, size_t n) {
  TpuChip *chip = state;
  if (!tpu_arena_holds(&chip->arena, dst, n)) return FLOE_INVALID_ARGUMENT;
  memset(dst, value, n);
  return FLOE_OK;
}

/* Frees the chip's arena; the last chip of a plugin frees the plugin's record. Destroy
 * slots run one after another at runtime shutdown. */
static void chip_destroy(void *state) {
  TpuChip *chip = state;
  TpuPlugin *pl = chip->plugin;
  tpu_arena_destroy(&chip->arena);
  if (--pl->live == 0) {
    tpu_host->free(pl->chips);
    tpu_host->free(pl);
  }
}

/* ------------------------------------------------------------------------------------ */
/* Kernels' shared helpers. */

floe_code tpu_add_kernel(FloePluginRegistrar *reg, const char *op, const char *constraint_attr,
                         uint32_t dtypes, uint32_t flags,
                         floe_code (*compute)(void *state, FloeKernelContext *ctx),
                         floe_code (*create)(const FloeHostApi *host, FloeKernelInit *init,
                                             void *user_data, void **state),
                         void (*destroy)(void *state), void *user_data) {
  return floe_plugin_add_kernel(reg, "TPU_SIM", op, constraint_attr, dtypes, flags, compute, create,
                                destroy, user_data);
}

const char *tpu_dims_str(int rank, const int64_t *dims, char *buf, size_t len) {
  size_t at = 0;
  if (len == 0) return buf;
  at += (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < rank && at < len; i++)
    at += (size_t)snprintf(buf + at, len - at, i ? ",%lld" : "%lld", (long long)dims[i]);
  if (at < len) snprintf(buf + at, len - at, "]");
  return buf;
}

const char *tpu_shape_str(const FloeTensor *t, char *buf, size_t len) {
  return tpu_dims_str(tpu_host->tensor_rank(t), tpu_host->tensor_dims(t), buf, len);
}

/* Where p lives, for a misplacement message: another chip of this plugin, or elsewhere. */
static void describe_place(const TpuChip *chip, const void *p, size_t n, char *buf, size_t len) {
  const TpuPlugin *pl = chip->plugin;
  for (int i = 0; i < pl->num_chips; i++) {
    if (&pl->chips[i] != chip && tpu_arena_holds(&pl->chips[i].arena, p, 1)) {
      snprintf(buf, len, "in the memory of tpu-sim:%d", pl->chips[i].ordinal);
      return;
    }
  }
  if (tpu_arena_holds(&chip->arena, p, 1))
    snprintf(buf, len, "partly past the end of this chip's memory (%zu bytes from %p)", n, p);
  else
    snprintf(buf, len, "at %p, outside every tpu-sim chip (host memory or another device's)", p);
}

static floe_code misplaced(FloeKernelContext *ctx, const char *what, int i, const FloeTensor *t,
                           const void *p) {
  const TpuChip *chip = tpu_chip(ctx);
  char where[160], shape[TPU_SHAPE_STR_MAX];
  size_t n = tpu_host->tensor_nbytes(t);
  describe_place(chip, p, n, where, sizeof where);
  return tpu_host->ctx_set_error(
      ctx, FLOE_INVALID_ARGUMENT,
      "%s %d (%s %s, %zu bytes) is not in tpu-sim:%d's memory: it lives %s; a tensor reaches "
      "a chip only through the device's copy functions (a placement or copy bug upstream)",
      what, i, tpu_host->dtype_name(tpu_host->tensor_dtype(t)), tpu_shape_str(t, shape, sizeof shape),
      n, chip->ordinal, where);
}

floe_code tpu_check_inputs(FloeKernelContext *ctx) {
  const TpuChip *chip = tpu_chip(ctx);
  int n = tpu_host->ctx_num_inputs(ctx);
  for (int i = 0; i < n; i++) {
    const FloeTensor *t = tpu_host->ctx_input(ctx, i);
    size_t bytes = t ? tpu_host->tensor_nbytes(t) : 0;
    if (bytes == 0) continue;
    const void *p = tpu_host->tensor_data(t);
    if (!p || !tpu_arena_holds(&chip->arena, p, bytes)) return misplaced(ctx, "input", i, t, p);
  }
  return FLOE_OK;
}

floe_code tpu_output(FloeKernelContext *ctx, int i, int rank, const int64_t *dims,
                     FloeTensor **out, void **data) {
  floe_code rc = tpu_host->ctx_allocate_output(ctx, i, rank, dims, out);
  if (rc != FLOE_OK) return rc;
  size_t bytes = tpu_host->tensor_nbytes(*out);
  void *p = tpu_host->tensor_data(*out);
  *data = bytes ? p : NULL;
  if (bytes && (!p || !tpu_arena_holds(&tpu_chip(ctx)->arena, p, bytes)))
    return misplaced(ctx, "output", i, *out, p);
  return FLOE_OK;
}

floe_code tpu_temp(FloeKernelContext *ctx, size_t bytes, void **out) {
  floe_code rc = tpu_host->ctx_allocate_temp(ctx, bytes ? bytes : 1, out);
  if (rc != FLOE_OK) return rc;
  if (!tpu_arena_holds(&tpu_chip(ctx)->arena, *out, bytes ? bytes : 1))
    return tpu_host->ctx_set_error(ctx, FLOE_INTERNAL,
                                   "scratch of %zu bytes is not in tpu-sim:%d's memory", bytes,
                                   tpu_chip(ctx)->ordinal);
  return FLOE_OK;
}

/* Total cost (n * cost_per_unit, about nanoseconds) below which work runs inline: waking the
 * pool costs a few microseconds. */
#define TPU_PARALLEL_MIN_COST 32768

void tpu_parallel_for(int64_t n, int64_t cost_per_unit, FloeParallelFn fn, void *arg) {
  if (n <= 0) return;
  int64_t cost = cost_per_unit > 0 ? cost_per_unit : 1;
  if (n == 1 || n < TPU_PARALLEL_MIN_COST / cost || tpu_host->num_threads() <= 1) {
    fn(arg, 0, n);
    return;
  }
  tpu_host->parallel_for(n, cost, fn, arg);
}

/* ------------------------------------------------------------------------------------ */
/* Entry point. */

/* Unmaps the arenas made so far and frees the plugin record (init failed). */
static void plugin_free(TpuPlugin *pl, int made) {
  for (int i = 0; i < made; i++) tpu_arena_destroy(&pl->chips[i].arena);
  tpu_host->free(pl->chips);
  tpu_host->free(pl);
}

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host, FloePluginRegistrar *reg) {
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "tpu-sim", PACKAGE_VERSION);
  if (rc != FLOE_OK) return rc;
  tpu_host = host;
  TpuConfig cfg;
  if ((rc = read_config(reg, &cfg)) != FLOE_OK) return rc;

  TpuPlugin *pl = host->alloc(sizeof *pl);
  TpuChip *chips = host->alloc((size_t)cfg.devices * sizeof *chips);
  if (!pl || !chips) {
    if (pl) host->free(pl);
    if (chips) host->free(chips);
    reg->set_message(reg, "out of memory creating %d tpu-sim chips", cfg.devices);
    return FLOE_NO_MEMORY;
  }
  memset(chips, 0, (size_t)cfg.devices * sizeof *chips);
  *pl = (TpuPlugin){.cfg = cfg, .num_chips = cfg.devices, .chips = chips, .live = cfg.devices};
  for (int i = 0; i < cfg.devices; i++) {
    int err = tpu_arena_init(&chips[i].arena, (size_t)cfg.memory);
    if (err) {
      reg->set_message(reg,
                       "cannot map %llu bytes of memory for tpu-sim:%d (%s); lower "
                       "FLOE_TPUSIM_MEMORY or FLOE_TPUSIM_DEVICES",
                       (unsigned long long)cfg.memory, i, strerror(err));
      plugin_free(pl, i);
      return FLOE_RESOURCE_EXHAUSTED;
    }
    chips[i].ordinal = i;
    chips[i].cfg = &pl->cfg;
    chips[i].plugin = pl;
  }
  for (int i = 0; i < cfg.devices; i++) {
    FloeDeviceFns d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.state = &chips[i];
    d.get_props = chip_props;
    d.allocate = chip_allocate;
    d.deallocate = chip_deallocate;
    d.copy_h2d = chip_copy_h2d;
    d.copy_d2h = chip_copy_d2h;
    d.copy_d2d = chip_copy_d2d;
    d.memset = chip_memset;
    d.destroy = chip_destroy;
    if ((rc = reg->register_device(reg, &d)) != FLOE_OK) goto err_free;
  }
  floe_code (*const sets[])(FloePluginRegistrar *) = {
      tpu_register_matrix, tpu_register_conv, tpu_register_vector, tpu_register_reduce,
      tpu_register_optim,
  };
  for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
    if ((rc = sets[i](reg)) != FLOE_OK) goto err_free;
  return FLOE_OK;

err_free: /* a failed init's registrations are dropped without calling destroy */
  plugin_free(pl, cfg.devices);
  return rc;
}
