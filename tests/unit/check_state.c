/* Unit tests for salusd's state file (salusd/state.c): a round trip keeps every field; the
 * write is atomic (no temporary file left, an old file replaced whole); a corrupt, truncated,
 * foreign, newer or malformed file is refused with a message saying which, and nothing of it
 * is used. */
#include "check_run.h"
#include "proto.h"
#include "state.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];
static char path[128];

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/check-state.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/sub/salusd.state", dir);
}

static void teardown(void)
{
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Two jobs, one with two chunks, and a policy state of 5 bytes. */
static void sample(salusd_state_t *st)
{
    static state_chunk_t chunks[2] = {{.id = 3, .bytes = 64u << 20, .dev = 7, .ino = 1001},
                                      {.id = 9, .bytes = 2u << 20, .dev = 7, .ino = 1002}};
    static state_job_t jobs[2];
    static uint8_t policy_state[5] = {1, 2, 3, 4, 5};
    memset(st, 0, sizeof(*st));
    memset(jobs, 0, sizeof(jobs));
    jobs[0] = (state_job_t){.id = 4, .uid = 1000, .gid = 100, .pid = 4242, .name = "train",
                            .gpu = 0, .lane = 2, .persistent_bytes = 128u << 20,
                            .ephemeral_bytes = 256u << 20, .iterations_expected = 500,
                            .priority = -3, .page_dev = 7, .page_ino = 999,
                            .charged_bytes = 4096, .chunks = chunks, .chunk_count = 2};
    jobs[1] = (state_job_t){.id = 6, .uid = 0, .pid = 1, .name = "infer", .gpu = 1, .lane = 5,
                            .persistent_bytes = 1, .ephemeral_bytes = 2,
                            .latency_target_ns = 20000000, .request_ns = 5000000};
    st->next_job_id = 11;
    snprintf(st->policy, sizeof(st->policy), "pack");
    st->policy_state = policy_state;
    st->policy_state_bytes = sizeof(policy_state);
    st->jobs = jobs;
    st->job_count = 2;
}

static uint8_t *encode(size_t *bytes)
{
    salusd_state_t st;
    uint8_t *image = NULL;
    sample(&st);
    ck_assert_int_eq(state_encode(&st, &image, bytes), 0);
    return image;
}

static void write_raw(const uint8_t *image, size_t bytes)
{
    char sub[96];
    snprintf(sub, sizeof(sub), "%s/sub", dir);
    mkdir(sub, 0700);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(image, 1, bytes, f), bytes);
    fclose(f);
}

/* Reads path back and expects a refusal whose message contains want. */
static void expect_refused(const char *want)
{
    salusd_state_t st;
    char err[512] = "";
    int rc = state_read_file(path, &st, err, sizeof(err));
    ck_assert_int_lt(rc, 0);
    ck_assert_msg(strstr(err, want) != NULL, "message '%s' lacks '%s'", err, want);
    ck_assert_msg(strstr(err, path) != NULL, "message '%s' does not name the file", err);
    ck_assert_uint_eq(st.job_count, 0);
    ck_assert_ptr_null(st.jobs);
}

/* Writes body as a whole state file of format 1 (header, checksum) and frees it. */
static void write_body(msgpack_sbuffer *sbuf)
{
    uint8_t *image = malloc(24 + sbuf->size);
    ck_assert_ptr_nonnull(image);
    memcpy(image, "SALUSST", 8);
    uint32_t version = 1, size = (uint32_t)sbuf->size;
    memcpy(image + 8, &version, 4);
    memcpy(image + 12, &size, 4);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < sbuf->size; i++) {
        h ^= (uint8_t)sbuf->data[i];
        h *= 0x100000001b3ull;
    }
    memcpy(image + 16, &h, 8);
    memcpy(image + 24, sbuf->data, sbuf->size);
    write_raw(image, 24 + sbuf->size);
    free(image);
    msgpack_sbuffer_destroy(sbuf);
}

/* A file with one job record as the salusd before classes wrote it (its 16 fields), plus
 * extra_keys more that the caller packs after this returns (the record's last ones). */
