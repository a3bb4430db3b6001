/* Access control (see access.h). */
#include "access.h"

#include "registry.h"

#include "log.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

int access_socket_mode(salusd_t *d, const char *path)
{
    const char *group = d->config.allow_group;
    if (!group[0]) {
        if (chmod(path, 0666) < 0) {
            LOG_ERROR("chmod 0666 %s: %s", path, strerror(errno));
            return -errno;
        }
        return 0;
    }
    struct group *g = getgrnam(group);
    if (!g) {
        LOG_ERROR("allow-group %s: no such group", group);
        return -ENOENT;
    }
    if (chown(path, (uid_t)-1, g->gr_gid) < 0 || chmod(path, 0660) < 0) {
        LOG_ERROR("giving %s to group %s (0660): %s", path, group, strerror(errno));
        return -errno;
    }
    return 0;
}

static int in_group(const char *name, uid_t uid, gid_t primary_gid)
{
    struct group *g = name[0] ? getgrnam(name) : NULL;
    if (!g)
        return 0;
    gid_t admin = g->gr_gid;
    if (primary_gid == admin)
        return 1;
    struct passwd *pw = getpwuid(uid);
    if (!pw)
        return 0;
    int n = 64;
    gid_t *groups = malloc(sizeof(*groups) * (size_t)n);
    if (!groups)
        return 0;
    if (getgrouplist(pw->pw_name, pw->pw_gid, groups, &n) < 0) {
        gid_t *more = n > 64 && n <= 65536 ? realloc(groups, sizeof(*groups) * (size_t)n) : NULL;
        if (!more || getgrouplist(pw->pw_name, pw->pw_gid, more, &n) < 0) {
            free(more ? more : groups);
            return 0;
        }
        groups = more;
    }
    int found = 0;
    for (int i = 0; i < n && !found; i++)
        found = groups[i] == admin;
    free(groups);
    return found;
}

int access_is_admin(conn_t *c)
{
    if (c->uid == 0 || c->uid == geteuid())
        return 1;
    /* cached for the connection's life: salusctl's connections last one request */
    if (c->access == 0) {
        const char *admins = c->daemon->config.admin_group;
        c->access = in_group(admins, c->uid, c->gid) ? 1 : 2;
        LOG_DEBUG("uid %u is %sin group %s", (unsigned)c->uid, c->access == 1 ? "" : "not ",
                  admins);
    }
    return c->access == 1;
}

int access_may_control(conn_t *c, uid_t owner_uid)
{
    return c->uid == owner_uid || access_is_admin(c);
}
