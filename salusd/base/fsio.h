/* File-system steps of salusd's durable writes (state.c's state file, ps_ckpt_file.c's
 * checkpoints): a temporary file written in full, fsynced and renamed over the old one, then
 * its directory fsynced. Each call returns 0 or a negative errno. */
#ifndef SALUS_FSIO_H
#define SALUS_FSIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* mkdir -p of path's directory part: the directories it creates above the last get
 * upper_mode, the last last_mode (existing ones are left as they are). */
int fsio_make_parents(const char *path, mode_t upper_mode, mode_t last_mode);
/* Writes all n bytes of p to fd (EINTR retried; a write of 0 bytes is -EIO). */
int fsio_write_all(int fd, const void *p, size_t n);
/* fsync of path's directory (salus_path_dir, common/paths.h), so that a rename in it is durable. */
int fsio_fsync_dir_of(const char *path);

/* Opens directory dir component by component, from the root (a relative dir: from the working
 * directory): each component with openat(O_NOFOLLOW | O_DIRECTORY), so that a symbolic link
 * anywhere on the way is refused (ELOOP / ENOTDIR), and each one checked: owned by root or by
 * salusd's uid, and writable by group or others only with the sticky bit (as /tmp). create:
 * missing components are made (0700). The directory's descriptor (O_CLOEXEC), or a negative
 * errno with err naming the component and what is wrong with it. */
int fsio_open_dir(const char *dir, int create, char *err, size_t err_size);
/* The state directory's check at start: dir is created when missing (its parents 0755, itself
 * 0700); a symbolic link on the path given must be root's or salusd's uid's; then its real
 * path (into real) is opened as fsio_open_dir does and must be owned by salusd's uid and
 * writable by nobody else. 0, or a negative errno with err saying why salusd must not use it. */
int fsio_check_state_dir(const char *dir, char *real, size_t real_size, char *err,
                         size_t err_size);
/* Splits path into its directory, opened with fsio_open_dir (create as there), and the last
 * component (a pointer into path: no '/', not "." nor ".."). The descriptor, or a negative
 * errno with err. */
int fsio_open_parent(const char *path, int create, const char **name, char *err,
                     size_t err_size);

/* Reads the regular file at path whole into a fresh buffer (*data, *len; the caller frees
 * *data, NULL on failure): its directory opened with fsio_open_parent (create 0), the file
 * with O_NOFOLLOW. own_uid: the file must belong to salusd's uid. 0, or a negative errno
 * with err naming path and saying why: -ENOENT (no such file), -EINVAL (not a regular
 * file), -EPERM (another uid's), -EFBIG (over max_bytes: "larger than WHAT can be"), -ENOMEM,
 * or fsio_open_parent's. */
int fsio_read_file(const char *path, size_t max_bytes, int own_uid, const char *what,
                   uint8_t **data, size_t *len, char *err, size_t err_size);

#endif
