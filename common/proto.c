#include "proto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int proto_frame_length(const uint8_t *buf, size_t available, size_t max_frame_bytes,
                       uint32_t *payload_bytes)
{
    if (available < PROTO_HEADER_BYTES)
        return PROTO_NEED_MORE;
    uint32_t n = ((uint32_t)buf[0] << 24) | ((uint32_t)buf[1] << 16) | ((uint32_t)buf[2] << 8) |
                 (uint32_t)buf[3];
    if (n == 0 || n > max_frame_bytes)
        return PROTO_E_TOO_BIG;
    *payload_bytes = n;
    return PROTO_OK;
}

static uint64_t read_be(const uint8_t *p, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; i++)
        v = (v << 8) | p[i];
    return v;
}

/* Size of the item at p: header bytes, payload bytes that follow it, and the number of
 * child elements (containers). Returns -1 for the reserved byte 0xc1 or a short header. */
static int item_shape(const uint8_t *p, size_t left, size_t *header, uint64_t *data,
                      uint64_t *children)
{
    uint8_t t = p[0];
    *header = 1;
    *data = 0;
    *children = 0;
    if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3)
        return 0;
    if (t >= 0x80 && t <= 0x8f) {
        *children = 2u * (t & 0x0fu);
        return 0;
    }
    if (t >= 0x90 && t <= 0x9f) {
        *children = t & 0x0fu;
        return 0;
    }
    if (t >= 0xa0 && t <= 0xbf) {
        *data = t & 0x1fu;
        return 0;
    }
    static const struct {
        uint8_t tag;
        uint8_t len_bytes; /* length field size (0: fixed) */
        uint8_t fixed;     /* fixed payload size, or extra bytes after the length field */
        uint8_t kind;      /* 0 data, 1 array, 2 map */
    } table[] = {
        {0xc4, 1, 0, 0}, {0xc5, 2, 0, 0}, {0xc6, 4, 0, 0},   /* bin */
        {0xc7, 1, 1, 0}, {0xc8, 2, 1, 0}, {0xc9, 4, 1, 0},   /* ext: +1 type byte */
        {0xca, 0, 4, 0}, {0xcb, 0, 8, 0},                     /* float */
        {0xcc, 0, 1, 0}, {0xcd, 0, 2, 0}, {0xce, 0, 4, 0}, {0xcf, 0, 8, 0},
        {0xd0, 0, 1, 0}, {0xd1, 0, 2, 0}, {0xd2, 0, 4, 0}, {0xd3, 0, 8, 0},
        {0xd4, 0, 2, 0}, {0xd5, 0, 3, 0}, {0xd6, 0, 5, 0}, {0xd7, 0, 9, 0}, {0xd8, 0, 17, 0},
        {0xd9, 1, 0, 0}, {0xda, 2, 0, 0}, {0xdb, 4, 0, 0},   /* str */
        {0xdc, 2, 0, 1}, {0xdd, 4, 0, 1},                     /* array */
        {0xde, 2, 0, 2}, {0xdf, 4, 0, 2},                     /* map */
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (table[i].tag != t)
            continue;
        if (table[i].len_bytes == 0) {
            *data = table[i].fixed;
            return 0;
        }
        if (left < 1u + table[i].len_bytes)
            return -1;
        uint64_t n = read_be(p + 1, table[i].len_bytes);
        *header = 1u + table[i].len_bytes;
        if (table[i].kind == 0)
            *data = n + table[i].fixed;
        else
            *children = table[i].kind == 2 ? 2 * n : n;
        return 0;
    }
    return -1; /* 0xc1: never used */
}

int proto_scan(const uint8_t *payload, size_t payload_bytes)
{
    uint64_t pending[PROTO_MAX_DEPTH + 1];
    int depth = 0;
    size_t pos = 0;

    pending[0] = 1;
    while (depth >= 0) {
        if (pending[depth] == 0) {
            depth--;
            continue;
        }
        pending[depth]--;
        if (pos >= payload_bytes)
            return PROTO_E_MALFORMED;
        size_t header;
        uint64_t data, children;
        if (item_shape(payload + pos, payload_bytes - pos, &header, &data, &children) < 0)
            return PROTO_E_MALFORMED;
        size_t left = payload_bytes - pos;
        if (header > left || data > left - header)
            return PROTO_E_MALFORMED;
        pos += header + (size_t)data;
        if (children > 0) {
            /* every element takes at least one byte: a count beyond the bytes left is a lie */
            if (children > payload_bytes - pos || depth + 1 > PROTO_MAX_DEPTH)
                return PROTO_E_MALFORMED;
            pending[++depth] = children;
        }
    }
    return pos == payload_bytes ? PROTO_OK : PROTO_E_MALFORMED;
}

static int decode_fail(const char **why, const char *text, int rc)
{
    if (why)
        *why = text;
    return rc;
}

