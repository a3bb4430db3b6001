/* Prints decoded msgpack values as JSON (salusctl --json). */
#ifndef SALUS_SALUSCTL_JSON_H
#define SALUS_SALUSCTL_JSON_H

#include <msgpack.h>
#include <stdio.h>

void json_print(FILE *out, const msgpack_object *value);

#endif
