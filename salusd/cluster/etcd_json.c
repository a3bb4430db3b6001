/* The etcd client's JSON (see etcd-internal.h): request bodies for the v3 gateway, replies
 * read into etcd_result_t, base64. etcd's gateway omits members that hold their zero value
 * ("kvs" of an empty range, "succeeded": false, a PUT event's "type"), sends int64 as
 * strings and bytes as base64; anything else of the wrong type is -EPROTO. */
#include "etcd-internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int etcd_buf_append(etcd_buf_t *buf, const void *data, size_t len)
{
    if (buf->len + len + 1 > buf->cap) {
        size_t cap = buf->cap ? buf->cap : 1024;
        while (cap < buf->len + len + 1)
            cap *= 2;
        char *grown = realloc(buf->data, cap);
        if (!grown)
            return -ENOMEM;
        buf->data = grown;
        buf->cap = cap;
    }
    memcpy(buf->data + buf->len, data, len);
    buf->len += len;
    buf->data[buf->len] = 0;
    return 0;
}

void etcd_buf_free(etcd_buf_t *buf)
{
    free(buf->data);
    *buf = (etcd_buf_t){0};
}

/* ---- base64 ----------------------------------------------------------------------------- */

static const char base64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *etcd_base64_encode(const void *data, size_t len)
{
    const unsigned char *in = data;
    char *out = malloc((len + 2) / 3 * 4 + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t chunk = (uint32_t)in[i] << 16;
        if (i + 1 < len)
            chunk |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            chunk |= in[i + 2];
        out[o++] = base64_alphabet[(chunk >> 18) & 63];
        out[o++] = base64_alphabet[(chunk >> 12) & 63];
        out[o++] = i + 1 < len ? base64_alphabet[(chunk >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? base64_alphabet[chunk & 63] : '=';
    }
    out[o] = 0;
    return out;
}

static int base64_value(char c)
{
    const char *at = c ? strchr(base64_alphabet, c) : NULL;
    return at ? (int)(at - base64_alphabet) : -1;
}

char *etcd_base64_decode(const char *text, size_t text_len, size_t *out_len)
{
    while (text_len > 0 && text[text_len - 1] == '=')
        text_len--;
    if (text_len % 4 == 1) {
        errno = EPROTO;
        return NULL;
    }
    char *out = malloc(text_len / 4 * 3 + 3);
    if (!out) {
        errno = ENOMEM;
        return NULL;
    }
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < text_len; i++) {
        int v = base64_value(text[i]);
        if (v < 0) {
            free(out);
            errno = EPROTO;
            return NULL;
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (char)((acc >> bits) & 0xff);
        }
    }
    out[o] = 0;
    *out_len = o;
    return out;
}

/* ---- request bodies --------------------------------------------------------------------- */

/* The body's text (malloc'd) and obj released; NULL on -ENOMEM. */
static char *finish(json_object *obj)
{
    char *text = NULL;
    if (obj) {
        const char *s = json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN);
        text = s ? strdup(s) : NULL;
        json_object_put(obj);
    }
    return text;
}

/* obj[name] = base64(data); 0 or -ENOMEM. */
static int add_base64(json_object *obj, const char *name, const void *data, size_t len)
{
    char *b64 = etcd_base64_encode(data, len);
    json_object *s = b64 ? json_object_new_string(b64) : NULL;
    free(b64);
    if (!s || json_object_object_add(obj, name, s) != 0) {
        json_object_put(s);
        return -ENOMEM;
    }
    return 0;
}

/* obj[name] = "value" (int64 as a string, as the gateway writes them); 0 or -ENOMEM. */
static int add_int64(json_object *obj, const char *name, int64_t value)
{
    char text[24];
    snprintf(text, sizeof(text), "%" PRId64, value);
    json_object *s = json_object_new_string(text);
    if (!s || json_object_object_add(obj, name, s) != 0) {
        json_object_put(s);
        return -ENOMEM;
    }
    return 0;
}

/* The range end of every key that starts with key: key with its last byte that is not
 * 0xff incremented (the rest dropped); "\0" (every key) when there is none. */
static int add_prefix_end(json_object *obj, const char *key)
{
    size_t len = strlen(key);
    char *end = malloc(len + 1);
    if (!end)
        return -ENOMEM;
    memcpy(end, key, len + 1);
    while (len > 0 && (unsigned char)end[len - 1] == 0xff)
        len--;
    int rc;
    if (len == 0) {
        rc = add_base64(obj, "range_end", "", 1);
    } else {
        end[len - 1] = (char)((unsigned char)end[len - 1] + 1);
        rc = add_base64(obj, "range_end", end, len);
    }
    free(end);
    return rc;
}

