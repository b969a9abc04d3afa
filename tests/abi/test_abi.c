/* SPDX-License-Identifier: Apache-2.0 */
/* test_abi.c - the plugin ABI with real .so files (the test plugins of tests/abi, built into
 * $FLOE_TEST_PLUGIN_DIR): what the loader reports for each kind of plugin, that older and
 * newer minors load, that a failing plugin leaves nothing behind, the lifecycle hooks, and
 * that the core keeps working beside the failures. */
#define _GNU_SOURCE
#include <check.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <floe/floe.h>
#include <floe/floe_plugin.h>

/* Every plugin of the test directory and the state the loader must report for it. */
static const struct {
  const char *file;
  FloePluginState state;
} expected[] = {
    {"floe-abitest.so", FLOE_PLUGIN_LOADED},
    {"floe-abitest-old.so", FLOE_PLUGIN_LOADED},
    {"floe-abitest-new.so", FLOE_PLUGIN_LOADED},
    {"floe-abitest-major2.so", FLOE_PLUGIN_REFUSED},
    {"floe-abitest-noentry.so", FLOE_PLUGIN_REFUSED},
    {"floe-abitest-initfail.so", FLOE_PLUGIN_FAILED},
    {"floe-abitest-badop.so", FLOE_PLUGIN_FAILED},
    {"floe-abitest-unavail.so", FLOE_PLUGIN_UNAVAILABLE},
    {"floe-abitest-nodeclare.so", FLOE_PLUGIN_FAILED},
    {"floe-abitest-dup-a.so", FLOE_PLUGIN_LOADED},
    {"floe-abitest-dup-b.so", FLOE_PLUGIN_DUPLICATE},
    {"floe-abitest-strict.so", FLOE_PLUGIN_LOADED},
    {"floe-abitest-badgrad.so", FLOE_PLUGIN_FAILED},
    {"floe-abitest-hostile.so", FLOE_PLUGIN_LOADED},
    {"floe-abitest-hostile-fail.so", FLOE_PLUGIN_FAILED},
};

static const char *test_dir(void) {
  const char *d = getenv("FLOE_TEST_PLUGIN_DIR");
  ck_assert_msg(d && *d, "FLOE_TEST_PLUGIN_DIR is not set (run through make check)");
  return d;
}

static FloeRuntime *runtime_at(const char *path, const char *plugins) {
  FloeRuntimeOptions o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.plugin_path = path;
  o.plugins = plugins;
  o.num_threads = 2;
  o.skip_install_dir = 1;
  FloeStatus *st = floe_status_new();
  FloeRuntime *rt = floe_runtime_new(&o, st);
  ck_assert_msg(rt != NULL, "floe_runtime_new(%s): %s", path, floe_status_message(st));
  floe_status_free(st);
  return rt;
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

/* The report of the plugin file named `file` in rt; fails the test when absent. */
static const FloePluginReport *report_for(const FloeRuntime *rt, const char *file) {
  for (int i = 0; i < floe_runtime_num_plugins(rt); i++) {
    const FloePluginReport *r = floe_runtime_plugin(rt, i);
    if (strcmp(base_name(r->path), file) == 0) return r;
  }
  ck_abort_msg("no report for %s", file);
  return NULL;
}

/* Index of the device of type `type`, or -1. */
static int device_of_type(const FloeRuntime *rt, const char *type) {
  FloeDeviceInfo info;
  for (int i = 0; i < floe_runtime_num_devices(rt); i++) {
    ck_assert_int_eq(floe_runtime_device(rt, i, &info), FLOE_OK);
    if (strcmp(info.type, type) == 0) return i;
  }
  return -1;
}

static void assert_contains(const char *s, const char *part) {
  ck_assert_msg(strstr(s, part) != NULL, "\"%s\" does not contain \"%s\"", s, part);
}

/* ------------------------------------------------------------------------------------ */

START_TEST(every_plugin_is_reported_with_its_state) {
  FloeRuntime *rt = runtime_at(test_dir(), "");
  ck_assert_int_eq(floe_runtime_num_plugins(rt), (int)(sizeof expected / sizeof expected[0]));
  for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
    const FloePluginReport *r = report_for(rt, expected[i].file);
    ck_assert_msg(r->state == expected[i].state, "%s: state %s, want %s (message: %s)",
                  expected[i].file, floe_plugin_state_name(r->state),
                  floe_plugin_state_name(expected[i].state), r->message);
    ck_assert_ptr_nonnull(r->name);
    ck_assert_ptr_nonnull(r->version);
    if (r->state == FLOE_PLUGIN_LOADED)
      ck_assert_str_eq(r->message, "");
    else
      assert_contains(r->message, r->path); /* every refusal names the file */
    if (r->state != FLOE_PLUGIN_LOADED)
      ck_assert_int_eq(r->num_devices + r->num_kernels + r->num_ops + r->num_transports, 0);
  }
  ck_assert_str_eq(floe_plugin_state_name(FLOE_PLUGIN_UNAVAILABLE), "unavailable");
  ck_assert_str_eq(floe_plugin_state_name(FLOE_PLUGIN_FILTERED), "filtered");
  floe_runtime_free(rt);
}
END_TEST

