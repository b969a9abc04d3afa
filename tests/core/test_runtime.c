/* SPDX-License-Identifier: Apache-2.0 */
/* test_runtime.c - device names, runtimes and their listings, plugin discovery
 * (FLOE_PLUGINS, de-duplication by real path) and kernel selection with its error. */
#define _GNU_SOURCE
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <floe/floe.h>

static const char *env_dir(const char *var) {
  const char *d = getenv(var);
  ck_assert_msg(d && *d, "%s is not set (run through make check)", var);
  return d;
}

static FloeRuntime *runtime_with(const char *path, const char *plugins, FloeStatus *st) {
  FloeRuntimeOptions o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.plugin_path = path;
  o.plugins = plugins;
  o.num_threads = 2;
  o.skip_install_dir = 1;
  return floe_runtime_new(&o, st);
}

static FloeRuntime *runtime_ok(const char *path, const char *plugins) {
  FloeStatus *st = floe_status_new();
  FloeRuntime *rt = runtime_with(path, plugins, st);
  ck_assert_msg(rt != NULL, "floe_runtime_new(%s): %s", path, floe_status_message(st));
  floe_status_free(st);
  return rt;
}

static const FloePluginReport *report_named(const FloeRuntime *rt, const char *file) {
  for (int i = 0; i < floe_runtime_num_plugins(rt); i++) {
    const FloePluginReport *r = floe_runtime_plugin(rt, i);
    const char *base = strrchr(r->path, '/');
    if (strcmp(base ? base + 1 : r->path, file) == 0) return r;
  }
  ck_abort_msg("no report for %s", file);
  return NULL;
}

static void assert_contains(const char *s, const char *part) {
  ck_assert_msg(strstr(s, part) != NULL, "\"%s\" does not contain \"%s\"", s, part);
}

/* ------------------------------------------------------------------------------------ */
/* Device names. */

static const struct {
  const char *text;
  const char *job;
  int replica, task;
  const char *type;
  int index;
} good_names[] = {
    {"/job:localhost/replica:0/task:0/device:CPU:0", "localhost", 0, 0, "CPU", 0},
    {"/device:CPU:0", "", -1, -1, "CPU", 0},
    {"cpu:0", "", -1, -1, "CPU", 0},
    {"CPU", "", -1, -1, "CPU", -1},
    {"gpu:12", "", -1, -1, "GPU", 12},
    {"/job:worker/task:1/device:GPU:0", "worker", -1, 1, "GPU", 0},
    {"/cpu:1", "", -1, -1, "CPU", 1}, /* TensorFlow's legacy form */
    {"/device:tpu_sim:*", "", -1, -1, "TPU_SIM", -1},
    {"/task:3/job:ps-0", "ps-0", -1, 3, "", -1},
    {"/replica:2", "", 2, -1, "", -1},
};

START_TEST(device_names_parse) {
  for (size_t i = 0; i < sizeof good_names / sizeof good_names[0]; i++) {
    FloeDeviceName n;
    FloeStatus *st = floe_status_new();
    ck_assert_msg(floe_device_name_parse(good_names[i].text, &n, st) == FLOE_OK, "%s: %s",
                  good_names[i].text, floe_status_message(st));
    ck_assert_str_eq(n.job, good_names[i].job);
    ck_assert_int_eq(n.replica, good_names[i].replica);
    ck_assert_int_eq(n.task, good_names[i].task);
    ck_assert_str_eq(n.type, good_names[i].type);
    ck_assert_int_eq(n.index, good_names[i].index);
    floe_status_free(st);
  }
}
END_TEST

static const struct {
  const char *text;
  const char *why;
} bad_names[] = {
    {"", "empty"},
    {"cpu:x", "TYPE or TYPE:N"},
    {"9cpu", "TYPE or TYPE:N"},
    {"cpu:0:1", "TYPE or TYPE:N"},
    {"/job:a/job:b", "given twice"},
    {"/device:CPU:0/device:GPU:0", "given twice"},
    {"/device:", "not TYPE or TYPE:N"},
    {"/replica:-1", "replica is not a number"},
    {"/task:one", "task is not a number"},
    {"/job:a b", "job name"},
    {"/job", "key:value"},
    {"//device:CPU:0", "key:value"},
};

