#include "json.h"

#include <inttypes.h>
#include <math.h>

void json_print_string(FILE *out, const char *s, size_t n)
{
    fputc('"', out);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        switch (ch) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        default:
            if (ch < 0x20)
                fprintf(out, "\\u%04x", ch);
            else
                fputc(ch, out);
        }
    }
    fputc('"', out);
}

void json_print(FILE *out, const msgpack_object *v)
{
    switch (v->type) {
    case MSGPACK_OBJECT_NIL: fputs("null", out); break;
    case MSGPACK_OBJECT_BOOLEAN: fputs(v->via.boolean ? "true" : "false", out); break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: fprintf(out, "%" PRIu64, v->via.u64); break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: fprintf(out, "%" PRId64, v->via.i64); break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        if (isfinite(v->via.f64))
            fprintf(out, "%.17g", v->via.f64);
        else
            fputs("null", out);
        break;
    case MSGPACK_OBJECT_STR: json_print_string(out, v->via.str.ptr, v->via.str.size); break;
    case MSGPACK_OBJECT_ARRAY:
        fputc('[', out);
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            if (i)
                fputc(',', out);
            json_print(out, &v->via.array.ptr[i]);
        }
        fputc(']', out);
        break;
    case MSGPACK_OBJECT_MAP:
        fputc('{', out);
        for (uint32_t i = 0; i < v->via.map.size; i++) {
            const msgpack_object_kv *kv = &v->via.map.ptr[i];
            if (i)
                fputc(',', out);
            if (kv->key.type == MSGPACK_OBJECT_STR)
                json_print_string(out, kv->key.via.str.ptr, kv->key.via.str.size);
            else
                fputs("\"?\"", out);
            fputc(':', out);
            json_print(out, &kv->val);
        }
        fputc('}', out);
        break;
    default: fputs("null", out); break;
    }
}