int proto_decode(const uint8_t *payload, size_t payload_bytes, proto_msg_t *msg, const char **why)
{
    int rc;
    memset(msg, 0, sizeof(*msg));
    if (proto_scan(payload, payload_bytes) != PROTO_OK)
        return decode_fail(why, "not a single well-formed msgpack value", PROTO_E_MALFORMED);

    msg->payload = malloc(payload_bytes);
    if (!msg->payload)
        return decode_fail(why, "out of memory", PROTO_E_NOMEM);
    memcpy(msg->payload, payload, payload_bytes);

    msgpack_unpacked_init(&msg->unpacked);
    size_t offset = 0;
    msgpack_unpack_return ur =
        msgpack_unpack_next(&msg->unpacked, (const char *)msg->payload, payload_bytes, &offset);
    if (ur != MSGPACK_UNPACK_SUCCESS || offset != payload_bytes) {
        rc = decode_fail(why, ur == MSGPACK_UNPACK_NOMEM_ERROR ? "out of memory" : "bad msgpack",
                         ur == MSGPACK_UNPACK_NOMEM_ERROR ? PROTO_E_NOMEM : PROTO_E_MALFORMED);
        goto fail;
    }

    const msgpack_object *root = &msg->unpacked.data;
    if (root->type != MSGPACK_OBJECT_ARRAY || root->via.array.size != 4) {
        rc = decode_fail(why, "message is not [kind, id, op, body]", PROTO_E_TYPE);
        goto fail;
    }
    const msgpack_object *f = root->via.array.ptr;
    if (f[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
        rc = decode_fail(why, "kind is not an unsigned integer", PROTO_E_TYPE);
        goto fail;
    }
    if (f[0].via.u64 < PROTO_HELLO || f[0].via.u64 > PROTO_ERROR) {
        rc = decode_fail(why, "unknown message kind", PROTO_E_KIND);
        goto fail;
    }
    if (f[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
        rc = decode_fail(why, "id is not an unsigned integer", PROTO_E_TYPE);
        goto fail;
    }
    if (f[2].type != MSGPACK_OBJECT_STR || f[2].via.str.size > PROTO_MAX_OP_BYTES ||
        (f[2].via.str.size && memchr(f[2].via.str.ptr, '\0', f[2].via.str.size))) {
        rc = decode_fail(why, "op is not a short string", PROTO_E_TYPE);
        goto fail;
    }
    if (f[3].type == MSGPACK_OBJECT_NIL) {
        msg->body.type = MSGPACK_OBJECT_MAP;
        msg->body.via.map.size = 0;
        msg->body.via.map.ptr = NULL;
    } else if (f[3].type == MSGPACK_OBJECT_MAP) {
        msg->body = f[3];
    } else {
        rc = decode_fail(why, "body is not a map", PROTO_E_TYPE);
        goto fail;
    }
    for (uint32_t i = 0; i < msg->body.via.map.size; i++) {
        if (msg->body.via.map.ptr[i].key.type != MSGPACK_OBJECT_STR) {
            rc = decode_fail(why, "body key is not a string", PROTO_E_TYPE);
            goto fail;
        }
    }
    msg->kind = (proto_kind_t)f[0].via.u64;
    msg->id = f[1].via.u64;
    if (f[2].via.str.size)
        memcpy(msg->op, f[2].via.str.ptr, f[2].via.str.size);
    msg->op[f[2].via.str.size] = '\0';
    return PROTO_OK;

fail:
    proto_msg_free(msg);
    return rc;
}

void proto_msg_free(proto_msg_t *msg)
{
    if (msg->payload) {
        msgpack_unpacked_destroy(&msg->unpacked);
        free(msg->payload);
    }
    memset(msg, 0, sizeof(*msg));
}

const char *proto_strerror(int rc)
{
    switch (rc) {
    case PROTO_OK: return "ok";
    case PROTO_NEED_MORE: return "incomplete frame";
    case PROTO_E_TOO_BIG: return "frame length is zero or over the size cap";
    case PROTO_E_MALFORMED: return "malformed msgpack";
    case PROTO_E_TYPE: return "wrong message shape or types";
    case PROTO_E_KIND: return "unknown message kind";
    case PROTO_E_NOMEM: return "out of memory";
    default: return "unknown protocol error";
    }
}

const char *proto_error_code_name(proto_error_code_t code)
{
    static const char *const names[] = {
        [PROTO_EBADFRAME] = "bad_frame",    [PROTO_EVERSION] = "version_mismatch",
        [PROTO_EUNKNOWN_OP] = "unknown_op", [PROTO_EBADARG] = "bad_argument",
        [PROTO_ENOTFOUND] = "not_found",    [PROTO_EPERM] = "permission_denied",
        [PROTO_EINTERNAL] = "internal",     [PROTO_EBUSY] = "busy",
        [PROTO_ESTATE] = "bad_state",      [PROTO_ENOMEM] = "out_of_memory",
        [PROTO_ENEVER_FITS] = "never_fits",
    };
    if ((int)code <= 0 || (size_t)code >= sizeof(names) / sizeof(names[0]) || !names[code])
        return "unknown";
    return names[code];
}

void proto_map_begin(proto_map_t *map, msgpack_packer *out)
{
    map->out = out;
    map->count = 0;
    msgpack_sbuffer_init(&map->body);
    msgpack_packer_init(&map->pk, &map->body, msgpack_sbuffer_write);
}

void proto_map_str(proto_map_t *map, const char *key, const char *value)
{
    proto_pack_kv_str(&map->pk, key, value);
    map->count++;
}

void proto_map_uint(proto_map_t *map, const char *key, uint64_t value)
{
    proto_pack_kv_uint(&map->pk, key, value);
    map->count++;
}

void proto_map_int_or_nil(proto_map_t *map, const char *key, int64_t value, int present)
{
    proto_pack_str(&map->pk, key);
    if (present)
        msgpack_pack_int64(&map->pk, value);
    else
        msgpack_pack_nil(&map->pk);
    map->count++;
}

void proto_map_end(proto_map_t *map)
{
    msgpack_pack_map(map->out, map->count);
    if (map->body.size)
        map->out->callback(map->out->data, map->body.data, map->body.size);
    msgpack_sbuffer_destroy(&map->body);
}
