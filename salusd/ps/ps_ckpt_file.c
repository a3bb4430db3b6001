/* A table's checkpoint file: the format, its writer and its reader (ps_ckpt_file.h). */
#include "ps_ckpt_file.h"

#include "fsio.h"
#include "ps_core.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC_BYTES 8

static size_t text_len(const char *s)
{
    size_t n = strnlen(s, PS_CKPT_TEXT_BYTES);
    return n < PS_CKPT_TEXT_BYTES ? n : 0;
}

size_t ps_ckpt_encoded_size(const ps_ckpt_header_t *h)
{
    size_t g = text_len(h->group), t = text_len(h->table), r = text_len(h->rule),
           s = text_len(h->sync);
    if (!g || !t || !r || !s || h->count == 0 || h->count > PS_CKPT_MAX_COUNT)
        return 0;
    return MAGIC_BYTES + 4 + 4 + 4 + g + t + r + s + 8 + 8 + 1 + h->count * sizeof(float) + 8;
}

/* The header's fields: 0 or -EINVAL with err. */
static int check_header(const ps_ckpt_header_t *h, char *err, size_t err_size)
{
    ps_rule_t rule;
    ps_sync_t sync;
    char why[128];
    if (!text_len(h->group) || !text_len(h->table) || !text_len(h->rule) || !text_len(h->sync)) {
        snprintf(err, err_size, "an empty or too long group, table, rule or sync");
        return -EINVAL;
    }
    if (!ps_name_valid(h->table)) {
        snprintf(err, err_size, "bad table name '%s'", h->table);
        return -EINVAL;
    }
    if (ps_rule_parse(h->rule, &rule, why, sizeof(why)) < 0 ||
        ps_sync_parse(h->sync, &sync, why, sizeof(why)) < 0) {
        snprintf(err, err_size, "%s", why);
        return -EINVAL;
    }
    if (h->count == 0 || h->count > PS_CKPT_MAX_COUNT) {
        snprintf(err, err_size, "%llu elements (1 .. %llu)", (unsigned long long)h->count,
                 (unsigned long long)PS_CKPT_MAX_COUNT);
        return -EINVAL;
    }
    if (h->asp != (sync.kind == PS_SYNC_ASP)) {
        snprintf(err, err_size, "the asp mark (%d) disagrees with sync %s", h->asp, h->sync);
        return -EINVAL;
    }
    return 0;
}

