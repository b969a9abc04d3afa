/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_info.c - floe devices, floe plugins, floe ops. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "table.h"

/* Parses the options shared by the listing commands: --json and --help. */
static int parse_list_opts(int argc, char **argv, const char *cmd, const char *help, int *json) {
  static const struct option opts[] = {
      {"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  int c;
  *json = 0;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":jh", opts, NULL)) != -1) {
    if (c == 'j') *json = 1;
    else if (c == 'h') {
      printf("%s", help);
      return 0;
    } else
      return cli_bad_option(cmd, c, argv, opts);
  }
  if (optind < argc) return cli_usage(cmd, "unexpected argument");
  return -1;
}

int cmd_devices(int argc, char **argv) {
  int json, rc = parse_list_opts(argc, argv, "devices",
                                 "Usage: floe devices [--json]\n"
                                 "List the devices of the loaded plugins: name, type, plugin,\n"
                                 "memory and peak f32 FLOP/s (the figures the placer uses).\n",
                                 &json);
  if (rc >= 0) return rc;
  FloeRuntime *rt = cli_runtime("devices");
  if (!rt) return 1;
  int n = floe_runtime_num_devices(rt);
  JsonWriter w;
  Table *t = json ? NULL : table_new(6, "lllrrl");
  char mem[32], flops[32];
  if (json) {
    json_init(&w, stdout);
    json_begin_array(&w);
  } else {
    if (!t) return cli_error("devices", "out of memory");
    table_row(t, "DEVICE", "TYPE", "PLUGIN", "MEMORY_MB", "PEAK_GFLOPS", "NAME");
  }
  for (int i = 0; i < n; i++) {
    FloeDeviceInfo d;
    if (floe_runtime_device(rt, i, &d) != FLOE_OK) continue;
    if (json) {
      json_begin_object(&w);
      json_key(&w, "name"), json_string(&w, d.name);
      json_key(&w, "short_name"), json_string(&w, d.short_name);
      json_key(&w, "type"), json_string(&w, d.type);
      json_key(&w, "plugin"), json_string(&w, d.plugin);
      json_key(&w, "description"), json_string(&w, d.description);
      json_key(&w, "memory_bytes"), json_uint(&w, d.memory_bytes);
      json_key(&w, "peak_flops_f32"), json_double(&w, d.peak_flops_f32);
      json_key(&w, "memory_bandwidth"), json_double(&w, d.memory_bandwidth);
      json_end_object(&w);
    } else {
      snprintf(mem, sizeof mem, "%llu", (unsigned long long)(d.memory_bytes >> 20));
      snprintf(flops, sizeof flops, "%.1f", d.peak_flops_f32 / 1e9);
      table_row(t, d.short_name, d.type, d.plugin, mem, flops, d.name);
    }
  }
  if (json) {
    json_end_array(&w);
    json_finish(&w);
  } else {
    int lost = table_print(t, stdout);
    table_free(t);
    if (lost) return cli_error("devices", "out of memory");
    if (n == 0) fprintf(stderr, "floe devices: no devices (see 'floe plugins' for why)\n");
  }
  return 0;
}

