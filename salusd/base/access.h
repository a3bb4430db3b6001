/* Who may connect, and see and control which jobs. Every local user may connect (socket
 * 0666), or only root and the allow-group (root:GROUP 0660). A user sees and controls their
 * own jobs; root, the daemon's own user and members of the admin-group (default
 * salus-admin) see and control all of them and may switch the policy. The requester's
 * identity is the kernel's (SO_PEERCRED) plus the supplementary groups of its passwd
 * entry. */
#ifndef SALUS_SALUSD_ACCESS_H
#define SALUS_SALUSD_ACCESS_H

#include "daemon.h"


/* Gives the bound socket its owner and mode: 0666, or root:allow-group 0660 (the group
 * must exist). 0, or a negative errno after logging why. */
int access_socket_mode(salusd_t *d, const char *path);
/* 1 when the connection's user may see and control every job (cached on the connection). */
int access_is_admin(conn_t *c);
/* 1 when the connection's user may see and control a job of owner_uid. */
int access_may_control(conn_t *c, uid_t owner_uid);

#endif
