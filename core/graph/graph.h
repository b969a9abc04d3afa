/* SPDX-License-Identifier: Apache-2.0 */
/* graph.h - libfloe's graph layer (core/graph/): the op registry and the standard op set
 * (.def tables, shape functions), graphs and their building, graph files, DOT, the cond and
 * while-loop builders, TensorArray builders, and the gradient registry. */
#ifndef FLOE__LAYER_GRAPH_H
#define FLOE__LAYER_GRAPH_H

#include "base/base.h"

/* ------------------------------------------------------------------------------------ */
/* opdef.c: op definitions, parsed from the spec strings of ops_std.def / FloeOpDef. */

/* Core-only op flags (beside FLOE_OP_STATEFUL). */
#define FLOE__OP_SOURCE 0x100u /* no inputs, output known without running (Const, Placeholder) */

typedef struct FloeArgDef {
  char *name;
  FloeDType fixed;      /* a fixed dtype, or FLOE_DTYPE_INVALID */
  char *type_attr;      /* "T" when typed by an attribute, else NULL */
  char *number_attr;    /* "N" for "N*T" lists, else NULL */
  char *type_list_attr; /* "Tlist" for list(type) lists, else NULL */
} FloeArgDef;

typedef struct FloeAttrDef {
  char *name;
  FloeAttrKind kind;
  bool has_default;
  FloeAttrValue def;   /* default value when has_default */
  bool has_min;
  int64_t min;         /* for int ("N: int >= 1") and list lengths */
  uint32_t allowed;    /* dtype mask for type / list(type); 0 = any */
} FloeAttrDef;

typedef struct FloeOpInfo {
  char *name;
  FloeArgDef *inputs;
  int num_inputs;
  FloeArgDef *outputs;
  int num_outputs;
  FloeAttrDef *attrs;
  int num_attrs;
  uint32_t flags;        /* FLOE_OP_STATEFUL | FLOE__OP_* */
  FloeShapeFn shape_fn;  /* NULL: unknown output shapes */
  char *doc;
  char *plugin;          /* name of the plugin that defined it; NULL for the standard set */
} FloeOpInfo;

/* Parse and add an op definition (all strings copied). Errors name the op and the spec
 * string that does not parse. FLOE_ALREADY_EXISTS if the name is taken. */
floe_code floe__op_register(const FloeOpDef *def, const char *plugin, FloeStatus *st);
/* Lookup by name; the result lives until process exit. Thread-safe. NULL if unknown. */
const FloeOpInfo *floe__op_lookup(const char *name);
const FloeAttrDef *floe__op_attr(const FloeOpInfo *op, const char *name);
/* Registers the standard op set once (idempotent, thread-safe); called by every entry
 * point that needs ops. Returns non-OK only on out-of-memory or a broken spec. */
floe_code floe__ops_init(FloeStatus *st);

/* ops_std.c / ops_shape_*.c: the shape functions named in ops_std.def, declared in
 * ops_shape.h. */

/* ------------------------------------------------------------------------------------ */
/* graph.c */


struct FloeNode {
  int id;                 /* index in graph->nodes */
  char *name;
  const FloeOpInfo *op;
  char *device;           /* requested device as typed; NULL/"" = none */
  FloeAttrs attrs;        /* complete: defaults filled in and type attrs inferred */
  int num_inputs;         /* flattened over the op's input arguments */
  FloeOutput *inputs;
  int *input_arg;         /* for each flattened input, the op input argument it belongs to */
  int num_control;
  struct FloeNode **control;
  int num_outputs;        /* flattened */
  FloeDType *out_dtypes;
  FloeShape *out_shapes;  /* inferred (may be partially unknown) */
  struct FloeGraph *graph;
};

struct FloeGraph {
  FloeNode **nodes;
  int num_nodes, cap_nodes;
  /* name -> node index: open addressing, power-of-two capacity */
  int *name_table;
  int name_cap;
  floe_code error;        /* sticky */
  char *error_msg;
  char *device_scope;     /* floe_graph_set_device_scope; NULL: none */
};

/* Removes the nodes no root reaches (by data or control edges), renumbering the rest in
 * order. Pointers to removed nodes dangle afterwards. */
