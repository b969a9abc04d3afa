/* SPDX-License-Identifier: Apache-2.0 */
/* test_cluster.c - cluster specs (core/dist/cluster.c): TF_CONFIG-compatible JSON from a
 * string, FLOE_CONFIG / TF_CONFIG and files; each refusal's message (the source, the field,
 * what to do); lookups by task name and device name; the PMIx path's refusals outside a
 * launcher (tests/core/test_pmix.sh runs the real one under mpirun). */
#define _GNU_SOURCE
#include "config.h" /* FLOE_HAVE_PMIX_H */

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"

static const char k_spec[] =
    "{\"cluster\": {\"chief\": [\"10.0.0.1:2222\"],"
    " \"worker\": [\"10.0.0.2:2222\", \"node-3.example:2222\", \"[::1]:2223\"],"
    " \"ps\": [\"10.0.0.4:2222\"]},"
    " \"task\": {\"type\": \"worker\", \"index\": 1}, \"environment\": \"cloud\"}";

static FloeClusterSpec *parse_ok(const char *json) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeClusterSpec *spec = NULL;
  floe_code rc = floe__cluster_parse(json, strlen(json), "TF_CONFIG", &spec, &st);
  ck_assert_msg(rc == FLOE_OK, "%s: %s", json, floe_status_message(&st));
  floe_status_clear(&st);
  return spec;
}

/* The spec json must be refused with code and a message holding each of the NULL-ended
 * fragments. */
static void parse_bad_len(const char *json, size_t len, floe_code code, const char *frag1,
                          const char *frag2) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeClusterSpec *spec = (FloeClusterSpec *)1;
  floe_code rc = floe__cluster_parse(json, len, "TF_CONFIG", &spec, &st);
  ck_assert_msg(rc == code, "%.200s: code %d, expected %d (%s)", json, rc, code,
                floe_status_message(&st));
  ck_assert_ptr_null(spec);
  const char *m = floe_status_message(&st);
  ck_assert_msg(strncmp(m, "TF_CONFIG: ", 11) == 0, "no source in \"%s\"", m);
  ck_assert_msg(strstr(m, frag1), "\"%s\" lacks \"%s\"", m, frag1);
  if (frag2) ck_assert_msg(strstr(m, frag2), "\"%s\" lacks \"%s\"", m, frag2);
  floe_status_clear(&st);
}
static void parse_bad(const char *json, const char *frag1, const char *frag2) {
  parse_bad_len(json, strlen(json), FLOE_INVALID_ARGUMENT, frag1, frag2);
}

START_TEST(test_parse_valid) {
  FloeClusterSpec *spec = parse_ok(k_spec);
  ck_assert_int_eq(spec->num_jobs, 3);
  ck_assert_int_eq(spec->num_tasks, 5);
  ck_assert_str_eq(spec->source, "TF_CONFIG");
  int w = floe__cluster_find_job(spec, "worker");
  ck_assert_int_ge(w, 0);
  ck_assert_int_eq(spec->jobs[w].num_tasks, 3);
  ck_assert_str_eq(spec->jobs[w].tasks[1].address, "node-3.example:2222");
  ck_assert_str_eq(spec->jobs[w].tasks[1].host, "node-3.example");
  ck_assert_int_eq(spec->jobs[w].tasks[1].port, 2222);
  ck_assert_str_eq(spec->jobs[w].tasks[2].host, "::1");
  ck_assert_int_eq(spec->jobs[w].tasks[2].port, 2223);
  ck_assert_int_eq(spec->self.job, w);
  ck_assert_int_eq(spec->self.task, 1);
  ck_assert_int_eq(floe__cluster_find_job(spec, "evaluator"), -1);
  char name[64];
  ck_assert_str_eq(floe__cluster_task_name(spec, spec->self, name, sizeof name),
                   "/job:worker/task:1");
  ck_assert_str_eq(floe__cluster_address(spec, spec->self), "node-3.example:2222");
  ck_assert_ptr_null(floe__cluster_address(spec, (FloeTaskRef){w, 3}));
  ck_assert_ptr_null(floe__cluster_address(spec, (FloeTaskRef){7, 0}));
  floe__cluster_free(spec);

  /* No task: a spec for a client that is none of the tasks. rpc_layer is TF's too. */
  spec = parse_ok("{\"cluster\": {\"worker\": [\"localhost:1\"]}, \"rpc_layer\": \"grpc\"}");
  ck_assert_int_eq(spec->self.job, -1);
  ck_assert_int_eq(spec->num_tasks, 1);
  floe__cluster_free(spec);
  /* The text need not end in NUL: only len bytes are read. */
  const char *t = "{\"cluster\": {\"ps\": [\"1.2.3.4:5\"]}}GARBAGE";
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(floe__cluster_parse(t, strlen(t) - 7, "x", &spec, &st), FLOE_OK);
  floe__cluster_free(spec);
  floe__cluster_free(NULL);
}
END_TEST

