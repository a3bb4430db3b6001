/* Unit tests of the wire protocol codec (common/proto.c, common/proto_body.c). */
#include "proto.h"

#include "check_run.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int decode_frame(const proto_enc_t *e, proto_msg_t *msg)
{
    uint32_t len;
    int rc = proto_frame_length((const uint8_t *)e->sbuf.data, e->sbuf.size,
                                PROTO_DEFAULT_MAX_FRAME_BYTES, &len);
    if (rc < 0)
        return rc;
    ck_assert_uint_eq(len + PROTO_HEADER_BYTES, e->sbuf.size);
    return proto_decode((const uint8_t *)e->sbuf.data + PROTO_HEADER_BYTES, len, msg, NULL);
}

/* Packs an arbitrary msgpack value into a payload (no length prefix). */
typedef struct {
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
} raw_t;

static void raw_init(raw_t *r)
{
    msgpack_sbuffer_init(&r->sbuf);
    msgpack_packer_init(&r->pk, &r->sbuf, msgpack_sbuffer_write);
}

static int raw_decode(raw_t *r, const char **why)
{
    proto_msg_t msg;
    int rc = proto_decode((const uint8_t *)r->sbuf.data, r->sbuf.size, &msg, why);
    if (rc == PROTO_OK)
        proto_msg_free(&msg);
    msgpack_sbuffer_destroy(&r->sbuf);
    return rc;
}

START_TEST(test_request_roundtrip)
{
    proto_enc_t e;
    proto_msg_t msg;
    proto_enc_init(&e);
    proto_enc_begin(&e, PROTO_REQUEST, 42, "register", 5);
    proto_pack_kv_str(&e.pk, "name", "resnet");
    proto_pack_kv_uint(&e.pk, "iterations", 1000);
    proto_pack_kv_int(&e.pk, "priority", -3);
    proto_pack_kv_bool(&e.pk, "flag", 1);
    proto_pack_kv_double(&e.pk, "ratio", 0.5);
    proto_enc_finish(&e);
    ck_assert_int_eq(decode_frame(&e, &msg), PROTO_OK);
    ck_assert_int_eq(msg.kind, PROTO_REQUEST);
    ck_assert_uint_eq(msg.id, 42);
    ck_assert_str_eq(msg.op, "register");

    char name[16];
    uint64_t u;
    int64_t i;
    int b;
    ck_assert_int_eq(proto_get_str_copy(&msg.body, "name", name, sizeof(name)), 0);
    ck_assert_str_eq(name, "resnet");
    ck_assert_int_eq(proto_get_uint(&msg.body, "iterations", &u), 0);
    ck_assert_uint_eq(u, 1000);
    ck_assert_int_eq(proto_get_int(&msg.body, "priority", &i), 0);
    ck_assert_int_eq(i, -3);
    ck_assert_int_eq(proto_get_int(&msg.body, "iterations", &i), 0);
    ck_assert_int_eq(i, 1000);
    ck_assert_int_eq(proto_get_bool(&msg.body, "flag", &b), 0);
    ck_assert_int_eq(b, 1);
    /* wrong types and absent keys are errors, not guesses */
    ck_assert_int_eq(proto_get_uint(&msg.body, "name", &u), -EINVAL);
    ck_assert_int_eq(proto_get_uint(&msg.body, "priority", &u), -EINVAL);
    ck_assert_int_eq(proto_get_str_copy(&msg.body, "missing", name, sizeof(name)), -ENOENT);
    ck_assert_int_eq(proto_get_str_copy(&msg.body, "name", name, 4), -EINVAL);
    proto_msg_free(&msg);
    proto_enc_destroy(&e);
}
END_TEST

/* An encoder moved by value between frames (the shim hands its whole client struct over when
 * it re-attaches to a restarted salusd) writes its next frame into its own buffer, not through
 * the packer's pointer to the copy it was moved from. */
