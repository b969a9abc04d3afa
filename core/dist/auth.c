/* SPDX-License-Identifier: Apache-2.0 */
/* auth.c - the job's secret and the proofs of holding it (docs/security.md).
 *
 * Every task of a job holds one secret, from a 0600 file (FLOE_JOB_SECRET_FILE) or the
 * environment (FLOE_JOB_SECRET). A control connection opens with a mutual challenge-response:
 * each side sends a fresh 32-byte nonce, then each proves
 *     HMAC-SHA256(secret, "floe-auth-v1" || role || nonce_c || nonce_s || its identity)
 * (role 'C' or 'S': a proof cannot be reflected to the other side; both nonces: a proof is
 * never valid twice; the identity: a proof names the task and incarnation it vouches for).
 * The frames after it are signed with HMAC-SHA256(secret, "floe-key-v1" || nonce_c ||
 * nonce_s). A data-plane connection (dataplane.c) opens with one hello carrying
 *     HMAC-SHA256(secret, "floe-data-v1" || receiver's data nonce || receiver's incarnation ||
 *                 sender's identity)
 * (the receiver published its nonce with its incarnation; a new incarnation draws a new one,
 * so an old hello is refused). Neither the secret nor a hash of it alone crosses the wire: what an eavesdropper
 * sees lets it test guesses of the secret one HMAC at a time, so a secret is at least 16
 * bytes. What this does not give: encryption (anyone on the path reads the messages), and
 * protection from a task that holds the secret. */
#include <errno.h>
#include <inttypes.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dist.h"

struct FloeJobSecret {
  uint8_t *bytes; /* len bytes, wiped before they are freed */
  size_t len;
  char *source;
};

void floe__secret_free(FloeJobSecret *s) {
  if (!s) return;
  if (s->bytes) OPENSSL_cleanse(s->bytes, s->len);
  floe__free(s->bytes);
  floe__free(s->source);
  floe__free(s);
}

const char *floe__secret_source(const FloeJobSecret *s) {
  return s ? s->source : "(no secret)";
}

floe_code floe__secret_from_bytes(const void *bytes, size_t len, const char *source,
                                  FloeJobSecret **out, FloeStatus *st) {
  *out = NULL;
  if (!source) source = "job secret";
  if (!bytes || len < FLOE__SECRET_MIN)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: the job secret has %zu bytes, fewer than %d: make one with "
                           "`head -c 32 /dev/urandom | base64`",
                           source, bytes ? len : 0, FLOE__SECRET_MIN);
  if (len > FLOE__SECRET_MAX)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: the job secret has %zu bytes, more than %d: is this the right "
                           "file?",
                           source, len, FLOE__SECRET_MAX);
  FloeJobSecret *s = floe__calloc(1, sizeof *s);
  if (!s) goto err_oom;
  s->bytes = floe__malloc(len);
  s->source = floe__strdup(source);
  if (!s->bytes || !s->source) goto err_oom;
  memcpy(s->bytes, bytes, len);
  s->len = len;
  *out = s;
  return FLOE_OK;
err_oom:
  floe__secret_free(s);
  return floe_status_set(st, FLOE_NO_MEMORY, "%s: out of memory", source);
}

