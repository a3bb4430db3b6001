/* File-system steps of salusd's durable writes (fsio.h). */
#include "fsio.h"

#include "paths.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
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
