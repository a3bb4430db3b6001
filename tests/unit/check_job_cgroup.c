/* Unit tests of salusd/job_cgroup.c against the machine's cgroup2 tree (needs root, as the
 * integration tests do): a job's cgroup is created, takes only a live child of the given
 * parent and uid, signals every process in it, and goes away; a process in a cgroup that
 * another manager owns (here a libpod-*.scope the test makes) is left there. The paths
 * another manager owns, without the tree. */
#include "job_cgroup.h"

#include "check_run.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* A child that waits until its pipe closes (or a signal). */
static pid_t waiting_child(int *release)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char c;
        signal(SIGTERM, SIG_DFL); /* not the test runner's handler, which signals its group */
        close(p[1]);
        ssize_t ignored = read(p[0], &c, 1);
        (void)ignored;
        _exit(0);
    }
    close(p[0]);
    *release = p[1];
    return pid;
}

static int cgroup_of_is(pid_t pid, const char *path)
{
    char file[64], line[1024];
    int yes = 0;
    snprintf(file, sizeof(file), "/proc/%d/cgroup", (int)pid);
    FILE *f = fopen(file, "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, "0::", 3) == 0) {
            size_t n = strlen(line + 3), total = strlen(path);
            yes = n <= total && strcmp(path + total - n, line + 3) == 0;
        }
    }
    fclose(f);
    return yes;
}

static void cgroup2_mount(char *mount, size_t size)
{
    char line[4096];
    FILE *f = fopen("/proc/self/mountinfo", "r");
    while (f && !mount[0] && fgets(line, sizeof(line), f)) {
        char root[1024], point[1024];
        const char *dash = strstr(line, " - ");
        if (dash && strncmp(dash + 3, "cgroup2 ", 8) == 0 &&
            sscanf(line, "%*s %*s %*s %1023s %1023s", root, point) == 2 && !strcmp(root, "/"))
            snprintf(mount, size, "%s", point);
    }
    if (f)
        fclose(f);
}

START_TEST(test_place_signal_remove)
{
    char path[JOB_CGROUP_PATH_BYTES], mount[1024] = "", stale[1200], stale_job[1300];
    struct stat st;
    ck_assert_msg(geteuid() == 0, "check_job_cgroup must run as root (it writes cgroup2)");
    /* what a salusd that is gone left (a pid that exited): swept at the first create */
    cgroup2_mount(mount, sizeof(mount));
    ck_assert_msg(mount[0], "no cgroup2 file system is mounted");
    pid_t gone = fork();
    if (gone == 0)
        _exit(0);
    ck_assert_int_eq(waitpid(gone, NULL, 0), gone);
    snprintf(stale, sizeof(stale), "%s/salus", mount);
    mkdir(stale, 0755);
    snprintf(stale, sizeof(stale), "%s/salus/salusd-%d", mount, (int)gone);
    snprintf(stale_job, sizeof(stale_job), "%s/job-3", stale);
    ck_assert_int_eq(mkdir(stale, 0755), 0);
    ck_assert_int_eq(mkdir(stale_job, 0755), 0);
    ck_assert_int_eq(job_cgroup_create(7, path, sizeof(path)), 0);
    ck_assert_int_eq(stat(stale, &st), -1);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(job_cgroup_populated(path), 0);

    int release;
    pid_t child = waiting_child(&release);
    int pidfd = (int)syscall(SYS_pidfd_open, child, 0);
    ck_assert_int_ge(pidfd, 0);
    /* not a pidfd; not a child of that parent; another uid: refused */
    ck_assert_int_eq(job_cgroup_place(path, release, getpid(), getuid()), -EBADF);
    ck_assert_int_eq(job_cgroup_place(path, pidfd, getppid(), getuid()), -EPERM);
    ck_assert_int_eq(job_cgroup_place(path, pidfd, getpid(), getuid() + 1), -EPERM);
    ck_assert(!cgroup_of_is(child, path));
    /* its own child: placed */
    ck_assert_int_eq(job_cgroup_place(path, pidfd, getpid(), getuid()), 0);
    ck_assert(cgroup_of_is(child, path));
    ck_assert_int_eq(job_cgroup_populated(path), 1);
    /* populated: not removed without killing; SIGTERM reaches it */
    ck_assert_int_eq(job_cgroup_remove(path, 0), -EBUSY);
    ck_assert_int_eq(job_cgroup_signal(path, SIGTERM), 1);
    int status;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
    close(pidfd);
    close(release);

    /* a process that was placed and forked: cgroup.kill takes both */
    child = waiting_child(&release);
    pidfd = (int)syscall(SYS_pidfd_open, child, 0);
    ck_assert_int_eq(job_cgroup_place(path, pidfd, getpid(), getuid()), 0);
    ck_assert_int_eq(job_cgroup_signal(path, SIGKILL), 1);
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    close(pidfd);
    close(release);
    /* an exited child's pidfd is refused */
    child = waiting_child(&release);
    pidfd = (int)syscall(SYS_pidfd_open, child, 0);
    close(release);
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert_int_lt(job_cgroup_place(path, pidfd, getpid(), getuid()), 0);
    close(pidfd);

    for (int i = 0; i < 100 && job_cgroup_populated(path) != 0; i++)
        usleep(10000);
    ck_assert_int_eq(job_cgroup_remove(path, 0), 0);
    ck_assert_int_eq(stat(path, &st), -1);
    job_cgroup_shutdown();
    char base[JOB_CGROUP_PATH_BYTES];
    snprintf(base, sizeof(base), "%s", path);
    *strrchr(base, '/') = '\0';
    ck_assert_int_eq(stat(base, &st), -1);
}
END_TEST