START_TEST(test_parse_refusals) {
  parse_bad("{\"cluster\": ", "not valid JSON at line 1", "byte offset");
  parse_bad("[1, 2]", "not a JSON object", NULL);
  parse_bad("{\"task\": {\"type\": \"worker\", \"index\": 0}}", "no \"cluster\"", NULL);
  parse_bad("{\"cluster\": {}}", "cluster has no jobs", NULL);
  parse_bad("{\"cluster\": []}", "cluster is not an object", NULL);
  parse_bad("{\"cluster\": {\"worker\": [\"a:1\"]}, \"extra\": 1}",
            "\"extra\" is not a field of a cluster spec", NULL);
  parse_bad("{\"cluster\": {\"worker\": [\"a:1\"]}, \"environment\": 1}",
            "environment is not a string", NULL);
  parse_bad("{\"cluster\": {\"worker\": [\"a:1\"], \"worker\": [\"b:1\"]}}", "duplicate", NULL);
  /* Job names. */
  parse_bad("{\"cluster\": {\"Worker\": [\"a:1\"]}}", "cluster.\"Worker\"",
            "starts with a lower-case letter");
  parse_bad("{\"cluster\": {\"w-1\": [\"a:1\"]}}", "cluster.\"w-1\"",
            "only lower-case letters, digits and '_'");
  parse_bad("{\"cluster\": {\"\": [\"a:1\"]}}", "a job name is empty", NULL);
  parse_bad("{\"cluster\": {\"a234567890123456789012345678901234567890123456789012345678901234\": "
            "[\"a:1\"]}}",
            "at most 63", NULL);
  /* Job values. */
  parse_bad("{\"cluster\": {\"worker\": {\"0\": \"a:1\"}}}", "sparse task maps", NULL);
  parse_bad("{\"cluster\": {\"worker\": \"a:1\"}}", "cluster.worker is not a list", NULL);
  parse_bad("{\"cluster\": {\"worker\": []}}", "cluster.worker is empty", NULL);
  parse_bad("{\"cluster\": {\"worker\": [1]}}", "cluster.worker[0] is not a string", NULL);
  parse_bad("{\"cluster\": {\"worker\": [\"a:1\", \"a\\u0000b:2\"]}}", "", NULL);
  /* Addresses: every error names the field and the address. */
  static const struct {
    const char *addr, *why;
  } bad[] = {
      {"10.0.0.1", "has no port"},
      {"10.0.0.1:", "is not a number from 1 to 65535"},
      {"10.0.0.1:0", "is not a number from 1 to 65535"},
      {"10.0.0.1:65536", "is not a number from 1 to 65535"},
      {"10.0.0.1:080", "is not a number"},
      {"10.0.0.1:+80", "is not a number"},
      {"10.0.0.1:8x", "is not a number"},
      {":80", "no host before the ':'"},
      {"1.2.3:80", "is not an IPv4 address"},
      {"256.1.1.1:80", "is not an IPv4 address"},
      {"01.2.3.4:80", "is not an IPv4 address"},
      {"::1:80", "an IPv6 address goes in brackets"},
      {"[::1]80", "no :port after the ']'"},
      {"[::1:80", "opens '[' without ']'"},
      {"[zz::1]:80", "not an IPv6 address"},
      {"[]:80", "not an IPv6 address"},
      {"[1.2.3.4]:80", "not an IPv6 address"},
      {"host_name:80", "only letters, digits, '-' and '.'"},
      {"-host:80", "starts with '-'"},
      {"host-:80", "ends with '-'"},
      {"a..b:80", "empty label"},
      {"a.b.:80", "empty label"},
      {"h\xc3\xa9te:80", "only letters, digits, '-' and '.'"},
  };
  for (size_t i = 0; i < FLOE__ARRAY_LEN(bad); i++) {
    char json[256];
    snprintf(json, sizeof json, "{\"cluster\": {\"chief\": [\"9.9.9.9:9\"], \"ps\": [\"%s\"]}}",
             bad[i].addr);
    parse_bad(json, "cluster.ps[0]", bad[i].why);
  }
  {
    char label[80], json[400];
    memset(label, 'a', 64);
    label[64] = '\0';
    snprintf(json, sizeof json, "{\"cluster\": {\"ps\": [\"%s.b:1\"]}}", label);
    parse_bad(json, "cluster.ps[0]", "label is at most 63");
    char host[300] = "";
    for (int i = 0; i < 64; i++) strcat(host, "abc.");
    strcat(host, "d");
    snprintf(json, sizeof json, "{\"cluster\": {\"ps\": [\"%s:1\"]}}", host);
    parse_bad(json, "cluster.ps[0]", "at most 253 characters");
  }
  /* Duplicates, whatever the case of the host. */
  parse_bad("{\"cluster\": {\"chief\": [\"Node-1:80\"], \"worker\": [\"a:1\", \"node-1:80\"]}}",
            "cluster.chief[0] and cluster.worker[1] have the same address", "own host:port");
  parse_bad("{\"cluster\": {\"worker\": [\"[::1]:5\", \"[::1]:5\"]}}",
            "cluster.worker[0] and cluster.worker[1]", NULL);
  /* The task. */
  parse_bad("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}}",
            "job \"ps\" is not in the cluster", "its jobs: worker");
  parse_bad("{\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, \"task\": {\"type\": \"worker\", "
            "\"index\": 2}}",
            "task 2 is out of range", "job worker has 2 tasks (0..1)");
  parse_bad("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"worker\", "
            "\"index\": -1}}",
            "out of range", NULL);
  parse_bad("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"worker\", "
            "\"index\": 0.0}}",
            "task.index is not an integer", NULL);
  parse_bad("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"worker\"}}",
            "task.index is missing", NULL);
  parse_bad("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"index\": 0}}",
            "task.type is missing", NULL);
  parse_bad("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"worker\", "
            "\"index\": 0, \"trial\": 1}}",
            "task.\"trial\" is not a field of a task", NULL);
  parse_bad("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": 3}", "task is not an object", NULL);
  /* Not UTF-8: the offset of the first bad byte. */
  const char latin1[] = "{\"cluster\": {\"worker\": [\"caf\xe9:1\"]}}";
  parse_bad_len(latin1, sizeof latin1 - 1, FLOE_INVALID_ARGUMENT, "not UTF-8 at byte offset 28",
                NULL);
  /* Too large, before anything is parsed. */
  size_t big = FLOE__CLUSTER_MAX_BYTES + 1;
  char *huge = malloc(big);
  memset(huge, ' ', big);
  parse_bad_len(huge, big, FLOE_RESOURCE_EXHAUSTED, "more than the 1048576", NULL);
  free(huge);
}
END_TEST

