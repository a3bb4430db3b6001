/* File-system steps of salusd's durable writes (fsio.h). */
#include "fsio.h"

#include "paths.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fsio_make_parents(const char *path, mode_t upper_mode, mode_t last_mode)
{
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof(dir), "%s", path) >= (int)sizeof(dir))
        return -ENAMETOOLONG;
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0;
    *slash = '\0';
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(dir, upper_mode) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(dir, last_mode) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

int fsio_write_all(int fd, const void *p, size_t n)
{
    for (size_t at = 0; at < n;) {
        ssize_t w = write(fd, (const uint8_t *)p + at, n - at);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        at += (size_t)w;
    }
    return 0;
}

int fsio_fsync_dir_of(const char *path)
{
    char dir[PATH_MAX];
    int rc = salus_path_dir(path, dir, sizeof(dir));
    if (rc < 0)
        return rc;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    rc = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

/* A component's owner and mode: root's or salusd's uid's, and writable by group or others only
 * with the sticky bit. 0, or -EPERM with err. */
static int check_component(int fd, const char *shown, char *err, size_t err_size)
{
    struct stat st;
    if (fstat(fd, &st) < 0) {
        snprintf(err, err_size, "%s: %s", shown, strerror(errno));
        return -errno;
    }
    uid_t self = geteuid();
    if ((st.st_uid != 0 && st.st_uid != self) ||
        ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))) {
        snprintf(err, err_size, "%s belongs to uid %u with mode %04o: another user could "
                 "redirect what salusd (uid %u) writes below it (a directory on the way must be "
                 "root's or uid %u's, writable by others only with the sticky bit)", shown,
                 (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), (unsigned)self,
                 (unsigned)self);
        return -EPERM;
    }
    return 0;
}

