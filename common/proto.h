/* Wire protocol shared by salusd, salusctl and the shim.
 *
 * A frame is a 4-byte big-endian payload length followed by one msgpack value:
 *
 *     [kind, id, op, body]      kind: uint (proto_kind_t), id: uint (request id,
 *                               echoed by the reply), op: str (verb; "" for replies),
 *                               body: map with string keys (or nil = empty)
 *
 * The first message on a connection is PROTO_HELLO with body {version, minor, client};
 * a server refuses any other version with a PROTO_ERROR (code PROTO_EVERSION).
 *
 * Versions: `version` is the major version; peers of different majors never talk. Within a
 * major, `minor` (absent = 0) counts additions that old peers can ignore or refuse one by one
 * (a new op answered PROTO_EUNKNOWN_OP by an older server, a new reply field an older client
 * skips): a daemon accepts every client of its major, whatever its minor, so a newer salusd
 * accepts the shims of running jobs that were started against an older one (an upgrade under
 * running jobs). Minor 1 added re-attach (reattach, reattach_chunk, reattach_done; the
 * admission's reattach_grace_ms). Minor 2 added groups (distributed jobs): submit's optional
 * fields group (name), world, rank, local_rank (-1: unknown), sync ("bsp", "ssp", "asp"),
 * staleness (ssp's S) and share_gpus; a daemon that took them echoes group in its reply (an
 * older one ignores them, so a client that sent a group treats a reply without the echo as a
 * refusal); the op groups; ps's group, rank and gang_wait_ms. Minor 3 added parameter-server tables (a worker's own
 * second connection; salusd/ps_local.c): ps_open {name, count, rule, sync, servers?, job_id}
 * passing one descriptor, a memfd sealed at least with F_SEAL_SHRINK of at least count * 12
 * bytes (count float32 values, then count uint64 keys) that both sides map, reply {handle,
 * count, clock}; ps_push {handle, offset, n, keyed, clock, seq} (the values in the region's
 * floats [offset, offset + n), or keyed: the first n floats and the first n keys), reply
 * {duplicate}; ps_pull {handle, offset, n, clock}, reply {clock, done, done_at_request,
 * waited_ns, waited} once the values are in the region's floats [offset, offset + n);
 * ps_clock {handle, clock}, reply {clock} (the next one); ps_close {handle}. Federated tables
 * (rule "fedavg:..."; two ops added without a new minor: a daemon without them answers
 * unknown op, which the library reports as -ENOSYS): ps_fed_state {handle}, reply {round,
 * selected, pushed, clients, per_round, epochs}; ps_fed_push {handle, round, samples (int),
 * work, n} (the model in the region's first n floats, n = count), reply {duplicate}.
 * Re-attaching a lane's shared chunks (salusd --lane-memory shared), also without a new
 * minor: a daemon that takes it says lane_sets: 1 in its reattach reply, and only then does
 * the shim send reattach_lane {chunk_id, bytes} with the lane page's and the chunk's
 * descriptors (before reattach_done), reply {taken}.
 * Fields are never removed or
 * retyped within a major.
 *
 * Every frame from a peer is untrusted: proto_decode() rejects malformed input
 * (truncated, over the size cap, wrong types, unknown kinds, trailing bytes,
 * nesting too deep, element counts larger than the bytes that could hold them)
 * with an error, never a crash, and allocates nothing that survives a failure. */
#ifndef SALUS_COMMON_PROTO_H
#define SALUS_COMMON_PROTO_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#define PROTO_VERSION 1
#define PROTO_VERSION_MINOR 3
#define PROTO_HEADER_BYTES 4
#define PROTO_DEFAULT_MAX_FRAME_BYTES (1024u * 1024u)
#define PROTO_MAX_DEPTH 16
#define PROTO_MAX_OP_BYTES 64

typedef enum proto_kind {
    PROTO_HELLO = 1,
    PROTO_REQUEST = 2,
    PROTO_REPLY = 3,
    PROTO_ERROR = 4,
} proto_kind_t;

/* Decoder results (negative) */
enum {
    PROTO_OK = 0,
    PROTO_NEED_MORE = -1,     /* not a whole frame yet */
    PROTO_E_TOO_BIG = -2,     /* length prefix over the cap (or zero) */
    PROTO_E_MALFORMED = -3,   /* not valid msgpack, or trailing bytes */
    PROTO_E_TYPE = -4,        /* valid msgpack, wrong shape or types */
    PROTO_E_KIND = -5,        /* unknown message kind */
    PROTO_E_NOMEM = -6,
};

/* Codes carried in PROTO_ERROR replies: body {code, message} */
typedef enum proto_error_code {
    PROTO_EBADFRAME = 1,
    PROTO_EVERSION = 2,
    PROTO_EUNKNOWN_OP = 3,
    PROTO_EBADARG = 4,
    PROTO_ENOTFOUND = 5,
    PROTO_EPERM = 6,
    PROTO_EINTERNAL = 7,
    PROTO_EBUSY = 8,
    PROTO_ESTATE = 9,
    PROTO_ENOMEM = 10,        /* over the job's memory budget, or the device is full */
    PROTO_ENEVER_FITS = 11,   /* the job can never be admitted on this node */
} proto_error_code_t;

