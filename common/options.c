#include "options.h"

#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const option_def_t *options_find(const option_def_t *table, size_t count, const char *name)
{
    for (size_t i = 0; i < count; i++)
        if (strcmp(table[i].name, name) == 0)
            return &table[i];
    return NULL;
}

int options_parse_bytes(const char *text, unsigned long long *out)
{
    /* K, M, G, T and KiB, MiB, GiB, TiB are powers of 1024; kB, MB, GB, TB (any case) are
     * the SI units, powers of 1000: "512MB" is 512000000 bytes, not 512 MiB */
    static const struct {
        const char *suffix;
        unsigned long long unit;
    } units[] = {{"", 1},
                 {"b", 1},
                 {"k", 1ull << 10},
                 {"kib", 1ull << 10},
                 {"m", 1ull << 20},
                 {"mib", 1ull << 20},
                 {"g", 1ull << 30},
                 {"gib", 1ull << 30},
                 {"t", 1ull << 40},
                 {"tib", 1ull << 40},
                 {"kb", 1000ull},
                 {"mb", 1000000ull},
                 {"gb", 1000000000ull},
                 {"tb", 1000000000000ull}};
    char *end;
    if (!text || !isdigit((unsigned char)text[0]))
        return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno)
        return -EINVAL;
    while (*end == ' ')
        end++;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcasecmp(end, units[i].suffix) != 0)
            continue;
        if (v > ULLONG_MAX / units[i].unit)
            return -EINVAL;
        *out = v * units[i].unit;
        return 0;
    }
    return -EINVAL;
}

