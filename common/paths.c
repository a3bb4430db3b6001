#include "paths.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

int salus_default_socket_path(char *out, size_t out_size)
{
    const char *env = getenv("SALUS_SOCKET");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int n;
    size_t limit = sizeof(((struct sockaddr_un *)0)->sun_path);
    if (out_size < limit)
        limit = out_size;

    if (env && env[0])
        n = snprintf(out, limit, "%s", env);
    else if (geteuid() == 0)
        n = snprintf(out, limit, "/run/salus/%s", SALUS_SOCKET_NAME);
    else if (xdg && xdg[0] == '/')
        n = snprintf(out, limit, "%s/salus/%s", xdg, SALUS_SOCKET_NAME);
    else
        n = snprintf(out, limit, "/tmp/salus-%u/%s", (unsigned)getuid(), SALUS_SOCKET_NAME);
    if (n < 0 || (size_t)n >= limit)
        return -ENAMETOOLONG;
    return 0;
}

int salus_path_dir(const char *path, char *dir, size_t size)
{
    if (snprintf(dir, size, "%s", path) >= (int)size)
        return -ENAMETOOLONG;
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, size, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    return 0;
}

int salus_check_socket_dir(const char *socket_path, char *err, size_t err_size)
{
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    struct stat st;
    int rc = salus_path_dir(socket_path, dir, sizeof(dir));
    if (rc < 0)
        return rc;
    if (lstat(dir, &st) < 0) {
        rc = -errno;
        snprintf(err, err_size, "%s: %s", dir, strerror(-rc));
        return rc;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, err_size, "the socket directory %s is not a directory (a link?); "
                                "refusing it", dir);
        return -ENOTDIR;
    }
    if (st.st_uid != geteuid() && st.st_uid != 0 && st.st_uid != (uid_t)salus_daemon_uid() &&
        !salus_uid_unmapped(st.st_uid)) {
        snprintf(err, err_size, "the socket directory %s belongs to uid %u, not to you (uid %u), "
                                "root or salusd's user; refusing it (another user may have made "
                                "it: remove it or set SALUS_SOCKET)",
                 dir, (unsigned)st.st_uid, (unsigned)geteuid());
        return -EPERM;
    }
    if ((st.st_mode & 022) && !((st.st_mode & S_ISVTX) && st.st_uid == 0)) {
        snprintf(err, err_size, "the socket directory %s is writable by group or others (mode "
                                "%03o); refusing it",
                 dir, (unsigned)(st.st_mode & 07777));
        return -EPERM;
    }
    return 0;
}

int salus_uid_unmapped(unsigned uid)
{
    unsigned overflow = 65534, first = 1, lower = 0;
    unsigned long long count = 0;
    FILE *f = fopen("/proc/sys/kernel/overflowuid", "re");
    if (f) {
        if (fscanf(f, "%u", &overflow) != 1)
            overflow = 65534;
        fclose(f);
    }
    if (uid != overflow)
        return 0;
    /* the first user namespace maps every uid to itself: "0 0 4294967295" */
    f = fopen("/proc/self/uid_map", "re");
    if (!f)
        return 0;
    int whole = fscanf(f, "%u %u %llu", &first, &lower, &count) == 3 && first == 0 &&
                lower == 0 && count == 4294967295ull;
    fclose(f);
    return !whole;
}

unsigned salus_daemon_uid(void)
{
    const char *name = getenv("SALUS_DAEMON_USER");
    struct passwd *pw = getpwnam(name && *name ? name : "salus");
    return pw ? (unsigned)pw->pw_uid : (unsigned)-1;
}

int salus_make_socket_dir(const char *socket_path)
{
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)], err[256];
    int rc = salus_path_dir(socket_path, dir, sizeof(dir));
    if (rc < 0)
        return rc;
    if (strcmp(dir, "/") == 0 || strcmp(dir, ".") == 0)
        return 0;
    mode_t mode = strncmp(dir, "/run/", 5) == 0 ? 0755 : 0700;
    if (mkdir(dir, mode) == 0)
        return 0;
    if (errno != EEXIST)
        return -errno;
    rc = salus_check_socket_dir(socket_path, err, sizeof(err));
    if (rc < 0)
        fprintf(stderr, "salusd: %s\n", err);
    return rc;
}
