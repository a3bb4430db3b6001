/* Preloaded into salusd by test_hardening_flood.sh: getsockopt(SO_PEERPIDFD) fails with
 * ENOPROTOOPT as on kernels older than 6.5, so that salusd's fallback (pidfd_open and a uid
 * check through /proc) is what binds connections. Every other option goes to the C library. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <dlfcn.h>
#include <errno.h>
#include <sys/socket.h>

#define NO_PEERPIDFD_OPTION 77 /* SO_PEERPIDFD */

int getsockopt(int fd, int level, int optname, void *optval, socklen_t *optlen)
{
    static int (*real)(int, int, int, void *, socklen_t *);
    if (level == SOL_SOCKET && optname == NO_PEERPIDFD_OPTION) {
        errno = ENOPROTOOPT;
        return -1;
    }
    if (!real)
        real = (int (*)(int, int, int, void *, socklen_t *))dlsym(RTLD_NEXT, "getsockopt");
    return real(fd, level, optname, optval, optlen);
}
