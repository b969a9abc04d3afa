/* SPDX-License-Identifier: Apache-2.0 */
/* checkpoint_private.h - what the checkpoint files share: safetensors.c (the file format),
 * checkpoint.c (save, restore, keep-N retention, the Save / Restore kernels) and export.c
 * (frozen graphs). Not installed; nothing outside these three files includes it. */
#ifndef FLOE_TRAIN_CHECKPOINT_PRIVATE_H
#define FLOE_TRAIN_CHECKPOINT_PRIVATE_H

#include "train.h"

#define FLOE__CKPT_MAX_STEP_DIGITS 19 /* INT64_MAX has 19 */
#define FLOE__CKPT_NAME_SHOWN 80      /* bytes of a name from a file quoted in a message */

/* A variable to write or restore. */
typedef struct FloeCkptItem {
  const char *name;  /* checkpoint key: the VarHandleOp node's name; borrowed */
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
/* "[2,3]" ("[]" for a scalar) into buf (FLOE__SAFETENSORS_DIMS_BUF bytes); returns buf. */
char *floe__safetensors_dims_str(int rank, const int64_t *dims, char *buf, size_t len);
#define FLOE__SAFETENSORS_DIMS_BUF (FLOE_MAX_DIMS * 21 + 3)
/* Whether s is strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF), as a
 * header's JSON must be. */
bool floe__safetensors_utf8_valid(const char *s);

/* Writer. Appends to b (the caller's, freed by the caller) the 8-byte length and the
 * padded JSON header of items (sorted by name, values on the host) with the metadata
 * global_step = step and the variables hash. */
floe_code floe__safetensors_header(const FloeCkptItem *items, int n, int64_t step,
                                   FloeByteBuf *b, FloeStatus *st);
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
  bool has_step, has_hash;
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

/* ------------------------------------------------------------------------------------ */
/* checkpoint.c, for export.c. */

/* The variable a VarHandleOp node names: (container, shared_name or else the node name),
 * as the VarHandleOp kernel resolves it. Borrowed from m. */
FloeVar *floe__ckpt_node_var(FloeResourceMgr *m, const FloeNode *n, FloeStatus *st);
/* Hands a local status st to the caller's status (which may be NULL), clears st and
 * returns rc. */
floe_code floe__ckpt_finish(FloeStatus *status, FloeStatus *st, floe_code rc);

#endif /* FLOE_TRAIN_CHECKPOINT_PRIVATE_H */