int cmd_plugins(int argc, char **argv) {
  int json, rc = parse_list_opts(argc, argv, "plugins",
                                 "Usage: floe plugins [--json]\n"
                                 "List every plugin found on FLOE_PLUGIN_PATH (when set) or in\n"
                                 "the folder floe/1 beside libfloe: loaded, unavailable here,\n"
                                 "refused, failed, duplicate or filtered by FLOE_PLUGINS, with\n"
                                 "the reason. Warns (stderr;\n"
                                 "\"warnings\" in --json, beside \"plugins\") about names in\n"
                                 "FLOE_PLUGINS that match no plugin, FLOE_PLUGIN_PATH folders\n"
                                 "that do not exist, shared objects there not named\n"
                                 "floe-NAME.so, and floe-NAME.so files that fail to load.\n",
                                 &json);
  if (rc >= 0) return rc;
  FloeRuntime *rt = cli_runtime("plugins");
  if (!rt) return 1;
  int n = floe_runtime_num_plugins(rt);
  JsonWriter w;
  Table *t = json ? NULL : table_new(7, "lllrrrl");
  char **warn = NULL;
  int nwarn = cli_plugin_warnings(rt, &warn);
  if (nwarn < 0) return cli_error("plugins", "out of memory");
  for (int i = 0; i < nwarn; i++) {
    fputs("floe plugins: warning: ", stderr);
    cli_fputs_escaped(warn[i], stderr); /* paths and plugins' messages */
    fputc('\n', stderr);
  }
  if (json) {
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key(&w, "warnings"), json_begin_array(&w);
    for (int i = 0; i < nwarn; i++) json_string(&w, warn[i]);
    json_end_array(&w);
    json_key(&w, "plugins"), json_begin_array(&w);
  } else {
    if (!t) return cli_error("plugins", "out of memory");
    table_row(t, "PLUGIN", "STATE", "ABI", "DEVICES", "KERNELS", "OPS", "PATH");
  }
  for (int i = 0; i < n; i++) {
    const FloePluginReport *p = floe_runtime_plugin(rt, i);
    if (json) {
      json_begin_object(&w);
      json_key(&w, "name"), json_string(&w, p->name);
      json_key(&w, "path"), json_string(&w, p->path);
      json_key(&w, "version"), json_string(&w, p->version);
      json_key(&w, "state"), json_string(&w, floe_plugin_state_name(p->state));
      json_key(&w, "abi_major"), json_int(&w, p->abi_major);
      json_key(&w, "abi_minor"), json_int(&w, p->abi_minor);
      json_key(&w, "negotiated_minor"), json_int(&w, p->negotiated_minor);
      json_key(&w, "devices"), json_int(&w, p->num_devices);
      json_key(&w, "kernels"), json_int(&w, p->num_kernels);
      json_key(&w, "ops"), json_int(&w, p->num_ops);
      json_key(&w, "transports"), json_int(&w, p->num_transports);
      json_key(&w, "collectives"), json_int(&w, p->num_collectives);
      json_key(&w, "message"), json_string(&w, p->message);
      json_end_object(&w);
    } else {
      char abi[32], dev[16], ker[16], ops[16];
      snprintf(abi, sizeof abi, "%u.%u", p->abi_major, p->abi_minor);
      snprintf(dev, sizeof dev, "%d", p->num_devices);
      snprintf(ker, sizeof ker, "%d", p->num_kernels);
      snprintf(ops, sizeof ops, "%d", p->num_ops);
      table_row(t, p->name, floe_plugin_state_name(p->state), abi, dev, ker, ops, p->path);
    }
  }
  for (int i = 0; i < nwarn; i++) free(warn[i]);
  free(warn);
  if (json) {
    json_end_array(&w);
    json_end_object(&w);
    json_finish(&w);
    return 0;
  }
  int lost = table_print(t, stdout);
  table_free(t);
  if (lost) return cli_error("plugins", "out of memory");
  if (n == 0) fprintf(stderr, "floe plugins: no plugin found (set FLOE_PLUGIN_PATH)\n");
  /* Below the table: what transport plugins bring (no device or kernel) and the reasons. */
  for (int i = 0; i < n; i++) {
    const FloePluginReport *p = floe_runtime_plugin(rt, i);
    if (p->num_transports > 0) {
      cli_fputs_escaped(p->name, stdout);
      printf(": %d transport%s (FLOE_TRANSPORT picks one; default \"local\")\n",
             p->num_transports, p->num_transports == 1 ? "" : "s");
    }
    if (p->num_collectives > 0) {
      cli_fputs_escaped(p->name, stdout);
      printf(": %d collective backend%s (a collective op's communication_hint or "
             "FLOE_COLLECTIVE picks one; default the built-in \"ring\")\n",
             p->num_collectives, p->num_collectives == 1 ? "" : "s");
    }
    if (p->message && *p->message) {
      cli_fputs_escaped(p->name, stdout); /* a file's name until the plugin declared one */
      fputs(": ", stdout);
      cli_fputs_escaped(p->message, stdout);
      fputc('\n', stdout);
    }
  }
  return 0;
}