START_TEST(good_plugin_registers_op_kernels_and_device) {
  FloeRuntime *rt = runtime_at(test_dir(), "abitest");
  const FloePluginReport *r = report_for(rt, "floe-abitest.so");
  ck_assert_int_eq(r->state, FLOE_PLUGIN_LOADED);
  ck_assert_str_eq(r->name, "abitest");
  ck_assert_str_eq(r->version, "1.2.3");
  ck_assert_uint_eq(r->abi_major, FLOE_ABI_MAJOR);
  ck_assert_uint_eq(r->abi_minor, FLOE_ABI_MINOR);
  ck_assert_uint_eq(r->negotiated_minor, FLOE_ABI_MINOR);
  ck_assert_int_eq(r->num_devices, 1);
  ck_assert_int_eq(r->num_kernels, 4); /* two of AbiTestTwice, AbiTestAsyncTwice, AbiTestMisbehave */
  ck_assert_int_eq(r->num_ops, 3);
  ck_assert_int_eq(r->num_transports, 0);
  ck_assert(floe_op_exists("AbiTestTwice"));
  ck_assert(floe_op_exists("AbiTestAsyncTwice"));
  ck_assert_int_eq(floe_runtime_num_kernels_for(rt, "AbiTestTwice", "CPU"), 2);
  ck_assert_int_eq(floe_runtime_num_kernels_for(rt, "AbiTestTwice", "abitest"), 0);

  /* The plugin said "AbiTest": types are upper-cased, names follow the canonical form. */
  int d = device_of_type(rt, "ABITEST");
  ck_assert_int_ge(d, 0);
  FloeDeviceInfo info;
  ck_assert_int_eq(floe_runtime_device(rt, d, &info), FLOE_OK);
  ck_assert_str_eq(info.name, "/job:localhost/replica:0/task:0/device:ABITEST:0");
  ck_assert_str_eq(info.short_name, "abitest:0");
  ck_assert_str_eq(info.plugin, "abitest");
  ck_assert_str_eq(info.description, "simulated device of the ABI tests");
  ck_assert_uint_eq(info.memory_bytes, (uint64_t)1 << 30);
  ck_assert(info.peak_flops_f32 == 1e9);
  ck_assert_int_eq(info.index, 0);
  ck_assert_int_eq(floe_runtime_device(rt, floe_runtime_num_devices(rt), &info), FLOE_OUT_OF_RANGE);
  ck_assert_int_eq(floe_runtime_device(rt, -1, &info), FLOE_OUT_OF_RANGE);
  floe_runtime_free(rt);
}
END_TEST

START_TEST(older_minor_with_short_structs_loads) {
  FloeRuntime *rt = runtime_at(test_dir(), "abitest-old");
  const FloePluginReport *r = report_for(rt, "floe-abitest-old.so");
  ck_assert_msg(r->state == FLOE_PLUGIN_LOADED, "abitest-old: %s", r->message);
  ck_assert_uint_eq(r->abi_minor, 0);
  ck_assert_uint_eq(r->negotiated_minor, 0);
  /* The kernel's garbage compute_async was beyond struct_size: it must not count. */
  ck_assert_int_eq(r->num_kernels, 1);
  ck_assert_int_eq(r->num_devices, 1);
  /* Its 1.3 transport's garbage trywait (with get_fd NULL) would be refused if read. */
  ck_assert_int_eq(r->num_transports, 1);
  ck_assert_int_ge(device_of_type(rt, "ABIOLD"), 0);
  ck_assert_int_eq(floe_runtime_num_kernels_for(rt, "Neg", "ABIOLD"), 1);
  /* Freeing would call the garbage destroy slot if the core had read it. */
  floe_runtime_free(rt);
}
END_TEST

