/* Access control (see access.h). */
#include "access.h"

#include "registry.h"

#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <stdio.h>
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

/* The inode of /proc/PID/ns/KIND (pid 0: this process's), 0 when it cannot be read. */
static uint64_t ns_inode(pid_t pid, const char *kind)
{
    char path[64];
    struct stat st;
    if (pid > 0)
        snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)pid, kind);
    else
        snprintf(path, sizeof(path), "/proc/self/ns/%s", kind);
    return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* 1 while the pidfd's process runs (a pidfd becomes readable when it exits) */
static int process_alive(int pidfd)
{
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    return pidfd >= 0 && poll(&p, 1, 0) == 0;
}

/* The pid namespace of the connection's process (0: unknown), and its user namespace when
 * user_ino is not NULL; read while its pidfd shows it alive, so that its pid still names it.
 * A peer outside salusd's pid namespace has pid 0 in SO_PEERCRED: unknown. */
static uint64_t conn_pidns(conn_t *c, uint64_t *user_ino)
{
    uint64_t pid_ino = c->pid > 0 ? ns_inode(c->pid, "pid") : 0;
    uint64_t user = c->pid > 0 ? ns_inode(c->pid, "user") : 0;
    if (!process_alive(c->pidfd))
        pid_ino = user = 0;
    if (user_ino)
        *user_ino = user;
    return pid_ino;
}

int access_in_own_namespaces(conn_t *c)
{
    uint64_t user_ino, pid_ino = conn_pidns(c, &user_ino);
    return pid_ino && user_ino && pid_ino == ns_inode(0, "pid") &&
           user_ino == ns_inode(0, "user");
}

int access_is_admin(conn_t *c)
{
    /* cached for the connection's life: salusctl's connections last one request */
    if (c->access == 0) {
        const char *admins = c->daemon->config.admin_group;
        int admin = c->uid == 0 || c->uid == geteuid();
        if (!admin) {
            admin = in_group(admins, c->uid, c->gid);
            LOG_DEBUG("uid %u is %sin group %s", (unsigned)c->uid, admin ? "" : "not ", admins);
        }
        if (admin && !c->daemon->config.admin_from_containers && !access_in_own_namespaces(c)) {
            LOG_INFO("pid %d (uid %u) runs in another pid or user namespace than salusd (a "
                     "container): not an administrator (admin-from-containers is off)",
                     (int)c->pid, (unsigned)c->uid);
            admin = 0;
        }
        c->access = admin ? 1 : 2;
    }
    return c->access == 1;
}

int access_may_control(conn_t *c, uid_t owner_uid)
{
    return c->uid == owner_uid || access_is_admin(c);
}

int access_may_control_job(conn_t *c, const job_t *job)
{
    if (access_is_admin(c))
        return 1;
    if (c->uid != job->uid)
        return 0;
    uint64_t pid_ino = conn_pidns(c, NULL);
    return pid_ino && (pid_ino == ns_inode(0, "pid") || pid_ino == job->pidns_ino);
}

/* The container id in one cgroup path component: libpod-ID, docker-ID, cri-containerd-ID,
 * crio-ID (a ".scope" after it or not) or ID alone, ID being 64 hex digits. 1 if found. */
static int container_in_component(const char *part, size_t len, char *out, size_t size)
{
    static const char *const prefixes[] = {"libpod-", "docker-", "cri-containerd-", "crio-"};
    if (len > 6 && memcmp(part + len - 6, ".scope", 6) == 0)
        len -= 6;
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
        size_t n = strlen(prefixes[i]);
        if (len > n && memcmp(part, prefixes[i], n) == 0) {
            part += n;
            len -= n;
            break;
        }
    }
    if (len != 64)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!isxdigit((unsigned char)part[i]))
            return 0;
    snprintf(out, size, "%.12s", part);
    return 1;
}

/* The container id of pid from /proc/PID/cgroup (the innermost component that names one),
 * "" when none. */
static void container_of(pid_t pid, char *out, size_t size)
{
    char path[64], line[1024];
    out[0] = '\0';
    snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
    FILE *f = pid > 0 ? fopen(path, "re") : NULL;
    if (!f)
        return;
    while (!out[0] && fgets(line, sizeof(line), f)) {
        char *cgroup = strchr(line, ':');
        cgroup = cgroup ? strchr(cgroup + 1, ':') : NULL;
        if (!cgroup)
            continue;
        cgroup[strcspn(cgroup, "\n")] = '\0';
        char *end = cgroup + strlen(cgroup);
        while (!out[0] && end > cgroup + 1) {
            char *start = end;
            while (start > cgroup + 1 && start[-1] != '/')
                start--;
            container_in_component(start, (size_t)(end - start), out, size);
            end = start - 1;
        }
    }
    fclose(f);
}

void access_note_job(conn_t *c, job_t *job)
{
    job->pidns_ino = conn_pidns(c, NULL);
    container_of(c->pid, job->container, sizeof(job->container));
    if (!process_alive(c->pidfd)) /* the pid may name another process now */
        job->container[0] = '\0';
    if (job->container[0])
        LOG_INFO("job %llu (pid %d, uid %u) runs in container %s", (unsigned long long)job->id,
                 (int)c->pid, (unsigned)c->uid, job->container);
}
