/* SPDX-License-Identifier: Apache-2.0 */
/* checkpoint_private.h - what the checkpoint files share: safetensors.c (the file format),
 * checkpoint.c (save, restore, keep-N retention, the Save / Restore kernels),
 * checkpoint_sharded.c (sharded checkpoints: per-task shard files and a committed index)
 * and export.c (frozen graphs). Not installed; nothing outside these files includes it. */
#ifndef FLOE_TRAIN_CHECKPOINT_PRIVATE_H
#define FLOE_TRAIN_CHECKPOINT_PRIVATE_H

#include "train.h"

#define FLOE__CKPT_MAX_STEP_DIGITS 19 /* INT64_MAX has 19 */
#define FLOE__CKPT_NAME_SHOWN 80      /* bytes of a name from a file quoted in a message */
#define FLOE__CKPT_SAVE_ID_LEN 16     /* hex digits of a sharded save's random id */
#define FLOE__CKPT_INDEX_SUFFIX ".index.json" /* a sharded checkpoint's committed index */
#define FLOE__CKPT_SHARDS_SUFFIX ".shards"    /* ... and the folder of its shard files */

/* A variable to write or restore. */
typedef struct FloeCkptItem {
  const char *name;  /* checkpoint key: the VarHandleOp node's name; borrowed */
  const FloeNode *node; /* that VarHandleOp (borrowed), or NULL when unknown */
  FloeVar *var;      /* borrowed from the resource manager; NULL for a variable of another
                      * task (a cluster session: read and assigned through the session) */
  FloeDType dtype;   /* the variable's (VarHandleOp's, or var's) */
  FloeShape shape;
  /* a shard of a sharded variable: the whole's name and shape, and the shard's place in it
   * (rows offset.. along axis); full_name NULL otherwise */
  const char *full_name;
  FloeShape full_shape;
  int axis;
  int64_t offset;
  FloeTensor *value; /* save: a host reference to the value; restore: the value read */
} FloeCkptItem;

/* ------------------------------------------------------------------------------------ */
/* safetensors.c: the format. File: u64 little-endian header length N, N bytes of JSON
 * padded with spaces to a multiple of 8, then the tensors' little-endian bytes, sorted by
 * name, contiguous. */

/* A safetensors dtype: its name, element size and Floe dtype (FLOE_DTYPE_INVALID for
 * those Floe lacks). */
typedef struct FloeSafetensorsType {
  const char *name;
  size_t size;
  FloeDType dt;
} FloeSafetensorsType;

/* The safetensors dtype of dt, or NULL when the format has none. Static storage. */
const FloeSafetensorsType *floe__safetensors_type_of(FloeDType dt);
/* The safetensors dtype called s ("F32"), or NULL. Static storage. */
const FloeSafetensorsType *floe__safetensors_type_named(const char *s);
/* "[2,3]" ("[]" for a scalar) into buf (FLOE__SAFETENSORS_DIMS_BUF bytes); returns buf. */
char *floe__safetensors_dims_str(int rank, const int64_t *dims, char *buf, size_t len);
#define FLOE__SAFETENSORS_DIMS_BUF (FLOE_MAX_DIMS * 21 + 3)
/* Appends s to b as a JSON string (quoted, escaped). */
void floe__safetensors_json_str(FloeByteBuf *b, const char *s);
/* Whether s is strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF), as a
 * header's JSON must be. */
bool floe__safetensors_utf8_valid(const char *s);

/* Writer. Appends to b (the caller's, freed by the caller) the 8-byte length and the
 * padded JSON header of items (sorted by name, values on the host) with the metadata
 * global_step = step, save_id (a sharded checkpoint's shard; NULL: none) and the variables
 * hash. */
floe_code floe__safetensors_header(const FloeCkptItem *items, int n, int64_t step,
                                   const char *save_id, FloeByteBuf *b, FloeStatus *st);
/* Writes header (from floe__safetensors_header) and then the bytes of items' values to
 * fd, little-endian. 0, or the errno of the failure; fd stays open. */