START_TEST(newer_minor_is_negotiated_down) {
  FloeRuntime *rt = runtime_at(test_dir(), "abitest-new");
  const FloePluginReport *r = report_for(rt, "floe-abitest-new.so");
  ck_assert_msg(r->state == FLOE_PLUGIN_LOADED, "abitest-new: %s", r->message);
  ck_assert_uint_eq(r->abi_major, FLOE_ABI_MAJOR);
  ck_assert_uint_eq(r->abi_minor, 99);
  ck_assert_uint_eq(r->negotiated_minor, FLOE_ABI_MINOR);
  ck_assert_str_eq(r->version, "99.0");
  ck_assert_int_eq(r->num_devices, 1);
  ck_assert_int_eq(r->num_kernels, 1);
  ck_assert_int_ge(device_of_type(rt, "ABINEW"), 0);
  floe_runtime_free(rt);
}
END_TEST

START_TEST(other_major_is_refused_with_both_versions) {
  FloeRuntime *rt = runtime_at(test_dir(), "abitest-major2");
  const FloePluginReport *r = report_for(rt, "floe-abitest-major2.so");
  ck_assert_int_eq(r->state, FLOE_PLUGIN_REFUSED);
  ck_assert_uint_eq(r->abi_major, 2);
  ck_assert_uint_eq(r->abi_minor, 7);
  char want[PATH_MAX + 128];
  snprintf(want, sizeof want,
           "%s: ABI 2.7 not supported by this core (ABI %d.%d): rebuild the plugin against "
           "Floe's headers",
           r->path, FLOE_ABI_MAJOR, FLOE_ABI_MINOR);
  ck_assert_str_eq(r->message, want);
  /* It registered a device after the refusal and returned FLOE_OK: nothing may remain. */
  ck_assert_int_eq(floe_runtime_num_devices(rt), 0);
  floe_runtime_free(rt);
}
END_TEST

START_TEST(missing_entry_symbol_is_refused_with_dlerror) {
  FloeRuntime *rt = runtime_at(test_dir(), "abitest-noentry");
  const FloePluginReport *r = report_for(rt, "floe-abitest-noentry.so");
  ck_assert_int_eq(r->state, FLOE_PLUGIN_REFUSED);
  assert_contains(r->message, "floe_plugin_init");
  assert_contains(r->message, "undefined symbol"); /* glibc's dlerror() text */
  char core_abi[64];
  snprintf(core_abi, sizeof core_abi, "core ABI %d.%d", FLOE_ABI_MAJOR, FLOE_ABI_MINOR);
  assert_contains(r->message, core_abi);
  ck_assert_str_eq(r->name, "abitest-noentry"); /* never declared: the file's stem */
  floe_runtime_free(rt);
}
END_TEST

START_TEST(failing_init_leaves_nothing_behind) {
  FloeRuntime *rt =
      runtime_at(test_dir(), "abitest-initfail,abitest-badop,abitest-nodeclare,abitest-badgrad");
  const FloePluginReport *r = report_for(rt, "floe-abitest-initfail.so");
  ck_assert_int_eq(r->state, FLOE_PLUGIN_FAILED);
  assert_contains(r->message, "init failed (INTERNAL)");
  assert_contains(r->message, "simulated failure: licence server lic.example unreachable");

  r = report_for(rt, "floe-abitest-badop.so");
  ck_assert_int_eq(r->state, FLOE_PLUGIN_FAILED);
  assert_contains(r->message, "NoSuchOpForAbiTest");
  assert_contains(r->message, "is not defined");
  ck_assert_int_eq(floe_runtime_num_kernels_for(rt, "NoSuchOpForAbiTest", NULL), 0);

  r = report_for(rt, "floe-abitest-nodeclare.so");
  ck_assert_int_eq(r->state, FLOE_PLUGIN_FAILED);
  assert_contains(r->message, "without a successful reg->declare");
  assert_contains(r->message, "register_device called before reg->declare");

  r = report_for(rt, "floe-abitest-badgrad.so");
  ck_assert_int_eq(r->state, FLOE_PLUGIN_FAILED);
  assert_contains(r->message, "register_gradient Relu");
  assert_contains(r->message, "already has a gradient (from the standard op set)");

  /* initfail and badop each registered an ABIBAD device before failing. */
  ck_assert_int_eq(floe_runtime_num_devices(rt), 0);
  floe_runtime_free(rt);
}
END_TEST