static void begin_old_file(msgpack_sbuffer *sbuf, msgpack_packer *pk, uint32_t extra_keys)
{
    msgpack_sbuffer_init(sbuf);
    msgpack_packer_init(pk, sbuf, msgpack_sbuffer_write);
    msgpack_pack_map(pk, 4);
    proto_pack_kv_uint(pk, "next_job_id", 5);
    proto_pack_kv_str(pk, "policy", "slo");
    proto_pack_str(pk, "policy_state");
    msgpack_pack_bin(pk, 0);
    proto_pack_str(pk, "jobs");
    msgpack_pack_array(pk, 1);
    msgpack_pack_map(pk, 16 + extra_keys);
    proto_pack_kv_uint(pk, "id", 3);
    proto_pack_kv_uint(pk, "uid", 1000);
    proto_pack_kv_uint(pk, "gid", 100);
    proto_pack_kv_int(pk, "pid", 4242);
    proto_pack_kv_str(pk, "name", "server");
    proto_pack_kv_int(pk, "gpu", 0);
    proto_pack_kv_uint(pk, "lane", 1);
    proto_pack_kv_uint(pk, "persistent_bytes", 64u << 20);
    proto_pack_kv_uint(pk, "ephemeral_bytes", 64u << 20);
    proto_pack_kv_uint(pk, "iterations_expected", 0);
    proto_pack_kv_int(pk, "priority", 0);
    proto_pack_kv_uint(pk, "page_dev", 7);
    proto_pack_kv_uint(pk, "page_ino", 99);
    proto_pack_kv_uint(pk, "charged_bytes", 0);
    proto_pack_kv_uint(pk, "chunk_count", 0);
    proto_pack_str(pk, "chunks");
    msgpack_pack_array(pk, 0);
}

START_TEST(test_round_trip_keeps_every_field)
{
    salusd_state_t in, out;
    char err[512] = "";
    sample(&in);
    ck_assert_int_eq(state_write_file(path, &in, 1, err, sizeof(err)), 0);
    char tmp[160];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    ck_assert_int_ne(access(tmp, F_OK), 0); /* renamed into place */
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0600);
    ck_assert_int_eq(state_read_file(path, &out, err, sizeof(err)), 0);
    ck_assert_uint_eq(out.next_job_id, 11);
    ck_assert_str_eq(out.policy, "pack");
    ck_assert_uint_eq(out.policy_state_bytes, 5);
    ck_assert_int_eq(memcmp(out.policy_state, in.policy_state, 5), 0);
    ck_assert_uint_eq(out.job_count, 2);
    const state_job_t *a = &out.jobs[0], *b = &out.jobs[1];
    ck_assert_uint_eq(a->id, 4);
    ck_assert_uint_eq(a->uid, 1000);
    ck_assert_uint_eq(a->gid, 100);
    ck_assert_int_eq(a->pid, 4242);
    ck_assert_str_eq(a->name, "train");
    ck_assert_int_eq(a->gpu, 0);
    ck_assert_uint_eq(a->lane, 2);
    ck_assert_uint_eq(a->persistent_bytes, 128u << 20);
    ck_assert_uint_eq(a->ephemeral_bytes, 256u << 20);
    ck_assert_uint_eq(a->iterations_expected, 500);
    ck_assert_int_eq(a->priority, -3);
    ck_assert_uint_eq(a->page_dev, 7);
    ck_assert_uint_eq(a->page_ino, 999);
    ck_assert_uint_eq(a->charged_bytes, 4096);
    ck_assert_uint_eq(a->chunk_count, 2);
    ck_assert_uint_eq(a->chunks[1].id, 9);
    ck_assert_uint_eq(a->chunks[1].bytes, 2u << 20);
    ck_assert_uint_eq(a->chunks[1].ino, 1002);
    ck_assert_uint_eq(a->latency_target_ns, 0); /* best-effort */
    ck_assert_uint_eq(a->request_ns, 0);
    ck_assert_uint_eq(b->id, 6);
    ck_assert_int_eq(b->gpu, 1);
    ck_assert_uint_eq(b->latency_target_ns, 20000000); /* latency-critical, as it registered */
    ck_assert_uint_eq(b->request_ns, 5000000);
    ck_assert_uint_eq(b->chunk_count, 0);
    state_free(&out);
    /* a second write replaces the first whole */
    in.job_count = 0;
    in.next_job_id = 12;
    ck_assert_int_eq(state_write_file(path, &in, 0, err, sizeof(err)), 0);
    ck_assert_int_eq(state_read_file(path, &out, err, sizeof(err)), 0);
    ck_assert_uint_eq(out.next_job_id, 12);
    ck_assert_uint_eq(out.job_count, 0);
    state_free(&out);
}
END_TEST

