/* The cluster key file of daemon links (links_key_load, links.h). */
#include "link_auth.h"
#include "links.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Checks what fstat says of the key file; 0 or -EPERM/-EINVAL with err filled. */
static int check_key_file(const char *path, const struct stat *st, char *err, size_t err_size)
{
    if (!S_ISREG(st->st_mode)) {
        snprintf(err, err_size, "cluster key %s: not a regular file", path);
        return -EINVAL;
    }
    if (st->st_uid != geteuid()) {
        snprintf(err, err_size, "cluster key %s: owned by uid %u, not by salusd's user (uid %u)",
                 path, (unsigned)st->st_uid, (unsigned)geteuid());
        return -EPERM;
    }
    if (st->st_mode & (S_IRWXG | S_IRWXO)) {
        snprintf(err, err_size, "cluster key %s: %s by others (mode %04o); it must be 0600 or "
                 "0400", path, (st->st_mode & (S_IRGRP | S_IROTH)) ? "readable" : "accessible",
                 (unsigned)(st->st_mode & 07777));
        return -EPERM;
    }
    if (st->st_size > LINKS_KEY_MAX_BYTES + 1) {
        snprintf(err, err_size, "cluster key %s: %lld bytes, more than the %d a key may have",
                 path, (long long)st->st_size, LINKS_KEY_MAX_BYTES);
        return -EINVAL;
    }
    return 0;
}

int links_key_load(const char *path, uint8_t *key, size_t cap, size_t *len, char *err,
                   size_t err_size)
{
    uint8_t buf[LINKS_KEY_MAX_BYTES + 2];
    struct stat st;
    size_t got = 0;
    int rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        rc = -errno;
        snprintf(err, err_size, "cluster key %s: %s", path, strerror(errno));
        return rc;
    }
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        snprintf(err, err_size, "cluster key %s: %s", path, strerror(errno));
        goto out;
    }
    rc = check_key_file(path, &st, err, err_size);
    if (rc < 0)
        goto out;
    while (got < sizeof(buf)) { /* the file may have grown since fstat */
        ssize_t n = read(fd, buf + got, sizeof(buf) - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            snprintf(err, err_size, "cluster key %s: %s", path, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    if (got > 0 && buf[got - 1] == '\n')
        got--;
    if (got < LINKS_KEY_MIN_BYTES || got > LINKS_KEY_MAX_BYTES) {
        snprintf(err, err_size, "cluster key %s: %zu bytes; a key has %d to %d (make one with "
                 "'head -c 32 /dev/urandom > %s')", path, got, LINKS_KEY_MIN_BYTES,
                 LINKS_KEY_MAX_BYTES, path);
        rc = -EINVAL;
        goto out;
    }
    if (got > cap) {
        snprintf(err, err_size, "cluster key %s: %zu bytes, more than the %zu the caller holds",
                 path, got, cap);
        rc = -ENOSPC;
        goto out;
    }
    memcpy(key, buf, got);
    *len = got;
out:
    link_auth_cleanse(buf, sizeof(buf));
    close(fd);
    return rc;
}
