/* Who may connect, and see and control which jobs. Every local user may connect (socket
 * 0666), or only root and the allow-group (root:GROUP 0660). A user sees and controls their
 * own jobs; root, the daemon's own user and members of the admin-group (default
 * salus-admin) see and control all of them and may switch the policy. The requester's
 * identity is the kernel's (SO_PEERCRED) plus the supplementary groups of its passwd
 * entry. Administrators are so only from salusd's own pid and user namespaces (a container's
 * root is not salus's administrator) unless admin-from-containers is set; a job started in
 * another pid namespace (a container) is controlled by its user from salusd's pid namespace
 * or from its own pid namespace, never from another container's. */
#ifndef SALUS_SALUSD_ACCESS_H
#define SALUS_SALUSD_ACCESS_H

#include "daemon.h"
#include "registry.h"


/* Gives the bound socket its owner and mode: 0666, or root:allow-group 0660 (the group
 * must exist). 0, or a negative errno after logging why. */
int access_socket_mode(salusd_t *d, const char *path);
/* 1 when the connection's user may see and control every job (cached on the connection). */
int access_is_admin(conn_t *c);
/* 1 when the connection's user may see and control a job of owner_uid. */
int access_may_control(conn_t *c, uid_t owner_uid);
/* 1 when the connection may control this job (kill, wait, logs): its user may, and it runs
 * in salusd's pid namespace or in the job's. */
int access_may_control_job(conn_t *c, const job_t *job);
/* 1 when the connection's process runs in salusd's own pid and user namespaces. */
int access_in_own_namespaces(conn_t *c);
/* Records on the job where the connection's process (the job's) runs: its pid namespace and
 * the container id in its cgroup path (libpod-, docker-, cri-containerd-, crio- followed by
 * 64 hex digits, or such a path component alone). */
void access_note_job(conn_t *c, job_t *job);

#endif