START_TEST(test_foreign_paths)
{
    static const char *const foreign[] = {
        "/machine.slice/libpod-0123abcd.scope",
        "/machine.slice/libpod-0123abcd.scope/container",
        "/machine.slice/libpod-conmon-0123abcd.scope",
        "/libpod_parent/libpod-0123abcd",
        "/system.slice/docker-0123abcd.scope",
        "/docker/0123abcd",
        "/system.slice/slurmstepd.scope/job_42/step_0/user/task_0",
        "/slurm/uid_1000/job_7/step_batch",
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/x.scope",
        "/kubepods/besteffort/pod1/0123abcd",
        "/kubepods-besteffort.slice",
        "docker-x.scope",
    };
    static const char *const own[] = {
        "/",
        "",
        "/user.slice/user-1000.slice/session-2.scope",
        "/system.slice/salusd.service/salusd-12/job-3",
        "/salus/salusd-12/job-3",
        "/system.slice/mydocker-x.scope",
        "/system.slice/dockerd.service",
        "/libpod-",
        "/docker-",
        "/job_",
        "/job_12x/step_0",
        "/job-12",
        "/kubepodsx",
        "/kubepods-",
        "/libpod_parentx",
        "//",
    };
    for (size_t i = 0; i < sizeof(foreign) / sizeof(foreign[0]); i++)
        ck_assert_msg(job_cgroup_foreign(foreign[i]) == 1, "%s: not another manager's",
                      foreign[i]);
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
        ck_assert_msg(job_cgroup_foreign(own[i]) == 0, "%s: taken for another manager's",
                      own[i]);
}
END_TEST

/* The cgroup a container engine would own: <mount>/libpod-salus-check-<pid>.scope */
static void container_cgroup(char *out, size_t size, pid_t pid)
{
    char mount[1024] = "";
    cgroup2_mount(mount, sizeof(mount));
    snprintf(out, size, "%s/libpod-salus-check-%d.scope", mount, (int)pid);
}

START_TEST(test_foreign_left)
{
    char path[JOB_CGROUP_PATH_BYTES], container[1200], procs[1300], text[32];
    struct stat st;
    ck_assert_msg(geteuid() == 0, "check_job_cgroup must run as root (it writes cgroup2)");
    container_cgroup(container, sizeof(container), getpid());
    ck_assert_int_eq(mkdir(container, 0755), 0);
    int release;
    pid_t child = waiting_child(&release);
    int pidfd = (int)syscall(SYS_pidfd_open, child, 0);
    ck_assert_int_ge(pidfd, 0);
    snprintf(procs, sizeof(procs), "%s/cgroup.procs", container);
    FILE *f = fopen(procs, "w");
    ck_assert_ptr_nonnull(f);
    snprintf(text, sizeof(text), "%d\n", (int)child);
    ck_assert_int_ge(fputs(text, f), 0);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert(cgroup_of_is(child, container));

    ck_assert_int_eq(job_cgroup_create(8, path, sizeof(path)), 0);
    /* the checks come first: another uid is refused, not left */
    ck_assert_int_eq(job_cgroup_place(path, pidfd, getpid(), getuid() + 1), -EPERM);
    ck_assert_int_eq(job_cgroup_place(path, pidfd, getpid(), getuid()), JOB_CGROUP_LEFT);
    ck_assert(cgroup_of_is(child, container));
    ck_assert_int_eq(job_cgroup_populated(path), 0);

    int status;
    close(release);
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    close(pidfd);
    ck_assert_int_eq(job_cgroup_remove(path, 0), 0);
    job_cgroup_shutdown();
    for (int i = 0; i < 100 && rmdir(container) < 0 && errno == EBUSY; i++)
        usleep(10000);
    ck_assert_int_eq(stat(container, &st), -1);
}
END_TEST

/* After the test, also when it failed (in its own process, in fork mode): removes what a
 * failed run left, the job-7 and job-8 cgroups and the container's cgroups of test
 * processes that are gone. */
static void remove_leftovers(void)
{
    char mount[1024] = "", dir[1100], job[1400];
    cgroup2_mount(mount, sizeof(mount));
    DIR *top = mount[0] ? opendir(mount) : NULL;
    struct dirent *t;
    while (top && (t = readdir(top))) {
        int pid;
        if (sscanf(t->d_name, "libpod-salus-check-%d.scope", &pid) != 1 || kill(pid, 0) == 0)
            continue;
        container_cgroup(job, sizeof(job), pid);
        /* its waiting child exits when the test's end closes its pipe */
        for (int i = 0; i < 100 && rmdir(job) < 0 && errno == EBUSY; i++)
            usleep(10000);
    }
    if (top)
        closedir(top);
    snprintf(dir, sizeof(dir), "%s/salus", mount);
    DIR *d = mount[0] ? opendir(dir) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int pid;
        if (sscanf(e->d_name, "salusd-%d", &pid) != 1 || kill(pid, 0) == 0)
            continue;
        for (int id = 7; id <= 8; id++) {
            snprintf(job, sizeof(job), "%s/%s/job-%d", dir, e->d_name, id);
            rmdir(job);
        }
        *strrchr(job, '/') = '\0';
        rmdir(job);
    }
    if (d)
        closedir(d);
    rmdir(dir); /* only when no salusd uses it */
}

int main(void)
{
    Suite *s = suite_create("job_cgroup");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_unchecked_fixture(tc, NULL, remove_leftovers);
    tcase_add_test(tc, test_place_signal_remove);
    tcase_add_test(tc, test_foreign_paths);
    tcase_add_test(tc, test_foreign_left);
    suite_add_tcase(s, tc);
    return check_run_suite(s);
}