START_TEST(test_encoder_moved_by_value)
{
    proto_enc_t *before = malloc(sizeof(*before));
    ck_assert_ptr_nonnull(before);
    proto_enc_init(before);
    proto_enc_begin(before, PROTO_REQUEST, 1, "hello", 0);
    proto_enc_finish(before);
    proto_enc_t e = *before;
    memset(before, 0xA5, sizeof(*before)); /* the old place is gone (a stack frame left) */
    free(before);
    proto_msg_t msg;
    proto_enc_begin(&e, PROTO_REQUEST, 7, "alloc", 1);
    proto_pack_kv_uint(&e.pk, "bytes", 134217728);
    proto_enc_finish(&e);
    ck_assert_int_eq(decode_frame(&e, &msg), PROTO_OK);
    ck_assert_uint_eq(msg.id, 7);
    ck_assert_str_eq(msg.op, "alloc");
    uint64_t bytes = 0;
    ck_assert_int_eq(proto_get_uint(&msg.body, "bytes", &bytes), 0);
    ck_assert_uint_eq(bytes, 134217728);
    proto_msg_free(&msg);
    proto_enc_destroy(&e);
}
END_TEST

START_TEST(test_hello_and_error)
{
    proto_enc_t e;
    proto_msg_t msg;
    uint64_t v;
    char text[64];
    proto_enc_init(&e);
    proto_enc_hello(&e, PROTO_VERSION, "check");
    ck_assert_int_eq(decode_frame(&e, &msg), PROTO_OK);
    ck_assert_int_eq(msg.kind, PROTO_HELLO);
    ck_assert_int_eq(proto_get_uint(&msg.body, "version", &v), 0);
    ck_assert_uint_eq(v, PROTO_VERSION);
    proto_msg_free(&msg);

    proto_enc_error(&e, 7, PROTO_EVERSION, "version 9 is not supported");
    ck_assert_int_eq(decode_frame(&e, &msg), PROTO_OK);
    ck_assert_int_eq(msg.kind, PROTO_ERROR);
    ck_assert_uint_eq(msg.id, 7);
    ck_assert_int_eq(proto_get_uint(&msg.body, "code", &v), 0);
    ck_assert_uint_eq(v, PROTO_EVERSION);
    ck_assert_int_eq(proto_get_str_copy(&msg.body, "message", text, sizeof(text)), 0);
    ck_assert_str_eq(text, "version 9 is not supported");
    ck_assert_int_eq(proto_get_str_copy(&msg.body, "name", text, sizeof(text)), 0);
    ck_assert_str_eq(text, "version_mismatch");
    proto_msg_free(&msg);
    proto_enc_destroy(&e);
}
END_TEST

START_TEST(test_frame_length)
{
    uint8_t hdr[4] = {0, 0, 1, 0};
    uint32_t len;
    ck_assert_int_eq(proto_frame_length(hdr, 3, 1024, &len), PROTO_NEED_MORE);
    ck_assert_int_eq(proto_frame_length(hdr, 4, 1024, &len), PROTO_OK);
    ck_assert_uint_eq(len, 256);
    ck_assert_int_eq(proto_frame_length(hdr, 4, 255, &len), PROTO_E_TOO_BIG);
    uint8_t zero[4] = {0};
    ck_assert_int_eq(proto_frame_length(zero, 4, 1024, &len), PROTO_E_TOO_BIG);
    uint8_t huge[4] = {0xff, 0xff, 0xff, 0xff};
    ck_assert_int_eq(proto_frame_length(huge, 4, PROTO_DEFAULT_MAX_FRAME_BYTES, &len),
                     PROTO_E_TOO_BIG);
}
END_TEST