static int parse_bool(const char *text, int *out)
{
    static const char *const yes[] = {"1", "yes", "true", "on"};
    static const char *const no[] = {"0", "no", "false", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(text, yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcasecmp(text, no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return -EINVAL;
}

static int set_row(const option_def_t *row, void *config, const char *value, char *err,
                   size_t err_size)
{
    char *field = (char *)config + row->offset;
    const char *v = value ? value : "";
    size_t need = row->type == OPTION_INT     ? sizeof(long long)
                  : row->type == OPTION_BYTES ? sizeof(unsigned long long)
                  : row->type == OPTION_STRING ? 1
                                               : sizeof(int);
    if (row->size < need || (row->type != OPTION_STRING && row->size != need)) {
        /* a table whose field does not have its type's size would write past it */
        snprintf(err, err_size, "--%s: the option table gives it a %zu-byte field, its type needs %zu",
                 row->name, row->size, need);
        return -EINVAL;
    }
    switch (row->type) {
    case OPTION_STRING:
        if (strlen(v) >= row->size) {
            snprintf(err, err_size, "--%s: value longer than %zu bytes", row->name, row->size - 1);
            return -EINVAL;
        }
        strcpy(field, v);
        return 0;
    case OPTION_BOOL:
        if (parse_bool(v[0] ? v : "0", (int *)(void *)field) < 0) {
            snprintf(err, err_size, "--%s: expected yes/no, got '%s'", row->name, v);
            return -EINVAL;
        }
        return 0;
    case OPTION_INT: {
        char *end;
        errno = 0;
        long long n = strtoll(v, &end, 10);
        if (!v[0] || *end || errno || n < row->min || n > row->max) {
            snprintf(err, err_size, "--%s: expected an integer in [%lld, %lld], got '%s'",
                     row->name, row->min, row->max, v);
            return -EINVAL;
        }
        *(long long *)(void *)field = n;
        return 0;
    }
    case OPTION_BYTES: {
        unsigned long long n;
        if (options_parse_bytes(v, &n) < 0 || n < (unsigned long long)row->min ||
            n > (unsigned long long)row->max) {
            snprintf(err, err_size, "--%s: expected a size in [%lld, %lld] bytes, got '%s'",
                     row->name, row->min, row->max, v);
            return -EINVAL;
        }
        *(unsigned long long *)(void *)field = n;
        return 0;
    }
    case OPTION_LOG_LEVEL: {
        salus_log_level_t level;
        if (salus_log_level_parse(v, &level) < 0) {
            snprintf(err, err_size, "--%s: expected error|warn|info|debug|trace, got '%s'",
                     row->name, v);
            return -EINVAL;
        }
        *(int *)(void *)field = (int)level;
        return 0;
    }
    }
    return -EINVAL;
}

int options_set_defaults(const option_def_t *table, size_t count, void *config)
{
    char err[256];
    for (size_t i = 0; i < count; i++) {
        const char *def = table[i].default_value;
        if (!def)
            def = table[i].type == OPTION_STRING ? "" : "0";
        if (set_row(&table[i], config, def, err, sizeof(err)) < 0)
            return -EINVAL;
    }
    return 0;
}

int options_set(const option_def_t *table, size_t count, void *config, const char *name,
                const char *value, char *err, size_t err_size)
{
    const option_def_t *row = options_find(table, count, name);
    if (!row) {
        snprintf(err, err_size, "unknown option '%s'", name);
        return -ENOENT;
    }
    return set_row(row, config, value, err, err_size);
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

int options_load_file(const option_def_t *table, size_t count, void *config, const char *path,
                      char *err, size_t err_size)
{
    FILE *f = fopen(path, "r");
    char line[1024], why[256];
    int rc = 0, lineno = 0;
    if (!f) {
        rc = -errno;
        snprintf(err, err_size, "%s: %s", path, strerror(errno));
        return rc;
    }
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            snprintf(err, err_size, "%s:%d: line too long", path, lineno);
            rc = -EINVAL;
            goto out;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *text = trim(line);
        if (!*text)
            continue;
        char *sep = strpbrk(text, "= \t");
        char *value = (char *)"";
        if (sep) {
            *sep = '\0';
            value = trim(sep + 1);
            if (*value == '=')
                value = trim(value + 1);
        }
        const char *name = trim(text);
        const option_def_t *row = options_find(table, count, name);
        if (!row) {
            snprintf(err, err_size, "%s:%d: unknown option '%s'", path, lineno, name);
            rc = -EINVAL;
            goto out;
        }
        if (row->type == OPTION_BOOL && !*value)
            value = (char *)"yes";
        if (set_row(row, config, value, why, sizeof(why)) < 0) {
            snprintf(err, err_size, "%s:%d: %s", path, lineno, why);
            rc = -EINVAL;
            goto out;
        }
    }
out:
    fclose(f);
    return rc;
}

int options_parse_args(const option_def_t *table, size_t count, void *config, int argc,
                       char **argv, int *next_arg, char *err, size_t err_size)
{
    int i = 1;
    for (; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--") == 0) {
            i++;
            break;
        }
        if (strncmp(arg, "--", 2) != 0)
            break;
        char name[64];
        const char *value = NULL;
        const char *eq = strchr(arg + 2, '=');
        size_t n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        if (n == 0 || n >= sizeof(name)) {
            snprintf(err, err_size, "bad option '%s'", arg);
            return -EINVAL;
        }
        memcpy(name, arg + 2, n);
        name[n] = '\0';
        if (eq)
            value = eq + 1;
        const option_def_t *row = options_find(table, count, name);
        if (!row && !eq && strncmp(name, "no-", 3) == 0) {
            row = options_find(table, count, name + 3);
            if (row && row->type == OPTION_BOOL) {
                *(int *)(void *)((char *)config + row->offset) = 0;
                continue;
            }
            row = NULL;
        }
        if (!row) {
            snprintf(err, err_size, "unknown option '--%s'", name);
            return -ENOENT;
        }
        if (!value && row->type == OPTION_BOOL)
            value = "yes";
        if (!value) {
            if (i + 1 >= argc) {
                snprintf(err, err_size, "option '--%s' needs a value", name);
                return -EINVAL;
            }
            value = argv[++i];
        }
        int rc = set_row(row, config, value, err, err_size);
        if (rc < 0)
            return rc;
    }
    *next_arg = i;
    return 0;
}

void options_usage(const option_def_t *table, size_t count, FILE *out)
{
    for (size_t i = 0; i < count; i++) {
        char left[64];
        const char *arg = table[i].type == OPTION_BOOL ? "" : "=VALUE";
        snprintf(left, sizeof(left), "--%s%s", table[i].name, arg);
        fprintf(out, "  %-28s %s", left, table[i].help);
        if (table[i].default_value && table[i].default_value[0])
            fprintf(out, " (default: %s)", table[i].default_value);
        fputc('\n', out);
    }
}