floe_code floe__secret_from_file(const char *path, FloeJobSecret **out, FloeStatus *st) {
  *out = NULL;
  if (!path || !*path)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "job secret file: the path is empty");
  int fd;
  uint64_t size;
  floe_code rc = floe__file_open_read(path, &fd, &size, st); /* regular files only */
  if (rc != FLOE_OK) {
    floe__status_prefix(st, "job secret file");
    return rc;
  }
  struct stat sb;
  uint8_t buf[FLOE__SECRET_MAX + 3];
  size_t n = 0;
  if (fstat(fd, &sb) != 0) {
    rc = floe__status_from_errno(st, errno, "job secret file %s: cannot stat it", path);
    goto out;
  }
  if (sb.st_uid != geteuid()) {
    rc = floe_status_set(st, FLOE_PERMISSION_DENIED,
                         "job secret file %s is owned by uid %u, not by this user (uid %u): "
                         "a secret must be the reader's own (chown it, or make a copy)",
                         path, (unsigned)sb.st_uid, (unsigned)geteuid());
    goto out;
  }
  if (sb.st_mode & 07177) {
    rc = floe_status_set(st, FLOE_PERMISSION_DENIED,
                         "job secret file %s has mode %04o: it must be 0600 or stricter so no "
                         "one else can read it (chmod 600 %s)",
                         path, (unsigned)(sb.st_mode & 07777), path);
    goto out;
  }
  if (size > sizeof buf - 1) {
    rc = floe_status_set(st, FLOE_INVALID_ARGUMENT,
                         "job secret file %s has %" PRIu64 " bytes, more than %d: is this the "
                         "right file?",
                         path, size, FLOE__SECRET_MAX);
    goto out;
  }
  while (n < sizeof buf) {
    ssize_t r = read(fd, buf + n, sizeof buf - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      rc = floe__status_from_errno(st, errno, "job secret file %s: read error", path);
      goto out;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  /* One final newline (echo, openssl rand -hex) is not part of the secret. */
  if (n > 0 && buf[n - 1] == '\n') n--;
  if (n > 0 && buf[n - 1] == '\r') n--;
  {
    char *source = floe__asprintf("job secret file %s", path);
    if (!source) {
      rc = floe_status_set(st, FLOE_NO_MEMORY, "job secret file %s: out of memory", path);
      goto out;
    }
    rc = floe__secret_from_bytes(buf, n, source, out, st);
    floe__free(source);
  }
out:
  OPENSSL_cleanse(buf, sizeof buf);
  close(fd);
  return rc;
}

floe_code floe__secret_from_env(FloeJobSecret **out, FloeStatus *st) {
  *out = NULL;
  const char *file = getenv("FLOE_JOB_SECRET_FILE"), *bytes = getenv("FLOE_JOB_SECRET");
  if (file && !*file) file = NULL;
  if (bytes && !*bytes) bytes = NULL;
  if (file && bytes)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "both FLOE_JOB_SECRET_FILE and FLOE_JOB_SECRET are set: give the job "
                           "secret one way (unset one)");
  if (file) return floe__secret_from_file(file, out, st);
  if (bytes) return floe__secret_from_bytes(bytes, strlen(bytes), "FLOE_JOB_SECRET", out, st);
  return floe_status_set(st, FLOE_FAILED_PRECONDITION,
                         "no job secret: the tasks of a job prove to each other that they hold "
                         "one; set FLOE_JOB_SECRET_FILE to a file of 16 bytes to 4 KiB with "
                         "mode 0600 (or FLOE_JOB_SECRET to the secret) on every task");
}

/* ------------------------------------------------------------------------------------ */
/* HMAC-SHA256 and proofs */

typedef struct HmacPart {
  const void *p;
  size_t n;
} HmacPart;

static floe_code hmac_sha256(const void *key, size_t keylen, const HmacPart *parts, int n,
                             uint8_t out[32], FloeStatus *st) {
  floe_code rc = FLOE_OK;
  EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
  EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  size_t outlen = 0;
  if (!ctx || !EVP_MAC_init(ctx, key, keylen, params)) goto err_crypto;
  for (int i = 0; i < n; i++)
    if (parts[i].n && !EVP_MAC_update(ctx, parts[i].p, parts[i].n)) goto err_crypto;
  if (!EVP_MAC_final(ctx, out, &outlen, 32) || outlen != 32) goto err_crypto;
  goto out;
err_crypto:
  rc = floe_status_set(st, FLOE_INTERNAL,
                       "HMAC-SHA256 failed in libcrypto (is OpenSSL's default provider "
                       "available?)");
out:
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  return rc;
}

floe_code floe__hmac_sha256(const uint8_t key[32], const void *a, size_t an, const void *b,
                            size_t bn, const void *c, size_t cn, uint8_t out[32],
                            FloeStatus *st) {
  HmacPart parts[] = {{a, an}, {b, bn}, {c, cn}};
  return hmac_sha256(key, 32, parts, 3, out, st);
}

