/* Unit tests of the job fields that register and submit share (salusd/jobs.c:
 * jobs_fields_parse, jobs_name_valid): one validation for both requests. */
#include "jobs.h"

#include "check_run.h"

#include <check.h>
#include <errno.h>
#include <msgpack.h>
#include <string.h>

/* the daemon's clock lives in main.c, outside the library: a fixed one here (nothing in
 * these tests depends on time) */
uint64_t salusd_now_ns(void)
{
    return 1000000000ull;
}

/* A request body built key by key, unpacked as the daemon sees it. */
typedef struct body_s {
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    msgpack_unpacked unpacked;
} body_t;

static void body_begin(body_t *b, uint32_t pairs)
{
    msgpack_sbuffer_init(&b->sbuf);
    msgpack_packer_init(&b->pk, &b->sbuf, msgpack_sbuffer_write);
    msgpack_unpacked_init(&b->unpacked);
    msgpack_pack_map(&b->pk, pairs);
}

static const msgpack_object *body_end(body_t *b)
{
    size_t offset = 0;
    ck_assert_int_eq(msgpack_unpack_next(&b->unpacked, b->sbuf.data, b->sbuf.size, &offset),
                     MSGPACK_UNPACK_SUCCESS);
    return &b->unpacked.data;
}

static void body_free(body_t *b)
{
    msgpack_unpacked_destroy(&b->unpacked);
    msgpack_sbuffer_destroy(&b->sbuf);
}

START_TEST(test_all_fields)
{
    body_t b;
    jobs_fields_t f;
    body_begin(&b, 6);
    proto_pack_kv_str(&b.pk, "name", "train résumé");
    proto_pack_kv_uint(&b.pk, "iterations", 40);
    proto_pack_kv_uint(&b.pk, "persistent_bytes", 3ull << 30);
    proto_pack_kv_uint(&b.pk, "ephemeral_bytes", 1ull << 50);
    proto_pack_kv_int(&b.pk, "priority", -5);
    proto_pack_kv_uint(&b.pk, "job_id", 7); /* another request's field: ignored here */
    ck_assert_int_eq(jobs_fields_parse(body_end(&b), &f), 0);
    ck_assert_str_eq(f.name, "train résumé");
    ck_assert_uint_eq(f.iterations, 40);
    ck_assert_uint_eq(f.persistent_bytes, 3ull << 30);
    ck_assert_uint_eq(f.ephemeral_bytes, 1ull << 50);
    ck_assert_int_eq(f.priority, -5);
    body_free(&b);
}
END_TEST

START_TEST(test_every_field_optional)
{
    body_t b;
    jobs_fields_t f;
    memset(&f, 0x5a, sizeof(f));
    body_begin(&b, 0);
    ck_assert_int_eq(jobs_fields_parse(body_end(&b), &f), 0);
    ck_assert_str_eq(f.name, "");
    ck_assert_uint_eq(f.iterations, 0);
    ck_assert_uint_eq(f.persistent_bytes, 0);
    ck_assert_uint_eq(f.ephemeral_bytes, 0);
    ck_assert_int_eq(f.priority, 0);
    body_free(&b);
}
END_TEST

/* wrong types and sizes above 2^50: -EINVAL (the request's usage answers) */
START_TEST(test_malformed)
{
    body_t b;
    jobs_fields_t f;
    char long_name[REGISTRY_NAME_BYTES + 1];
    memset(long_name, 'x', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    body_begin(&b, 1);
    proto_pack_kv_str(&b.pk, "iterations", "many");
    ck_assert_int_eq(jobs_fields_parse(body_end(&b), &f), -EINVAL);
    body_free(&b);
    body_begin(&b, 1);
    proto_pack_kv_uint(&b.pk, "persistent_bytes", (1ull << 50) + 1);
    ck_assert_int_eq(jobs_fields_parse(body_end(&b), &f), -EINVAL);
    body_free(&b);
    body_begin(&b, 1);
    proto_pack_kv_uint(&b.pk, "ephemeral_bytes", UINT64_MAX);
    ck_assert_int_eq(jobs_fields_parse(body_end(&b), &f), -EINVAL);
    body_free(&b);
    body_begin(&b, 1);
    proto_pack_kv_int(&b.pk, "iterations", -1);
    ck_assert_int_eq(jobs_fields_parse(body_end(&b), &f), -EINVAL);
    body_free(&b);
    body_begin(&b, 1);
    proto_pack_kv_str(&b.pk, "priority", "high");
    ck_assert_int_eq(jobs_fields_parse(body_end(&b), &f), -EINVAL);
    body_free(&b);
    body_begin(&b, 1);
    proto_pack_kv_uint(&b.pk, "name", 3);
    ck_assert_int_eq(jobs_fields_parse(body_end(&b), &f), -EINVAL);
    body_free(&b);
    body_begin(&b, 1);
    proto_pack_kv_str(&b.pk, "name", long_name);
    ck_assert_int_eq(jobs_fields_parse(body_end(&b), &f), -EINVAL);
    body_free(&b);
}
END_TEST

/* well-formed but not a name that may reach a terminal: -EILSEQ */
START_TEST(test_bad_names)
{
    static const char *const bad[] = {"a\nb", "tab\there", "esc\x1b[2J", "del\x7f",
                                      "c1 \xc2\x9b", "broken \xc3", "overlong \xc0\xaf"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        body_t b;
        jobs_fields_t f;
        body_begin(&b, 2);
        proto_pack_kv_str(&b.pk, "name", bad[i]);
        proto_pack_kv_uint(&b.pk, "iterations", 3);
        ck_assert_msg(jobs_fields_parse(body_end(&b), &f) == -EILSEQ, "name %zu accepted", i);
        ck_assert_int_eq(jobs_name_valid(bad[i]), 0);
        body_free(&b);
    }
    ck_assert_int_eq(jobs_name_valid("ok-name_1 ✓"), 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("jobs");
    TCase *tc = tcase_create("fields");
    tcase_add_test(tc, test_all_fields);
    tcase_add_test(tc, test_every_field_optional);
    tcase_add_test(tc, test_malformed);
    tcase_add_test(tc, test_bad_names);
    suite_add_tcase(s, tc);
    return check_run_suite(s);
}