FLOE__SHARED void floe__graph_keep_reachable(FloeGraph *g, FloeNode *const *roots,
                                             int num_roots);
/* Deep copy of a graph (nodes renumbered identically). Caller owns. */
FloeGraph *floe__graph_clone(const FloeGraph *g, FloeStatus *st);
/* Set the sticky error (first one wins) from a status or a message. */
FLOE__SHARED void floe__graph_fail(FloeGraph *g, floe_code code, const char *fmt, ...)
    FLOE__PRINTF(3, 4);
/* Parse "node" or "node:3" into a node and output index; errors name the string. */
floe_code floe__graph_resolve_output(const FloeGraph *g, const char *name, FloeOutput *out,
                                     FloeStatus *st);
/* Add a fully described node (used by graph_io when loading and by graph building).
 * Validates against the op (arity, dtypes, attrs), fills defaults, infers type attrs and
 * shapes. On error returns NULL with st set (the graph's sticky error is not touched). */
typedef struct FloeNodeSpec {
  const char *op;
  const char *name;
  const char *device;
  const FloeOutput *inputs;
  int num_inputs;
  const int *list_sizes;  /* inputs per op input argument, or NULL: one each */
  int num_lists;
  FloeNode *const *control;
  int num_control;
  const FloeAttrs *attrs; /* copied */
} FloeNodeSpec;
FLOE__SHARED FloeNode *floe__graph_add_node(FloeGraph *g, const FloeNodeSpec *spec,
                                            FloeStatus *st);

/* Edits for the control-flow builders: a loop's Merge gets its back edge once the body
 * exists. add_control: dep (same graph) becomes a control input of n (once). set_input:
 * input j of n becomes v, of the same dtype; shapes are not re-inferred. */
floe_code floe__node_add_control(FloeNode *n, FloeNode *dep, FloeStatus *st);
FLOE__SHARED floe_code floe__node_set_input(FloeNode *n, int j, FloeOutput v, FloeStatus *st);

/* graph.c: a node's attribute `name` when it has one of `kind` (else NULL / the default;
 * strings: "" when absent). Borrowed from the node. */
FLOE__SHARED const FloeAttrValue *floe__node_attr(const FloeNode *n, const char *name,
                                                  FloeAttrKind kind);
int64_t floe__node_attr_int(const FloeNode *n, const char *name, int64_t dflt);
FLOE__SHARED bool floe__node_attr_bool(const FloeNode *n, const char *name, bool dflt);
FLOE__SHARED const char *floe__node_attr_str(const FloeNode *n, const char *name);

/* Node ids of g, each after its inputs (data and control; a loop's back edge, a Merge's
 * input from a NextIteration, does not count); nodes on a cycle without such an edge come
 * last, by id. need (NULL: every node) restricts it; *count gets the number listed.
 * floe__malloc'd (caller frees); NULL when out of memory. */
int *floe__graph_topo_order(const FloeGraph *g, const bool *need, int *count);

/* Shape inference of one node (called by add_node; exposed for re-inference). */
floe_code floe__infer_shapes(FloeNode *n, FloeStatus *st);

/* ------------------------------------------------------------------------------------ */
/* Shape contexts (host.c provides the accessors; graph.c fills the struct). */
struct FloeShapeContext {
  const FloeNode *node;       /* inputs, attrs */
  FloeShape *input_shapes;    /* num_inputs */
  FloeShape *output_shapes;   /* num_outputs, written by the shape fn */
  FloeStatus *status;         /* set by shape_set_error */
};
/* Sets attribute `name` of node `from` on b (nothing when from lacks it). */
void floe__node_copy_attr(const FloeNode *from, FloeNodeBuilder *b, const char *name);

/* ------------------------------------------------------------------------------------ */
/* build.c: small builders shared by the graph builders above (layers, optimisers, recurrent
 * cells, variables, gradient functions) and control flow. Their nodes belong to g and their
 * string arguments are borrowed for the call. Failures are the graph's sticky error and give
 * invalid outputs (NULL builders); once g has failed they build nothing. */

/* "<scope>/<leaf>"; unique: "<scope>/<leaf>_<k>" for the first k >= 1 free in g when that is
 * taken. floe__malloc'd (caller frees); NULL when out of memory (nothing recorded). */