START_TEST(test_task_limit) {
  /* 4096 tasks pass; one more is refused. */
  size_t cap = 64 * 4200;
  char *json = malloc(cap);
  for (int total = 4096; total <= 4097; total++) {
    size_t n = (size_t)snprintf(json, cap, "{\"cluster\": {\"worker\": [");
    for (int i = 0; i < total - 1; i++)
      n += (size_t)snprintf(json + n, cap - n, "%s\"10.%d.%d.1:80\"", i ? ", " : "", i / 256,
                            i % 256);
    n += (size_t)snprintf(json + n, cap - n, "], \"ps\": [\"ps:1\"]}}");
    FloeStatus st = {FLOE_OK, NULL};
    FloeClusterSpec *spec = NULL;
    floe_code rc = floe__cluster_parse(json, n, "big", &spec, &st);
    if (total == 4096) {
      ck_assert_msg(rc == FLOE_OK, "%s", floe_status_message(&st));
      ck_assert_int_eq(spec->num_tasks, 4096);
    } else {
      ck_assert_int_eq(rc, FLOE_RESOURCE_EXHAUSTED);
      ck_assert_msg(strstr(floe_status_message(&st), "more than 4096 tasks"), "%s",
                    floe_status_message(&st));
    }
    floe__cluster_free(spec);
    floe_status_clear(&st);
  }
  free(json);
}
END_TEST

