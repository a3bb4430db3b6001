/* Unit tests of the frame reader of the control socket and the daemon links
 * (salusd/base/frame_read.c): frames split across reads, several in one read, lengths out of
 * bounds refused from the header alone, nothing drained but what the caller drains. */
#include "frame_read.h"

#include "proto.h"

#include "check_run.h"

#include <check.h>
#include <errno.h>
#include <event2/buffer.h>
#include <stdlib.h>
#include <string.h>

static void add_header(struct evbuffer *in, uint32_t len)
{
    uint8_t h[PROTO_HEADER_BYTES] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16),
                                     (uint8_t)(len >> 8), (uint8_t)len};
    ck_assert_int_eq(evbuffer_add(in, h, sizeof(h)), 0);
}

static void add_bytes(struct evbuffer *in, const void *p, size_t n)
{
    ck_assert_int_eq(evbuffer_add(in, p, n), 0);
}

START_TEST(test_whole_frame)
{
    struct evbuffer *in = evbuffer_new();
    frame_read_t f;
    char why[128] = "";
    add_header(in, 5);
    add_bytes(in, "hello", 5);
    ck_assert_int_eq(frame_read_next(in, 1, 1024, &f, why, sizeof(why)), FRAME_READ_READY);
    ck_assert_uint_eq(f.payload_bytes, 5);
    ck_assert_uint_eq(f.frame_bytes, PROTO_HEADER_BYTES + 5);
    ck_assert(f.payload == f.frame + PROTO_HEADER_BYTES);
    ck_assert_int_eq(memcmp(f.payload, "hello", 5), 0);
    ck_assert_uint_eq(evbuffer_get_length(in), PROTO_HEADER_BYTES + 5); /* nothing drained */
    frame_read_drain(in, &f);
    ck_assert_uint_eq(evbuffer_get_length(in), 0);
    ck_assert_int_eq(frame_read_next(in, 1, 1024, &f, why, sizeof(why)), FRAME_READ_MORE);
    evbuffer_free(in);
}
END_TEST

/* A frame that arrives a byte at a time (header included) is ready only with its last byte,
 * and the two buffer chains it arrived in are read as one. */
START_TEST(test_split_across_reads)
{
    struct evbuffer *in = evbuffer_new();
    uint8_t frame[PROTO_HEADER_BYTES + 300];
    frame_read_t f;
    char why[128] = "";
    frame[0] = 0;
    frame[1] = 0;
    frame[2] = 300 >> 8;
    frame[3] = 300 & 0xff;
    for (size_t i = 0; i < 300; i++)
        frame[PROTO_HEADER_BYTES + i] = (uint8_t)(i * 7);
    for (size_t i = 0; i < sizeof(frame); i++) {
        ck_assert_int_eq(frame_read_next(in, 1, 1024, &f, why, sizeof(why)), FRAME_READ_MORE);
        /* one chain per byte: the reader must make the frame contiguous */
        struct evbuffer *piece = evbuffer_new();
        add_bytes(piece, &frame[i], 1);
        ck_assert_int_eq(evbuffer_add_buffer(in, piece), 0);
        evbuffer_free(piece);
    }
    ck_assert_int_eq(frame_read_next(in, 1, 1024, &f, why, sizeof(why)), FRAME_READ_READY);
    ck_assert_uint_eq(f.payload_bytes, 300);
    ck_assert_int_eq(memcmp(f.frame, frame, sizeof(frame)), 0);
    frame_read_drain(in, &f);
    ck_assert_uint_eq(evbuffer_get_length(in), 0);
    evbuffer_free(in);
}
END_TEST

/* Two frames and the start of a third in one read: two are ready in turn, then more. */
START_TEST(test_frames_back_to_back)
{
    struct evbuffer *in = evbuffer_new();
    frame_read_t f;
    char why[128] = "";
    add_header(in, 3);
    add_bytes(in, "abc", 3);
    add_header(in, 1);
    add_bytes(in, "d", 1);
    add_header(in, 4);
    add_bytes(in, "ef", 2);
    ck_assert_int_eq(frame_read_next(in, 1, 1024, &f, why, sizeof(why)), FRAME_READ_READY);
    ck_assert_int_eq(memcmp(f.payload, "abc", 3), 0);
    frame_read_drain(in, &f);
    ck_assert_int_eq(frame_read_next(in, 1, 1024, &f, why, sizeof(why)), FRAME_READ_READY);
    ck_assert_uint_eq(f.payload_bytes, 1);
    ck_assert_int_eq(f.payload[0], 'd');
    frame_read_drain(in, &f);
    ck_assert_int_eq(frame_read_next(in, 1, 1024, &f, why, sizeof(why)), FRAME_READ_MORE);
    add_bytes(in, "gh", 2);
    ck_assert_int_eq(frame_read_next(in, 1, 1024, &f, why, sizeof(why)), FRAME_READ_READY);
    ck_assert_int_eq(memcmp(f.payload, "efgh", 4), 0);
    frame_read_drain(in, &f);
    ck_assert_uint_eq(evbuffer_get_length(in), 0);
    evbuffer_free(in);
}
END_TEST