char *floe__build_name(const FloeGraph *g, const char *scope, const char *leaf, bool unique);
/* The unique name above written into the caller's buf (truncated to len); returns buf. */
char *floe__build_name_in(const FloeGraph *g, char *buf, size_t len, const char *scope,
                          const char *leaf);

/* Where the builders below put their nodes, and how they name them and their failures
 * (usually on the caller's stack; it and its strings are borrowed for each call). */
typedef struct FloeBuildScope FloeBuildScope;
struct FloeBuildScope {
  FloeGraph *g;
  const char *name;   /* nodes are "<name>/<leaf>" (leaf NULL: the op); NULL: named leaf
                         itself (NULL: the graph's default name) */
  bool unique;        /* "<name>/<leaf>_<k>" for the first free k when the name is taken */
  bool round_ints;    /* integer constants from doubles round to nearest; else truncate */
  const char *device; /* requested for every node when non-empty */
  /* Records on g why node leaf (of op) cannot be built: out of memory naming it (why NULL)
   * or making its value (why: that failure). NULL: "node '<name>/<leaf>' (<op>): out of
   * memory[ making its value]". */
  void (*fail)(const FloeBuildScope *s, const char *op, const char *leaf, const FloeStatus *why);
  const void *arg; /* the fail function's own (borrowed) */
};
/* A fail function whose every failure reads s->arg (a string), with FLOE_NO_MEMORY. */
void floe__build_fail_message(const FloeBuildScope *s, const char *op, const char *leaf,
                              const FloeStatus *why);

/* floe_node_begin of op named as s says, with s's device. The caller finishes it. */
FloeNodeBuilder *floe__build_begin(const FloeBuildScope *s, const char *op, const char *leaf);
/* One node of op on inputs ins[0..n): its output 0. _like also copies the attributes attrs
 * (NULL-terminated; NULL: none) that from has. */
FloeOutput floe__build_op(const FloeBuildScope *s, const char *op, const char *leaf,
                          const FloeOutput *ins, int n);
FloeOutput floe__build_op_like(const FloeBuildScope *s, const char *op, const char *leaf,
                               const FloeOutput *ins, int n, const FloeNode *from,
                               const char *const *attrs);
FloeOutput floe__build_unary(const FloeBuildScope *s, const char *op, const char *leaf,
                             FloeOutput x);
FloeOutput floe__build_binary(const FloeBuildScope *s, const char *op, const char *leaf,
                              FloeOutput a, FloeOutput b);
/* Cast of x to dt. */
FloeOutput floe__build_cast(const FloeBuildScope *s, const char *leaf, FloeOutput x, FloeDType dt);
/* Sets the attributes names (NULL-terminated; NULL: none) that from has on b (copies). */
void floe__node_copy_attrs(const FloeNode *from, FloeNodeBuilder *b, const char *const *names);

/* Stores v as element i of the caller's data of dtype dt, as a cast would (integers truncated,
 * or with round_ints rounded to nearest; bool: v != 0). False, nothing stored, for other
 * dtypes. */
bool floe__build_store(void *data, FloeDType dt, int64_t i, double v, bool round_ints);
/* A host tensor of dt and shape (rank, dims) with every element v (zeros where
 * floe__build_store has no such value); caller owns. NULL with st set on failure. */
FloeTensor *floe__build_filled_tensor(FloeDType dt, int rank, const int64_t *dims, double v,
                                      bool round_ints, FloeStatus *st);
/* An i32 or i64 host tensor of v[0..n): 1-D, or with rank 0 the scalar v[0]; caller owns.
 * NULL with st set on failure. */
FloeTensor *floe__build_ints_tensor(FloeDType dt, int rank, const int64_t *v, int n,
                                    FloeStatus *st);
/* A Const holding t, taking the caller's reference to t. NULL t: its value could not be made
 * (why says why; NULL: out of memory), recorded. */
FloeOutput floe__build_const(const FloeBuildScope *s, const char *leaf, FloeTensor *t,
                             const FloeStatus *why);
/* Consts of floe__build_filled_tensor (the scalar: rank 0), of one integer, and of an
 * integer vector v[0..n) (dt: i32 or i64). */