START_TEST(test_env) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeClusterSpec *spec = NULL;
  unsetenv("FLOE_CONFIG");
  unsetenv("TF_CONFIG");
  ck_assert_int_eq(floe__cluster_from_env(&spec, &st), FLOE_NOT_FOUND);
  ck_assert_msg(strstr(floe_status_message(&st), "neither FLOE_CONFIG nor TF_CONFIG is set"),
                "%s", floe_status_message(&st));
  floe_status_clear(&st);
  setenv("TF_CONFIG", "{\"cluster\": {\"worker\": [\"tf:1\"]}, \"task\": {\"type\": "
                      "\"worker\", \"index\": 0}}", 1);
  ck_assert_int_eq(floe__cluster_from_env(&spec, &st), FLOE_OK);
  ck_assert_str_eq(spec->source, "TF_CONFIG");
  floe__cluster_free(spec);
  /* FLOE_CONFIG wins; an empty one counts as unset. */
  setenv("FLOE_CONFIG", "", 1);
  ck_assert_int_eq(floe__cluster_from_env(&spec, &st), FLOE_OK);
  ck_assert_str_eq(spec->source, "TF_CONFIG");
  floe__cluster_free(spec);
  setenv("FLOE_CONFIG", "{\"cluster\": {\"chief\": [\"floe:1\"]}}", 1);
  ck_assert_int_eq(floe__cluster_from_env(&spec, &st), FLOE_OK);
  ck_assert_str_eq(spec->source, "FLOE_CONFIG");
  ck_assert_str_eq(spec->jobs[0].tasks[0].address, "floe:1");
  floe__cluster_free(spec);
  /* Errors name the variable. */
  setenv("FLOE_CONFIG", "{\"cluster\": {\"chief\": [\"floe\"]}}", 1);
  ck_assert_int_eq(floe__cluster_from_env(&spec, &st), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_status_message(&st), "FLOE_CONFIG: cluster.chief[0]: \"floe\" has "
                                                 "no port"),
                "%s", floe_status_message(&st));
  floe_status_clear(&st);
  unsetenv("FLOE_CONFIG");
  unsetenv("TF_CONFIG");
}
END_TEST

static char tmpdir[64];
static void make_tmpdir(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/floe-cluster-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}
static void remove_tmpdir(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  ck_assert_int_eq(system(cmd), 0);
}
static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