typedef struct proto_msg_s {
    proto_kind_t kind;
    uint64_t id;
    char op[PROTO_MAX_OP_BYTES + 1];
    msgpack_object body;          /* MSGPACK_OBJECT_MAP (size 0 when the peer sent nil) */
    msgpack_unpacked unpacked;    /* owns body's objects; release with proto_msg_free() */
    uint8_t *payload;             /* private copy that body's strings point into */
} proto_msg_t;

/* Reads the length prefix of the frame that starts at buf. Returns PROTO_OK and the
 * payload length, PROTO_NEED_MORE when fewer than 4 bytes are there, PROTO_E_TOO_BIG when
 * the length is 0 or above max_frame_bytes. */
int proto_frame_length(const uint8_t *buf, size_t available, size_t max_frame_bytes,
                       uint32_t *payload_bytes);

/* Checks that payload is exactly one msgpack value, nested at most PROTO_MAX_DEPTH deep,
 * whose container counts and string lengths fit in the bytes present. Allocates nothing. */
int proto_scan(const uint8_t *payload, size_t payload_bytes);

/* Decodes one payload (without the length prefix). On success msg must be released with
 * proto_msg_free(); on failure nothing needs releasing. *why (optional) names the fault. */
int proto_decode(const uint8_t *payload, size_t payload_bytes, proto_msg_t *msg, const char **why);
void proto_msg_free(proto_msg_t *msg);

const char *proto_strerror(int rc);
const char *proto_error_code_name(proto_error_code_t code);

/* Body accessors: 0, -ENOENT when the key is absent, -EINVAL when its type is wrong. */
const msgpack_object *proto_get(const msgpack_object *map, const char *key);
int proto_get_str(const msgpack_object *map, const char *key, const char **str, size_t *len);
int proto_get_str_copy(const msgpack_object *map, const char *key, char *out, size_t out_size);
int proto_get_uint(const msgpack_object *map, const char *key, uint64_t *value);
int proto_get_int(const msgpack_object *map, const char *key, int64_t *value);
int proto_get_bool(const msgpack_object *map, const char *key, int *value);

/* Encoder: one frame at a time.
 *     proto_enc_t e; proto_enc_init(&e);
 *     proto_enc_begin(&e, PROTO_REQUEST, id, "status", 0);
 *     proto_enc_finish(&e) ... send e.sbuf.data, e.sbuf.size ... proto_enc_destroy(&e);
 * An encoder may be moved by value between frames (the packer is bound to its buffer again
 * at each proto_enc_begin); the copy left behind must then not be destroyed. */
typedef struct proto_enc_s {
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
} proto_enc_t;

void proto_enc_init(proto_enc_t *enc);
void proto_enc_destroy(proto_enc_t *enc);
void proto_enc_reset(proto_enc_t *enc);
/* Starts a message whose body map will hold body_fields key/value pairs. */
void proto_enc_begin(proto_enc_t *enc, proto_kind_t kind, uint64_t id, const char *op,
                     uint32_t body_fields);
/* Writes the length prefix; the frame is enc->sbuf.data, enc->sbuf.size bytes. */
void proto_enc_finish(proto_enc_t *enc);

void proto_pack_str(msgpack_packer *pk, const char *str);
void proto_pack_kv_str(msgpack_packer *pk, const char *key, const char *value);
void proto_pack_kv_uint(msgpack_packer *pk, const char *key, uint64_t value);
void proto_pack_kv_int(msgpack_packer *pk, const char *key, int64_t value);
void proto_pack_kv_bool(msgpack_packer *pk, const char *key, int value);
void proto_pack_kv_double(msgpack_packer *pk, const char *key, double value);

/* A map whose entries are counted as they are written (no hand-counted msgpack_pack_map):
 * begin, any number of entries, end (which writes the map to out and frees the buffer). */
typedef struct proto_map_s {
    msgpack_packer *out;
    msgpack_sbuffer body;
    msgpack_packer pk;
    uint32_t count;
} proto_map_t;
void proto_map_begin(proto_map_t *map, msgpack_packer *out);
void proto_map_str(proto_map_t *map, const char *key, const char *value);
void proto_map_uint(proto_map_t *map, const char *key, uint64_t value);
/* value when present, else nil */
void proto_map_int_or_nil(proto_map_t *map, const char *key, int64_t value, int present);
void proto_map_end(proto_map_t *map);

/* A whole error reply {code, message} for request id. */
void proto_enc_error(proto_enc_t *enc, uint64_t id, proto_error_code_t code, const char *message);
/* A whole hello {version, client}. */
void proto_enc_hello(proto_enc_t *enc, uint32_t version, const char *client);

#endif
