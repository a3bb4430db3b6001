/* Body accessors and the frame encoder of the wire protocol (see proto.h). */
#include "proto.h"

#include <errno.h>
#include <string.h>

const msgpack_object *proto_get(const msgpack_object *map, const char *key)
{
    if (!map || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    size_t key_len = strlen(key);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == key_len &&
            memcmp(k->via.str.ptr, key, key_len) == 0)
            return &map->via.map.ptr[i].val;
    }
    return NULL;
}

int proto_get_str(const msgpack_object *map, const char *key, const char **str, size_t *len)
{
    const msgpack_object *v = proto_get(map, key);
    if (!v)
        return -ENOENT;
    if (v->type != MSGPACK_OBJECT_STR)
        return -EINVAL;
    *str = v->via.str.ptr;
    *len = v->via.str.size;
    return 0;
}

int proto_get_str_copy(const msgpack_object *map, const char *key, char *out, size_t out_size)
{
    const char *s;
    size_t n;
    int rc = proto_get_str(map, key, &s, &n);
    if (rc < 0)
        return rc;
    if (n >= out_size || (n && memchr(s, '\0', n)))
        return -EINVAL;
    if (n)
        memcpy(out, s, n);
    out[n] = '\0';
    return 0;
}

int proto_get_uint(const msgpack_object *map, const char *key, uint64_t *value)
{
    const msgpack_object *v = proto_get(map, key);
    if (!v)
        return -ENOENT;
    if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return -EINVAL;
    *value = v->via.u64;
    return 0;
}

int proto_get_int(const msgpack_object *map, const char *key, int64_t *value)
{
    const msgpack_object *v = proto_get(map, key);
    if (!v)
        return -ENOENT;
    if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *value = v->via.i64;
    else if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER && v->via.u64 <= INT64_MAX)
        *value = (int64_t)v->via.u64;
    else
        return -EINVAL;
    return 0;
}

int proto_get_bool(const msgpack_object *map, const char *key, int *value)
{
    const msgpack_object *v = proto_get(map, key);
    if (!v)
        return -ENOENT;
    if (v->type != MSGPACK_OBJECT_BOOLEAN)
        return -EINVAL;
    *value = v->via.boolean ? 1 : 0;
    return 0;
}

void proto_enc_init(proto_enc_t *enc)
{
    msgpack_sbuffer_init(&enc->sbuf);
    msgpack_packer_init(&enc->pk, &enc->sbuf, msgpack_sbuffer_write);
}

void proto_enc_destroy(proto_enc_t *enc)
{
    msgpack_sbuffer_destroy(&enc->sbuf);
}

void proto_enc_reset(proto_enc_t *enc)
{
    msgpack_sbuffer_clear(&enc->sbuf);
}

void proto_enc_begin(proto_enc_t *enc, proto_kind_t kind, uint64_t id, const char *op,
                     uint32_t body_fields)
{
    static const char placeholder[PROTO_HEADER_BYTES] = {0};
    /* The packer points at the buffer; an encoder copied or moved by value (a client
     * struct handed over whole, as the shim does when it re-attaches) would otherwise go on
     * writing through the old copy's address. Bound again at every frame: two stores. */
    msgpack_packer_init(&enc->pk, &enc->sbuf, msgpack_sbuffer_write);
    msgpack_sbuffer_clear(&enc->sbuf);
    msgpack_sbuffer_write(&enc->sbuf, placeholder, sizeof(placeholder));
    msgpack_pack_array(&enc->pk, 4);
    msgpack_pack_uint32(&enc->pk, (uint32_t)kind);
    msgpack_pack_uint64(&enc->pk, id);
    proto_pack_str(&enc->pk, op ? op : "");
    msgpack_pack_map(&enc->pk, body_fields);
}

void proto_enc_finish(proto_enc_t *enc)
{
    uint32_t n = (uint32_t)(enc->sbuf.size - PROTO_HEADER_BYTES);
    uint8_t *p = (uint8_t *)enc->sbuf.data;
    p[0] = (uint8_t)(n >> 24);
    p[1] = (uint8_t)(n >> 16);
    p[2] = (uint8_t)(n >> 8);
    p[3] = (uint8_t)n;
}

void proto_pack_str(msgpack_packer *pk, const char *str)
{
    size_t n = strlen(str);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, str, n);
}

void proto_pack_kv_str(msgpack_packer *pk, const char *key, const char *value)
{
    proto_pack_str(pk, key);
    proto_pack_str(pk, value ? value : "");
}

void proto_pack_kv_uint(msgpack_packer *pk, const char *key, uint64_t value)
{
    proto_pack_str(pk, key);
    msgpack_pack_uint64(pk, value);
}

void proto_pack_kv_int(msgpack_packer *pk, const char *key, int64_t value)
{
    proto_pack_str(pk, key);
    msgpack_pack_int64(pk, value);
}

void proto_pack_kv_bool(msgpack_packer *pk, const char *key, int value)
{
    proto_pack_str(pk, key);
    if (value)
        msgpack_pack_true(pk);
    else
        msgpack_pack_false(pk);
}

void proto_pack_kv_double(msgpack_packer *pk, const char *key, double value)
{
    proto_pack_str(pk, key);
    msgpack_pack_double(pk, value);
}

void proto_enc_error(proto_enc_t *enc, uint64_t id, proto_error_code_t code, const char *message)
{
    proto_enc_begin(enc, PROTO_ERROR, id, "", 3);
    proto_pack_kv_uint(&enc->pk, "code", (uint64_t)code);
    proto_pack_kv_str(&enc->pk, "name", proto_error_code_name(code));
    proto_pack_kv_str(&enc->pk, "message", message);
    proto_enc_finish(enc);
}

void proto_enc_hello(proto_enc_t *enc, uint32_t version, const char *client)
{
    proto_enc_begin(enc, PROTO_HELLO, 0, "hello", 3);
    proto_pack_kv_uint(&enc->pk, "version", version);
    proto_pack_kv_uint(&enc->pk, "minor", PROTO_VERSION_MINOR);
    proto_pack_kv_str(&enc->pk, "client", client);
    proto_enc_finish(enc);
}
