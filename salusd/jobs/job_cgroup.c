/* A cgroup per job (see job_cgroup.h). */
#include "job_cgroup.h"

#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#define JOB_CGROUP_LINE_BYTES 4096

static struct {
    int tried;
    int usable;
    int shared_tree;     /* base is below <cgroup2 mount>/salus, shared by all salusd */
    char base[PATH_MAX]; /* <tree>/salusd-<pid> */
} job_cgroups;

/* The mount point of the cgroup2 file system, from /proc/self/mountinfo. */
static int cgroup2_mount(char *out, size_t size)
{
    char line[JOB_CGROUP_LINE_BYTES];
    int rc = -ENOENT;
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -errno;
    while (rc < 0 && fgets(line, sizeof(line), f)) {
        /* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER */
        char root[PATH_MAX], point[PATH_MAX];
        const char *dash = strstr(line, " - ");
        if (!dash || strncmp(dash + 3, "cgroup2 ", 8) != 0)
            continue;
        if (sscanf(line, "%*s %*s %*s %4095s %4095s", root, point) != 2 || strcmp(root, "/"))
            continue; /* a bind mount of a sub-tree: not the whole hierarchy */
        if (strchr(point, '\\')) /* an escaped character: not a path to use as it is */
            continue;
        if (snprintf(out, size, "%s", point) < (int)size)
            rc = 0;
    }
    fclose(f);
    return rc;
}

/* The cgroup of pid (0: this process) in the v2 hierarchy ("0::/path"). */
static int proc_cgroup(pid_t pid, char *out, size_t size)
{
    char line[JOB_CGROUP_LINE_BYTES], file[64];
    int rc = -ENOENT;
    if (pid > 0)
        snprintf(file, sizeof(file), "/proc/%d/cgroup", (int)pid);
    else
        snprintf(file, sizeof(file), "/proc/self/cgroup");
    FILE *f = fopen(file, "re");
    if (!f)
        return -errno;
    while (rc < 0 && fgets(line, sizeof(line), f)) {
        if (strncmp(line, "0::", 3) != 0)
            continue;
        line[strcspn(line, "\n")] = '\0';
        if (snprintf(out, size, "%s", line + 3) < (int)size)
            rc = 0;
    }
    fclose(f);
    return rc;
}

/* 1 when systemd delegated the cgroup at dir to this service (Delegate=yes marks it). */
static int delegated(const char *dir)
{
    char value[8];
    return getxattr(dir, "trusted.delegate", value, sizeof(value)) > 0 ||
           getxattr(dir, "user.delegate", value, sizeof(value)) > 0;
}