START_TEST(bad_device_names_are_explained) {
  for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
    FloeDeviceName n;
    FloeStatus *st = floe_status_new();
    ck_assert_msg(floe_device_name_parse(bad_names[i].text, &n, st) == FLOE_INVALID_ARGUMENT,
                  "\"%s\" was accepted", bad_names[i].text);
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\"", bad_names[i].text);
    assert_contains(floe_status_message(st), quoted);
    assert_contains(floe_status_message(st), bad_names[i].why);
    assert_contains(floe_status_message(st), "accepted forms");
    floe_status_free(st);
  }
  FloeDeviceName n;
  ck_assert_int_eq(floe_device_name_parse(NULL, &n, NULL), FLOE_INVALID_ARGUMENT);
  ck_assert_int_eq(floe_device_name_parse("cpu:0", NULL, NULL), FLOE_INVALID_ARGUMENT);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Runtimes. */

START_TEST(runtime_from_the_environment_lists_the_cpu) {
  FloeStatus *st = floe_status_new();
  FloeRuntime *rt = floe_runtime_new(NULL, st); /* FLOE_PLUGIN_PATH, FLOE_NO_INSTALL_DIR */
  ck_assert_msg(rt != NULL, "%s", floe_status_message(st));
  const FloePluginReport *cpu = report_named(rt, "floe-cpu.so");
  ck_assert_msg(cpu->state == FLOE_PLUGIN_LOADED, "cpu plugin: %s", cpu->message);
  ck_assert_str_eq(cpu->name, "cpu");
  ck_assert_int_eq(cpu->num_devices, 1);
  ck_assert_int_gt(cpu->num_kernels, 0);
  ck_assert_int_eq(floe_runtime_num_devices(rt), 1);
  FloeDeviceInfo info;
  ck_assert_int_eq(floe_runtime_device(rt, 0, &info), FLOE_OK);
  ck_assert_str_eq(info.name, "/job:localhost/replica:0/task:0/device:CPU:0");
  ck_assert_str_eq(info.short_name, "cpu:0");
  ck_assert_str_eq(info.type, "CPU");
  ck_assert_str_eq(info.plugin, "cpu");
  ck_assert_int_eq(info.index, 0);
  ck_assert_uint_gt(info.memory_bytes, 0);
  ck_assert(info.peak_flops_f32 > 0);
  ck_assert_int_eq(floe_runtime_device(rt, 1, &info), FLOE_OUT_OF_RANGE);
  int matmul = floe_runtime_num_kernels_for(rt, "MatMul", "CPU");
  ck_assert_int_ge(matmul, 1);
  ck_assert_int_eq(floe_runtime_num_kernels_for(rt, "MatMul", "cpu"), matmul);
  ck_assert_int_eq(floe_runtime_num_kernels_for(rt, "MatMul", NULL), matmul);
  ck_assert_int_eq(floe_runtime_num_kernels_for(rt, "NoSuchOp", NULL), 0);
  ck_assert_int_eq(floe_runtime_num_kernels_for(rt, "MatMul", "GPU"), 0);
  ck_assert_ptr_null(floe_runtime_plugin(rt, -1));
  ck_assert_ptr_null(floe_runtime_plugin(rt, floe_runtime_num_plugins(rt)));
  floe_status_free(st);
  floe_runtime_free(rt);
  ck_assert_int_eq(floe_runtime_num_plugins(NULL), 0);
  floe_runtime_free(NULL);
}
END_TEST

