/* SPDX-License-Identifier: Apache-2.0 */
/* test_cuda_registry.c - the CUDA plugin's kernel registrations, checked without a GPU (the
 * plugin's init registers nothing when it finds none): each registration set is run
 * against a registrar that applies the core's rules (the op is defined, a constrained
 * attribute exists and is a type, the mask is not empty, exactly one compute function), and
 * every op of the `floe train --model mlp` and `--model cnn` training and evaluation steps
 * must have a CUDA kernel. Built only with the CUDA toolkit (it links the plugin's code). */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include <floe/floe_plugin.h>

#include "core.h"

/* The plugin's registration sets (plugins/cuda/cuda.h, which needs the CUDA headers). */
floe_code cu_register_elementwise(FloePluginRegistrar *reg);
floe_code cu_register_array(FloePluginRegistrar *reg);
floe_code cu_register_reduce(FloePluginRegistrar *reg);
floe_code cu_register_blas(FloePluginRegistrar *reg);
floe_code cu_register_dnn(FloePluginRegistrar *reg);

enum { MAX_KERNELS = 256 };
static char ops[MAX_KERNELS][64];
static int num_ops;
static char problems[4096];

static void problem(const char *fmt, const char *a, const char *b) {
  size_t at = strlen(problems);
  snprintf(problems + at, sizeof problems - at, fmt, a, b);
}

static floe_code check_kernel(FloePluginRegistrar *reg, const FloeKernelDef *k) {
  (void)reg;
  if (!k->op || strcmp(k->device_type, "CUDA") != 0) {
    problem("a kernel of %s for device %s\n", k->op ? k->op : "(null)", k->device_type);
    return FLOE_INVALID_ARGUMENT;
  }
  const FloeOpInfo *info = floe__op_lookup(k->op);
  if (!info) problem("op %s is not defined%s\n", k->op, "");
  if (!k->compute == !k->compute_async) problem("%s: compute or compute_async, exactly one%s\n", k->op, "");
  for (size_t i = 0; i < k->num_constraints; i++) {
    const FloeTypeConstraint *c = &k->constraints[i];
    if (!c->attr || !c->dtypes) {
      problem("%s: an empty constraint%s\n", k->op, "");
      continue;
    }
    const FloeAttrDef *ad = info ? floe__op_attr(info, c->attr) : NULL;
    if (info && (!ad || (ad->kind != FLOE_ATTR_TYPE && ad->kind != FLOE_ATTR_TYPE_LIST)))
      problem("%s has no type attribute %s\n", k->op, c->attr);
    if (ad && ad->allowed && !(ad->allowed & c->dtypes))
      problem("%s: the mask on %s allows none of the op's dtypes\n", k->op, c->attr);
  }
  if (num_ops < MAX_KERNELS) snprintf(ops[num_ops++], sizeof ops[0], "%s", k->op);
  return FLOE_OK;
}

static int registered(const char *op) {
  for (int i = 0; i < num_ops; i++)
    if (!strcmp(ops[i], op)) return 1;
  return 0;
}

START_TEST(test_registrations) {
  FloePluginRegistrar reg;
  memset(&reg, 0, sizeof reg);
  reg.struct_size = sizeof reg;
  reg.register_kernel = check_kernel;
  floe_code (*const sets[])(FloePluginRegistrar *) = {
      cu_register_elementwise, cu_register_array, cu_register_reduce, cu_register_blas,
      cu_register_dnn};
  for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
    ck_assert_int_eq(sets[i](&reg), FLOE_OK);
  ck_assert_msg(problems[0] == '\0', "%s", problems);
  ck_assert_int_gt(num_ops, 60);
}
END_TEST

START_TEST(test_training_graph_ops) {
  FloePluginRegistrar reg;
  memset(&reg, 0, sizeof reg);
  reg.struct_size = sizeof reg;
  reg.register_kernel = check_kernel;
  num_ops = 0;
  cu_register_elementwise(&reg);
  cu_register_array(&reg);
  cu_register_reduce(&reg);
  cu_register_blas(&reg);
  cu_register_dnn(&reg);
  /* The ops `floe train --profile` lists for mlp and cnn (Adam, cosine schedule), their
   * unfused forms, and the evaluation step's; the variable ops are the core's ("*"), and the
   * random initialisers run once, on the CPU. */
  static const char *const needed[] = {
      "Add", "AssignAddVariableOp", "BiasAdd", "BiasAddGrad", "Cast", "Const", "Cos",
      "ExpandDims", "ExpandReduced", "MatMul", "Mean", "Minimum", "Mul", "NoOp", "OnesLike",
      "Pow", "Relu", "ReluGrad", "ResourceApplyAdam", "Shape",
      "SparseSoftmaxCrossEntropyWithLogits", "Conv2D", "Conv2DBackpropFilter",
      "Conv2DBackpropInput", "MaxPool", "MaxPoolGrad", "Reshape", "ArgMax", "Identity",
      "ResourceApplyGradientDescent", "ResourceApplyMomentum", "SumToShape"};
  for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++)
    ck_assert_msg(registered(needed[i]), "no CUDA kernel for %s", needed[i]);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cuda_registry");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_registrations);
  tcase_add_test(tc, test_training_graph_ops);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