START_TEST(unavailable_plugin_keeps_its_reason) {
  FloeRuntime *rt = runtime_at(test_dir(), "abitest-unavail");
  const FloePluginReport *r = report_for(rt, "floe-abitest-unavail.so");
  ck_assert_int_eq(r->state, FLOE_PLUGIN_UNAVAILABLE);
  ck_assert_str_eq(r->name, "abitest-unavail");
  assert_contains(r->message, "not usable here: no ABIBAD accelerator on this machine");
  floe_runtime_free(rt);
}
END_TEST

START_TEST(same_declared_name_is_a_duplicate) {
  FloeRuntime *rt = runtime_at(test_dir(), "abitest-dup-a,abitest-dup-b");
  const FloePluginReport *a = report_for(rt, "floe-abitest-dup-a.so");
  const FloePluginReport *b = report_for(rt, "floe-abitest-dup-b.so");
  ck_assert_int_eq(a->state, FLOE_PLUGIN_LOADED);
  ck_assert_int_eq(b->state, FLOE_PLUGIN_DUPLICATE);
  ck_assert_str_eq(b->name, "abitest-dup");
  assert_contains(b->message, "\"abitest-dup\"");
  assert_contains(b->message, a->path); /* names the one that was kept */
  ck_assert_int_ge(device_of_type(rt, "DUPA"), 0);
  ck_assert_int_eq(device_of_type(rt, "DUPB"), -1);
  floe_runtime_free(rt);
}
END_TEST

START_TEST(invalid_registrations_are_rejected) {
  FloeRuntime *rt = runtime_at(test_dir(), "abitest-strict");
  const FloePluginReport *r = report_for(rt, "floe-abitest-strict.so");
  ck_assert_msg(r->state == FLOE_PLUGIN_LOADED, "abitest-strict: %s", r->message);
  ck_assert_int_eq(r->num_kernels, 1);
  ck_assert_int_eq(r->num_ops, 1);
  ck_assert_int_eq(r->num_devices, 0);
  ck_assert_int_eq(r->num_transports, 0);
  ck_assert(floe_op_exists("AbiStrictOp"));
  ck_assert(floe_op_has_gradient("AbiStrictOp"));
  ck_assert_int_eq(floe_runtime_num_kernels_for(rt, "AbiStrictOp", "STRICT"), 1);
  floe_runtime_free(rt);
}
END_TEST

/* ------------------------------------------------------------------------------------ */

/* The good plugin's lifecycle log (a test-only exported symbol). */
static const char *lifecycle_log(const FloeRuntime *rt) {
  const FloePluginReport *r = report_for(rt, "floe-abitest.so");
  void *h = dlopen(r->path, RTLD_NOW | RTLD_NOLOAD);
  ck_assert_msg(h != NULL, "the plugin is not loaded: %s", dlerror());
  const char *log = dlsym(h, "abitest_lifecycle");
  ck_assert_ptr_nonnull(log);
  dlclose(h); /* drops only the reference taken here */
  return log;
}

START_TEST(shutdown_hook_runs_before_device_destroy) {
  FloeRuntime *rt = runtime_at(test_dir(), "abitest");
  const char *log = lifecycle_log(rt);
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s", report_for(rt, "floe-abitest.so")->path);
  size_t before = strlen(log);
  floe_runtime_free(rt);
  ck_assert_str_eq(log + before, "SD");
  /* Never unloaded: the code stays mapped after the runtime is gone. */
  void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  ck_assert_ptr_nonnull(h);
  dlclose(h);
}
END_TEST

START_TEST(two_runtimes_load_the_same_plugin) {
  FloeRuntime *a = runtime_at(test_dir(), "abitest");
  FloeRuntime *b = runtime_at(test_dir(), "abitest");
  ck_assert_int_eq(report_for(a, "floe-abitest.so")->state, FLOE_PLUGIN_LOADED);
  /* The op is already defined (by the same plugin): that is not a clash. */
  const FloePluginReport *rb = report_for(b, "floe-abitest.so");
  ck_assert_msg(rb->state == FLOE_PLUGIN_LOADED, "second runtime: %s", rb->message);
  ck_assert_int_eq(rb->num_ops, 3);
  const char *log = lifecycle_log(a);
  size_t before = strlen(log);
  floe_runtime_free(b);
  floe_runtime_free(a);
  ck_assert_str_eq(log + before, "SDSD");
}
END_TEST

static char tmp_dir[64];