static const char ops_help[] =
    "Usage: floe ops [--device TYPE|NAME] [--json] [OP]\n"
    "List the defined ops (the standard set and plugins' custom ops), with the number of\n"
    "kernels each has and the device types they run on.\n"
    "  OP                    show one op: its inputs and outputs with their types, its\n"
    "                        attributes (name, type, default), its description, and the\n"
    "                        kernels for it (device type, plugin, dtypes)\n"
    "  --device TYPE|NAME    only the ops with a kernel on that device type (CPU, TPU_SIM)\n"
    "                        or device (cpu:0); kernels of the core ('*') run anywhere\n"
    "  --json                print JSON instead of a table; with OP, each input and\n"
    "                        output is {name, dtype (a fixed one, else null), type_attr,\n"
    "                        type_list_attr, number_attr (a list of N), is_list, spec}\n"
    "                        and each attribute {name, type (int, float, bool, string,\n"
    "                        type, shape, tensor, list(...)), min, allowed (dtypes),\n"
    "                        has_default, default (a JSON value of that type: an\n"
    "                        unknown shape is null, a tensor {dtype, shape}), spec};\n"
    "                        each kernel's dtypes also as constraints [{attr, dtypes}]\n";

/* The device type --device names: a type of a present device ("CPU", "cpu") or a device's
 * name ("cpu:0", "/device:CPU:0"); NULL (message printed) when none matches. */
static const char *device_type_of(FloeRuntime *rt, const char *want) {
  int n = floe_runtime_num_devices(rt);
  for (int i = 0; i < n; i++) {
    FloeDeviceInfo d;
    if (floe_runtime_device(rt, i, &d) != FLOE_OK) continue;
    if (!strcasecmp(want, d.type) || !strcmp(want, d.short_name) || !strcmp(want, d.name))
      return d.type;
  }
  FloeDeviceName dn;
  FloeStatus *st = floe_status_new();
  const char *type = NULL;
  if (st && floe_device_name_parse(want, &dn, st) == FLOE_OK)
    for (int i = 0; i < n && !type; i++) {
      FloeDeviceInfo d;
      if (floe_runtime_device(rt, i, &d) == FLOE_OK && !strcmp(dn.type, d.type)) type = d.type;
    }
  floe_status_free(st);
  if (!type) cli_error("ops", "no device or device type '%s' here (see 'floe devices')", want);
  return type;
}

/* Kernel i's dtypes as "f32,f64" (its first type constraint), or "any". */
static void kernel_dtypes(const FloeRuntime *rt, int i, int ncons, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  for (int j = 0; j < ncons; j++) {
    const char *attr;
    uint32_t mask;
    if (floe_runtime_kernel_constraint(rt, i, j, &attr, &mask) != FLOE_OK) continue;
    len += (size_t)snprintf(buf + len, len < cap ? cap - len : 0, "%s%s=", j ? " " : "", attr);
    for (int dt = 0, first = 1; dt < 32 && len < cap; dt++)
      if (mask & FLOE_DTYPE_BIT(dt)) {
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", first ? "" : ",",
                                floe_dtype_name((FloeDType)dt));
        first = 0;
      }
    if (len >= cap) break;
  }
  if (!buf[0]) snprintf(buf, cap, "any");
}

/* Whether op has a kernel for device type `type` (NULL: any); the device types it has
 * kernels on into types ("CPU,TPU_SIM"). */