/* A job on three GPUs (--gpus 3): GPUs 0, 2, 1, a chunk on each; beside a job on one GPU. */
static void sample_gpus(salusd_state_t *st, state_job_t *jobs, state_chunk_t *chunks,
                        state_member_t *members)
{
    sample(st);
    memcpy(jobs, st->jobs, 2 * sizeof(*jobs));
    chunks[0] = (state_chunk_t){.id = 20, .bytes = 2u << 20, .dev = 7, .ino = 2000};
    chunks[1] = (state_chunk_t){.id = 21, .bytes = 4u << 20, .dev = 7, .ino = 2001, .device = 2};
    chunks[2] = (state_chunk_t){.id = 22, .bytes = 8u << 20, .dev = 7, .ino = 2002, .device = 1};
    members[0] = (state_member_t){.gpu = 2, .lane = 7, .persistent_bytes = 32u << 20,
                                  .ephemeral_bytes = 96u << 20};
    members[1] = (state_member_t){.gpu = 1, .lane = 3, .persistent_bytes = 16u << 20,
                                  .ephemeral_bytes = 48u << 20};
    jobs[1].chunks = chunks;
    jobs[1].chunk_count = 3;
    jobs[1].gpu = 0;
    jobs[1].gpus = 3;
    jobs[1].members = members;
    st->jobs = jobs;
}

/* Writes st as the file and expects a refusal whose message contains want. */
static void expect_encoded_refused(const salusd_state_t *st, const char *want)
{
    uint8_t *image = NULL;
    size_t bytes = 0;
    ck_assert_int_eq(state_encode(st, &image, &bytes), 0);
    write_raw(image, bytes);
    free(image);
    expect_refused(want);
}

/* A job on several GPUs keeps its members (GPU, lane, sizes) and which GPU each chunk is on. */
START_TEST(test_gpus_job_round_trip)
{
    salusd_state_t in, out;
    state_job_t jobs[2];
    state_chunk_t chunks[3];
    state_member_t members[2];
    char err[512] = "";
    sample_gpus(&in, jobs, chunks, members);
    ck_assert_int_eq(state_write_file(path, &in, 0, err, sizeof(err)), 0);
    ck_assert_msg(state_read_file(path, &out, err, sizeof(err)) == 0, "%s", err);
    const state_job_t *a = &out.jobs[0], *b = &out.jobs[1];
    ck_assert_uint_eq(a->gpus, 1); /* one GPU: no members */
    ck_assert_ptr_null(a->members);
    ck_assert_uint_eq(a->chunks[0].device, 0);
    ck_assert_uint_eq(a->chunks[1].device, 0);
    ck_assert_uint_eq(b->gpus, 3);
    ck_assert_ptr_nonnull(b->members);
    ck_assert_int_eq(b->gpu, 0);
    ck_assert_int_eq(b->members[0].gpu, 2);
    ck_assert_uint_eq(b->members[0].lane, 7);
    ck_assert_uint_eq(b->members[0].persistent_bytes, 32u << 20);
    ck_assert_uint_eq(b->members[0].ephemeral_bytes, 96u << 20);
    ck_assert_int_eq(b->members[1].gpu, 1);
    ck_assert_uint_eq(b->members[1].lane, 3);
    ck_assert_uint_eq(b->members[1].persistent_bytes, 16u << 20);
    ck_assert_uint_eq(b->members[1].ephemeral_bytes, 48u << 20);
    ck_assert_uint_eq(b->chunk_count, 3);
    ck_assert_uint_eq(b->chunks[0].device, 0);
    ck_assert_uint_eq(b->chunks[1].device, 2);
    ck_assert_uint_eq(b->chunks[1].ino, 2001);
    ck_assert_uint_eq(b->chunks[2].device, 1);
    state_free(&out);
}
END_TEST

/* A job's GPUs this module never writes: a member on the job's own GPU or two on one, a GPU
 * index out of range, a count that is not the members', a chunk on a GPU the job lacks: the
 * file is refused with a message saying so (no crash, nothing used). */
