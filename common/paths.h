/* Where the control socket lives. */
#ifndef SALUS_COMMON_PATHS_H
#define SALUS_COMMON_PATHS_H

#include <stddef.h>

#define SALUS_SOCKET_NAME "salusd.sock"

/* The default socket path: $SALUS_SOCKET if set; else /run/salus/salusd.sock for root;
 * else $XDG_RUNTIME_DIR/salus/salusd.sock; else /tmp/salus-$UID/salusd.sock.
 * Returns 0, or -ENAMETOOLONG when it does not fit in a sockaddr_un. */
int salus_default_socket_path(char *out, size_t out_size);

/* Creates the socket's parent directory (mode 0755 under /run, else 0700) if missing. */
int salus_make_socket_dir(const char *socket_path);

#endif