static int op_kernels(const FloeRuntime *rt, const char *op, const char *type, char *types,
                      size_t cap) {
  int nk = floe_runtime_num_kernels(rt), match = !type;
  size_t len = 0;
  types[0] = 0;
  for (int i = 0; i < nk; i++) {
    FloeKernelInfo k = {.struct_size = sizeof k};
    if (floe_runtime_kernel(rt, i, &k) != FLOE_OK || strcmp(k.op, op)) continue;
    if (type && (!strcmp(k.device_type, type) || !strcmp(k.device_type, "*"))) match = 1;
    char seen[80];
    snprintf(seen, sizeof seen, ",%s,", k.device_type);
    char have[512];
    snprintf(have, sizeof have, ",%s,", types);
    if (!strstr(have, seen) && len < cap)
      len += (size_t)snprintf(types + len, cap - len, "%s%s", len ? "," : "", k.device_type);
  }
  return match;
}

/* Prints text word-wrapped to the terminal (at most 100 columns, at least 40), each line
 * indented by `indent` spaces; a word longer than a line gets a line of its own. */
static void print_wrapped(const char *raw, int indent) {
  char *text = cli_escape(raw); /* a plugin's op documentation */
  if (!text) return;
  int width = cli_term_columns();
  width = width > 100 ? 100 : width < 40 ? 40 : width;
  long room = width - 1 - indent; /* the last column stays free: some terminals wrap there */
  for (const char *p = text + strspn(text, " "); *p; p += strspn(p, " ")) {
    /* The line: its first word, then each next word while the line still fits. */
    const char *end = p + strcspn(p, " ");
    for (;;) {
      const char *w = end + strspn(end, " "), *we = w + strcspn(w, " ");
      if (we == w || we - p > room) break;
      end = we;
    }
    printf("%*s%.*s\n", indent, "", (int)(end - p), p);
    p = end;
  }
  free(text);
}

/* ---------------------------------------------------------------- floe ops --json OP
 * The public API gives each argument as a spec string (floe_op_arg_spec, the grammar of
 * floe_plugin.h); --json parses them into fields. An attribute: "name: kind [>= min]
 * [in {dtype,...}] [= default]", the default written as the core's graph dumps write values
 * (strings in double quotes, shapes "[?,784]" or "<unknown>", lists of up to 8 elements then
 * ",...", floats with %g). An input or output: "name: [N*]T", T a type attribute, a
 * list(type) attribute or a fixed dtype. */

/* Argument i's whole spec (malloc'd), or NULL. */
static char *op_arg_spec(const char *op, int which, int i) {
  int len = floe_op_arg_spec(op, which, i, NULL, 0);
  if (len < 0) return NULL;
  char *s = malloc((size_t)len + 1);
  if (s) floe_op_arg_spec(op, which, i, s, (size_t)len + 1);
  return s;
}

/* A spec's "name: rest": the name's length; *rest set past ": ". -1 when there is none. */
static int spec_name(const char *spec, const char **rest) {
  const char *c = strstr(spec, ": ");
  if (!c) return -1;
  *rest = c + 2;
  return (int)(c - spec);
}

/* The parsers below read a default's text at *p (advancing it) and write its JSON value to w,
 * or only check it when w is NULL: a value is written once it is known to parse whole.
 * 0 on success, -1 when the text is not of that form. */
typedef int (*ValueParser)(const char **p, JsonWriter *w);

static int parse_number(const char **p, JsonWriter *w, int integer) {
  char *end;
  const char *s = *p;
  if (integer) {
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno) return -1;
    if (w) json_int(w, v);
  } else {
    double v = strtod(s, &end);
    if (end == s) return -1;
    if (w && isfinite(v)) json_double(w, v);
    else if (w) json_string(w, isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"); /* JSON has none */
  }
  *p = end;
  return 0;
}

static int parse_int_value(const char **p, JsonWriter *w) { return parse_number(p, w, 1); }
static int parse_float_value(const char **p, JsonWriter *w) { return parse_number(p, w, 0); }