START_TEST(test_file) {
  make_tmpdir();
  char path[128];
  FloeStatus st = {FLOE_OK, NULL};
  FloeClusterSpec *spec = NULL;
  /* The cluster object alone, the task given separately. */
  snprintf(path, sizeof path, "%s/cluster.json", tmpdir);
  write_file(path, "{\"chief\": [\"127.0.0.1:7000\"], \"worker\": [\"127.0.0.1:7001\", "
                   "\"127.0.0.1:7002\"]}\n");
  ck_assert_int_eq(floe__cluster_from_file(path, "worker", 1, &spec, &st), FLOE_OK);
  ck_assert_str_eq(spec->source, path);
  ck_assert_str_eq(floe__cluster_address(spec, spec->self), "127.0.0.1:7002");
  floe__cluster_free(spec);
  ck_assert_int_eq(floe__cluster_from_file(path, NULL, -1, &spec, &st), FLOE_OK);
  ck_assert_int_eq(spec->self.job, -1);
  floe__cluster_free(spec);
  ck_assert_int_eq(floe__cluster_from_file(path, "worker", 2, &spec, &st), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_status_message(&st), "the task given (/job:worker/task:2): task 2 is "
                                                 "out of range"),
                "%s", floe_status_message(&st));
  ck_assert_msg(strncmp(floe_status_message(&st), path, strlen(path)) == 0, "%s",
                floe_status_message(&st));
  floe_status_clear(&st);
  ck_assert_int_eq(floe__cluster_from_file(path, "ps", 0, &spec, &st), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_status_message(&st), "job \"ps\" is not in the cluster (its jobs: "
                                                 "chief, worker)"),
                "%s", floe_status_message(&st));
  floe_status_clear(&st);
  /* TF_CONFIG's form: the task given wins over the file's. */
  write_file(path, "{\"cluster\": {\"chief\": [\"127.0.0.1:7000\"], \"worker\": "
                   "[\"127.0.0.1:7001\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}");
  ck_assert_int_eq(floe__cluster_from_file(path, "chief", 0, &spec, &st), FLOE_OK);
  ck_assert_str_eq(spec->jobs[spec->self.job].name, "chief");
  floe__cluster_free(spec);
  ck_assert_int_eq(floe__cluster_from_file(path, NULL, -1, &spec, &st), FLOE_OK);
  ck_assert_str_eq(spec->jobs[spec->self.job].name, "worker");
  floe__cluster_free(spec);
  /* A file too large is refused before it is read. */
  snprintf(path, sizeof path, "%s/huge.json", tmpdir);
  int fd = open(path, O_CREAT | O_WRONLY, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, 1 << 30), 0);
  close(fd);
  ck_assert_int_eq(floe__cluster_from_file(path, NULL, -1, &spec, &st), FLOE_RESOURCE_EXHAUSTED);
  ck_assert_msg(strstr(floe_status_message(&st), "1073741824 bytes, more than the 1048576"), "%s",
                floe_status_message(&st));
  floe_status_clear(&st);
  /* Not a regular file; missing. */
  snprintf(path, sizeof path, "%s/fifo", tmpdir);
  ck_assert_int_eq(mkfifo(path, 0600), 0);
  ck_assert_int_eq(floe__cluster_from_file(path, NULL, -1, &spec, &st), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_status_message(&st), "a FIFO"), "%s", floe_status_message(&st));
  floe_status_clear(&st);
  snprintf(path, sizeof path, "%s/none.json", tmpdir);
  ck_assert_int_eq(floe__cluster_from_file(path, NULL, -1, &spec, &st), FLOE_NOT_FOUND);
  ck_assert_msg(strstr(floe_status_message(&st), path), "%s", floe_status_message(&st));
  floe_status_clear(&st);
  /* Errors in a file name it. */
  snprintf(path, sizeof path, "%s/bad.json", tmpdir);
  write_file(path, "{\"worker\": [\"127.0.0.1:7001\"],\n \"ps\": [\"127.0.0.1:70001\"]}");
  ck_assert_int_eq(floe__cluster_from_file(path, NULL, -1, &spec, &st), FLOE_INVALID_ARGUMENT);
  char want[200];
  snprintf(want, sizeof want, "%s: cluster.ps[0]: \"127.0.0.1:70001\": the port", path);
  ck_assert_msg(strstr(floe_status_message(&st), want), "%s", floe_status_message(&st));
  floe_status_clear(&st);
  remove_tmpdir();
}
END_TEST

