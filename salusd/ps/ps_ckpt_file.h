/* A parameter-server table's checkpoint file (salusctl checkpoint, restored by salusctl run
 * --restore): one file per table, STATE_DIR/checkpoints/UID/GROUP/TABLE.ckpt, holding the
 * table's values at one clock boundary C (every shard's done == C).
 *
 * The format (little-endian, no padding):
 *   8  magic "SALUSPSC"
 *   u32 version (PS_CKPT_VERSION)
 *   u32 uid
 *   str group, str table, str rule, str sync       (str: u8 length, then the bytes, no NUL)
 *   u64 count                                      (elements, >= 1)
 *   u64 clock                                      (C: the clocks 0 .. C-1 are in the values)
 *   u8  asp                                        (1: taken under ASP, the values of a moment,
 *                                                   not of a clock boundary)
 *   count x f32 values                             (finite)
 *   u64 checksum: FNV-1a 64 over every byte before it
 * A reader checks every field, the exact length and the checksum: a truncated, corrupted or
 * foreign file (another user's, group's or table's) is refused with a message saying which.
 * Nothing here touches the daemon: the functions take paths and buffers (check_ps_ckpt). */
#ifndef SALUS_SALUSD_PS_CKPT_FILE_H
#define SALUS_SALUSD_PS_CKPT_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PS_CKPT_MAGIC "SALUSPSC"
#define PS_CKPT_VERSION 1u
#define PS_CKPT_TEXT_BYTES 64
/* the largest table a checkpoint holds (as the daemon's tables: 4 GiB of float32) */
#define PS_CKPT_MAX_COUNT ((4ull << 30) / sizeof(float))

typedef struct ps_ckpt_header_s {
    uint32_t uid;
    char group[PS_CKPT_TEXT_BYTES];
    char table[PS_CKPT_TEXT_BYTES];
    char rule[PS_CKPT_TEXT_BYTES];   /* ps_rule_format's text */
    char sync[PS_CKPT_TEXT_BYTES];   /* ps_sync_format's text */
    uint64_t count;
    uint64_t clock;
    int asp;
} ps_ckpt_header_t;

/* The bytes of the encoded file (0: a header that cannot be encoded). */
size_t ps_ckpt_encoded_size(const ps_ckpt_header_t *h);
/* Encodes header and count values into buf (ps_ckpt_encoded_size bytes): the bytes written,
 * or -EINVAL (a bad header: empty or too long texts, a rule or sync that does not parse,
 * count 0 or too large, a non-finite value; err says which) or -ENOSPC. */
int64_t ps_ckpt_encode(const ps_ckpt_header_t *h, const float *values, void *buf, size_t size,
                       char *err, size_t err_size);
/* Decodes a whole file: 0 with *h filled and *values a malloc'ed copy of the count values
 * (the caller frees), or -EINVAL (not a checkpoint, another version, truncated or too long,
 * a checksum that does not match, a bad field, a non-finite value), -ENOMEM; err says why. */
int ps_ckpt_decode(const void *buf, size_t size, ps_ckpt_header_t *h, float **values,
                   char *err, size_t err_size);
/* The header's identity is (uid, group, table): 0, or -EINVAL with err naming what differs
 * (a file of another user, group or table). */
int ps_ckpt_check_identity(const ps_ckpt_header_t *h, uid_t uid, const char *group,
                           const char *table, char *err, size_t err_size);

/* dir/checkpoints/UID/GROUP (the group's checkpoint directory) into out: 0, or -ENAMETOOLONG
 * / -EINVAL (a group name with '/' or "..", empty texts). */
int ps_ckpt_dir(char *out, size_t size, const char *state_dir, uid_t uid, const char *group);
/* dir/checkpoints/UID/GROUP/TABLE.ckpt into out: as ps_ckpt_dir. */
int ps_ckpt_path(char *out, size_t size, const char *state_dir, uid_t uid, const char *group,
                 const char *table);

/* Writes the encoded bytes to `path` durably: a temporary name in the same directory
 * (created with its parents, mode 0700), fsync, rename over path, fsync of the directory.
 * Every directory on the way is opened component by component, never through a symbolic
 * link, each root's or salusd's uid's and writable by others only with the sticky bit
 * (fsio_open_dir); the files with O_NOFOLLOW. 0, or a negative errno with err (nothing left
 * under the temporary name). */
int ps_ckpt_write_bytes(const char *path, const void *bytes, size_t len, char *err,
                        size_t err_size);
/* Encodes and writes (ps_ckpt_encode then ps_ckpt_write_bytes). */
int ps_ckpt_write(const char *path, const ps_ckpt_header_t *h, const float *values, char *err,
                  size_t err_size);
/* Reads and decodes path (ps_ckpt_decode), its directories opened as ps_ckpt_write_bytes
 * does; -ENOENT when there is no such file. */
int ps_ckpt_read(const char *path, ps_ckpt_header_t *h, float **values, char *err,
                 size_t err_size);

#endif