/* {"key", "range_end"?} */
static json_object *key_object(const char *key, int prefix)
{
    json_object *obj = json_object_new_object();
    if (!obj || add_base64(obj, "key", key, strlen(key)) != 0 ||
        (prefix && add_prefix_end(obj, key) != 0)) {
        json_object_put(obj);
        return NULL;
    }
    return obj;
}

char *etcd_json_range_body(const char *key, int prefix)
{
    return finish(key_object(key, prefix));
}

char *etcd_json_delete_body(const char *key, int prefix)
{
    return finish(key_object(key, prefix));
}

static json_object *put_object(const char *key, const char *value, size_t value_len,
                               int64_t lease)
{
    json_object *obj = key_object(key, 0);
    if (obj && (add_base64(obj, "value", value ? value : "", value ? value_len : 0) != 0 ||
                (lease != 0 && add_int64(obj, "lease", lease) != 0))) {
        json_object_put(obj);
        return NULL;
    }
    return obj;
}

char *etcd_json_put_body(const char *key, const char *value, size_t value_len, int64_t lease)
{
    return finish(put_object(key, value, value_len, lease));
}

/* One of a txn's ops as a RequestOp ({"request_put": ...}), or an empty array slot for
 * ETCD_OP_NONE (NULL op: no request). 0 or -ENOMEM. */
static int add_op(json_object *list, const char *key, const etcd_op_t *op)
{
    json_object *inner = NULL;
    const char *name = NULL;
    switch (op->kind) {
    case ETCD_OP_NONE:
        return 0;
    case ETCD_OP_PUT:
        name = "request_put";
        inner = put_object(key, op->value, op->value_len, op->lease);
        break;
    case ETCD_OP_DELETE:
        name = "request_delete_range";
        inner = key_object(key, 0);
        break;
    case ETCD_OP_GET:
        name = "request_range";
        inner = key_object(key, 0);
        break;
    }
    json_object *wrap = inner ? json_object_new_object() : NULL;
    if (!wrap || json_object_object_add(wrap, name, inner) != 0) {
        json_object_put(inner);
        json_object_put(wrap);
        return -ENOMEM;
    }
    if (json_object_array_add(list, wrap) != 0) {
        json_object_put(wrap);
        return -ENOMEM;
    }
    return 0;
}

char *etcd_json_txn_body(const etcd_txn_t *txn)
{
    json_object *obj = json_object_new_object();
    json_object *compares = json_object_new_array();
    json_object *cmp = json_object_new_object();
    json_object *success = json_object_new_array();
    json_object *failure = json_object_new_array();
    int rc = (obj && compares && cmp && success && failure) ? 0 : -ENOMEM;
    bool create = txn->target == ETCD_CMP_CREATE_REVISION;
    if (rc == 0)
        rc = add_base64(cmp, "key", txn->key, strlen(txn->key));
    if (rc == 0)
        rc = json_object_object_add(cmp, "target",
                                    json_object_new_string(create ? "CREATE" : "MOD"));
    if (rc == 0)
        rc = json_object_object_add(cmp, "result", json_object_new_string("EQUAL"));
    if (rc == 0)
        rc = add_int64(cmp, create ? "create_revision" : "mod_revision", txn->rev);
    if (rc == 0)
        rc = add_op(success, txn->key, &txn->success);
    if (rc == 0)
        rc = add_op(failure, txn->key, &txn->failure);
    if (rc == 0 && json_object_array_add(compares, cmp) == 0) {
        cmp = NULL;
        rc = json_object_object_add(obj, "compare", compares);
        compares = NULL;
        if (rc == 0)
            rc = json_object_object_add(obj, "success", success);
        success = NULL;
        if (rc == 0)
            rc = json_object_object_add(obj, "failure", failure);
        failure = NULL;
    } else {
        rc = -ENOMEM;
    }
    json_object_put(cmp);
    json_object_put(compares);
    json_object_put(success);
    json_object_put(failure);
    if (rc != 0) {
        json_object_put(obj);
        return NULL;
    }
    return finish(obj);
}

char *etcd_json_lease_body(int64_t id, int64_t ttl_s)
{
    json_object *obj = json_object_new_object();
    if (obj && ((id != 0 && add_int64(obj, "ID", id) != 0) ||
                (ttl_s != 0 && add_int64(obj, "TTL", ttl_s) != 0))) {
        json_object_put(obj);
        return NULL;
    }
    return finish(obj);
}

