#ifndef SALUS_SALUSCTL_RUN_H
#define SALUS_SALUSCTL_RUN_H

/* salusctl run [options] -- COMMAND...: returns the command's exit status (128 + signal),
 * 1 when salusd cannot be reached, 2 on a usage error. */
int salusctl_run(const char *socket_path, int timeout_ms, int argc, char **argv);

/* The job options run and submit share (--name, --iterations, --persistent, --ephemeral,
 * --priority; with log_path also --log FILE): sets the SALUS_* hint variables and the index
 * of the command in argv. 0, or 2 after a usage message. */
int salusctl_job_options(const char *verb, int argc, char **argv, const char **log_path,
                         int *command_index);
/* The rest of a job's environment: checks that salusd answers, sets SALUS_SOCKET, the shim
 * on LD_LIBRARY_PATH and in LD_PRELOAD, PYTORCH_CUDA_ALLOC_CONF. 0, or 1 with a message. */
int salusctl_job_environment(const char *socket_path, int timeout_ms);

#endif