START_TEST(test_wrong_shapes)
{
    raw_t r;
    const char *why = NULL;

    raw_init(&r); /* not an array */
    msgpack_pack_map(&r.pk, 0);
    ck_assert_int_eq(raw_decode(&r, &why), PROTO_E_TYPE);
    ck_assert_ptr_nonnull(why);

    raw_init(&r); /* array of the wrong size */
    msgpack_pack_array(&r.pk, 3);
    msgpack_pack_uint8(&r.pk, 2);
    msgpack_pack_uint8(&r.pk, 1);
    proto_pack_str(&r.pk, "x");
    ck_assert_int_eq(raw_decode(&r, NULL), PROTO_E_TYPE);

    raw_init(&r); /* kind is a string */
    msgpack_pack_array(&r.pk, 4);
    proto_pack_str(&r.pk, "req");
    msgpack_pack_uint8(&r.pk, 1);
    proto_pack_str(&r.pk, "status");
    msgpack_pack_nil(&r.pk);
    ck_assert_int_eq(raw_decode(&r, NULL), PROTO_E_TYPE);

    raw_init(&r); /* unknown kind */
    msgpack_pack_array(&r.pk, 4);
    msgpack_pack_uint8(&r.pk, 99);
    msgpack_pack_uint8(&r.pk, 1);
    proto_pack_str(&r.pk, "status");
    msgpack_pack_nil(&r.pk);
    ck_assert_int_eq(raw_decode(&r, NULL), PROTO_E_KIND);

    raw_init(&r); /* negative id */
    msgpack_pack_array(&r.pk, 4);
    msgpack_pack_uint8(&r.pk, PROTO_REQUEST);
    msgpack_pack_int8(&r.pk, -1);
    proto_pack_str(&r.pk, "status");
    msgpack_pack_nil(&r.pk);
    ck_assert_int_eq(raw_decode(&r, NULL), PROTO_E_TYPE);

    raw_init(&r); /* body is an array */
    msgpack_pack_array(&r.pk, 4);
    msgpack_pack_uint8(&r.pk, PROTO_REQUEST);
    msgpack_pack_uint8(&r.pk, 1);
    proto_pack_str(&r.pk, "status");
    msgpack_pack_array(&r.pk, 0);
    ck_assert_int_eq(raw_decode(&r, NULL), PROTO_E_TYPE);

    raw_init(&r); /* body key is an integer */
    msgpack_pack_array(&r.pk, 4);
    msgpack_pack_uint8(&r.pk, PROTO_REQUEST);
    msgpack_pack_uint8(&r.pk, 1);
    proto_pack_str(&r.pk, "status");
    msgpack_pack_map(&r.pk, 1);
    msgpack_pack_uint8(&r.pk, 1);
    msgpack_pack_uint8(&r.pk, 1);
    ck_assert_int_eq(raw_decode(&r, NULL), PROTO_E_TYPE);

    raw_init(&r); /* op too long */
    msgpack_pack_array(&r.pk, 4);
    msgpack_pack_uint8(&r.pk, PROTO_REQUEST);
    msgpack_pack_uint8(&r.pk, 1);
    char long_op[PROTO_MAX_OP_BYTES + 2];
    memset(long_op, 'a', sizeof(long_op) - 1);
    long_op[sizeof(long_op) - 1] = '\0';
    proto_pack_str(&r.pk, long_op);
    msgpack_pack_nil(&r.pk);
    ck_assert_int_eq(raw_decode(&r, NULL), PROTO_E_TYPE);

    raw_init(&r); /* nil body is an empty map */
    msgpack_pack_array(&r.pk, 4);
    msgpack_pack_uint8(&r.pk, PROTO_REQUEST);
    msgpack_pack_uint8(&r.pk, 1);
    proto_pack_str(&r.pk, "status");
    msgpack_pack_nil(&r.pk);
    ck_assert_int_eq(raw_decode(&r, NULL), PROTO_OK);
}
END_TEST