START_TEST(bad_runtime_options_are_named) {
  FloeStatus *st = floe_status_new();
  FloeRuntimeOptions o;
  memset(&o, 0, sizeof o);
  ck_assert_ptr_null(floe_runtime_new(&o, st)); /* struct_size forgotten */
  ck_assert_int_eq(floe_status_code(st), FLOE_INVALID_ARGUMENT);
  assert_contains(floe_status_message(st), "struct_size");

  o.struct_size = sizeof o;
  o.num_threads = -3;
  ck_assert_ptr_null(floe_runtime_new(&o, st));
  ck_assert_int_eq(floe_status_code(st), FLOE_INVALID_ARGUMENT);
  assert_contains(floe_status_message(st), "num_threads is -3");

  o.num_threads = 0;
  setenv("FLOE_NUM_THREADS", "lots", 1);
  ck_assert_ptr_null(floe_runtime_new(&o, st));
  unsetenv("FLOE_NUM_THREADS");
  ck_assert_int_eq(floe_status_code(st), FLOE_INVALID_ARGUMENT);
  assert_contains(floe_status_message(st), "FLOE_NUM_THREADS=\"lots\"");
  floe_status_free(st);
}
END_TEST

START_TEST(default_runtime_is_shared_and_lives_on) {
  FloeRuntime *a = floe_runtime_default(NULL);
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_eq(floe_runtime_default(NULL), a);
  int n = floe_runtime_num_devices(a);
  floe_runtime_free(a); /* borrowed: a no-op */
  ck_assert_ptr_eq(floe_runtime_default(NULL), a);
  ck_assert_int_eq(floe_runtime_num_devices(a), n);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Discovery. */

START_TEST(plugin_list_in_options_filters_by_file_name) {
  const char *list = "abitest, abitest-unavail";
  FloeRuntime *rt = runtime_ok(env_dir("FLOE_TEST_PLUGIN_DIR"), list);
  int loaded = 0, unavailable = 0, filtered = 0;
  for (int i = 0; i < floe_runtime_num_plugins(rt); i++) {
    const FloePluginReport *r = floe_runtime_plugin(rt, i);
    if (r->state == FLOE_PLUGIN_FILTERED) {
      filtered++;
      assert_contains(r->message, r->path);
      assert_contains(r->message, list);
    }
    loaded += r->state == FLOE_PLUGIN_LOADED;
    unavailable += r->state == FLOE_PLUGIN_UNAVAILABLE;
  }
  ck_assert_int_eq(loaded, 1);
  ck_assert_int_eq(unavailable, 1);
  ck_assert_int_eq(filtered, floe_runtime_num_plugins(rt) - 2);
  ck_assert_int_eq(report_named(rt, "floe-abitest.so")->state, FLOE_PLUGIN_LOADED);
  ck_assert_int_eq(report_named(rt, "floe-abitest-major2.so")->state, FLOE_PLUGIN_FILTERED);
  floe_runtime_free(rt);
}
END_TEST

START_TEST(plugin_list_from_the_environment) {
  setenv("FLOE_PLUGINS", "abitest-dup-b", 1);
  FloeRuntime *rt = runtime_ok(env_dir("FLOE_TEST_PLUGIN_DIR"), NULL);
  unsetenv("FLOE_PLUGINS");
  /* dup-a is filtered out before loading, so dup-b's name is free. */
  ck_assert_int_eq(report_named(rt, "floe-abitest-dup-a.so")->state, FLOE_PLUGIN_FILTERED);
  ck_assert_int_eq(report_named(rt, "floe-abitest-dup-b.so")->state, FLOE_PLUGIN_LOADED);
  ck_assert_int_eq(floe_runtime_num_devices(rt), 1);
  FloeDeviceInfo info;
  ck_assert_int_eq(floe_runtime_device(rt, 0, &info), FLOE_OK);
  ck_assert_str_eq(info.type, "DUPB");
  floe_runtime_free(rt);
}
END_TEST

START_TEST(same_directory_twice_is_deduplicated) {
  const char *cpu = env_dir("FLOE_PLUGIN_PATH");
  char path[3 * PATH_MAX];
  snprintf(path, sizeof path, "%s:%s/.:%s", cpu, cpu, cpu);
  FloeRuntime *rt = runtime_ok(path, "cpu");
  ck_assert_int_eq(floe_runtime_num_plugins(rt), 3);
  const FloePluginReport *first = floe_runtime_plugin(rt, 0);
  ck_assert_int_eq(first->state, FLOE_PLUGIN_LOADED);
  for (int i = 1; i < 3; i++) {
    const FloePluginReport *r = floe_runtime_plugin(rt, i);
    ck_assert_int_eq(r->state, FLOE_PLUGIN_DUPLICATE);
    ck_assert_str_eq(r->path, first->path); /* the same real path */
    assert_contains(r->message, "same file as");
  }
  ck_assert_int_eq(floe_runtime_num_devices(rt), 1);
  floe_runtime_free(rt);
}
END_TEST

START_TEST(missing_and_empty_directories_hold_nothing) {
  FloeRuntime *rt = runtime_ok("/nonexistent/floe-plugins::/dev/null:", NULL);
  ck_assert_int_eq(floe_runtime_num_plugins(rt), 0);
  ck_assert_int_eq(floe_runtime_num_devices(rt), 0);
  floe_runtime_free(rt);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Kernel selection, through sessions on the CPU plugin plus the test plugin floe-abitest
 * (AbiTestTwice: a priority-10 kernel for f32 computing 2x, a priority-0 kernel for f32
 * and f64 computing 2x + 1, and a kernel-less device ABITEST). */

static FloeRuntime *kernel_rt;

static void kernel_setup(void) {
  char path[2 * PATH_MAX];
  snprintf(path, sizeof path, "%s:%s", env_dir("FLOE_TEST_PLUGIN_DIR"), env_dir("FLOE_PLUGIN_PATH"));
  kernel_rt = runtime_ok(path, "abitest,cpu");
}

static void kernel_teardown(void) { floe_runtime_free(kernel_rt); }

/* Runs twice(x) for x = {1, 2, 3} of dtype dt on `device` (NULL: unplaced). Returns the
 * code; y receives the result as doubles when it succeeds. */
static floe_code run_twice(FloeDType dt, const char *device, double y[3], FloeStatus *st) {
  FloeGraph *g = floe_graph_new();
  int64_t dims[1] = {3};
  FloeOutput x = floe_placeholder(g, "x", dt, floe_shape_make(1, dims));
  FloeNodeBuilder *b = floe_node_begin(g, "AbiTestTwice", "twice");
  floe_node_add_input(b, x);
  if (device) floe_node_set_device(b, device);
  ck_assert_msg(floe_node_finish(b) != NULL, "%s", floe_graph_error(g, NULL));

  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.runtime = kernel_rt;
  FloeSession *s = floe_session_new(g, &so, st);
  ck_assert_msg(s != NULL, "%s", floe_status_message(st));
  union {
    float f[3];
    double d[3];
    int32_t i[3];
  } in;
  for (int k = 0; k < 3; k++) {
    if (dt == FLOE_F32) in.f[k] = (float)(k + 1);
    if (dt == FLOE_F64) in.d[k] = k + 1;
    if (dt == FLOE_I32) in.i[k] = k + 1;
  }
  FloeTensor *xv = floe_tensor_from_data(dt, 1, dims, &in, 3 * floe_dtype_size(dt), st);
  ck_assert_ptr_nonnull(xv);
  FloeFeed feed = {"x", xv};
  const char *fetch = "twice";
  FloeTensor *out = NULL;
  floe_code rc = floe_session_run(s, &feed, 1, &fetch, 1, NULL, 0, &out, st);
  if (rc == FLOE_OK) {
    ck_assert_int_eq(floe_tensor_dtype(out), dt);
    for (int k = 0; k < 3; k++)
      y[k] = dt == FLOE_F32 ? ((const float *)floe_tensor_data(out))[k]
                            : ((const double *)floe_tensor_data(out))[k];
    floe_tensor_release(out);
  }
  floe_tensor_release(xv);
  floe_session_free(s);
  floe_graph_free(g);
  return rc;
}

START_TEST(highest_priority_matching_kernel_wins) {
  FloeStatus *st = floe_status_new();
  double y[3];
  ck_assert_msg(run_twice(FLOE_F32, NULL, y, st) == FLOE_OK, "%s", floe_status_message(st));
  for (int k = 0; k < 3; k++) ck_assert(y[k] == 2.0 * (k + 1)); /* priority 10 */
  ck_assert_msg(run_twice(FLOE_F64, "cpu:0", y, st) == FLOE_OK, "%s", floe_status_message(st));
  for (int k = 0; k < 3; k++) ck_assert(y[k] == 2.0 * (k + 1) + 1); /* only priority 0 takes f64 */
  floe_status_free(st);
}
END_TEST

START_TEST(no_matching_dtype_names_node_dtypes_and_kernels) {
  FloeStatus *st = floe_status_new();
  double y[3];
  ck_assert_int_eq(run_twice(FLOE_I32, "cpu:0", y, st), FLOE_NOT_FOUND);
  const char *m = floe_status_message(st);
  assert_contains(m, "node 'twice'");
  assert_contains(m, "op AbiTestTwice");
  assert_contains(m, "T=i32");
  assert_contains(m, "on device type CPU");
  assert_contains(m, "CPU (T in {f32})");
  assert_contains(m, "CPU (T in {f32,f64})");
  floe_status_free(st);
}
END_TEST

START_TEST(no_kernel_on_the_requested_device_type) {
  FloeStatus *st = floe_status_new();
  double y[3];
  ck_assert_int_eq(run_twice(FLOE_F32, "/device:ABITEST:0", y, st), FLOE_NOT_FOUND);
  const char *m = floe_status_message(st);
  assert_contains(m, "node 'twice'");
  assert_contains(m, "on device type ABITEST");
  assert_contains(m, "kernels of this op exist for CPU");
  floe_status_free(st);
}
END_TEST

START_TEST(unknown_device_lists_the_devices) {
  FloeStatus *st = floe_status_new();
  double y[3];
  ck_assert_int_eq(run_twice(FLOE_F32, "gpu:3", y, st), FLOE_NOT_FOUND);
  const char *m = floe_status_message(st);
  assert_contains(m, "no device matches \"gpu:3\"");
  assert_contains(m, "cpu:0");
  assert_contains(m, "abitest:0");
  ck_assert_int_eq(run_twice(FLOE_F32, "/job:worker/device:CPU:0", y, st), FLOE_NOT_FOUND);
  ck_assert_int_eq(run_twice(FLOE_F32, "cpu:zero", y, st), FLOE_INVALID_ARGUMENT);
  assert_contains(floe_status_message(st), "\"cpu:zero\"");
  floe_status_free(st);
}
END_TEST

int main(void) {
  Suite *s = suite_create("runtime");
  TCase *names = tcase_create("device_names");
  tcase_add_test(names, device_names_parse);
  tcase_add_test(names, bad_device_names_are_explained);
  suite_add_tcase(s, names);

  TCase *rts = tcase_create("runtimes");
  tcase_add_test(rts, runtime_from_the_environment_lists_the_cpu);
  tcase_add_test(rts, bad_runtime_options_are_named);
  tcase_add_test(rts, default_runtime_is_shared_and_lives_on);
  suite_add_tcase(s, rts);

  TCase *disc = tcase_create("discovery");
  tcase_add_test(disc, plugin_list_in_options_filters_by_file_name);
  tcase_add_test(disc, plugin_list_from_the_environment);
  tcase_add_test(disc, same_directory_twice_is_deduplicated);
  tcase_add_test(disc, missing_and_empty_directories_hold_nothing);
  suite_add_tcase(s, disc);

  TCase *kernels = tcase_create("kernel_selection");
  tcase_add_checked_fixture(kernels, kernel_setup, kernel_teardown);
  tcase_set_timeout(kernels, 30);
  tcase_add_test(kernels, highest_priority_matching_kernel_wins);
  tcase_add_test(kernels, no_matching_dtype_names_node_dtypes_and_kernels);
  tcase_add_test(kernels, no_kernel_on_the_requested_device_type);
  tcase_add_test(kernels, unknown_device_lists_the_devices);
  suite_add_tcase(s, kernels);

  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