char *etcd_json_watch_body(const char *prefix, int64_t start_revision)
{
    json_object *create = key_object(prefix, 1);
    if (create && start_revision > 0 && add_int64(create, "start_revision", start_revision)) {
        json_object_put(create);
        return NULL;
    }
    json_object *obj = create ? json_object_new_object() : NULL;
    if (!obj || json_object_object_add(obj, "create_request", create) != 0) {
        json_object_put(create);
        json_object_put(obj);
        return NULL;
    }
    return finish(obj);
}

/* ---- replies ---------------------------------------------------------------------------- */

int etcd_json_int64(json_object *obj, const char *name, int64_t *out)
{
    json_object *v;
    *out = 0;
    if (!json_object_object_get_ex(obj, name, &v) || json_object_is_type(v, json_type_null))
        return 0;
    if (json_object_is_type(v, json_type_int)) {
        *out = json_object_get_int64(v);
        return 0;
    }
    if (!json_object_is_type(v, json_type_string))
        return -EPROTO;
    const char *s = json_object_get_string(v);
    char *end;
    errno = 0;
    long long n = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != 0)
        return -EPROTO;
    *out = n;
    return 0;
}

/* A base64 member decoded (absent: ""); 0 or -EPROTO / -ENOMEM. */
static int read_bytes(json_object *obj, const char *name, char **out, size_t *len)
{
    json_object *v;
    const char *text = "";
    *out = NULL;
    *len = 0;
    if (json_object_object_get_ex(obj, name, &v)) {
        if (!json_object_is_type(v, json_type_string))
            return -EPROTO;
        text = json_object_get_string(v);
    }
    *out = etcd_base64_decode(text, strlen(text), len);
    return *out ? 0 : -errno;
}

void etcd_kv_free(etcd_kv_t *kv)
{
    free((char *)kv->key);
    free((char *)kv->value);
    *kv = (etcd_kv_t){0};
}

int etcd_json_read_kv(json_object *obj, etcd_kv_t *kv, const char **why)
{
    char *key = NULL, *value = NULL;
    *kv = (etcd_kv_t){0};
    if (!json_object_is_type(obj, json_type_object)) {
        *why = "a kv is not an object";
        return -EPROTO;
    }
    int rc = read_bytes(obj, "key", &key, &kv->key_len);
    if (rc == 0)
        rc = read_bytes(obj, "value", &value, &kv->value_len);
    kv->key = key;
    kv->value = value;
    if (rc != 0) {
        *why = "a key or value is not base64";
        goto fail;
    }
    if (etcd_json_int64(obj, "create_revision", &kv->create_revision) != 0 ||
        etcd_json_int64(obj, "mod_revision", &kv->mod_revision) != 0 ||
        etcd_json_int64(obj, "version", &kv->version) != 0 ||
        etcd_json_int64(obj, "lease", &kv->lease) != 0) {
        *why = "a kv's revision, version or lease is not an integer";
        rc = -EPROTO;
        goto fail;
    }
    return 0;
fail:
    etcd_kv_free(kv);
    return rc;
}

const char *etcd_json_error_text(json_object *obj)
{
    json_object *err, *msg;
    if (!json_object_is_type(obj, json_type_object) ||
        !json_object_object_get_ex(obj, "error", &err))
        return NULL;
    if (json_object_is_type(err, json_type_string)) {
        const char *s = json_object_get_string(err);
        return s[0] ? s : NULL; /* lease grant's "error" member: "" when granted */
    }
    if (json_object_is_type(err, json_type_object) &&
        json_object_object_get_ex(err, "message", &msg) &&
        json_object_is_type(msg, json_type_string))
        return json_object_get_string(msg);
    return "an error without a message";
}

void etcd_reply_free(etcd_reply_t *reply)
{
    for (size_t i = 0; i < reply->kv_count; i++)
        etcd_kv_free(&reply->kvs[i]);
    free(reply->kvs);
    reply->kvs = NULL;
    reply->kv_count = 0;
}

/* Appends the kvs of a RangeResponse object ("kvs" absent: none). 0, -EPROTO, -ENOMEM. */
static int read_kvs(json_object *range, etcd_reply_t *reply, const char **why)
{
    json_object *kvs;
    if (!json_object_object_get_ex(range, "kvs", &kvs))
        return 0;
    if (!json_object_is_type(kvs, json_type_array)) {
        *why = "\"kvs\" is not an array";
        return -EPROTO;
    }
    size_t n = json_object_array_length(kvs);
    etcd_kv_t *grown = realloc(reply->kvs, (reply->kv_count + n + 1) * sizeof(*grown));
    if (!grown) {
        *why = "out of memory";
        return -ENOMEM;
    }
    reply->kvs = grown;
    for (size_t i = 0; i < n; i++) {
        int rc = etcd_json_read_kv(json_object_array_get_idx(kvs, i),
                                   &reply->kvs[reply->kv_count], why);
        if (rc != 0)
            return rc;
        reply->kv_count++;
    }
    return 0;
}