START_TEST(test_lookup) {
  FloeClusterSpec *spec = parse_ok(k_spec);
  FloeStatus st = {FLOE_OK, NULL};
  FloeTaskRef r;
  char name[64];
  ck_assert_int_eq(floe__cluster_lookup(spec, "/job:worker/task:2", &r, &st), FLOE_OK);
  ck_assert_str_eq(floe__cluster_address(spec, r), "[::1]:2223");
  ck_assert_int_eq(floe__cluster_lookup(spec, "/job:ps/replica:0/task:0/device:CPU:0", &r, &st),
                   FLOE_OK);
  ck_assert_str_eq(floe__cluster_task_name(spec, r, name, sizeof name), "/job:ps/task:0");
  /* A job of one task needs no task index; a job of several does. */
  ck_assert_int_eq(floe__cluster_lookup(spec, "/job:chief", &r, &st), FLOE_OK);
  ck_assert_str_eq(floe__cluster_address(spec, r), "10.0.0.1:2222");
  static const struct {
    const char *name;
    floe_code code;
    const char *frag;
  } bad[] = {
      {"/job:worker", FLOE_INVALID_ARGUMENT, "names no task and the job has 3"},
      {"/job:worker/task:3", FLOE_NOT_FOUND, "job worker has 3 tasks (0..2)"},
      {"/job:evaluator/task:0", FLOE_NOT_FOUND, "not a job of TF_CONFIG (its jobs: chief, worker, ps)"},
      {"/job:worker/replica:1/task:0", FLOE_INVALID_ARGUMENT, "replica 0 only"},
      {"/task:1", FLOE_INVALID_ARGUMENT, "names no job"},
      {"cpu:0", FLOE_INVALID_ARGUMENT, "names no job"},
      {"/job:worker/task:x", FLOE_INVALID_ARGUMENT, "task is not a number"},
  };
  for (size_t i = 0; i < FLOE__ARRAY_LEN(bad); i++) {
    floe_code rc = floe__cluster_lookup(spec, bad[i].name, &r, &st);
    ck_assert_msg(rc == bad[i].code, "%s: %d (%s)", bad[i].name, rc, floe_status_message(&st));
    ck_assert_msg(strstr(floe_status_message(&st), bad[i].frag), "%s: %s", bad[i].name,
                  floe_status_message(&st));
    ck_assert_int_eq(r.job, -1);
    floe_status_clear(&st);
  }
  /* Device names: no job, or /job:localhost, is this task. */
  static const char *const local[] = {"cpu:0", "/device:CPU:1", "/job:localhost/replica:0/task:0/device:CPU:0"};
  for (size_t i = 0; i < FLOE__ARRAY_LEN(local); i++) {
    FloeDeviceName dn;
    ck_assert_int_eq(floe_device_name_parse(local[i], &dn, &st), FLOE_OK);
    ck_assert_int_eq(floe__cluster_task_of_device(spec, &dn, &r, &st), FLOE_OK);
    ck_assert_int_eq(r.job, spec->self.job);
    ck_assert_int_eq(r.task, spec->self.task);
  }
  FloeDeviceName dn;
  ck_assert_int_eq(floe_device_name_parse("/job:worker/replica:0/task:0/device:GPU:1", &dn, &st),
                   FLOE_OK);
  ck_assert_int_eq(floe__cluster_task_of_device(spec, &dn, &r, &st), FLOE_OK);
  ck_assert_str_eq(floe__cluster_address(spec, r), "10.0.0.2:2222");
  floe__cluster_free(spec);
  /* A spec without a task cannot say which task "cpu:0" is. */
  spec = parse_ok("{\"cluster\": {\"worker\": [\"a:1\"]}}");
  ck_assert_int_eq(floe_device_name_parse("cpu:0", &dn, &st), FLOE_OK);
  ck_assert_int_eq(floe__cluster_task_of_device(spec, &dn, &r, &st), FLOE_FAILED_PRECONDITION);
  ck_assert_msg(strstr(floe_status_message(&st), "names no task for this process"), "%s",
                floe_status_message(&st));
  floe_status_clear(&st);
  floe__cluster_free(spec);
}
END_TEST

START_TEST(test_from_addresses) {
  const char *addrs[] = {"127.0.0.1:7000", "127.0.0.1:7001", "[::1]:7002"};
  FloeStatus st = {FLOE_OK, NULL};
  FloeClusterSpec *spec = NULL;
  ck_assert_int_eq(floe__cluster_from_addresses(addrs, 3, 2, 0, "PMIx", &spec, &st), FLOE_OK);
  char name[64];
  ck_assert_int_eq(spec->num_jobs, 2);
  ck_assert_str_eq(spec->jobs[0].name, "chief");
  ck_assert_str_eq(spec->jobs[1].name, "worker");
  ck_assert_str_eq(floe__cluster_task_name(spec, spec->self, name, sizeof name),
                   "/job:worker/task:1");
  ck_assert_str_eq(floe__cluster_address(spec, spec->self), "[::1]:7002");
  floe__cluster_free(spec);
  ck_assert_int_eq(floe__cluster_from_addresses(addrs, 1, 0, 0, "PMIx", &spec, &st), FLOE_OK);
  ck_assert_int_eq(spec->num_jobs, 1);
  floe__cluster_free(spec);
  const char *dup[] = {"127.0.0.1:7000", "127.0.0.1:7000"};
  ck_assert_int_eq(floe__cluster_from_addresses(dup, 2, 0, 0, "PMIx", &spec, &st),
                   FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_status_message(&st), "same address 127.0.0.1:7000"), "%s",
                floe_status_message(&st));
  floe_status_clear(&st);
  const char *bad[] = {"127.0.0.1:7000", "nowhere"};
  ck_assert_int_eq(floe__cluster_from_addresses(bad, 2, 0, 0, "PMIx", &spec, &st),
                   FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_status_message(&st), "PMIx: rank 1: \"nowhere\" has no port"), "%s",
                floe_status_message(&st));
  floe_status_clear(&st);
  ck_assert_int_eq(floe__cluster_from_addresses(addrs, 3, 3, 0, "PMIx", &spec, &st),
                   FLOE_INVALID_ARGUMENT);
  floe_status_clear(&st);
  /* ranks 1..num_ps are the ps tasks, the rest workers */
  const char *four[] = {"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"};
  const char *want[] = {"/job:chief/task:0", "/job:ps/task:0", "/job:worker/task:0",
                        "/job:worker/task:1"};
  for (int r = 0; r < 4; r++) {
    ck_assert_int_eq(floe__cluster_from_addresses(four, 4, r, 1, "PMIx", &spec, &st), FLOE_OK);
    ck_assert_str_eq(floe__cluster_task_name(spec, spec->self, name, sizeof name), want[r]);
    ck_assert_str_eq(floe__cluster_address(spec, spec->self), four[r]);
    floe__cluster_free(spec);
  }
  ck_assert_int_eq(floe__cluster_from_addresses(four, 4, 3, 3, "PMIx", &spec, &st), FLOE_OK);
  ck_assert_str_eq(floe__cluster_task_name(spec, spec->self, name, sizeof name), "/job:ps/task:2");
  ck_assert_int_eq(spec->num_jobs, 2);
  floe__cluster_free(spec);
  ck_assert_int_eq(floe__cluster_from_addresses(four, 4, 0, 4, "PMIx", &spec, &st),
                   FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_status_message(&st), "at most 3 can be ps tasks"), "%s",
                floe_status_message(&st));
  floe_status_clear(&st);
}
END_TEST

