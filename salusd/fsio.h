/* File-system steps of salusd's durable writes (state.c's state file, ps_ckpt_file.c's
 * checkpoints): a temporary file written in full, fsynced and renamed over the old one, then
 * its directory fsynced. Each call returns 0 or a negative errno. */
#ifndef SALUS_FSIO_H
#define SALUS_FSIO_H

#include <stddef.h>
#include <sys/types.h>

/* mkdir -p of path's directory part: the directories it creates above the last get
 * upper_mode, the last last_mode (existing ones are left as they are). */
int fsio_make_parents(const char *path, mode_t upper_mode, mode_t last_mode);
/* Writes all n bytes of p to fd (EINTR retried; a write of 0 bytes is -EIO). */
int fsio_write_all(int fd, const void *p, size_t n);
/* fsync of path's directory (salus_path_dir, common/paths.h), so that a rename in it is durable. */
int fsio_fsync_dir_of(const char *path);

#endif
