#include "paths.h"

#include <errno.h>
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

int salus_make_socket_dir(const char *socket_path)
{
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    if (snprintf(dir, sizeof(dir), "%s", socket_path) >= (int)sizeof(dir))
        return -ENAMETOOLONG;
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0;
    *slash = '\0';
    mode_t mode = strncmp(dir, "/run/", 5) == 0 ? 0755 : 0700;
    if (mkdir(dir, mode) == 0 || errno == EEXIST)
        return 0;
    return -errno;
}
