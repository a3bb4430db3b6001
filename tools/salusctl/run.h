#ifndef SALUS_SALUSCTL_RUN_H
#define SALUS_SALUSCTL_RUN_H

/* salusctl run [options] -- COMMAND...: returns the command's exit status (128 + signal),
 * 1 when salusd cannot be reached, 2 on a usage error. */
int salusctl_run(const char *socket_path, int timeout_ms, int argc, char **argv);

#endif