static void write_file(const char *dir, const char *name, const char *text) {
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

static void make_tmp_dir(void) {
  snprintf(tmp_dir, sizeof tmp_dir, "/tmp/floe-abi-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
}

static void remove_tmp_dir(void) {
  char cmd[PATH_MAX];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
  ck_assert_int_eq(system(cmd), 0);
}

START_TEST(unloadable_files_and_links) {
  make_tmp_dir();
  write_file(tmp_dir, "floe-garbage.so", "this is not an ELF file\n");
  write_file(tmp_dir, "notaplugin.so", "ignored: no floe- prefix\n");
  write_file(tmp_dir, "floe-text.txt", "ignored: no .so suffix\n");
  char p[PATH_MAX], target[PATH_MAX];
  snprintf(p, sizeof p, "%s/floe-dir.so", tmp_dir);
  ck_assert_int_eq(mkdir(p, 0700), 0); /* not a file: skipped */
  snprintf(p, sizeof p, "%s/floe-abitest-link.so", tmp_dir);
  snprintf(target, sizeof target, "%s/floe-abitest.so", test_dir());
  ck_assert_int_eq(symlink(target, p), 0);

  char path[2 * PATH_MAX];
  snprintf(path, sizeof path, "%s:%s", tmp_dir, test_dir());
  FloeRuntime *rt = runtime_at(path, "garbage,abitest-link,abitest");
  /* The link and the garbage in tmp_dir (the directory is skipped), then the test directory. */
  ck_assert_int_eq(floe_runtime_num_plugins(rt), 2 + (int)(sizeof expected / sizeof expected[0]));

  const FloePluginReport *g = floe_runtime_plugin(rt, 1); /* name order: floe-garbage after the link */
  ck_assert_str_eq(base_name(g->path), "floe-garbage.so");
  ck_assert_int_eq(g->state, FLOE_PLUGIN_REFUSED);
  assert_contains(g->message, "cannot be loaded");
  ck_assert_msg(strstr(g->message, "file too short") || strstr(g->message, "invalid ELF header"),
                "no dlerror() text in: %s", g->message);

  const FloePluginReport *link = floe_runtime_plugin(rt, 0);
  ck_assert_int_eq(link->state, FLOE_PLUGIN_LOADED);
  ck_assert_str_eq(link->name, "abitest");
  ck_assert_str_eq(base_name(link->path), "floe-abitest.so"); /* the real path */

  /* The same file reached through the test directory: de-duplicated by real path. */
  int dups = 0;
  for (int i = 2; i < floe_runtime_num_plugins(rt); i++) {
    const FloePluginReport *r = floe_runtime_plugin(rt, i);
    if (strcmp(base_name(r->path), "floe-abitest.so") == 0) {
      ck_assert_int_eq(r->state, FLOE_PLUGIN_DUPLICATE);
      assert_contains(r->message, "same file as");
      dups++;
    } else {
      ck_assert_msg(r->state == FLOE_PLUGIN_FILTERED, "%s: %s", r->path,
                    floe_plugin_state_name(r->state));
      assert_contains(r->message, "garbage,abitest-link,abitest");
    }
  }
  ck_assert_int_eq(dups, 1);
  ck_assert_int_eq(floe_runtime_num_devices(rt), 1);
  floe_runtime_free(rt);
  remove_tmp_dir();
}
END_TEST

START_TEST(host_log_is_silent_by_default) {
  /* main() unset FLOE_LOG_LEVEL before any runtime; the good plugin logs during init. */
  char file[] = "/tmp/floe-abi-log-XXXXXX";
  int fd = mkstemp(file);
  ck_assert_int_ge(fd, 0);
  fflush(stderr);
  int saved = dup(STDERR_FILENO);
  ck_assert_int_ge(dup2(fd, STDERR_FILENO), 0);
  FloeRuntime *rt = runtime_at(test_dir(), "");
  floe_runtime_free(rt);
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  struct stat sb;
  ck_assert_int_eq(fstat(fd, &sb), 0);
  close(fd);
  unlink(file);
  ck_assert_int_eq(sb.st_size, 0);
}
END_TEST

/* ------------------------------------------------------------------------------------ */

START_TEST(custom_op_runs_in_a_session_beside_the_failures) {
  const char *cpu = getenv("FLOE_PLUGIN_PATH");
  ck_assert_msg(cpu && *cpu, "FLOE_PLUGIN_PATH (the CPU plugin) is not set");
  char path[2 * PATH_MAX];
  snprintf(path, sizeof path, "%s:%s", test_dir(), cpu);
  FloeRuntime *rt = runtime_at(path, "");
  ck_assert_int_eq(report_for(rt, "floe-cpu.so")->state, FLOE_PLUGIN_LOADED);

  FloeGraph *g = floe_graph_new();
  int64_t dims[1] = {5};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, dims));
  FloeNodeBuilder *b = floe_node_begin(g, "AbiTestTwice", "twice");
  floe_node_add_input(b, x);
  FloeNode *n = floe_node_finish(b);
  ck_assert_msg(n != NULL, "%s", floe_graph_error(g, NULL));
  FloeShape s = floe_node_output_shape(n, 0); /* from the plugin's shape function */
  ck_assert_int_eq(s.rank, 1);
  ck_assert_int_eq(s.dims[0], 5);

  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.runtime = rt;
  so.device = "cpu:0";
  FloeStatus *st = floe_status_new();
  FloeSession *sess = floe_session_new(g, &so, st);
  ck_assert_msg(sess != NULL, "%s", floe_status_message(st));
  const float in[5] = {1, -2, 0.5f, 3, 100};
  FloeTensor *xv = floe_tensor_from_data(FLOE_F32, 1, dims, in, sizeof in, st);
  ck_assert_ptr_nonnull(xv);
  FloeFeed feed = {"x", xv};
  const char *fetch = "twice";
  FloeTensor *out = NULL;
  ck_assert_msg(floe_session_run(sess, &feed, 1, &fetch, 1, NULL, 0, &out, st) == FLOE_OK, "%s",
                floe_status_message(st));
  const float *y = floe_tensor_data(out);
  for (int i = 0; i < 5; i++) ck_assert_float_eq(y[i], 2 * in[i]); /* priority 10 kernel */
  floe_tensor_release(out);
  floe_session_free(sess);

  /* The plugin's declarative gradient: d sum(twice(x)) / dx = 2, built from AbiTestTwice. */
  FloeOutput y_out = floe_out(n, 0), dx;
  ck_assert_msg(floe_gradients(g, &y_out, 1, &x, 1, NULL, &dx, st) == FLOE_OK, "%s",
                floe_status_message(st));
  ck_assert_str_eq(floe_node_op(dx.node), "AbiTestTwice");
  sess = floe_session_new(g, &so, st);
  ck_assert_msg(sess != NULL, "%s", floe_status_message(st));
  const char *dx_name = floe_node_name(dx.node);
  ck_assert_msg(floe_session_run(sess, &feed, 1, &dx_name, 1, NULL, 0, &out, st) == FLOE_OK, "%s",
                floe_status_message(st));
  for (int i = 0; i < 5; i++) ck_assert_float_eq(((const float *)floe_tensor_data(out))[i], 2.0f);
  floe_tensor_release(out);
  floe_tensor_release(xv);
  floe_session_free(sess);
  floe_graph_free(g);
  floe_status_free(st);
  floe_runtime_free(rt);
}
END_TEST