static int try_base(const char *tree)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s/cgroup.procs", tree) >= (int)sizeof(path) ||
        access(path, W_OK) < 0)
        return -EACCES;
    if (snprintf(job_cgroups.base, sizeof(job_cgroups.base), "%s/salusd-%d", tree,
                 (int)getpid()) >= (int)sizeof(job_cgroups.base))
        return -ENAMETOOLONG;
    if (mkdir(job_cgroups.base, 0755) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/* Removes the empty job cgroups, and then the directory, of each salusd-<pid> in tree whose
 * process is gone (a salusd that did not stop cleanly). Processes are left alone. */
static void sweep_stale(const char *tree)
{
    DIR *dir = opendir(tree);
    struct dirent *e;
    char path[PATH_MAX], job[PATH_MAX + 300];
    while (dir && (e = readdir(dir))) {
        int pid;
        if (sscanf(e->d_name, "salusd-%d", &pid) != 1 || pid <= 0 || pid == (int)getpid() ||
            kill(pid, 0) == 0 || errno != ESRCH)
            continue;
        if (snprintf(path, sizeof(path), "%s/%s", tree, e->d_name) >= (int)sizeof(path))
            continue;
        DIR *jobs = opendir(path);
        struct dirent *j;
        while (jobs && (j = readdir(jobs)))
            if (strncmp(j->d_name, "job-", 4) == 0 &&
                snprintf(job, sizeof(job), "%s/%s", path, j->d_name) < (int)sizeof(job))
                rmdir(job);
        if (jobs)
            closedir(jobs);
        if (rmdir(path) == 0)
            LOG_INFO("removed %s, left by a salusd that is gone", path);
    }
    if (dir)
        closedir(dir);
}

/* Finds where the jobs' cgroups go, once; logs the choice. */
static int base_ready(void)
{
    char mount[PATH_MAX], own[PATH_MAX], tree[PATH_MAX * 2];
    if (job_cgroups.tried)
        return job_cgroups.usable ? 0 : -ENOTSUP;
    job_cgroups.tried = 1;
    const char *why = "no cgroup2 file system is mounted";
    if (cgroup2_mount(mount, sizeof(mount)) == 0) {
        why = "neither the daemon's cgroup is delegated to it nor may it write below the "
              "cgroup2 root";
        if (proc_cgroup(0, own, sizeof(own)) == 0 && strcmp(own, "/") != 0 &&
            snprintf(tree, sizeof(tree), "%s%s", mount, own) < (int)sizeof(tree) &&
            delegated(tree) && try_base(tree) == 0) {
            job_cgroups.usable = 1;
        } else if (snprintf(tree, sizeof(tree), "%s/salus", mount) < (int)sizeof(tree)) {
            /* twice: another salusd may remove the shared directory as it stops */
            for (int i = 0; i < 2 && !job_cgroups.usable; i++)
                job_cgroups.usable = (mkdir(tree, 0755) == 0 || errno == EEXIST) &&
                                     try_base(tree) == 0;
            job_cgroups.shared_tree = job_cgroups.usable;
        }
    }
    if (!job_cgroups.usable) {
        LOG_WARN("no cgroup for jobs (%s): kill reaches a job's command (a submitted job's "
                 "process group) only", why);
        return -ENOTSUP;
    }
    char *slash = strrchr(job_cgroups.base, '/');
    *slash = '\0';
    sweep_stale(job_cgroups.base);
    *slash = '/';
    LOG_INFO("jobs get a cgroup each below %s", job_cgroups.base);
    return 0;
}

int job_cgroup_create(uint64_t job_id, char *path, size_t size)
{
    int rc = base_ready();
    if (rc < 0)
        return rc;
    if (snprintf(path, size, "%s/job-%llu", job_cgroups.base, (unsigned long long)job_id) >=
        (int)size)
        return -ENAMETOOLONG;
    if (mkdir(path, 0755) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

static int pidfd_alive(int pidfd)
{
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    return poll(&p, 1, 0) == 0;
}

/* The pid behind a pidfd (its fdinfo's "Pid:" line), or a negative errno. */
static pid_t pidfd_pid(int pidfd)
{
    char path[64], line[256];
    long pid = 0;
    int found = 0;
    snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    while (!found && fgets(line, sizeof(line), f))
        found = sscanf(line, "Pid: %ld", &pid) == 1;
    fclose(f);
    if (!found)
        return -EBADF;
    return pid > 0 ? (pid_t)pid : -ESRCH;
}

/* PPid and the real and effective uids of pid, from /proc/PID/status. */
static int proc_ids(pid_t pid, long *ppid, long *ruid, long *euid)
{
    char path[64], line[256];
    int got = 0;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    while (got < 2 && fgets(line, sizeof(line), f)) {
        if (sscanf(line, "PPid: %ld", ppid) == 1)
            got++;
        else if (sscanf(line, "Uid: %ld %ld", ruid, euid) == 2)
            got++;
    }
    fclose(f);
    return got == 2 ? 0 : -EIO;
}

static int write_text(const char *dir, const char *file, const char *text)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s/%s", dir, file) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = write(fd, text, strlen(text));
    int rc = n < 0 ? -errno : 0;
    close(fd);
    return rc;
}

/* 1 when the directory name (n bytes) marks its cgroup as another manager's. */
static int foreign_name(const char *name, size_t n)
{
    static const char *const prefixes[] = {"libpod-", "docker-", "kubepods-", "kubepods."};
    static const char *const names[] = {"libpod_parent", "docker", "kubepods"};
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
        if (n > strlen(prefixes[i]) && memcmp(name, prefixes[i], strlen(prefixes[i])) == 0)
            return 1;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (n == strlen(names[i]) && memcmp(name, names[i], n) == 0)
            return 1;
    if (n <= 4 || memcmp(name, "job_", 4) != 0) /* Slurm: job_<number> */
        return 0;
    for (size_t i = 4; i < n; i++)
        if (name[i] < '0' || name[i] > '9')
            return 0;
    return 1;
}

int job_cgroup_foreign(const char *path)
{
    while (*path) {
        size_t n = strcspn(path, "/");
        if (n && foreign_name(path, n))
            return 1;
        path += n;
        path += *path == '/';
    }
    return 0;
}

int job_cgroup_place(const char *path, int pidfd, pid_t parent, uid_t uid)
{
    long ppid = -1, ruid = -1, euid = -1;
    char text[32], now[JOB_CGROUP_LINE_BYTES];
    pid_t pid = pidfd_pid(pidfd);
    if (pid < 0)
        return pid;
    /* read while the process lives, so that pid names it */
    int rc = proc_ids(pid, &ppid, &ruid, &euid);
    int cg_rc = rc == 0 ? proc_cgroup(pid, now, sizeof(now)) : rc;
    if (rc < 0 || !pidfd_alive(pidfd))
        return -ESRCH;
    if (ppid != (long)parent || ruid != (long)uid || euid != (long)uid)
        return -EPERM;
    if (cg_rc < 0)
        return cg_rc;
    if (job_cgroup_foreign(now)) {
        LOG_INFO("pid %d stays in its cgroup %s: another manager owns it", (int)pid, now);
        return JOB_CGROUP_LEFT;
    }
    snprintf(text, sizeof(text), "%d\n", (int)pid);
    rc = write_text(path, "cgroup.procs", text);
    if (rc < 0)
        return rc;
    /* still alive: the pid was its, not a newcomer's, when it was written */
    return pidfd_alive(pidfd) ? 0 : -ESRCH;
}

int job_cgroup_populated(const char *path)
{
    char file[PATH_MAX], line[128];
    int populated = -EIO;
    if (snprintf(file, sizeof(file), "%s/cgroup.events", path) >= (int)sizeof(file))
        return -ENAMETOOLONG;
    FILE *f = fopen(file, "re");
    if (!f)
        return -errno;
    while (populated < 0 && fgets(line, sizeof(line), f))
        if (sscanf(line, "populated %d", &populated) != 1)
            populated = -EIO;
    fclose(f);
    return populated;
}

/* 1 when /proc/PID/cgroup says pid is in the cgroup whose path (below the mount) ends
 * path's tail. */
static int in_cgroup(pid_t pid, const char *path)
{
    char file[64], line[JOB_CGROUP_LINE_BYTES];
    int yes = 0;
    snprintf(file, sizeof(file), "/proc/%d/cgroup", (int)pid);
    FILE *f = fopen(file, "re");
    if (!f)
        return 0;
    while (!yes && fgets(line, sizeof(line), f)) {
        if (strncmp(line, "0::", 3) != 0)
            continue;
        line[strcspn(line, "\n")] = '\0';
        size_t n = strlen(line + 3), total = strlen(path);
        yes = n > 1 && n <= total && strcmp(path + total - n, line + 3) == 0;
    }
    fclose(f);
    return yes;
}

/* Signals each process listed in the cgroup, through a pidfd taken and checked first. */
static int signal_each(const char *path, int sig)
{
    char file[PATH_MAX];
    int count = 0, pid;
    if (snprintf(file, sizeof(file), "%s/cgroup.procs", path) >= (int)sizeof(file))
        return -ENAMETOOLONG;
    FILE *f = fopen(file, "re");
    if (!f)
        return -errno;
    while (fscanf(f, "%d", &pid) == 1) {
        int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (pidfd < 0)
            continue;
        if (in_cgroup(pid, path) && pidfd_alive(pidfd) &&
            syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) == 0)
            count++;
        close(pidfd);
    }
    fclose(f);
    return count;
}

int job_cgroup_signal(const char *path, int sig)
{
    if (sig != SIGKILL)
        return signal_each(path, sig);
    int populated = job_cgroup_populated(path);
    if (populated <= 0)
        return populated;
    if (write_text(path, "cgroup.kill", "1") == 0)
        return 1;
    /* before Linux 5.14: frozen, nothing forks while each is killed */
    int frozen = write_text(path, "cgroup.freeze", "1") == 0;
    int count = signal_each(path, SIGKILL);
    if (frozen)
        write_text(path, "cgroup.freeze", "0");
    return count;
}

int job_cgroup_remove(const char *path, int kill_rest)
{
    if (rmdir(path) == 0 || errno == ENOENT)
        return 0;
    if (errno != EBUSY || !kill_rest)
        return -errno;
    job_cgroup_signal(path, SIGKILL);
    if (rmdir(path) == 0 || errno == ENOENT)
        return 0;
    return -errno;
}

void job_cgroup_shutdown(void)
{
    if (job_cgroups.usable && rmdir(job_cgroups.base) < 0 && errno != ENOENT)
        LOG_WARN("could not remove %s: %s", job_cgroups.base, strerror(errno));
    char *slash = strrchr(job_cgroups.base, '/');
    if (job_cgroups.shared_tree && slash) { /* the last salusd out removes <mount>/salus */
        *slash = '\0';
        rmdir(job_cgroups.base);
    }
    job_cgroups.shared_tree = 0;
    job_cgroups.tried = 0;
    job_cgroups.usable = 0;
}