int fsio_open_dir(const char *dir, int create, char *err, size_t err_size)
{
    char walk[PATH_MAX];
    if (!dir || !dir[0] || snprintf(walk, sizeof(walk), "%s", dir) >= (int)sizeof(walk)) {
        snprintf(err, err_size, "%s: an empty or too long directory path", dir ? dir : "");
        return -ENAMETOOLONG;
    }
    int fd = open(walk[0] == '/' ? "/" : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, err_size, "%s: %s", walk[0] == '/' ? "/" : ".", strerror(errno));
        return -errno;
    }
    int rc = check_component(fd, walk[0] == '/' ? "/" : ".", err, err_size);
    char *save = NULL;
    size_t done = 0; /* the bytes of walk opened so far (shown in messages) */
    for (char *part = strtok_r(walk, "/", &save); part && rc == 0;
         part = strtok_r(NULL, "/", &save)) {
        done = (size_t)(part - walk) + strlen(part);
        if (strcmp(part, ".") == 0)
            continue;
        int next = openat(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0 && errno == ENOENT && create) {
            if (mkdirat(fd, part, 0700) < 0 && errno != EEXIST)
                rc = -errno;
            else
                next = openat(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (rc == 0 && next < 0)
            rc = -errno;
        char shown[PATH_MAX];
        snprintf(shown, sizeof(shown), "%.*s", (int)done, dir);
        if (rc < 0) {
            snprintf(err, err_size, "%s: %s", shown,
                     rc == -ELOOP || rc == -ENOTDIR
                         ? "not a directory (a symbolic link is never followed here)"
                         : strerror(-rc));
            break;
        }
        close(fd);
        fd = next;
        rc = check_component(fd, shown, err, err_size);
    }
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

int fsio_check_state_dir(const char *dir, char *real, size_t real_size, char *err,
                         size_t err_size)
{
    char probe[PATH_MAX];
    struct stat st;
    if (snprintf(probe, sizeof(probe), "%s/x", dir) >= (int)sizeof(probe)) {
        snprintf(err, err_size, "the state directory path is too long");
        return -ENAMETOOLONG;
    }
    if (lstat(dir, &st) < 0 && errno == ENOENT) {
        int rc = fsio_make_parents(probe, 0755, 0700);
        if (rc < 0) {
            snprintf(err, err_size, "cannot create the state directory %s: %s", dir,
                     strerror(-rc));
            return rc;
        }
    }
    /* a symbolic link on the way as given: only root's or salusd's own (another user's could
     * point the directory anywhere at the next start) */
    for (char *p = probe + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (lstat(probe, &st) == 0 && S_ISLNK(st.st_mode) && st.st_uid != 0 &&
            st.st_uid != geteuid()) {
            snprintf(err, err_size, "the state directory's path goes through %s, a symbolic "
                     "link of uid %u", probe, (unsigned)st.st_uid);
            return -EPERM;
        }
        *p = '/';
    }
    char resolved[PATH_MAX];
    if (!realpath(dir, resolved)) {
        snprintf(err, err_size, "the state directory %s: %s", dir, strerror(errno));
        return -errno;
    }
    if (snprintf(real, real_size, "%s", resolved) >= (int)real_size) {
        snprintf(err, err_size, "the state directory path is too long");
        return -ENAMETOOLONG;
    }
    char why[PATH_MAX + 256];
    int fd = fsio_open_dir(resolved, 0, why, sizeof(why));
    if (fd < 0) {
        snprintf(err, err_size, "the state directory %s: %s", resolved, why);
        return fd;
    }
    int rc = fstat(fd, &st) < 0 ? -errno : 0;
    close(fd);
    if (rc == 0 && (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))) {
        snprintf(err, err_size, "the state directory %s belongs to uid %u with mode %04o: it "
                 "must be salusd's own (uid %u) and writable by nobody else", resolved,
                 (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), (unsigned)geteuid());
        rc = -EPERM;
    } else if (rc < 0) {
        snprintf(err, err_size, "the state directory %s: %s", resolved, strerror(-rc));
    }
    return rc;
}

int fsio_open_parent(const char *path, int create, const char **name, char *err,
                     size_t err_size)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    const char *last = slash ? slash + 1 : path;
    if (!last[0] || strcmp(last, ".") == 0 || strcmp(last, "..") == 0) {
        snprintf(err, err_size, "%s: not a file path", path);
        return -EINVAL;
    }
    int rc = salus_path_dir(path, dir, sizeof(dir));
    if (rc < 0) {
        snprintf(err, err_size, "%s: %s", path, strerror(-rc));
        return rc;
    }
    *name = last;
    return fsio_open_dir(dir, create, err, err_size);
}

int fsio_read_file(const char *path, size_t max_bytes, int own_uid, const char *what,
                   uint8_t **data, size_t *len, char *err, size_t err_size)
{
    *data = NULL;
    *len = 0;
    const char *name = NULL;
    char where[PATH_MAX + 256];
    int dfd = fsio_open_parent(path, 0, &name, where, sizeof(where));
    if (dfd < 0) {
        snprintf(err, err_size, "%s", where);
        return dfd;
    }
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    close(dfd);
    if (fd < 0) {
        int rc = -errno;
        snprintf(err, err_size, "%s: %s", path, strerror(-rc));
        return rc;
    }
    struct stat st;
    uint8_t *buf = NULL;
    int rc = 0;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        rc = -EINVAL;
        snprintf(err, err_size, "%s: not a regular file", path);
        goto out;
    }
    if (own_uid && st.st_uid != geteuid()) {
        rc = -EPERM;
        snprintf(err, err_size, "%s belongs to uid %u, not to salusd's user (%u): refused", path,
                 (unsigned)st.st_uid, (unsigned)geteuid());
        goto out;
    }
    if ((uint64_t)st.st_size > max_bytes) {
        rc = -EFBIG;
        snprintf(err, err_size, "%s: %lld bytes, larger than %s can be", path,
                 (long long)st.st_size, what);
        goto out;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        rc = -ENOMEM;
        snprintf(err, err_size, "%s: out of memory", path);
        goto out;
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    *data = buf;
    *len = got;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return rc;
}