int floe__safetensors_write(int fd, const FloeByteBuf *header, const FloeCkptItem *items,
                            int n);

/* Reader: a strict, bounded parser of the header and a check of the layout before any
 * data is read. */
typedef struct FloeSafetensorsEntry {
  char *name;          /* decoded key; owned */
  size_t at;           /* header offset of the key, for messages */
  const FloeSafetensorsType *type;
  int rank;
  int64_t dims[FLOE_MAX_DIMS];
  uint64_t begin, end; /* relative to the data section */
} FloeSafetensorsEntry;

typedef struct FloeSafetensorsFile {
  const char *path;    /* borrowed */
  int fd;
  uint64_t data_start, data_len;
  FloeSafetensorsEntry *e; /* sorted by name once validated; owned */
  int n, cap;
  int64_t step;        /* metadata global_step; 0 when absent */
  bool has_step, has_hash, has_save_id;
  char save_id[FLOE__CKPT_SAVE_ID_LEN + 1]; /* metadata save_id (its first 16 bytes) */
  uint64_t hash;
  size_t hash_at;
} FloeSafetensorsFile;

/* Opens and validates path (borrowed until floe__safetensors_close): header, layout and
 * variables hash; the data is read later. On error f is closed. */
floe_code floe__safetensors_open(const char *path, FloeSafetensorsFile *f, FloeStatus *st);
/* Frees f's entries and closes its file. */
void floe__safetensors_close(FloeSafetensorsFile *f);
/* The entry called name, or NULL. Borrowed from f. */
const FloeSafetensorsEntry *floe__safetensors_find(const FloeSafetensorsFile *f,
                                                   const char *name);
/* Entry e's values in a new host tensor (caller releases), or NULL with st set. */
FloeTensor *floe__safetensors_read(const FloeSafetensorsFile *f, const FloeSafetensorsEntry *e,
                                   FloeStatus *st);
/* Reads the box [lo, hi) of e (e's rank; bounds checked by the caller) into host tensor dst
 * (of e's dtype and rank) with its corner at dst_lo; the rest of dst is untouched. */
floe_code floe__safetensors_read_box(const FloeSafetensorsFile *f, const FloeSafetensorsEntry *e,
                                     const int64_t *lo, const int64_t *hi, FloeTensor *dst,
                                     const int64_t *dst_lo, FloeStatus *st);

/* ------------------------------------------------------------------------------------ */
/* checkpoint.c, for export.c and checkpoint_sharded.c. */

/* Every VarHandleOp of the session's graph, in graph order; in a cluster session without
 * their FloeVars (they may live on other tasks). *out: free with floe__ckpt_items_free. */
floe_code floe__ckpt_graph_items(FloeSession *s, FloeCkptItem **out, int *n_out, FloeStatus *st);
/* Releases the items' values and frees the array (NULL: no-op). */
void floe__ckpt_items_free(FloeCkptItem *items, int n);
/* Items for the resource inputs first.. of a kernel's node (FLOE__KERNEL_RAW_RESOURCES),
 * named after the VarHandleOps feeding them. Free with floe__ckpt_items_free. */
floe_code floe__ckpt_kernel_items(FloeKernelContext *ctx, int first, FloeCkptItem **out,
                                  int *n_out, FloeStatus *st);
/* Sets ctx's error from st (cleared); returns the code to return from compute. */
floe_code floe__ckpt_kernel_fail(FloeKernelContext *ctx, FloeStatus *st);
/* Sets ctx's output 0 (an i64 scalar on its device) to v. */
floe_code floe__ckpt_output_i64(FloeKernelContext *ctx, int64_t v);
/* The save's arguments: a directory, a plain-file prefix, step >= 0, keep >= 0. */
floe_code floe__ckpt_check_save_args(const char *dir, const char *prefix, int64_t step,
                                     int keep, FloeStatus *st);