START_TEST(test_hostport) {
  char host[FLOE__HOST_MAX + 1];
  int port;
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(floe__hostport_parse("0.0.0.0:0", true, "listen", host, &port, &st), FLOE_OK);
  ck_assert_str_eq(host, "0.0.0.0");
  ck_assert_int_eq(port, 0);
  ck_assert_int_eq(floe__hostport_parse("0.0.0.0:0", false, "listen", host, &port, &st),
                   FLOE_INVALID_ARGUMENT);
  ck_assert_str_eq(floe_status_message(&st), "listen: \"0.0.0.0:0\": the port \"0\" is not a "
                                             "number from 1 to 65535");
  floe_status_clear(&st);
  ck_assert_int_eq(floe__hostport_parse("[fe80::1]:65535", false, "x", host, &port, &st), FLOE_OK);
  ck_assert_str_eq(host, "fe80::1");
  ck_assert_int_eq(port, 65535);
  ck_assert_int_eq(floe__hostport_parse("", false, "x", host, &port, &st), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_status_message(&st), "the address is empty"), "%s",
                floe_status_message(&st));
  floe_status_clear(&st);
}
END_TEST

/* Outside a launcher the PMIx path is not taken; a missing library is named. */
START_TEST(test_pmix_refusals) {
  const char *rank = getenv("PMIX_RANK");
  if (!rank) ck_assert(!floe__pmix_detect());
  setenv("PMIX_RANK", "0", 1);
  setenv("PMIX_NAMESPACE", "test-ns", 1);
  ck_assert(floe__pmix_detect());
  FloePmix *p = NULL;
  int r, n;
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = floe__pmix_open("libfloe-no-such-pmix.so.2", &p, &r, &n, &st);
  ck_assert_ptr_null(p);
#ifdef FLOE_HAVE_PMIX_H
  ck_assert_int_eq(rc, FLOE_UNAVAILABLE);
  ck_assert_msg(strstr(floe_status_message(&st), "libfloe-no-such-pmix.so.2 cannot be loaded"),
                "%s", floe_status_message(&st));
  /* A library that is not PMIx: its missing function is named. */
  floe_status_clear(&st);
  rc = floe__pmix_open("libz.so.1", &p, &r, &n, &st);
  ck_assert_int_eq(rc, FLOE_UNAVAILABLE);
  ck_assert_msg(strstr(floe_status_message(&st), "libz.so.1 has no PMIx_Init"), "%s",
                floe_status_message(&st));
#else
  ck_assert_int_eq(rc, FLOE_UNIMPLEMENTED);
  ck_assert_msg(strstr(floe_status_message(&st), "built without PMIx"), "%s",
                floe_status_message(&st));
#endif
  floe_status_clear(&st);
  unsetenv("PMIX_RANK");
  unsetenv("PMIX_NAMESPACE");
  ck_assert(!floe__pmix_detect());
  /* A bad address is refused before PMIx is touched. */
  FloeClusterSpec *spec = NULL;
  ck_assert_int_eq(floe__cluster_from_pmix("localhost", &spec, &st), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_status_message(&st), "this task's address"), "%s",
                floe_status_message(&st));
  floe_status_clear(&st);
}
END_TEST