static int parse_bool_value(const char **p, JsonWriter *w) {
  int v = !strncmp(*p, "true", 4) ? 1 : !strncmp(*p, "false", 5) ? 0 : -1;
  if (v < 0) return -1;
  *p += v ? 4 : 5;
  if (w) json_bool(w, v);
  return 0;
}

/* A dtype name: letters and digits. */
static int parse_type_value(const char **p, JsonWriter *w) {
  char name[32];
  size_t n = 0;
  while (n + 1 < sizeof name && (((*p)[n] >= 'a' && (*p)[n] <= 'z') || ((*p)[n] >= '0' && (*p)[n] <= '9')))
    name[n] = (*p)[n], n++;
  name[n] = 0;
  if (!n || !strcmp(floe_dtype_name(floe_dtype_from_name(name)), "invalid")) return -1;
  *p += n;
  if (w) json_string(w, name);
  return 0;
}

/* "[?,784]" as [null,784]; "<unknown>" (unknown rank) as null. */
static int parse_shape_value(const char **p, JsonWriter *w) {
  if (!strncmp(*p, "<unknown>", 9)) {
    *p += 9;
    if (w) json_null(w);
    return 0;
  }
  const char *s = *p;
  if (*s++ != '[') return -1;
  if (w) json_begin_array(w);
  while (*s != ']') {
    if (*s == '?') {
      s++;
      if (w) json_null(w);
    } else if (parse_number(&s, w, 1)) return -1;
    if (*s == ',') s++;
    else if (*s != ']') return -1;
  }
  if (w) json_end_array(w);
  *p = s + 1;
  return 0;
}

/* A tensor default is written as its dtype and shape ("f32[2,3]"): {"dtype", "shape"}. */
static int parse_tensor_value(const char **p, JsonWriter *w) {
  const char *s = *p;
  if (parse_type_value(&s, NULL) || parse_shape_value(&s, NULL)) return -1;
  if (w) {
    json_begin_object(w);
    json_key(w, "dtype"), parse_type_value(p, w);
    json_key(w, "shape"), parse_shape_value(p, w);
    json_end_object(w);
  } else
    *p = s;
  return 0;
}

/* '"text"': the text between the first and the last quote (the core does not escape). */
static int parse_string_value(const char **p, JsonWriter *w) {
  size_t n = strlen(*p);
  if (n < 2 || (*p)[0] != '"' || (*p)[n - 1] != '"') return -1;
  if (w) {
    char *s = strndup(*p + 1, n - 2);
    json_string(w, s ? s : "");
    free(s);
  }
  *p += n;
  return 0;
}

/* "[a,b,...]" with elements of one parser; *truncated set for the core's ",...]" (a list of
 * more than 8 elements: the first 8 are written). */
static int parse_list_value(const char **p, JsonWriter *w, ValueParser elem, int *truncated) {
  const char *s = *p;
  if (*s++ != '[') return -1;
  if (w) json_begin_array(w);
  *truncated = 0;
  while (*s != ']') {
    if (!strncmp(s, "...]", 4)) {
      *truncated = 1;
      s += 3;
      break;
    }
    if (elem(&s, w)) return -1;
    if (*s == ',') s++;
    else if (*s != ']') return -1;
  }
  if (w) json_end_array(w);
  *p = s + 1;
  return 0;
}

/* The default of an attribute of kind `kind` as JSON; its text as a string when it cannot be
 * read (a form this parser does not know). *truncated: see parse_list_value. */