FloeOutput floe__build_filled(const FloeBuildScope *s, const char *leaf, FloeDType dt, int rank,
                              const int64_t *dims, double v);
FloeOutput floe__build_scalar(const FloeBuildScope *s, const char *leaf, FloeDType dt, double v);
FloeOutput floe__build_int(const FloeBuildScope *s, const char *leaf, FloeDType dt, int64_t v);
FloeOutput floe__build_ints(const FloeBuildScope *s, const char *leaf, FloeDType dt,
                            const int64_t *v, int n);

/* ------------------------------------------------------------------------------------ */
/* grad_registry.c: which function differentiates each op. The autodiff walk
 * (train/gradients.c) fills in the standard set's functions and reads it. */
/* What a gradient function works with (train.h defines it). */
typedef struct FloeGradCtx FloeGradCtx;
/* Builds the nodes of the input gradients. On error sets st (naming the node) or leaves the
 * graph's sticky error, and returns non-OK. */
typedef floe_code (*FloeGradFn)(FloeGradCtx *c, FloeStatus *st);

/* Registers fn for op (NULL fn: op is not differentiable: no gradient flows through it, and
 * reaching it is not an error). FLOE_ALREADY_EXISTS when op has one. Thread-safe. */
floe_code floe__grad_register(const char *op, FloeGradFn fn, FloeStatus *st);
/* A plugin's declarative gradient (validated against the op registry). */
floe_code floe__grad_register_def(const FloeGradientDef *def, const char *plugin,
                                  FloeStatus *st);
/* grad_registry.c: the standard "not differentiable" entries (idempotent). */
floe_code floe__grad_registry_init(FloeStatus *st);
/* grad_registry.c: whether op has an entry, and its function and plugin definition (either
 * may be NULL; both NULL: not differentiable). Thread-safe; *def lives as long as the
 * process. fn, def may be NULL. */
bool floe__grad_lookup(const char *op, FloeGradFn *fn, const FloeGradientDef **def);
/* grad_registry.c: a FloeGradientDef's grad_inputs entry "dy:J", "x:I" or "y:J" -> kind
 * ('d', 'x', 'y') and index; false when malformed. */
bool floe__grad_input_parse(const char *s, char *kind, long *idx);

/* ------------------------------------------------------------------------------------ */
/* control_flow.c: nodes the next floe_while_loop / floe_cond scan must leave alone (the
 * caller made them for another frame while building a body; thread-local), and the reset. */
FLOE__SHARED floe_code floe__cf_exclude(const FloeNode *n);
void floe__cf_exclude_clear(void);
/* How many nodes are excluded; dropping those excluded after the first n (a construct
 * built inside another one gives its nodes back to the outer one). */
FLOE__SHARED int floe__cf_exclude_count(void);
FLOE__SHARED void floe__cf_exclude_truncate(int n);

/* ------------------------------------------------------------------------------------ */
/* TensorArrays (the graph side; exec/tensor_array.c runs them). */
/* ops_shape_tensor_array.c: the shape functions named in ops_rnn.def. */
floe_code floe__shape_tensor_array(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_ta_write(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_ta_read(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_ta_gather(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_ta_scatter(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_ta_stack(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_ta_concat(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_ta_split(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_ta_unstack(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_ta_grad(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_stack_push(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_stack_pop(const FloeHostApi *host, FloeShapeContext *sctx);
/* tensor_array_build.c: what the graph says about the TensorArray behind handle, read from
 * the TensorArrayV3 node that made it (followed through TensorArrayGradV3 and pass-through
 * ops: Identity, Enter, Exit, Switch, Merge, NextIteration). Returns that node (borrowed
 * from its graph), or NULL when it cannot be told; *dtype (FLOE_DTYPE_INVALID), *elem (the
 * declared element shape, unknown) and *size (a Const size of an array that cannot grow,
 * else -1) say what is known. Pure; thread-safe on a graph nobody modifies. */
const FloeNode *floe__ta_static_info(FloeOutput handle, FloeDType *dtype, FloeShape *elem,
                                     int64_t *size);

#endif /* FLOE__LAYER_GRAPH_H */
