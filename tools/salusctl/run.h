#ifndef SALUS_SALUSCTL_RUN_H
#define SALUS_SALUSCTL_RUN_H

#include <stddef.h>
#include <stdint.h>

/* salusctl run [options] -- COMMAND...: returns the command's exit status (128 + signal),
 * 1 when salusd cannot be reached, 2 on a usage error. */
int salusctl_run(const char *socket_path, int timeout_ms, int argc, char **argv);

/* The job options run and submit share (--name, --iterations, --persistent, --ephemeral,
 * --priority, --gpus, the group's flags; with log_path also --log FILE): sets the SALUS_* hint
 * variables and the index of the command in argv, and checks that the command can be executed
 * (looked up on PATH as execvp does). 0, or 2 after a usage message. */
int salusctl_job_options(const char *verb, int argc, char **argv, const char **log_path,
                         int *command_index);
/* The shim's directory (../lib/salus next to this salusctl, resolved), holding
 * libcuda.so.1. 0, or -ENOENT. */
int salusctl_shim_dir(char *out, size_t size);
/* The rest of a job's environment: checks that salusd answers, sets SALUS_SOCKET, the shim
 * on LD_LIBRARY_PATH and in LD_PRELOAD, PYTORCH_CUDA_ALLOC_CONF. 0, or 1 with a message. */
int salusctl_job_environment(const char *socket_path, int timeout_ms);

/* Reserves a job for this process (op submit) with the hints of the environment and
 * SALUS_JOB_NAME, or name; log_path (NULL: none) is the log's path, shown only; fds are
 * passed with the request (SCM_RIGHTS), roles[i] naming fds[i] ("log", "command").
 * 0 with *id, or a negative errno with the reason in err. */
int salusctl_reserve(const char *socket_path, int timeout_ms, const char *name,
                     const char *log_path, const int *fds, const char *const *roles, int nfds,
                     uint64_t *id, char *err, size_t err_size);
/* In the command's process, forked before the job was reserved: waits on go_fd for the
 * job id (EOF: no job, exits 127 without a word), then execs command with SALUS_JOB_ID;
 * says why on stderr and exits 127 when it cannot. Never returns. verb: for the message. */
void salusctl_exec_job(const char *verb, char **command, int go_fd);
/* Reports how the job's command ended (op job_exit): exit status code, or killed by sig
 * (code 128 + sig). Prints why on stderr when it cannot. */
void salusctl_report_exit(const char *socket_path, int timeout_ms, uint64_t id, int code,
                          int sig);

#endif
