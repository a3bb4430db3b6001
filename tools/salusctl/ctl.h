/* What salusctl's verbs share: the global options and the exit codes. */
#ifndef SALUS_SALUSCTL_CTL_H
#define SALUS_SALUSCTL_CTL_H

#include "client.h"

enum { EXIT_OK = 0, EXIT_DAEMON = 1, EXIT_USAGE = 2 };

typedef struct ctl_s {
    char socket_path[108];
    int json;
    int timeout_ms;
} ctl_t;

/* Connects; prints the one-line error and returns EXIT_DAEMON when salusd does not answer. */
int ctl_open(ctl_t *ctl, salus_client_t *c);
/* Sends the request begun on c (salus_client_begin), waits for the reply (timeout_ms < 0:
 * for ever), closes c. EXIT_OK, or EXIT_DAEMON after printing "salusctl: OP: why". */
int ctl_finish(ctl_t *ctl, salus_client_t *c, const char *op, proto_msg_t *reply,
               int timeout_ms);
/* Parses a job id (> 0); prints a usage error and returns -1 otherwise. */
int ctl_parse_job_id(const char *verb, const char *text, uint64_t *id);

/* jobs_verbs.c */
int verb_submit(ctl_t *ctl, int argc, char **argv);
int verb_kill(ctl_t *ctl, int argc, char **argv);
int verb_wait(ctl_t *ctl, int argc, char **argv);
int verb_logs(ctl_t *ctl, int argc, char **argv);
/* groups.c */
int verb_groups(ctl_t *ctl, int argc, char **argv);
/* checkpoint.c */
int verb_checkpoint(ctl_t *ctl, int argc, char **argv);
/* ps_servers.c */
int verb_ps_servers(ctl_t *ctl, int argc, char **argv);
/* cdi.c */
int verb_cdi(ctl_t *ctl, int argc, char **argv);
/* top.c */
int verb_stats(ctl_t *ctl, int argc, char **argv);
int verb_top(ctl_t *ctl, int argc, char **argv);

#endif
