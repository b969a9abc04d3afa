/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_info.c - floe devices, floe plugins, floe ops. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

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
  if (json) {
    json_init(&w, stdout);
    json_begin_array(&w);
  } else {
    printf("%-8s %-6s %-8s %12s %14s  %s\n", "DEVICE", "TYPE", "PLUGIN", "MEMORY_MB",
           "PEAK_GFLOPS", "NAME");
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
      printf("%-8s %-6s %-8s %12llu %14.1f  %s\n", d.short_name, d.type, d.plugin,
             (unsigned long long)(d.memory_bytes >> 20), d.peak_flops_f32 / 1e9, d.name);
    }
  }
  if (json) {
    json_end_array(&w);
    json_finish(&w);
  } else if (n == 0) {
    fprintf(stderr, "floe devices: no devices (see 'floe plugins' for why)\n");
  }
  return 0;
}

int cmd_plugins(int argc, char **argv) {
  int json, rc = parse_list_opts(argc, argv, "plugins",
                                 "Usage: floe plugins [--json]\n"
                                 "List every plugin found on FLOE_PLUGIN_PATH and the install\n"
                                 "folder: loaded, unavailable here, refused, failed, duplicate\n"
                                 "or filtered by FLOE_PLUGINS, with the reason.\n",
                                 &json);
  if (rc >= 0) return rc;
  FloeRuntime *rt = cli_runtime("plugins");
  if (!rt) return 1;
  int n = floe_runtime_num_plugins(rt);
  JsonWriter w;
  if (json) {
    json_init(&w, stdout);
    json_begin_array(&w);
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
      json_key(&w, "message"), json_string(&w, p->message);
      json_end_object(&w);
    } else {
      printf("%-15s %-11s ABI %u.%u  %3d devices %4d kernels %3d ops  %s\n", p->name,
             floe_plugin_state_name(p->state), p->abi_major, p->abi_minor, p->num_devices,
             p->num_kernels, p->num_ops, p->path);
      /* Transport plugins register no device or kernel: say what they do bring. */
      if (p->num_transports > 0)
        printf("                %d transport%s (FLOE_TRANSPORT picks one; default \"local\")\n",
               p->num_transports, p->num_transports == 1 ? "" : "s");
      if (p->message && *p->message) printf("                %s\n", p->message);
    }
  }
  if (json) {
    json_end_array(&w);
    json_finish(&w);
  } else if (n == 0) {
    fprintf(stderr, "floe plugins: no plugin found (set FLOE_PLUGIN_PATH)\n");
  }
  return 0;
}

int cmd_ops(int argc, char **argv) {
  int json, rc = parse_list_opts(argc, argv, "ops",
                                 "Usage: floe ops [--json]\n"
                                 "List the defined ops (the standard set and plugins' custom\n"
                                 "ops) and how many kernels each has.\n",
                                 &json);
  if (rc >= 0) return rc;
  FloeRuntime *rt = cli_runtime("ops");
  if (!rt) return 1;
  JsonWriter w;
  if (json) {
    json_init(&w, stdout);
    json_begin_array(&w);
  }
  for (int i = 0; i < floe_op_count(); i++) {
    const char *op = floe_op_name(i);
    int k = floe_runtime_num_kernels_for(rt, op, NULL);
    if (json) {
      json_begin_object(&w);
      json_key(&w, "op"), json_string(&w, op);
      json_key(&w, "kernels"), json_int(&w, k);
      json_end_object(&w);
    } else {
      printf("%-40s %d kernel%s\n", op, k, k == 1 ? "" : "s");
    }
  }
  if (json) {
    json_end_array(&w);
    json_finish(&w);
  }
  return 0;
}