static uint8_t *put(uint8_t *p, uint64_t v, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

static uint8_t *put_str(uint8_t *p, const char *s)
{
    size_t n = strlen(s);
    *p++ = (uint8_t)n;
    memcpy(p, s, n);
    return p + n;
}

int64_t ps_ckpt_encode(const ps_ckpt_header_t *h, const float *values, void *buf, size_t size,
                       char *err, size_t err_size)
{
    int rc = check_header(h, err, err_size);
    if (rc < 0)
        return rc;
    size_t need = ps_ckpt_encoded_size(h);
    if (size < need) {
        snprintf(err, err_size, "%zu bytes needed, %zu given", need, size);
        return -ENOSPC;
    }
    for (uint64_t i = 0; i < h->count; i++)
        if (!isfinite(values[i])) {
            snprintf(err, err_size, "value %llu is not finite", (unsigned long long)i);
            return -EINVAL;
        }
    uint8_t *p = buf;
    memcpy(p, PS_CKPT_MAGIC, MAGIC_BYTES);
    p += MAGIC_BYTES;
    p = put(p, PS_CKPT_VERSION, 4);
    p = put(p, h->uid, 4);
    p = put_str(p, h->group);
    p = put_str(p, h->table);
    p = put_str(p, h->rule);
    p = put_str(p, h->sync);
    p = put(p, h->count, 8);
    p = put(p, h->clock, 8);
    p = put(p, (uint64_t)(h->asp != 0), 1);
    for (uint64_t i = 0; i < h->count; i++) {
        uint32_t bits;
        memcpy(&bits, &values[i], sizeof(bits));
        p = put(p, bits, 4);
    }
    uint64_t sum = ps_fnv1a(buf, (size_t)(p - (uint8_t *)buf));
    p = put(p, sum, 8);
    return (int64_t)(p - (uint8_t *)buf);
}

typedef struct reader_s {
    const uint8_t *b;
    size_t len, at;
    int bad;
} reader_t;

static uint64_t get(reader_t *r, size_t bytes)
{
    uint64_t v = 0;
    if (r->bad || r->at + bytes > r->len) {
        r->bad = 1;
        return 0;
    }
    for (size_t i = 0; i < bytes; i++)
        v |= (uint64_t)r->b[r->at++] << (8 * i);
    return v;
}

static void get_str(reader_t *r, char *out)
{
    size_t n = (size_t)get(r, 1);
    out[0] = '\0';
    if (r->bad || n == 0 || n >= PS_CKPT_TEXT_BYTES || r->at + n > r->len ||
        memchr(r->b + r->at, '\0', n)) {
        r->bad = 1;
        return;
    }
    memcpy(out, r->b + r->at, n);
    out[n] = '\0';
    r->at += n;
}

int ps_ckpt_decode(const void *buf, size_t size, ps_ckpt_header_t *h, float **values,
                   char *err, size_t err_size)
{
    reader_t r = {buf, size, 0, 0};
    memset(h, 0, sizeof(*h));
    *values = NULL;
    if (size < MAGIC_BYTES || memcmp(buf, PS_CKPT_MAGIC, MAGIC_BYTES) != 0) {
        snprintf(err, err_size, "not a salus table checkpoint (no %s magic)", PS_CKPT_MAGIC);
        return -EINVAL;
    }
    r.at = MAGIC_BYTES;
    uint64_t version = get(&r, 4);
    if (!r.bad && version != PS_CKPT_VERSION) {
        snprintf(err, err_size, "checkpoint format version %llu (this salusd reads %u)",
                 (unsigned long long)version, PS_CKPT_VERSION);
        return -EINVAL;
    }
    h->uid = (uint32_t)get(&r, 4);
    get_str(&r, h->group);
    get_str(&r, h->table);
    get_str(&r, h->rule);
    get_str(&r, h->sync);
    h->count = get(&r, 8);
    h->clock = get(&r, 8);
    uint64_t asp = get(&r, 1);
    if (r.bad) {
        snprintf(err, err_size, "truncated or malformed header (%zu bytes)", size);
        return -EINVAL;
    }
    if (h->count == 0 || h->count > PS_CKPT_MAX_COUNT) {
        snprintf(err, err_size, "bad element count %llu", (unsigned long long)h->count);
        return -EINVAL;
    }
    size_t want = r.at + h->count * sizeof(float) + 8;
    if (size != want) {
        snprintf(err, err_size, "%s: %zu bytes, a checkpoint of %llu elements has %zu",
                 size < want ? "truncated" : "trailing bytes", size,
                 (unsigned long long)h->count, want);
        return -EINVAL;
    }
    const uint8_t *sum_at = (const uint8_t *)buf + size - 8;
    reader_t s = {sum_at, 8, 0, 0};
    if (get(&s, 8) != ps_fnv1a(buf, size - 8)) {
        snprintf(err, err_size, "corrupted: the checksum does not match the contents");
        return -EINVAL;
    }
    if (asp > 1) {
        snprintf(err, err_size, "bad asp mark %llu", (unsigned long long)asp);
        return -EINVAL;
    }
    h->asp = (int)asp;
    int rc = check_header(h, err, err_size);
    if (rc < 0)
        return rc;
    float *v = malloc(h->count * sizeof(float));
    if (!v) {
        snprintf(err, err_size, "out of memory (%llu elements)", (unsigned long long)h->count);
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < h->count; i++) {
        uint32_t bits = (uint32_t)get(&r, 4);
        memcpy(&v[i], &bits, sizeof(bits));
        if (!isfinite(v[i])) {
            snprintf(err, err_size, "value %llu is not finite", (unsigned long long)i);
            free(v);
            return -EINVAL;
        }
    }
    *values = v;
    return 0;
}

int ps_ckpt_check_identity(const ps_ckpt_header_t *h, uid_t uid, const char *group,
                           const char *table, char *err, size_t err_size)
{
    if (h->uid == (uint32_t)uid && strcmp(h->group, group) == 0 && strcmp(h->table, table) == 0)
        return 0;
    snprintf(err, err_size, "the file holds table '%s' of group %s (uid %u), not '%s' of %s "
             "(uid %u)", h->table, h->group, (unsigned)h->uid, table, group, (unsigned)uid);
    return -EINVAL;
}

int ps_ckpt_dir(char *out, size_t size, const char *state_dir, uid_t uid, const char *group)
{
    if (!state_dir[0] || !group[0] || strchr(group, '/') || strcmp(group, ".") == 0 ||
        strcmp(group, "..") == 0)
        return -EINVAL;
    int n = snprintf(out, size, "%s/checkpoints/%u/%s", state_dir, (unsigned)uid, group);
    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int ps_ckpt_path(char *out, size_t size, const char *state_dir, uid_t uid, const char *group,
                 const char *table)
{
    if (!ps_name_valid(table))
        return -EINVAL;
    int rc = ps_ckpt_dir(out, size, state_dir, uid, group);
    if (rc < 0)
        return rc;
    size_t len = strlen(out);
    int n = snprintf(out + len, size - len, "/%s.ckpt", table);
    return n < 0 || (size_t)n >= size - len ? -ENAMETOOLONG : 0;
}

int ps_ckpt_write_bytes(const char *path, const void *bytes, size_t len, char *err,
                        size_t err_size)
{
    char tmp[NAME_MAX + 1], why[PATH_MAX + 256] = "";
    const char *what = "mkdir", *name = NULL;
    int fd = -1, made = 0;
    /* every directory on the way opened with O_NOFOLLOW and checked (fsio_open_dir): a
     * symbolic link planted below the state directory is refused, never followed */
    int dfd = fsio_open_parent(path, 1, &name, why, sizeof(why)), rc = dfd < 0 ? dfd : 0;
    if (rc == 0 && snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", name, (long)getpid()) >=
                       (int)sizeof(tmp))
        rc = -ENAMETOOLONG;
    if (rc < 0)
        goto out;
    what = "create";
    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    made = 1;
    what = "write";
    rc = fsio_write_all(fd, bytes, len);
    if (rc < 0)
        goto out;
    what = "fsync";
    if (fsync(fd) < 0) {
        rc = -errno;
        goto out;
    }
    what = "close";
    rc = close(fd) < 0 ? -errno : 0;
    fd = -1;
    if (rc < 0)
        goto out;
    what = "rename";
    if (renameat(dfd, tmp, dfd, name) < 0) {
        rc = -errno;
        goto out;
    }
    made = 0;
    what = "fsync of the directory";
    rc = fsync(dfd) < 0 ? -errno : 0;
out:
    if (fd >= 0)
        close(fd);
    if (made)
        unlinkat(dfd, tmp, 0);
    if (dfd >= 0)
        close(dfd);
    if (rc < 0) {
        if (why[0])
            snprintf(err, err_size, "%s: %s", path, why);
        else
            snprintf(err, err_size, "%s: %s: %s", path, what, strerror(-rc));
    }
    return rc;
}

int ps_ckpt_write(const char *path, const ps_ckpt_header_t *h, const float *values, char *err,
                  size_t err_size)
{
    size_t size = ps_ckpt_encoded_size(h);
    if (size == 0) {
        snprintf(err, err_size, "bad checkpoint header (texts or count)");
        return -EINVAL;
    }
    uint8_t *buf = malloc(size);
    if (!buf) {
        snprintf(err, err_size, "out of memory (%zu bytes)", size);
        return -ENOMEM;
    }
    int64_t n = ps_ckpt_encode(h, values, buf, size, err, err_size);
    int rc = n < 0 ? (int)n : ps_ckpt_write_bytes(path, buf, (size_t)n, err, err_size);
    free(buf);
    return rc;
}

int ps_ckpt_read(const char *path, ps_ckpt_header_t *h, float **values, char *err,
                 size_t err_size)
{
    *values = NULL;
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = fsio_read_file(path, 64 + 4 * PS_CKPT_TEXT_BYTES + PS_CKPT_MAX_COUNT * sizeof(float),
                            0, "a checkpoint", &buf, &len, err, err_size);
    if (rc == -ENOENT)
        snprintf(err, err_size, "%s: no checkpoint (no such file)", path);
    if (rc < 0)
        return rc;
    char why[256];
    rc = ps_ckpt_decode(buf, len, h, values, why, sizeof(why));
    if (rc < 0)
        snprintf(err, err_size, "%s: %s", path, why);
    free(buf);
    return rc;
}
