/* Unit tests of the blocking client side (common/client.c) and socket paths (common/paths.c). */
#include "client.h"
#include "paths.h"

#include "check_run.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

START_TEST(test_frame_over_socketpair)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    proto_enc_t e;
    proto_enc_init(&e);
    proto_enc_begin(&e, PROTO_REQUEST, 3, "status", 1);
    proto_pack_kv_str(&e.pk, "k", "v");
    proto_enc_finish(&e);
    ck_assert_int_eq(salus_send_frame(sv[0], e.sbuf.data, e.sbuf.size, 1000), 0);
    proto_msg_t msg;
    ck_assert_int_eq(salus_recv_msg(sv[1], &msg, 1024, 1000), 0);
    ck_assert_str_eq(msg.op, "status");
    ck_assert_uint_eq(msg.id, 3);
    proto_msg_free(&msg);

    /* nothing to read: a timeout, not a hang */
    ck_assert_int_eq(salus_recv_msg(sv[1], &msg, 1024, 50), -ETIMEDOUT);
    /* a frame over the receiver's cap is refused */
    ck_assert_int_eq(salus_send_frame(sv[0], e.sbuf.data, e.sbuf.size, 1000), 0);
    ck_assert_int_eq(salus_recv_msg(sv[1], &msg, 4, 1000), -EPROTO);
    close(sv[0]);
    close(sv[1]);
    /* a peer that closes mid-frame */
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(write(sv[0], e.sbuf.data, e.sbuf.size - 1), (ssize_t)e.sbuf.size - 1);
    close(sv[0]);
    ck_assert_int_eq(salus_recv_msg(sv[1], &msg, 1024, 1000), -ECONNRESET);
    close(sv[1]);
    proto_enc_destroy(&e);
}
END_TEST

START_TEST(test_frame_with_fds)
{
    int sv[2], passed[4], n = -1;
    struct stat a, b;
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    proto_enc_t e;
    proto_enc_init(&e);
    proto_enc_begin(&e, PROTO_REQUEST, 4, "submit", 0);
    proto_enc_finish(&e);
    int fds[2] = {0, sv[0]};
    ck_assert_int_eq(salus_send_frame_fds(sv[0], e.sbuf.data, e.sbuf.size, fds, 2, 1000), 0);
    ck_assert_int_eq(salus_send_frame_fds(sv[0], e.sbuf.data, e.sbuf.size, fds, 0, 1000), -EINVAL);
    proto_msg_t msg;
    ck_assert_int_eq(salus_recv_msg_fds(sv[1], &msg, 1024, 1000, passed, 4, &n), 0);
    ck_assert_str_eq(msg.op, "submit");
    ck_assert_int_eq(n, 2);
    /* the same open files, as new descriptors */
    ck_assert_int_eq(fstat(passed[1], &a), 0);
    ck_assert_int_eq(fstat(sv[0], &b), 0);
    ck_assert(a.st_ino == b.st_ino && passed[1] != sv[0]);
    proto_msg_free(&msg);
    close(passed[0]);
    close(passed[1]);
    close(sv[0]);
    close(sv[1]);
    proto_enc_destroy(&e);
}
END_TEST

START_TEST(test_open_missing_socket)
{
    salus_client_t c;
    char err[128] = "";
    ck_assert_int_eq(salus_client_open(&c, "/nonexistent/dir/salusd.sock", "t", 100, err,
                                       sizeof(err)),
                     -ENOENT);
    ck_assert_str_eq(err, strerror(ENOENT));
}
END_TEST

START_TEST(test_default_paths)
{
    char path[108];
    setenv("SALUS_SOCKET", "/x/y.sock", 1);
    ck_assert_int_eq(salus_default_socket_path(path, sizeof(path)), 0);
    ck_assert_str_eq(path, "/x/y.sock");
    unsetenv("SALUS_SOCKET");
    ck_assert_int_eq(salus_default_socket_path(path, sizeof(path)), 0);
    if (geteuid() == 0) {
        ck_assert_str_eq(path, "/run/salus/salusd.sock");
    } else {
        setenv("XDG_RUNTIME_DIR", "/run/user/42", 1);
        ck_assert_int_eq(salus_default_socket_path(path, sizeof(path)), 0);
        ck_assert_str_eq(path, "/run/user/42/salus/salusd.sock");
        unsetenv("XDG_RUNTIME_DIR");
        ck_assert_int_eq(salus_default_socket_path(path, sizeof(path)), 0);
        char expected[64];
        snprintf(expected, sizeof(expected), "/tmp/salus-%u/salusd.sock", (unsigned)getuid());
        ck_assert_str_eq(path, expected);
    }
    char longname[200];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[0] = '/';
    longname[sizeof(longname) - 1] = '\0';
    setenv("SALUS_SOCKET", longname, 1);
    ck_assert_int_eq(salus_default_socket_path(path, sizeof(path)), -ENAMETOOLONG);
    unsetenv("SALUS_SOCKET");
}
END_TEST

START_TEST(test_socket_dir_checks)
{
    char dir[] = "/tmp/check-client-XXXXXX", sock[200], link[160], err[256] = "";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(sock, sizeof(sock), "%s/salusd.sock", dir);
    ck_assert_int_eq(salus_check_socket_dir(sock, err, sizeof(err)), 0); /* ours, 0700 */
    ck_assert_int_eq(salus_check_socket_dir("/tmp/x.sock", err, sizeof(err)), 0); /* root, sticky */
    ck_assert_int_eq(chmod(dir, 0777), 0);
    ck_assert_int_eq(salus_check_socket_dir(sock, err, sizeof(err)), -EPERM);
    ck_assert_ptr_nonnull(strstr(err, "writable by group or others"));
    ck_assert_int_eq(chmod(dir, 0755), 0);
    if (geteuid() == 0) { /* another user's directory */
        ck_assert_int_eq(chown(dir, 54321, (gid_t)-1), 0);
        ck_assert_int_eq(salus_check_socket_dir(sock, err, sizeof(err)), -EPERM);
        ck_assert_ptr_nonnull(strstr(err, "belongs to uid 54321"));
        ck_assert_int_eq(chown(dir, 0, (gid_t)-1), 0);
    }
    snprintf(link, sizeof(link), "%s-link", dir); /* a link to a directory is refused */
    ck_assert_int_eq(symlink(dir, link), 0);
    snprintf(sock, sizeof(sock), "%s/salusd.sock", link);
    ck_assert_int_eq(salus_check_socket_dir(sock, err, sizeof(err)), -ENOTDIR);
    unlink(link);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("client");
    TCase *tc = tcase_create("client");
    tcase_add_test(tc, test_frame_over_socketpair);
    tcase_add_test(tc, test_frame_with_fds);
    tcase_add_test(tc, test_open_missing_socket);
    tcase_add_test(tc, test_default_paths);
    tcase_add_test(tc, test_socket_dir_checks);
    suite_add_tcase(s, tc);
    return check_run_suite(s);
}