/* A header of fewer than 4 bytes is a part of a frame, whatever its bytes say so far. */
START_TEST(test_truncated_header)
{
    struct evbuffer *in = evbuffer_new();
    frame_read_t f;
    char why[128] = "";
    for (int n = 1; n < PROTO_HEADER_BYTES; n++) {
        add_bytes(in, "\xff", 1);
        ck_assert_int_eq(frame_read_next(in, 1, 1024, &f, why, sizeof(why)), FRAME_READ_MORE);
        ck_assert_uint_eq(evbuffer_get_length(in), (size_t)n);
    }
    add_bytes(in, "\xff", 1); /* now whole: 0xffffffff, over the cap */
    ck_assert_int_eq(frame_read_next(in, 1, 1024, &f, why, sizeof(why)), -EMSGSIZE);
    evbuffer_free(in);
}
END_TEST

START_TEST(test_zero_length)
{
    struct evbuffer *in = evbuffer_new();
    frame_read_t f;
    char why[128] = "";
    add_header(in, 0);
    add_bytes(in, "xyz", 3);
    ck_assert_int_eq(frame_read_next(in, 1, 1024, &f, why, sizeof(why)), -EMSGSIZE);
    ck_assert_str_eq(why, "frame length is zero");
    /* zero is refused even when the caller allows anything from 0 up */
    ck_assert_int_eq(frame_read_next(in, 0, 1024, &f, why, sizeof(why)), -EMSGSIZE);
    ck_assert_uint_eq(evbuffer_get_length(in), PROTO_HEADER_BYTES + 3); /* the caller's */
    evbuffer_free(in);
}
END_TEST

/* Over the cap is refused from the header alone (no payload sent, none waited for); the cap
 * itself is allowed. */
START_TEST(test_oversized_length)
{
    struct evbuffer *in = evbuffer_new();
    frame_read_t f;
    char why[128] = "";
    add_header(in, 1025);
    ck_assert_int_eq(frame_read_next(in, 1, 1024, &f, why, sizeof(why)), -EMSGSIZE);
    ck_assert_str_eq(why, "frame length 1025 is over the size cap (1024 bytes)");
    evbuffer_drain(in, PROTO_HEADER_BYTES);
    add_header(in, UINT32_MAX);
    ck_assert_int_eq(frame_read_next(in, 1, PROTO_DEFAULT_MAX_FRAME_BYTES, &f, why,
                                     sizeof(why)), -EMSGSIZE);
    ck_assert_ptr_nonnull(strstr(why, "over the size cap"));
    evbuffer_drain(in, PROTO_HEADER_BYTES);
    add_header(in, 1024);
    uint8_t *body = calloc(1, 1024);
    ck_assert_ptr_nonnull(body);
    add_bytes(in, body, 1023);
    ck_assert_int_eq(frame_read_next(in, 1, 1024, &f, why, sizeof(why)), FRAME_READ_MORE);
    add_bytes(in, body, 1);
    ck_assert_int_eq(frame_read_next(in, 1, 1024, &f, why, sizeof(why)), FRAME_READ_READY);
    ck_assert_uint_eq(f.payload_bytes, 1024);
    free(body);
    evbuffer_free(in);
}
END_TEST

/* A floor (a link's frame ends with its tag): a length at or under it is refused. */
START_TEST(test_under_the_least)
{
    struct evbuffer *in = evbuffer_new();
    frame_read_t f;
    char why[128] = "";
    add_header(in, 16);
    ck_assert_int_eq(frame_read_next(in, 17, 1024, &f, why, sizeof(why)), -EMSGSIZE);
    ck_assert_str_eq(why, "frame length 16 is under the least a frame holds here (17 bytes)");
    evbuffer_drain(in, PROTO_HEADER_BYTES);
    add_header(in, 17);
    ck_assert_int_eq(frame_read_next(in, 17, 1024, &f, why, sizeof(why)), FRAME_READ_MORE);
    evbuffer_free(in);
}
END_TEST

/* A small why buffer is cut, never overrun. */
START_TEST(test_short_why)
{
    struct evbuffer *in = evbuffer_new();
    frame_read_t f;
    char why[8];
    add_header(in, 5000);
    ck_assert_int_eq(frame_read_next(in, 1, 1024, &f, why, sizeof(why)), -EMSGSIZE);
    ck_assert_str_eq(why, "frame l");
    evbuffer_free(in);
}
END_TEST

static Suite *frame_read_suite(void)
{
    Suite *s = suite_create("frame_read");
    TCase *tc = tcase_create("reader");
    tcase_add_test(tc, test_whole_frame);
    tcase_add_test(tc, test_split_across_reads);
    tcase_add_test(tc, test_frames_back_to_back);
    tcase_add_test(tc, test_truncated_header);
    tcase_add_test(tc, test_zero_length);
    tcase_add_test(tc, test_oversized_length);
    tcase_add_test(tc, test_under_the_least);
    tcase_add_test(tc, test_short_why);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run_suite(frame_read_suite());
}
