/* Unit tests of a table's checkpoint file (salusd/ps_ckpt_file.h): a round trip bit for bit
 * (negative zero, subnormals, the extremes), the durable writer (no temporary left, parents
 * made), and a reader that refuses every truncation, every flipped byte, trailing bytes,
 * another version, a foreign file and a bad header, each with a message saying why. The
 * restore inside the service: check_ps_ckpt_service.c. */
#include "check_run.h"
#include "ps_ckpt_file.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static ps_ckpt_header_t header(uint64_t count)
{
    ps_ckpt_header_t h = {.uid = 1234, .count = count, .clock = 17};
    snprintf(h.group, sizeof(h.group), "train.g-1");
    snprintf(h.table, sizeof(h.table), "mlp-w");
    snprintf(h.rule, sizeof(h.rule), "sgd:0.05");
    snprintf(h.sync, sizeof(h.sync), "bsp");
    return h;
}

static float *sample_values(uint64_t count)
{
    float *v = malloc(count * sizeof(float));
    ck_assert_ptr_nonnull(v);
    for (uint64_t i = 0; i < count; i++)
        v[i] = (float)i * 0.37f - 3.0f;
    if (count > 4) {
        v[0] = -0.0f;
        v[1] = FLT_MIN / 8; /* subnormal */
        v[2] = FLT_MAX;
        v[3] = -FLT_MAX;
    }
    return v;
}

static uint8_t *encode(const ps_ckpt_header_t *h, const float *v, size_t *len)
{
    char err[256] = "";
    size_t size = ps_ckpt_encoded_size(h);
    ck_assert_uint_gt(size, 0);
    uint8_t *buf = malloc(size);
    ck_assert_ptr_nonnull(buf);
    int64_t n = ps_ckpt_encode(h, v, buf, size, err, sizeof(err));
    ck_assert_msg(n == (int64_t)size, "encode: %lld (%s)", (long long)n, err);
    *len = size;
    return buf;
}

/* Decoding len bytes of buf is refused (-EINVAL, no values) with a message that says `word`. */
static void refused(const uint8_t *buf, size_t len, const char *word)
{
    ps_ckpt_header_t back;
    float *got = NULL;
    char err[256] = "";
    ck_assert_int_eq(ps_ckpt_decode(buf, len, &back, &got, err, sizeof(err)), -EINVAL);
    ck_assert_ptr_null(got);
    ck_assert_msg(strstr(err, word), "%s", err);
}

START_TEST(test_round_trip)
{
    const uint64_t count = 1000;
    ps_ckpt_header_t h = header(count), back;
    float *v = sample_values(count), *got = NULL;
    size_t len;
    uint8_t *buf = encode(&h, v, &len);
    char err[256] = "";
    ck_assert_int_eq(ps_ckpt_decode(buf, len, &back, &got, err, sizeof(err)), 0);
    ck_assert_uint_eq(back.uid, 1234);
    ck_assert_str_eq(back.group, "train.g-1");
    ck_assert_str_eq(back.table, "mlp-w");
    ck_assert_str_eq(back.rule, "sgd:0.05");
    ck_assert_str_eq(back.sync, "bsp");
    ck_assert_uint_eq(back.count, count);
    ck_assert_uint_eq(back.clock, 17);
    ck_assert_int_eq(back.asp, 0);
    ck_assert_int_eq(memcmp(got, v, count * sizeof(float)), 0); /* bit for bit: -0.0 too */
    ck_assert(signbit(got[0]));
    ck_assert_int_eq(ps_ckpt_check_identity(&back, 1234, "train.g-1", "mlp-w", err, sizeof(err)),
                     0);
    free(got);
    free(buf);
    free(v);
}
END_TEST

START_TEST(test_every_truncation_refused)
{
    const uint64_t count = 7;
    ps_ckpt_header_t h = header(count), back;
    float *v = sample_values(count), *got = NULL;
    size_t len;
    uint8_t *buf = encode(&h, v, &len);
    for (size_t cut = 0; cut < len; cut++) {
        char err[256] = "";
        ck_assert_int_eq(ps_ckpt_decode(buf, cut, &back, &got, err, sizeof(err)), -EINVAL);
        ck_assert_ptr_null(got);
        ck_assert_msg(err[0], "no message for a cut at %zu", cut);
    }
    refused(buf, len - 3, "truncated");
    free(buf);
    free(v);
}
END_TEST

