/* Where the control socket lives. */
#ifndef SALUS_COMMON_PATHS_H
#define SALUS_COMMON_PATHS_H

#include <stddef.h>

#define SALUS_SOCKET_NAME "salusd.sock"

/* The default socket path: $SALUS_SOCKET if set; else /run/salus/salusd.sock for root;
 * else $XDG_RUNTIME_DIR/salus/salusd.sock; else /tmp/salus-$UID/salusd.sock.
 * Returns 0, or -ENAMETOOLONG when it does not fit in a sockaddr_un. */
int salus_default_socket_path(char *out, size_t out_size);

/* The directory part of path into dir ("/" for a file at the root, "." for none). 0, or
 * -ENAMETOOLONG when it does not fit. */
int salus_path_dir(const char *path, char *dir, size_t size);

/* Creates the socket's parent directory (mode 0755 under /run, else 0700) if missing; an
 * existing one must pass salus_check_socket_dir. 0, or a negative errno. */
int salus_make_socket_dir(const char *socket_path);

/* The socket's parent directory may be trusted: a directory (not a link) owned by this user,
 * root or salusd's user (salus_daemon_uid), writable by nobody else (group/other write only with the sticky bit, on a
 * directory of root's such as /tmp). Another user's /tmp/salus-$UID, made before this user,
 * is refused. In a user namespace that does not map its owner (a rootless container given
 * the host's socket directory) the directory shows as the overflow uid: accepted, with the
 * same mode check. 0, or -EPERM / -ENOTDIR / -errno with the reason in err. */
int salus_check_socket_dir(const char *socket_path, char *err, size_t err_size);

/* 1 when this process runs in a user namespace other than the first (a rootless container)
 * and uid is the kernel's overflow uid (/proc/sys/kernel/overflowuid, 65534), the uid it shows
 * for a user outside the namespace's map (the host's root, salusd's user). */
int salus_uid_unmapped(unsigned uid);

/* The uid a daemon may run as, besides root and the client's own: that of the user
 * $SALUS_DAEMON_USER (default "salus") when it exists; (uid_t)-1 when none. */
unsigned salus_daemon_uid(void);

#endif