START_TEST(test_bad_gpus_are_refused)
{
    salusd_state_t st;
    state_job_t jobs[2];
    state_chunk_t chunks[3];
    state_member_t members[2];
    sample_gpus(&st, jobs, chunks, members);
    members[1].gpu = 0; /* the job's own */
    expect_encoded_refused(&st, "bad a job's GPUs (--gpus: one GPU given to two of its members)");
    sample_gpus(&st, jobs, chunks, members);
    members[1].gpu = 2; /* member 1's */
    expect_encoded_refused(&st, "one GPU given to two of its members");
    sample_gpus(&st, jobs, chunks, members);
    members[0].gpu = 1024;
    expect_encoded_refused(&st, "bad a job's GPUs (--gpus: a member's GPU index out of range)");
    sample_gpus(&st, jobs, chunks, members);
    members[0].gpu = -1; /* (written as a huge number) */
    expect_encoded_refused(&st, "a member's GPU index out of range");
    sample_gpus(&st, jobs, chunks, members);
    chunks[1].device = 3; /* of 3 GPUs: 0 .. 2 */
    expect_encoded_refused(&st, "bad a job's chunks (a chunk on a GPU the job does not have)");
    /* a --gpus job's members take the ids after its own (6 .. 8 here; next_job_id 11) */
    sample_gpus(&st, jobs, chunks, members);
    jobs[1].id = 9; /* members 10 and 11 */
    expect_encoded_refused(&st, "a job id (or a --gpus job's member's) at or past next_job_id");
    sample_gpus(&st, jobs, chunks, members);
    jobs[0].id = 7; /* member 1 of job 6 */
    expect_encoded_refused(&st, "two jobs' ids (a --gpus job's members' included) that meet");
    /* by hand: members without gpus, gpus 1 or above 32, members of the wrong count or type */
    static const struct {
        int with_gpus;
        uint64_t gpus;
        uint32_t members;
        int bad_type;
    } bad[] = {{0, 0, 1, 0}, {1, 1, 0, 0}, {1, 33, 32, 0}, {1, 2, 2, 0}, {1, 3, 1, 0},
               {1, 2, 1, 1}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        msgpack_sbuffer sbuf;
        msgpack_packer pk;
        begin_old_file(&sbuf, &pk, bad[i].with_gpus ? 2 : 1);
        if (bad[i].with_gpus)
            proto_pack_kv_uint(&pk, "gpus", bad[i].gpus);
        proto_pack_str(&pk, "members");
        msgpack_pack_array(&pk, bad[i].members);
        for (uint32_t k = 0; k < bad[i].members; k++) {
            msgpack_pack_array(&pk, 4);
            msgpack_pack_uint64(&pk, 1 + k);
            msgpack_pack_uint64(&pk, 0);
            if (bad[i].bad_type)
                proto_pack_str(&pk, "64MiB");
            else
                msgpack_pack_uint64(&pk, 1);
            msgpack_pack_uint64(&pk, 1);
        }
        write_body(&sbuf);
        expect_refused("bad a job's GPUs (--gpus: gpus and members)");
    }
}
END_TEST

START_TEST(test_missing_file_is_a_first_start)
{
    salusd_state_t st;
    char err[512];
    ck_assert_int_eq(state_read_file(path, &st, err, sizeof(err)), -ENOENT);
}
END_TEST

START_TEST(test_corrupt_byte_is_refused)
{
    size_t bytes;
    uint8_t *image = encode(&bytes);
    image[bytes - 3] ^= 0x40;
    write_raw(image, bytes);
    free(image);
    expect_refused("checksum mismatch");
}
END_TEST

START_TEST(test_truncated_file_is_refused)
{
    size_t bytes;
    uint8_t *image = encode(&bytes);
    write_raw(image, bytes - 10);
    free(image);
    expect_refused("truncated");
}
END_TEST

START_TEST(test_foreign_file_is_refused)
{
    const char *text = "name = value\nthis is some other program's file\n";
    write_raw((const uint8_t *)text, strlen(text));
    expect_refused("not a salusd state file");
    write_raw((const uint8_t *)"SAL", 3);
    expect_refused("not a salusd state file");
}
END_TEST

START_TEST(test_newer_format_is_refused)
{
    size_t bytes;
    uint8_t *image = encode(&bytes);
    image[8] = 2; /* format version 2 */
    write_raw(image, bytes);
    free(image);
    expect_refused("state format 2");
}
END_TEST

/* A body with a valid header and checksum but the wrong shape: never trusted in part. */
START_TEST(test_well_sealed_nonsense_is_refused)
{
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sbuf);
    msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    proto_pack_kv_uint(&pk, "next_job_id", 5);
    proto_pack_kv_str(&pk, "policy", "pack");
    proto_pack_str(&pk, "policy_state");
    msgpack_pack_bin(&pk, 0);
    proto_pack_str(&pk, "jobs");
    msgpack_pack_array(&pk, 1);
    msgpack_pack_map(&pk, 1);
    proto_pack_kv_uint(&pk, "id", 9); /* a job record without its fields, past next_job_id */
    write_body(&sbuf);
    expect_refused("bad a job record");
}
END_TEST