floe_code floe__ckpt_check_prefix(const char *prefix, FloeStatus *st);
/* Reads each item that has a FloeVar and no value yet into a host tensor; checks every
 * item's dtype and name can be written. `where` names the save in messages. */
floe_code floe__ckpt_read_values(FloeCkptItem *items, int n, const char *where, FloeStatus *st);
/* Sorts items by name; a name given twice is an error. */
floe_code floe__ckpt_sort_items(FloeCkptItem *items, int n, FloeStatus *st);
/* mkdir -p dir. */
floe_code floe__ckpt_make_dirs(const char *dir, FloeStatus *st);
/* dir + "/" + file. Caller frees (floe__free); NULL when out of memory. */
char *floe__ckpt_join_path(const char *dir, const char *file);
/* Writes items (sorted, host values) to dir/file atomically (temporary file, fsync, rename,
 * fsync of dir), the metadata's global_step = step and save_id (NULL: none). *size_out (may
 * be NULL): the file's bytes; *final_out (may be NULL): its path (caller frees). */
floe_code floe__ckpt_write_file(const char *dir, const char *file, const FloeCkptItem *items,
                                int n, int64_t step, const char *save_id, uint64_t *size_out,
                                char **final_out, FloeStatus *st);
/* Assigns every item's value to its variable, all or nothing (s: a cluster session, through
 * its graph; NULL: the items' FloeVars). path names the checkpoint in messages. */
floe_code floe__ckpt_assign_items(const char *path, FloeCkptItem *items, int n, FloeSession *s,
                                  FloeStatus *st);

/* A checkpoint found in a directory. */
typedef struct FloeCkptFound {
  char *file;        /* its name in the directory; owned */
  size_t prefix_len;
  int64_t step;
  bool sharded;      /* a sharded checkpoint's index (else a single file) */
} FloeCkptFound;
/* "<prefix>-<step, 10 to 19 digits>" + suffix: sets the prefix length and step. */
bool floe__ckpt_parse_name(const char *file, const char *suffix, size_t *prefix_len,
                           int64_t *step);
/* The checkpoints of prefix (NULL: any) in dir, oldest first by step (an index after a file
 * of the same step); suffix non-NULL: the names ending in it instead (".shards" folders).
 * Free with floe__ckpt_found_free. */
floe_code floe__ckpt_list(const char *dir, const char *prefix, const char *suffix,
                          FloeCkptFound **out, int *n_out, FloeStatus *st);
void floe__ckpt_found_free(FloeCkptFound *f, int n);
/* Removes all but the newest keep checkpoints of prefix (both kinds); `written` (a name in
 * dir) always stays. Best effort. */
void floe__ckpt_prune(const char *dir, const char *prefix, int keep, const char *written);

/* ------------------------------------------------------------------------------------ */
/* checkpoint_sharded.c, for checkpoint.c. */

/* Removes checkpoint f of dir: a file, or an index and then its shard folder. Best effort. */
void floe__ckpt_remove(const char *dir, const FloeCkptFound *f);
/* Restores items from the sharded checkpoint whose index is path, resharding each variable
 * to the graph's shards; all or nothing (s as floe__ckpt_assign_items). */
floe_code floe__ckpt_restore_index(const char *path, FloeCkptItem *items, int n,
                                   int64_t *step_out, FloeSession *s, FloeStatus *st);
/* The SaveShard kernel. */
floe_code floe__ckpt_save_shard_compute(void *state, FloeKernelContext *ctx);

/* The variable a VarHandleOp node names: (container, shared_name or else the node name),
 * as the VarHandleOp kernel resolves it. Borrowed from m. */
FloeVar *floe__ckpt_node_var(FloeResourceMgr *m, const FloeNode *n, FloeStatus *st);
/* Hands a local status st to the caller's status (which may be NULL), clears st and
 * returns rc. */
floe_code floe__ckpt_finish(FloeStatus *status, FloeStatus *st, floe_code rc);

#endif /* FLOE_TRAIN_CHECKPOINT_PRIVATE_H */