/* A TxnResponse: "succeeded" (absent: false) and the kvs of its range responses. */
static int read_txn(json_object *root, etcd_reply_t *reply, const char **why)
{
    json_object *v, *responses;
    if (json_object_object_get_ex(root, "succeeded", &v)) {
        if (!json_object_is_type(v, json_type_boolean)) {
            *why = "\"succeeded\" is not a boolean";
            return -EPROTO;
        }
        reply->result.succeeded = json_object_get_boolean(v);
    }
    if (!json_object_object_get_ex(root, "responses", &responses))
        return 0;
    if (!json_object_is_type(responses, json_type_array)) {
        *why = "\"responses\" is not an array";
        return -EPROTO;
    }
    for (size_t i = 0; i < json_object_array_length(responses); i++) {
        json_object *op = json_object_array_get_idx(responses, i), *range;
        if (!json_object_is_type(op, json_type_object)) {
            *why = "a txn response is not an object";
            return -EPROTO;
        }
        if (json_object_object_get_ex(op, "response_range", &range)) {
            if (!json_object_is_type(range, json_type_object)) {
                *why = "\"response_range\" is not an object";
                return -EPROTO;
            }
            int rc = read_kvs(range, reply, why);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

/* The members of a reply object that kind says to read. */
static int read_reply(etcd_reply_kind_t kind, json_object *root, etcd_reply_t *reply,
                      const char **why)
{
    json_object *header, *result;
    if (kind == ETCD_REPLY_KEEPALIVE) { /* a stream's one message: {"result":{...}} */
        if (!json_object_object_get_ex(root, "result", &result) ||
            !json_object_is_type(result, json_type_object)) {
            *why = "no \"result\" object";
            return -EPROTO;
        }
        root = result;
    }
    if (json_object_object_get_ex(root, "header", &header)) {
        if (!json_object_is_type(header, json_type_object) ||
            etcd_json_int64(header, "revision", &reply->result.revision) != 0) {
            *why = "\"header\" is not etcd's";
            return -EPROTO;
        }
    }
    switch (kind) {
    case ETCD_REPLY_PLAIN:
        return 0;
    case ETCD_REPLY_RANGE:
        return read_kvs(root, reply, why);
    case ETCD_REPLY_TXN:
        return read_txn(root, reply, why);
    case ETCD_REPLY_LEASE:
    case ETCD_REPLY_KEEPALIVE:
        if (etcd_json_int64(root, "ID", &reply->result.lease_id) != 0 ||
            etcd_json_int64(root, "TTL", &reply->result.ttl) != 0) {
            *why = "\"ID\" or \"TTL\" is not an integer";
            return -EPROTO;
        }
        return 0;
    }
    return 0;
}

void etcd_json_parse_reply(etcd_reply_kind_t kind, long http_status, const char *body,
                           size_t body_len, const char *endpoint, etcd_reply_t *reply)
{
    memset(reply, 0, sizeof(*reply));
    reply->result.message = reply->message;
    const char *why = NULL;
    enum json_tokener_error jerr = json_tokener_success;
    json_object *root = NULL;
    json_tokener *tok = json_tokener_new();
    if (tok) {
        root = json_tokener_parse_ex(tok, body ? body : "", (int)body_len);
        jerr = json_tokener_get_error(tok);
        json_tokener_free(tok);
    }
    if (!root || jerr != json_tokener_success || !json_object_is_type(root, json_type_object)) {
        reply->result.error = http_status != 200 ? -EIO : -EPROTO;
        snprintf(reply->message, sizeof(reply->message),
                 "etcd at %s: HTTP %ld, a reply that is not etcd's JSON (%.80s)", endpoint,
                 http_status, body_len ? body : "empty");
        goto out;
    }
    const char *error = etcd_json_error_text(root);
    if (error || http_status != 200) {
        reply->result.error = -EIO;
        snprintf(reply->message, sizeof(reply->message), "etcd at %s: HTTP %ld: %s", endpoint,
                 http_status, error ? error : "no error message");
        goto out;
    }
    int rc = read_reply(kind, root, reply, &why);
    if (rc != 0) {
        reply->result.error = rc;
        snprintf(reply->message, sizeof(reply->message), "etcd at %s: a bad reply: %s",
                 endpoint, why ? why : "unreadable");
    }
out:
    json_object_put(root);
    if (reply->result.error != 0) {
        etcd_reply_free(reply);
    } else {
        reply->result.kvs = reply->kvs;
        reply->result.count = reply->kv_count;
    }
}