/* A file of the salusd before classes (no latency_target_ns, no request_ns) still loads: its
 * jobs are best-effort, as they were. */
START_TEST(test_file_without_classes_loads)
{
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    begin_old_file(&sbuf, &pk, 0);
    write_body(&sbuf);
    salusd_state_t st;
    char err[512] = "";
    ck_assert_msg(state_read_file(path, &st, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(st.job_count, 1);
    ck_assert_str_eq(st.jobs[0].name, "server");
    ck_assert_uint_eq(st.jobs[0].latency_target_ns, 0);
    ck_assert_uint_eq(st.jobs[0].request_ns, 0);
    ck_assert_uint_eq(st.jobs[0].gpus, 1); /* before --gpus jobs were kept: one GPU */
    ck_assert_ptr_null(st.jobs[0].members);
    state_free(&st);
    /* with them (what this salusd writes for a latency-critical job) */
    begin_old_file(&sbuf, &pk, 2);
    proto_pack_kv_uint(&pk, "latency_target_ns", 40000000);
    proto_pack_kv_uint(&pk, "request_ns", 0);
    write_body(&sbuf);
    ck_assert_msg(state_read_file(path, &st, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(st.jobs[0].latency_target_ns, 40000000);
    ck_assert_uint_eq(st.jobs[0].request_ns, 0);
    state_free(&st);
}
END_TEST

/* A class this module never writes: a target of 0 or above an hour, a request time above an
 * hour or without a target, a target that is not a number. */
START_TEST(test_bad_class_is_refused)
{
    static const struct {
        const char *key;
        uint64_t value;
        const char *key2;
        uint64_t value2;
    } bad[] = {
        {"latency_target_ns", 0, "request_ns", 0},
        {"latency_target_ns", 3600ull * 1000000000ull + 1, "request_ns", 0},
        {"latency_target_ns", 1000000, "request_ns", 3600ull * 1000000000ull + 1},
        {"request_ns", 1000000, NULL, 0},
        {"latency_target_ns", 1000000, NULL, 0}, /* without its request time */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        msgpack_sbuffer sbuf;
        msgpack_packer pk;
        begin_old_file(&sbuf, &pk, bad[i].key2 ? 2 : 1);
        proto_pack_kv_uint(&pk, bad[i].key, bad[i].value);
        if (bad[i].key2)
            proto_pack_kv_uint(&pk, bad[i].key2, bad[i].value2);
        write_body(&sbuf);
        expect_refused("bad a job's class");
    }
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    begin_old_file(&sbuf, &pk, 2);
    proto_pack_kv_str(&pk, "latency_target_ns", "20ms");
    proto_pack_kv_uint(&pk, "request_ns", 0);
    write_body(&sbuf);
    expect_refused("bad a job's class");
}
END_TEST

/* The lane set a job has mapped (--lane-memory shared) comes back as written; a file without
 * one (an older salusd's, or a job with none) loads with none; one that is not six numbers
 * with a size of 1 byte to 1 PiB is refused. */
START_TEST(test_lane_set_round_trip)
{
    salusd_state_t in, out;
    char err[512] = "";
    sample(&in);
    in.jobs[0].lane_set = (state_lane_set_t){.chunk_id = 12, .bytes = 600u << 20, .dev = 7,
                                             .ino = 2001, .page_dev = 7, .page_ino = 2002};
    ck_assert_int_eq(state_write_file(path, &in, 0, err, sizeof(err)), 0);
    ck_assert_msg(state_read_file(path, &out, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(out.jobs[0].lane_set.chunk_id, 12);
    ck_assert_uint_eq(out.jobs[0].lane_set.bytes, 600u << 20);
    ck_assert_uint_eq(out.jobs[0].lane_set.dev, 7);
    ck_assert_uint_eq(out.jobs[0].lane_set.ino, 2001);
    ck_assert_uint_eq(out.jobs[0].lane_set.page_dev, 7);
    ck_assert_uint_eq(out.jobs[0].lane_set.page_ino, 2002);
    ck_assert_uint_eq(out.jobs[1].lane_set.bytes, 0); /* none */
    ck_assert_uint_eq(out.jobs[0].chunk_count, 2);    /* the rest as before */
    ck_assert_uint_eq(out.jobs[1].latency_target_ns, 20000000);
    state_free(&out);
    in.jobs[0].lane_set = (state_lane_set_t){0};
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    begin_old_file(&sbuf, &pk, 0);
    write_body(&sbuf);
    ck_assert_msg(state_read_file(path, &out, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(out.jobs[0].lane_set.bytes, 0);
    state_free(&out);
    static const uint64_t bad_sizes[] = {0, (1ull << 50) + 1};
    for (size_t i = 0; i < 2; i++) {
        begin_old_file(&sbuf, &pk, 1);
        proto_pack_str(&pk, "lane_set");
        msgpack_pack_array(&pk, 6);
        for (int k = 0; k < 6; k++)
            msgpack_pack_uint64(&pk, k == 1 ? bad_sizes[i] : 5);
        write_body(&sbuf);
        expect_refused("bad a job's lane set");
    }
    begin_old_file(&sbuf, &pk, 1); /* five numbers */
    proto_pack_str(&pk, "lane_set");
    msgpack_pack_array(&pk, 5);
    for (int k = 0; k < 5; k++)
        msgpack_pack_uint64(&pk, 5);
    write_body(&sbuf);
    expect_refused("bad a job's lane set");
    begin_old_file(&sbuf, &pk, 1); /* not an array */
    proto_pack_kv_str(&pk, "lane_set", "lane 1");
    write_body(&sbuf);
    expect_refused("bad a job's lane set");
}
END_TEST

START_TEST(test_file_of_another_user_is_refused)
{
    if (geteuid() != 0)
        return; /* only root can give a file away */
    size_t bytes;
    uint8_t *image = encode(&bytes);
    write_raw(image, bytes);
    free(image);
    ck_assert_int_eq(chown(path, 65534, 65534), 0);
    expect_refused("belongs to uid 65534");
}
END_TEST

/* A state directory others can write to (or not salusd's own) is refused before anything is
 * written there: another user could plant the temporary file salusd writes through. */
START_TEST(test_loose_state_directory_is_refused)
{
    salusd_state_t in;
    char err[512] = "", sub[160];
    sample(&in);
    snprintf(sub, sizeof(sub), "%s/sub", dir);
    ck_assert_int_eq(mkdir(sub, 0777), 0);
    ck_assert_int_eq(chmod(sub, 0777), 0);
    ck_assert_int_eq(state_write_file(path, &in, 0, err, sizeof(err)), -EPERM);
    ck_assert_msg(strstr(err, "mode 0777") && strstr(err, "only with the sticky bit"), "%s",
                  err);
    ck_assert_int_ne(access(path, F_OK), 0);
    ck_assert_int_eq(chmod(sub, 0755), 0);
    ck_assert_int_eq(state_write_file(path, &in, 0, err, sizeof(err)), 0);
}
END_TEST

START_TEST(test_file_names)
{
    char out[256], other[256];
    ck_assert_int_eq(state_file_path("/var/lib/salus", "/run/salus/salusd.sock",
                                     "/run/salus/salusd.sock", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "/var/lib/salus/salusd.state");
    ck_assert_int_eq(state_file_path("/s", "/tmp/a.sock", "/run/salus/salusd.sock", out,
                                     sizeof(out)), 0);
    ck_assert_int_eq(state_file_path("/s", "/tmp/b.sock", "/run/salus/salusd.sock", other,
                                     sizeof(other)), 0);
    ck_assert_int_eq(strncmp(out, "/s/salusd-", 10), 0);
    ck_assert_str_ne(out, other);
}
END_TEST

static Suite *state_suite(void)
{
    Suite *s = suite_create("state");
    TCase *t = tcase_create("file");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, test_round_trip_keeps_every_field);
    tcase_add_test(t, test_missing_file_is_a_first_start);
    tcase_add_test(t, test_corrupt_byte_is_refused);
    tcase_add_test(t, test_truncated_file_is_refused);
    tcase_add_test(t, test_foreign_file_is_refused);
    tcase_add_test(t, test_newer_format_is_refused);
    tcase_add_test(t, test_well_sealed_nonsense_is_refused);
    tcase_add_test(t, test_file_without_classes_loads);
    tcase_add_test(t, test_bad_class_is_refused);
    tcase_add_test(t, test_gpus_job_round_trip);
    tcase_add_test(t, test_bad_gpus_are_refused);
    tcase_add_test(t, test_lane_set_round_trip);
    tcase_add_test(t, test_file_of_another_user_is_refused);
    tcase_add_test(t, test_file_names);
    tcase_add_test(t, test_loose_state_directory_is_refused);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_run_suite(state_suite());
}