START_TEST(test_every_flipped_byte_refused)
{
    const uint64_t count = 9;
    ps_ckpt_header_t h = header(count), back;
    float *v = sample_values(count), *got = NULL;
    size_t len;
    uint8_t *buf = encode(&h, v, &len);
    for (size_t at = 0; at < len; at++)
        for (int bit = 0; bit < 8; bit += 3) {
            char err[256] = "";
            buf[at] ^= (uint8_t)(1u << bit);
            ck_assert_msg(ps_ckpt_decode(buf, len, &back, &got, err, sizeof(err)) < 0,
                          "byte %zu bit %d flipped was taken", at, bit);
            ck_assert_ptr_null(got);
            ck_assert(err[0]);
            buf[at] ^= (uint8_t)(1u << bit);
        }
    /* a value changed: the checksum says so */
    buf[len - 8 - 1] ^= 0x10;
    refused(buf, len, "checksum");
    free(buf);
    free(v);
}
END_TEST

START_TEST(test_trailing_version_magic)
{
    const uint64_t count = 3;
    ps_ckpt_header_t h = header(count);
    float *v = sample_values(count);
    size_t len;
    uint8_t *buf = encode(&h, v, &len);
    uint8_t *longer = calloc(1, len + 1);
    memcpy(longer, buf, len);
    refused(longer, len + 1, "trailing");
    buf[8] = 2; /* version 2 */
    refused(buf, len, "version 2");
    buf[8] = 1;
    buf[0] = 'X';
    refused(buf, len, "not a salus table checkpoint");
    free(longer);
    free(buf);
    free(v);
}
END_TEST

