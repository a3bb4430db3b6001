/* Options as one table of rows (name, type, default, bounds, help), used by the command
 * line, the config file and (later) salusctl. Values live in a caller-owned struct at
 * the row's offset; strings are fixed-size char arrays, so nothing needs freeing. */
#ifndef SALUS_COMMON_OPTIONS_H
#define SALUS_COMMON_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

typedef enum option_type {
    OPTION_STRING,    /* char[size] */
    OPTION_BOOL,      /* int: 0/1; "--name" sets, "--no-name" clears */
    OPTION_INT,       /* long long within [min, max] */
    OPTION_BYTES,     /* unsigned long long within [min, max]; accepts K/M/G/KiB/MiB/GiB */
    OPTION_LOG_LEVEL, /* int: salus_log_level_t */
} option_type_t;

typedef struct option_def_s {
    const char *name;          /* long option (--name) and config-file key */
    option_type_t type;
    const char *default_value; /* parsed like any other value; NULL: empty / 0 */
    long long min, max;        /* OPTION_INT / OPTION_BYTES bounds */
    size_t offset;             /* where the value lives in the config struct */
    size_t size;               /* OPTION_STRING buffer size */
    const char *help;
} option_def_t;

const option_def_t *options_find(const option_def_t *table, size_t count, const char *name);
/* Applies defaults to every row. Returns 0, or -EINVAL if a default is invalid. */
int options_set_defaults(const option_def_t *table, size_t count, void *config);
/* Sets one option from text. Returns 0, -ENOENT (unknown name) or -EINVAL (bad value). */
int options_set(const option_def_t *table, size_t count, void *config, const char *name,
                const char *value, char *err, size_t err_size);
/* Reads "name = value" lines ('#' starts a comment). Errors name the file and line. */
int options_load_file(const option_def_t *table, size_t count, void *config, const char *path,
                      char *err, size_t err_size);
/* Parses --name=value, --name value, --flag, --no-flag up to the first non-option or "--".
 * *next_arg is set to the index of the first argument not consumed. Returns 0, or a
 * negative error with err set. "--help"/"-h" are not options here: the caller checks them. */
int options_parse_args(const option_def_t *table, size_t count, void *config, int argc,
                       char **argv, int *next_arg, char *err, size_t err_size);
/* Parses a byte size ("512", "4K", "16MiB", "1G": powers of 1024; "512MB", "2GB", "10kB": SI,
 * powers of 1000). Returns 0 or -EINVAL. */
int options_parse_bytes(const char *text, unsigned long long *out);
void options_usage(const option_def_t *table, size_t count, FILE *out);

#endif
