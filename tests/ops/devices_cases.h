/* SPDX-License-Identifier: Apache-2.0 */
/* devices_cases.h - the case table of test_devices (every kernel of every loaded device
 * against the CPU reference). A case is one op with its inputs (random values in a range, or
 * given values for indices, shapes and axes), its attributes, and how to compare. The table
 * and the derive functions live in devices_cases.c; the runner in test_devices.c. */
#ifndef FLOE_TEST_DEVICES_CASES_H
#define FLOE_TEST_DEVICES_CASES_H

#include <floe/floe.h>

#define XMAX_IN 10    /* inputs of a case */
#define XMAX_ATTRS 8  /* attributes of a case */
#define XMAX_LIST 8   /* entries of an int-list attribute, dims of a shape */

/* An attribute of the node under test. kind: 'i' int (num), 'f' float (num), 'b' bool (num),
 * 's' string (str), 't' type (dt), 'l' int list (list[0..n)), 'T' a tensor of dtype dt and
 * shape list[0..n) with uniform values in [-1, 1) drawn from seed num. */
typedef struct XAttr {
  const char *name;
  char kind;
  double num;
  const char *str;
  FloeDType dt;
  int n;
  int64_t list[XMAX_LIST];
} XAttr;

/* An input. kind: 'r' uniform random in [lo, hi) (integers: floor), 'v' the given values
 * (rank 0 or the product of dims of them), 'x' a resource variable initialised with random
 * values in [lo, hi) whose value after the op is an output of the case, 'd' made by the
 * case's derive function (dt and dims say what it makes). 0 ends the list. */
typedef struct XIn {
  char kind;
  FloeDType dt;
  int rank;
  int64_t dims[XMAX_LIST];
  double lo, hi;
  const double *values;
} XIn;

enum {
  /* A matrix-class op: on a device whose matrix unit rounds its operands (bf16, TF32; see
   * reduced_matrix in test_devices.c) its float outputs get that unit's threshold. */
  XF_MATRIX = 1u << 0,
  /* The CPU plugin registers the op only on some machines (the blocked layout's converters
   * need AVX-512): where the reference has no kernel for it the case is skipped. */
  XF_IF_REF_KERNEL = 1u << 1,
};

/* How a case is checked: by normalised error against the CPU (XS_NONE), or, for random ops,
 * by the distance of each device's samples from the distribution (Kolmogorov-Smirnov),
 * since a device need not draw the same stream. */
typedef enum XStat {
  XS_NONE = 0,
  XS_UNIFORM,      /* output 0 ~ U[0, 1) */
  XS_NORMAL,       /* output 0 ~ N(0, 1) */
  XS_TRUNCATED,    /* output 0 ~ N(0, 1) truncated to [-2, 2] */
  XS_LOG_UNIFORM,  /* LogUniformCandidateSampler: ids ~ log((k+2)/(k+1)) / log(range_max+1) */
} XStat;

struct FloeRuntime;
typedef struct XCase XCase;
/* Replaces the 'd' inputs of ins (host tensors the caller owns and releases) with values
 * consistent with the others, computing them with ops on the reference device of rt where
 * it needs them. Fails the test (ck_abort) when it cannot. */
typedef void (*XDeriveFn)(const XCase *c, FloeTensor **ins, FloeRuntime *rt);

struct XCase {
  const char *op;
  const char *label;       /* the shapes and attributes, for messages */
  XIn in[XMAX_IN];
  int lists[4];            /* consecutive inputs grouped into list arguments; {0}: one each */
  XAttr attrs[XMAX_ATTRS]; /* ends at the first NULL name */
  unsigned flags;          /* XF_* */
  XStat stat;
  XDeriveFn derive;        /* NULL unless some input is 'd' */
};

extern const XCase xcases[];
extern const int xnum_cases;

/* Ops no case covers, with the reason; a device kernel for one of them is listed, not
 * failed. Everything else a device has a kernel for must be covered by a case. */
typedef struct XExcluded {
  const char *op;
  const char *reason;
} XExcluded;
extern const XExcluded xexcluded[];
extern const int xnum_excluded;

/* For derive functions (test_devices.c): runs op on the reference device "cpu:0" of rt with
 * inputs ins[0..n_in) (host tensors, borrowed), one per argument, and the attributes of
 * attrs (ending at a NULL name, may be NULL); returns a host copy of output `index` (caller
 * releases). Fails the test when the op fails. */
FloeTensor *xdev_run_ref(FloeRuntime *rt, const char *op, FloeTensor *const *ins, int n_in,
                         const XAttr *attrs, int index);

#endif