START_TEST(test_malformed_bytes)
{
    proto_msg_t msg;
    /* truncated: a valid frame cut at every length */
    proto_enc_t e;
    proto_enc_init(&e);
    proto_enc_begin(&e, PROTO_REQUEST, 5, "register", 1);
    proto_pack_kv_str(&e.pk, "name", "a-job-name");
    proto_enc_finish(&e);
    const uint8_t *payload = (const uint8_t *)e.sbuf.data + PROTO_HEADER_BYTES;
    size_t full = e.sbuf.size - PROTO_HEADER_BYTES;
    for (size_t n = 1; n < full; n++)
        ck_assert_int_eq(proto_decode(payload, n, &msg, NULL), PROTO_E_MALFORMED);
    /* trailing bytes */
    uint8_t *extra = malloc(full + 1);
    memcpy(extra, payload, full);
    extra[full] = 0xc0;
    ck_assert_int_eq(proto_decode(extra, full + 1, &msg, NULL), PROTO_E_MALFORMED);
    free(extra);
    proto_enc_destroy(&e);

    /* the reserved byte 0xc1 */
    const uint8_t reserved[] = {0x94, 0x02, 0x01, 0xc1, 0xc0};
    ck_assert_int_eq(proto_decode(reserved, sizeof(reserved), &msg, NULL), PROTO_E_MALFORMED);
    /* an array32 claiming 4 billion elements in 5 bytes: refused before any allocation */
    const uint8_t liar[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
    ck_assert_int_eq(proto_scan(liar, sizeof(liar)), PROTO_E_MALFORMED);
    ck_assert_int_eq(proto_decode(liar, sizeof(liar), &msg, NULL), PROTO_E_MALFORMED);
    /* a str32 claiming more bytes than present */
    const uint8_t long_str[] = {0xdb, 0x00, 0x10, 0x00, 0x00, 'a'};
    ck_assert_int_eq(proto_scan(long_str, sizeof(long_str)), PROTO_E_MALFORMED);
    /* nesting deeper than PROTO_MAX_DEPTH */
    uint8_t deep[64];
    memset(deep, 0x91, sizeof(deep));
    deep[sizeof(deep) - 1] = 0xc0;
    ck_assert_int_eq(proto_scan(deep, sizeof(deep)), PROTO_E_MALFORMED);
    /* nesting within the limit is fine for the scanner */
    uint8_t shallow[PROTO_MAX_DEPTH];
    memset(shallow, 0x91, sizeof(shallow));
    shallow[sizeof(shallow) - 1] = 0xc0;
    ck_assert_int_eq(proto_scan(shallow, sizeof(shallow)), PROTO_OK);
}
END_TEST

START_TEST(test_random_bytes_never_crash)
{
    /* A deterministic stream of random and bit-flipped payloads; run under the sanitizers
     * in CI, where any overread, leak or undefined behaviour fails the test. */
    unsigned seed = 12345;
    proto_enc_t e;
    proto_enc_init(&e);
    proto_enc_begin(&e, PROTO_REQUEST, 9, "ps", 2);
    proto_pack_kv_str(&e.pk, "name", "abc");
    proto_pack_kv_uint(&e.pk, "n", 77777);
    proto_enc_finish(&e);
    size_t full = e.sbuf.size - PROTO_HEADER_BYTES;
    uint8_t buf[256];
    int ok = 0;
    for (int round = 0; round < 20000; round++) {
        size_t n;
        if (round % 2) {
            n = (size_t)(rand_r(&seed) % sizeof(buf)) + 1;
            for (size_t i = 0; i < n; i++)
                buf[i] = (uint8_t)rand_r(&seed);
        } else {
            n = full;
            memcpy(buf, e.sbuf.data + PROTO_HEADER_BYTES, n);
            int flips = 1 + rand_r(&seed) % 3;
            for (int f = 0; f < flips; f++)
                buf[rand_r(&seed) % n] ^= (uint8_t)(1u << (rand_r(&seed) % 8));
        }
        proto_msg_t msg;
        if (proto_decode(buf, n, &msg, NULL) == PROTO_OK) {
            ok++;
            ck_assert(msg.kind >= PROTO_HELLO && msg.kind <= PROTO_ERROR);
            ck_assert_int_eq(msg.body.type, MSGPACK_OBJECT_MAP);
            proto_msg_free(&msg);
        }
    }
    ck_assert_int_gt(ok, 0); /* some flips land in values and stay valid */
    proto_enc_destroy(&e);
}
END_TEST

static Suite *proto_suite(void)
{
    Suite *s = suite_create("proto");
    TCase *tc = tcase_create("codec");
    tcase_add_test(tc, test_request_roundtrip);
    tcase_add_test(tc, test_encoder_moved_by_value);
    tcase_add_test(tc, test_hello_and_error);
    tcase_add_test(tc, test_frame_length);
    tcase_add_test(tc, test_wrong_shapes);
    tcase_add_test(tc, test_malformed_bytes);
    tcase_add_test(tc, test_random_bytes_never_crash);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run_suite(proto_suite());
}