/* The host a rank binds under a launcher: FLOE_SERVER_HOST (an interface or an address),
 * else 127.0.0.1 when every rank is on this node. */
START_TEST(test_pmix_host) {
  char host[FLOE__HOST_MAX + 1];
  FloeStatus st = {FLOE_OK, NULL};
  char *saved = getenv("FLOE_SERVER_HOST") ? strdup(getenv("FLOE_SERVER_HOST")) : NULL;
  unsetenv("FLOE_SERVER_HOST");
  ck_assert_int_eq(floe__pmix_host(true, host, &st), FLOE_OK);
  ck_assert_str_eq(host, "127.0.0.1");
  setenv("FLOE_SERVER_HOST", "lo", 1); /* an interface: its IPv4 address */
  ck_assert_int_eq(floe__pmix_host(false, host, &st), FLOE_OK);
  ck_assert_str_eq(host, "127.0.0.1");
  setenv("FLOE_SERVER_HOST", "10.1.2.3", 1); /* not an interface: as is, on one node too */
  ck_assert_int_eq(floe__pmix_host(true, host, &st), FLOE_OK);
  ck_assert_str_eq(host, "10.1.2.3");
  setenv("FLOE_SERVER_HOST", "[fd00::3]", 1);
  ck_assert_int_eq(floe__pmix_host(false, host, &st), FLOE_OK);
  ck_assert_str_eq(host, "fd00::3");
  setenv("FLOE_SERVER_HOST", "0.0.0.0", 1);
  ck_assert_int_eq(floe__pmix_host(true, host, &st), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_status_message(&st), "not the wildcard"), "%s",
                floe_status_message(&st));
  floe_status_clear(&st);
  /* Several nodes and no setting: the host name's address, never a loopback one. */
  unsetenv("FLOE_SERVER_HOST");
  floe_code rc = floe__pmix_host(false, host, &st);
  if (rc == FLOE_OK) {
    ck_assert(strncmp(host, "127.", 4) != 0 && strcmp(host, "::1") != 0);
  } else {
    ck_assert_msg(strstr(floe_status_message(&st), "FLOE_SERVER_HOST"), "%s",
                  floe_status_message(&st));
    floe_status_clear(&st);
  }
  if (saved) setenv("FLOE_SERVER_HOST", saved, 1);
  free(saved);
}
END_TEST

/* Every allocation failure ends in NO_MEMORY with a message, never a crash or a leak. */
START_TEST(test_alloc_fail) {
  for (long n = 1;; n++) {
    FloeStatus st = {FLOE_OK, NULL};
    FloeClusterSpec *spec = NULL;
    floe_test_fail_alloc_after(n);
    floe_code rc = floe__cluster_parse(k_spec, strlen(k_spec), "TF_CONFIG", &spec, &st);
    floe_test_fail_alloc_after(0);
    if (rc == FLOE_OK) {
      ck_assert_int_eq(spec->num_tasks, 5);
      floe__cluster_free(spec);
      ck_assert_int_gt(n, 5);
      break;
    }
    ck_assert_int_eq(rc, FLOE_NO_MEMORY);
    ck_assert_ptr_null(spec);
    ck_assert_msg(*floe_status_message(&st), "no message at n=%ld", n);
    floe_status_clear(&st);
    ck_assert_int_lt(n, 1000);
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("cluster");
  TCase *tc = tcase_create("cluster");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_parse_valid);
  tcase_add_test(tc, test_parse_refusals);
  tcase_add_test(tc, test_task_limit);
  tcase_add_test(tc, test_env);
  tcase_add_test(tc, test_file);
  tcase_add_test(tc, test_lookup);
  tcase_add_test(tc, test_from_addresses);
  tcase_add_test(tc, test_hostport);
  tcase_add_test(tc, test_pmix_refusals);
  tcase_add_test(tc, test_pmix_host);
  tcase_add_test(tc, test_alloc_fail);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