floe_code floe__auth_random(uint8_t *out, size_t n, FloeStatus *st) {
  for (size_t got = 0; got < n;) {
    ssize_t r = getrandom(out + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return floe__status_from_errno(st, errno,
                                     "getrandom failed (the kernel's random source is needed "
                                     "for nonces and incarnations)");
    got += (size_t)r;
  }
  return FLOE_OK;
}

/* The identity as proofs sign it: job length (u16) and bytes, task (u32), incarnation (u64),
 * big-endian; returns the length written into buf (2 + 63 + 4 + 8 at most). */
static size_t identity_bytes(const FloeTaskIdentity *who, uint8_t *buf) {
  size_t jn = strnlen(who->job, FLOE__JOB_NAME_MAX), n = 0;
  buf[n++] = (uint8_t)(jn >> 8);
  buf[n++] = (uint8_t)jn;
  memcpy(buf + n, who->job, jn);
  n += jn;
  uint32_t t = (uint32_t)who->task;
  for (int i = 3; i >= 0; i--) buf[n++] = (uint8_t)(t >> (8 * i));
  for (int i = 7; i >= 0; i--) buf[n++] = (uint8_t)(who->incarnation >> (8 * i));
  return n;
}

floe_code floe__auth_proof(const FloeJobSecret *s, uint8_t role,
                           const uint8_t nonce_c[FLOE__NONCE], const uint8_t nonce_s[FLOE__NONCE],
                           const FloeTaskIdentity *who, uint8_t out[32], FloeStatus *st) {
  static const char label[] = "floe-auth-v1";
  uint8_t id[2 + FLOE__JOB_NAME_MAX + 4 + 8];
  size_t idn = identity_bytes(who, id);
  HmacPart parts[] = {{label, sizeof label - 1},
                      {&role, 1},
                      {nonce_c, FLOE__NONCE},
                      {nonce_s, FLOE__NONCE},
                      {id, idn}};
  return hmac_sha256(s->bytes, s->len, parts, (int)FLOE__ARRAY_LEN(parts), out, st);
}

floe_code floe__auth_data_proof(const FloeJobSecret *s, const uint8_t receiver_nonce[FLOE__NONCE],
                                uint64_t receiver_incarnation, const FloeTaskIdentity *sender,
                                uint8_t out[32], FloeStatus *st) {
  static const char label[] = "floe-data-v1";
  uint8_t inc[8], id[2 + FLOE__JOB_NAME_MAX + 4 + 8];
  for (int i = 0; i < 8; i++) inc[i] = (uint8_t)(receiver_incarnation >> (8 * (7 - i)));
  size_t idn = identity_bytes(sender, id);
  HmacPart parts[] = {{label, sizeof label - 1},
                      {receiver_nonce, FLOE__NONCE},
                      {inc, sizeof inc},
                      {id, idn}};
  return hmac_sha256(s->bytes, s->len, parts, (int)FLOE__ARRAY_LEN(parts), out, st);
}

floe_code floe__auth_session_key(const FloeJobSecret *s, const uint8_t nonce_c[FLOE__NONCE],
                                 const uint8_t nonce_s[FLOE__NONCE], uint8_t out[32],
                                 FloeStatus *st) {
  static const char label[] = "floe-key-v1";
  HmacPart parts[] = {{label, sizeof label - 1}, {nonce_c, FLOE__NONCE}, {nonce_s, FLOE__NONCE}};
  return hmac_sha256(s->bytes, s->len, parts, (int)FLOE__ARRAY_LEN(parts), out, st);
}

bool floe__auth_equal(const void *a, const void *b, size_t n) {
  return CRYPTO_memcmp(a, b, n) == 0;
}

char *floe__task_identity_str(const FloeTaskIdentity *id, char *buf, size_t cap) {
  snprintf(buf, cap, "/job:%s/task:%d (incarnation %016" PRIx64 ")", id->job, id->task,
           id->incarnation);
  return buf;
}