START_TEST(test_foreign_refused)
{
    ps_ckpt_header_t h = header(4);
    char err[256] = "";
    ck_assert_int_eq(ps_ckpt_check_identity(&h, 1234, "train.g-1", "mlp-w", err, sizeof(err)), 0);
    ck_assert_int_eq(ps_ckpt_check_identity(&h, 1235, "train.g-1", "mlp-w", err, sizeof(err)),
                     -EINVAL);
    ck_assert_msg(strstr(err, "uid 1234"), "%s", err);
    ck_assert_int_eq(ps_ckpt_check_identity(&h, 1234, "other", "mlp-w", err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(ps_ckpt_check_identity(&h, 1234, "train.g-1", "mlp-loss", err, sizeof(err)),
                     -EINVAL);
    ck_assert_msg(strstr(err, "'mlp-w'"), "%s", err);
}
END_TEST

START_TEST(test_bad_header_not_encoded)
{
    float v[4] = {1, 2, 3, 4};
    uint8_t buf[512];
    char err[256];
    ps_ckpt_header_t h = header(4);
    h.rule[0] = '\0';
    ck_assert_uint_eq(ps_ckpt_encoded_size(&h), 0);
    ck_assert_int_eq(ps_ckpt_encode(&h, v, buf, sizeof(buf), err, sizeof(err)), -EINVAL);
    h = header(4);
    snprintf(h.rule, sizeof(h.rule), "mul");
    ck_assert_int_eq(ps_ckpt_encode(&h, v, buf, sizeof(buf), err, sizeof(err)), -EINVAL);
    h = header(4);
    snprintf(h.sync, sizeof(h.sync), "asp"); /* asp without its mark */
    ck_assert_int_eq(ps_ckpt_encode(&h, v, buf, sizeof(buf), err, sizeof(err)), -EINVAL);
    h.asp = 1;
    ck_assert_int_gt(ps_ckpt_encode(&h, v, buf, sizeof(buf), err, sizeof(err)), 0);
    h = header(0);
    ck_assert_int_eq(ps_ckpt_encode(&h, v, buf, sizeof(buf), err, sizeof(err)), -EINVAL);
    h = header(4);
    v[2] = NAN;
    ck_assert_int_eq(ps_ckpt_encode(&h, v, buf, sizeof(buf), err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "value 2"), "%s", err);
    v[2] = 3;
    ck_assert_int_eq(ps_ckpt_encode(&h, v, buf, 10, err, sizeof(err)), -ENOSPC);
}
END_TEST

START_TEST(test_paths)
{
    char p[256];
    ck_assert_int_eq(ps_ckpt_path(p, sizeof(p), "/var/lib/salus", 1000, "g1", "mlp-w"), 0);
    ck_assert_str_eq(p, "/var/lib/salus/checkpoints/1000/g1/mlp-w.ckpt");
    ck_assert_int_eq(ps_ckpt_dir(p, sizeof(p), "/s", 0, "g1"), 0);
    ck_assert_str_eq(p, "/s/checkpoints/0/g1");
    ck_assert_int_eq(ps_ckpt_dir(p, sizeof(p), "/s", 0, "a/b"), -EINVAL);
    ck_assert_int_eq(ps_ckpt_dir(p, sizeof(p), "/s", 0, ".."), -EINVAL);
    ck_assert_int_eq(ps_ckpt_path(p, sizeof(p), "/s", 0, "g", "../x"), -EINVAL);
    ck_assert_int_eq(ps_ckpt_path(p, 12, "/s", 0, "g", "table"), -ENAMETOOLONG);
}
END_TEST

static int entries_in(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

START_TEST(test_write_read_files)
{
    char root[] = "/tmp/check_ps_ckpt.XXXXXX", path[512], dir[512], err[256] = "";
    ck_assert_ptr_nonnull(mkdtemp(root));
    const uint64_t count = 5000;
    ps_ckpt_header_t h = header(count), back;
    float *v = sample_values(count), *got = NULL;
    ck_assert_int_eq(ps_ckpt_path(path, sizeof(path), root, h.uid, h.group, h.table), 0);
    ck_assert_int_eq(ps_ckpt_dir(dir, sizeof(dir), root, h.uid, h.group), 0);
    ck_assert_int_eq(ps_ckpt_read(path, &back, &got, err, sizeof(err)), -ENOENT);
    ck_assert_msg(strstr(err, "no checkpoint"), "%s", err);
    ck_assert_int_eq(ps_ckpt_write(path, &h, v, err, sizeof(err)), 0);
    ck_assert_int_eq(entries_in(dir), 1); /* the file alone: no temporary left */
    struct stat st;
    ck_assert_int_eq(stat(dir, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0700);
    ck_assert_int_eq(ps_ckpt_read(path, &back, &got, err, sizeof(err)), 0);
    ck_assert_int_eq(memcmp(got, v, count * sizeof(float)), 0);
    free(got);
    got = NULL;
    /* a second checkpoint replaces the first */
    h.clock = 30;
    v[10] = 42.0f;
    ck_assert_int_eq(ps_ckpt_write(path, &h, v, err, sizeof(err)), 0);
    ck_assert_int_eq(ps_ckpt_read(path, &back, &got, err, sizeof(err)), 0);
    ck_assert_uint_eq(back.clock, 30);
    ck_assert(got[10] == 42.0f);
    free(got);
    got = NULL;
    ck_assert_int_eq(entries_in(dir), 1);
    /* a byte changed on disk: refused, the path in the message */
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, 200, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 200, SEEK_SET);
    fputc(c ^ 0xff, f);
    fclose(f);
    ck_assert_int_eq(ps_ckpt_read(path, &back, &got, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, path) && strstr(err, "checksum"), "%s", err);
    ck_assert_ptr_null(got);
    /* truncated on disk */
    ck_assert_int_eq(truncate(path, 100), 0);
    ck_assert_int_eq(ps_ckpt_read(path, &back, &got, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "truncated"), "%s", err);
    /* the writer into a directory it cannot make: an error, nothing left */
    char bad[600];
    snprintf(bad, sizeof(bad), "%s/x.ckpt/inner/t.ckpt", path);
    ck_assert_int_lt(ps_ckpt_write(bad, &h, v, err, sizeof(err)), 0);
    ck_assert(err[0]);
    unlink(path);
    rmdir(dir);
    snprintf(dir, sizeof(dir), "%s/checkpoints/%u", root, (unsigned)h.uid);
    rmdir(dir);
    snprintf(dir, sizeof(dir), "%s/checkpoints", root);
    rmdir(dir);
    ck_assert_int_eq(rmdir(root), 0);
    free(v);
}
END_TEST

TCase *ps_ckpt_service_tcase(void);

static Suite *ps_ckpt_suite(void)
{
    Suite *s = suite_create("ps_ckpt");
    TCase *format = tcase_create("format");
    tcase_add_test(format, test_round_trip);
    tcase_add_test(format, test_every_truncation_refused);
    tcase_add_test(format, test_every_flipped_byte_refused);
    tcase_add_test(format, test_trailing_version_magic);
    tcase_add_test(format, test_foreign_refused);
    tcase_add_test(format, test_bad_header_not_encoded);
    tcase_add_test(format, test_paths);
    suite_add_tcase(s, format);
    TCase *files = tcase_create("files");
    tcase_add_test(files, test_write_read_files);
    suite_add_tcase(s, files);
    suite_add_tcase(s, ps_ckpt_service_tcase()); /* check_ps_ckpt_service.c */
    return s;
}

int main(void)
{
    return check_run_suite(ps_ckpt_suite());
}