int main(void) {
  unsetenv("FLOE_LOG_LEVEL");
  Suite *s = suite_create("abi");
  TCase *reports = tcase_create("reports");
  tcase_add_test(reports, every_plugin_is_reported_with_its_state);
  tcase_add_test(reports, good_plugin_registers_op_kernels_and_device);
  tcase_add_test(reports, older_minor_with_short_structs_loads);
  tcase_add_test(reports, newer_minor_is_negotiated_down);
  tcase_add_test(reports, other_major_is_refused_with_both_versions);
  tcase_add_test(reports, missing_entry_symbol_is_refused_with_dlerror);
  tcase_add_test(reports, failing_init_leaves_nothing_behind);
  tcase_add_test(reports, unavailable_plugin_keeps_its_reason);
  tcase_add_test(reports, same_declared_name_is_a_duplicate);
  tcase_add_test(reports, invalid_registrations_are_rejected);
  suite_add_tcase(s, reports);

  TCase *life = tcase_create("lifecycle");
  tcase_add_test(life, shutdown_hook_runs_before_device_destroy);
  tcase_add_test(life, two_runtimes_load_the_same_plugin);
  tcase_add_test(life, unloadable_files_and_links);
  tcase_add_test(life, host_log_is_silent_by_default);
  suite_add_tcase(s, life);

  TCase *core = tcase_create("core_still_works");
  tcase_set_timeout(core, 30);
  tcase_add_test(core, custom_op_runs_in_a_session_beside_the_failures);
  suite_add_tcase(s, core);

  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