static void json_attr_default(JsonWriter *w, const char *kind, const char *text, int *truncated) {
  static const struct {
    const char *kind;
    ValueParser parse;
    int list;
  } kinds[] = {{"int", parse_int_value, 0},          {"float", parse_float_value, 0},
               {"bool", parse_bool_value, 0},        {"string", parse_string_value, 0},
               {"type", parse_type_value, 0},        {"shape", parse_shape_value, 0},
               {"tensor", parse_tensor_value, 0},    {"list(int)", parse_int_value, 1},
               {"list(float)", parse_float_value, 1}, {"list(type)", parse_type_value, 1},
               {"list(shape)", parse_shape_value, 1}};
  *truncated = 0;
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    if (strcmp(kind, kinds[k].kind)) continue;
    const char *p = text;
    int r = kinds[k].list ? parse_list_value(&p, NULL, kinds[k].parse, truncated)
                          : kinds[k].parse(&p, NULL);
    if (r || *p) break;
    p = text;
    if (kinds[k].list) parse_list_value(&p, w, kinds[k].parse, truncated);
    else kinds[k].parse(&p, w);
    return;
  }
  json_string(w, text);
}

/* One attribute of op as an object: name, type (its kind), min, allowed dtypes, default. */
static void json_op_attr(JsonWriter *w, const char *spec) {
  const char *rest;
  int nlen = spec_name(spec, &rest);
  json_begin_object(w);
  if (nlen < 0) { /* not the grammar: the spec alone */
    json_key(w, "name"), json_null(w);
    json_key(w, "spec"), json_string(w, spec);
    json_end_object(w);
    return;
  }
  char *name = strndup(spec, (size_t)nlen);
  size_t klen = strcspn(rest, " ");
  char *kind = strndup(rest, klen);
  const char *p = rest + klen;
  json_key(w, "name"), json_string(w, name ? name : "");
  json_key(w, "type"), json_string(w, kind ? kind : "");
  json_key(w, "min");
  if (!strncmp(p, " >= ", 4)) {
    p += 4;
    if (parse_number(&p, w, 1)) json_null(w);
  } else
    json_null(w);
  json_key(w, "allowed");
  if (!strncmp(p, " in {", 5)) {
    p += 5;
    json_begin_array(w);
    while (*p && *p != '}') {
      size_t n = strcspn(p, ",}");
      char *dt = strndup(p, n);
      json_string(w, dt ? dt : "");
      free(dt);
      p += n;
      if (*p == ',') p++;
    }
    json_end_array(w);
    if (*p == '}') p++;
  } else
    json_null(w);
  int has_default = !strncmp(p, " = ", 3), truncated = 0;
  json_key(w, "has_default"), json_bool(w, has_default);
  json_key(w, "default");
  if (has_default) json_attr_default(w, kind ? kind : "", p + 3, &truncated);
  else json_null(w);
  if (truncated) json_key(w, "default_truncated"), json_bool(w, 1);
  json_key(w, "spec"), json_string(w, spec);
  json_end_object(w);
  free(name), free(kind);
}

/* Whether op has an attribute `name` of kind `kind`. */
static int op_has_attr(const char *op, const char *name, const char *kind) {
  int n = floe_op_num_args(op, FLOE_OP_ARG_ATTR), found = 0;
  for (int i = 0; i < n && !found; i++) {
    char *s = op_arg_spec(op, FLOE_OP_ARG_ATTR, i);
    const char *rest;
    int nlen = s ? spec_name(s, &rest) : -1;
    found = nlen >= 0 && (size_t)nlen == strlen(name) && !strncmp(s, name, (size_t)nlen) &&
            !strncmp(rest, kind, strlen(kind)) && (rest[strlen(kind)] == ' ' || !rest[strlen(kind)]);
    free(s);
  }
  return found;
}

/* One input or output as an object: name, its dtype (fixed) or the attribute giving it
 * (type_attr; type_list_attr for a list of mixed dtypes), and number_attr for a list of N. */
