/* Prints decoded msgpack values as JSON (salusctl --json). */
#ifndef SALUS_SALUSCTL_JSON_H
#define SALUS_SALUSCTL_JSON_H

#include <msgpack.h>
#include <stdio.h>

void json_print(FILE *out, const msgpack_object *value);
/* n bytes of s as a JSON string (quoted, escaped). */
void json_print_string(FILE *out, const char *s, size_t n);

#endif