static void json_op_io(JsonWriter *w, const char *op, const char *spec) {
  const char *rest;
  int nlen = spec_name(spec, &rest);
  json_begin_object(w);
  if (nlen < 0) {
    json_key(w, "name"), json_null(w);
    json_key(w, "spec"), json_string(w, spec);
    json_end_object(w);
    return;
  }
  char *name = strndup(spec, (size_t)nlen), *number = NULL;
  const char *star = strchr(rest, '*');
  if (star) number = strndup(rest, (size_t)(star - rest)), rest = star + 1;
  int is_type = op_has_attr(op, rest, "type"), is_list = !is_type && op_has_attr(op, rest, "list(type)");
  json_key(w, "name"), json_string(w, name ? name : "");
  json_key(w, "dtype");
  if (!is_type && !is_list) json_string(w, rest);
  else json_null(w);
  json_key(w, "type_attr");
  if (is_type) json_string(w, rest);
  else json_null(w);
  json_key(w, "type_list_attr");
  if (is_list) json_string(w, rest);
  else json_null(w);
  json_key(w, "number_attr");
  if (number) json_string(w, number);
  else json_null(w);
  json_key(w, "is_list"), json_bool(w, number || is_list);
  json_key(w, "spec"), json_string(w, spec);
  json_end_object(w);
  free(name), free(number);
}

static int show_op(FloeRuntime *rt, const char *op, int json) {
  if (!floe_op_exists(op)) {
    int n = floe_op_count();
    const char **names = calloc((size_t)n + 1, sizeof *names);
    const char *near = NULL;
    if (names) {
      for (int i = 0; i < n; i++) names[i] = floe_op_name(i);
      near = cli_closest(op, strlen(op), names, (size_t)n);
      free(names);
    }
    if (near) return cli_error("ops", "no op '%s' (did you mean %s?)", op, near);
    return cli_error("ops", "no op '%s'; 'floe ops' lists them", op);
  }
  static const char *const kinds[] = {"inputs", "outputs", "attributes"};
  char dtypes[512];
  JsonWriter w;
  if (json) {
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key(&w, "op"), json_string(&w, op);
    json_key(&w, "doc"), json_string(&w, floe_op_doc(op));
    json_key(&w, "plugin");
    if (floe_op_plugin(op)) json_string(&w, floe_op_plugin(op));
    else json_null(&w);
  } else {
    cli_fputs_escaped(op, stdout);
    if (floe_op_plugin(op)) {
      fputs(" (defined by plugin ", stdout);
      cli_fputs_escaped(floe_op_plugin(op), stdout);
      fputs(")", stdout);
    }
    printf("\n");
    print_wrapped(floe_op_doc(op), 2);
  }
  for (int which = 0; which < 3; which++) {
    int n = floe_op_num_args(op, which);
    if (json) json_key(&w, kinds[which]), json_begin_array(&w);
    else printf("%s:%s\n", which == 0 ? "Inputs" : which == 1 ? "Outputs" : "Attributes",
                n ? "" : " none");
    for (int i = 0; i < n; i++) {
      char *spec = op_arg_spec(op, which, i);
      if (!spec) {
        if (json) json_null(&w);
        continue;
      }
      if (!json) {
        fputs("  ", stdout);
        cli_fputs_escaped(spec, stdout);
        fputc('\n', stdout);
      }
      else if (which == FLOE_OP_ARG_ATTR) json_op_attr(&w, spec);
      else json_op_io(&w, op, spec);
      free(spec);
    }
    if (json) json_end_array(&w);
  }
  int nk = floe_runtime_num_kernels(rt), count = 0;
  Table *t = json ? NULL : table_new(4, "lllr");
  if (json) json_key(&w, "kernels"), json_begin_array(&w);
  else if (!t) return cli_error("ops", "out of memory");
  else table_row(t, "  DEVICE", "PLUGIN", "DTYPES", "PRIORITY");
  for (int i = 0; i < nk; i++) {
    FloeKernelInfo k = {.struct_size = sizeof k};
    if (floe_runtime_kernel(rt, i, &k) != FLOE_OK || strcmp(k.op, op)) continue;
    kernel_dtypes(rt, i, k.num_constraints, dtypes, sizeof dtypes);
    count++;
    if (json) {
      json_begin_object(&w);
      json_key(&w, "device_type"), json_string(&w, k.device_type);
      json_key(&w, "plugin"), json_string(&w, k.plugin);
      json_key(&w, "dtypes"), json_string(&w, dtypes);
      json_key(&w, "constraints"), json_begin_array(&w);
      for (int j = 0; j < k.num_constraints; j++) {
        const char *attr;
        uint32_t mask;
        if (floe_runtime_kernel_constraint(rt, i, j, &attr, &mask) != FLOE_OK) continue;
        json_begin_object(&w);
        json_key(&w, "attr"), json_string(&w, attr);
        json_key(&w, "dtypes"), json_begin_array(&w);
        for (int dt = 0; dt < 32; dt++)
          if (mask & FLOE_DTYPE_BIT(dt)) json_string(&w, floe_dtype_name((FloeDType)dt));
        json_end_array(&w);
        json_end_object(&w);
      }
      json_end_array(&w);
      json_key(&w, "priority"), json_int(&w, k.priority);
      json_end_object(&w);
    } else {
      char dev[80], prio[16];
      snprintf(dev, sizeof dev, "  %s", k.device_type);
      snprintf(prio, sizeof prio, "%d", (int)k.priority);
      table_row(t, dev, k.plugin, dtypes, prio);
    }
  }
  if (json) {
    json_end_array(&w);
    json_end_object(&w);
    json_finish(&w);
    return 0;
  }
  printf("Kernels:%s\n", count ? "" : " none (no device can run it)");
  int lost = count ? table_print(t, stdout) : 0;
  table_free(t);
  return lost ? cli_error("ops", "out of memory") : 0;
}

int cmd_ops(int argc, char **argv) {
  static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
                                       {"device", required_argument, NULL, 'd'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  int json = 0, c;
  const char *device = NULL;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":jh", opts, NULL)) != -1) {
    if (c == 'j') json = 1;
    else if (c == 'd') device = optarg;
    else if (c == 'h') {
      printf("%s", ops_help);
      return 0;
    } else
      return cli_bad_option("ops", c, argv, opts);
  }
  if (optind < argc - 1) return cli_usage("ops", "expected at most one OP");
  if (optind == argc - 1 && device) return cli_usage("ops", "--device lists ops: drop OP");
  FloeRuntime *rt = cli_runtime("ops");
  if (!rt) return 1;
  if (optind == argc - 1) return show_op(rt, argv[optind], json);
  const char *type = device ? device_type_of(rt, device) : NULL;
  if (device && !type) return 1;
  JsonWriter w;
  Table *t = json ? NULL : table_new(3, "lrl");
  if (json) {
    json_init(&w, stdout);
    json_begin_array(&w);
  } else {
    if (!t) return cli_error("ops", "out of memory");
    table_row(t, "OP", "KERNELS", "DEVICES");
  }
  char types[512], num[16];
  for (int i = 0; i < floe_op_count(); i++) {
    const char *op = floe_op_name(i);
    if (!op_kernels(rt, op, type, types, sizeof types)) continue;
    int k = floe_runtime_num_kernels_for(rt, op, NULL);
    if (json) {
      json_begin_object(&w);
      json_key(&w, "op"), json_string(&w, op);
      json_key(&w, "kernels"), json_int(&w, k);
      json_key(&w, "device_types"), json_string(&w, types);
      json_end_object(&w);
    } else {
      snprintf(num, sizeof num, "%d", k);
      table_row(t, op, num, types[0] ? types : "-");
    }
  }
  if (json) {
    json_end_array(&w);
    json_finish(&w);
    return 0;
  }
  int lost = table_print(t, stdout);
  table_free(t);
  return lost ? cli_error("ops", "out of memory") : 0;
}
