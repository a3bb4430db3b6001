/* Nonces, handshake macs and the cluster key file of daemon links (link_auth.h, links.h).
 * Built apart from salusd's other files (salusd/CMakeLists.txt): OpenSSL's headers include
 * <pthread.h>, which includes <sched.h>, and salusd's own sched.h would be found first. */
#include "link_auth.h"
#include "links.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

void link_auth_cleanse(void *data, size_t bytes)
{
    OPENSSL_cleanse(data, bytes);
}

int link_auth_nonce(uint8_t nonce[LINK_AUTH_NONCE_BYTES])
{
    size_t got = 0;
    while (got < LINK_AUTH_NONCE_BYTES) {
        ssize_t n = getrandom(nonce + got, LINK_AUTH_NONCE_BYTES - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        got += (size_t)n;
    }
    return 0;
}

int link_auth_mac(link_auth_role_t role, const uint8_t *key, size_t key_len,
                  const uint8_t answered_nonce[LINK_AUTH_NONCE_BYTES],
                  const uint8_t sender_nonce[LINK_AUTH_NONCE_BYTES], const char *sender_node,
                  const char *receiver_node, uint8_t mac[LINK_AUTH_MAC_BYTES])
{
    const char *label = role == LINK_AUTH_ACCEPTOR ? "salus-link-acceptor" : "salus-link-dialer";
    uint8_t data[32 + 2 * LINK_AUTH_NONCE_BYTES + 2 * LINKS_NODE_BYTES];
    size_t label_len = strlen(label) + 1; /* with its zero byte */
    size_t sender_len = strnlen(sender_node, LINKS_NODE_BYTES);
    size_t receiver_len = strnlen(receiver_node, LINKS_NODE_BYTES);
    if (sender_len >= LINKS_NODE_BYTES || receiver_len >= LINKS_NODE_BYTES)
        return -EINVAL;
    sender_len++; /* with its zero byte */
    size_t n = 0;
    memcpy(data + n, label, label_len);
    n += label_len;
    memcpy(data + n, answered_nonce, LINK_AUTH_NONCE_BYTES);
    n += LINK_AUTH_NONCE_BYTES;
    memcpy(data + n, sender_nonce, LINK_AUTH_NONCE_BYTES);
    n += LINK_AUTH_NONCE_BYTES;
    memcpy(data + n, sender_node, sender_len);
    n += sender_len;
    memcpy(data + n, receiver_node, receiver_len);
    n += receiver_len;
    unsigned int mac_len = 0;
    if (!HMAC(EVP_sha256(), key, (int)key_len, data, n, mac, &mac_len) ||
        mac_len != LINK_AUTH_MAC_BYTES)
        return -EIO;
    return 0;
}

int link_auth_check(link_auth_role_t role, const uint8_t *key, size_t key_len,
                    const uint8_t answered_nonce[LINK_AUTH_NONCE_BYTES],
                    const uint8_t sender_nonce[LINK_AUTH_NONCE_BYTES], const char *sender_node,
                    const char *receiver_node, const uint8_t *mac, size_t mac_len)
{
    uint8_t expected[LINK_AUTH_MAC_BYTES];
    if (mac_len != LINK_AUTH_MAC_BYTES ||
        link_auth_mac(role, key, key_len, answered_nonce, sender_nonce, sender_node,
                      receiver_node, expected) < 0)
        return 0;
    int same = CRYPTO_memcmp(expected, mac, LINK_AUTH_MAC_BYTES) == 0;
    OPENSSL_cleanse(expected, sizeof(expected));
    return same;
}

/* Checks what fstat says of the key file; 0 or -EPERM/-EINVAL with err filled. */
static int check_key_file(const char *path, const struct stat *st, char *err, size_t err_size)
{
    if (!S_ISREG(st->st_mode)) {
        snprintf(err, err_size, "cluster key %s: not a regular file", path);
        return -EINVAL;
    }
    if (st->st_uid != geteuid()) {
        snprintf(err, err_size, "cluster key %s: owned by uid %u, not by salusd's user (uid %u)",
                 path, (unsigned)st->st_uid, (unsigned)geteuid());
        return -EPERM;
    }
    if (st->st_mode & (S_IRWXG | S_IRWXO)) {
        snprintf(err, err_size, "cluster key %s: %s by others (mode %04o); it must be 0600 or "
                 "0400", path, (st->st_mode & (S_IRGRP | S_IROTH)) ? "readable" : "accessible",
                 (unsigned)(st->st_mode & 07777));
        return -EPERM;
    }
    if (st->st_size > LINKS_KEY_MAX_BYTES + 1) {
        snprintf(err, err_size, "cluster key %s: %lld bytes, more than the %d a key may have",
                 path, (long long)st->st_size, LINKS_KEY_MAX_BYTES);
        return -EINVAL;
    }
    return 0;
}

int links_key_load(const char *path, uint8_t *key, size_t cap, size_t *len, char *err,
                   size_t err_size)
{
    uint8_t buf[LINKS_KEY_MAX_BYTES + 2];
    struct stat st;
    size_t got = 0;
    int rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        rc = -errno;
        snprintf(err, err_size, "cluster key %s: %s", path, strerror(errno));
        return rc;
    }
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        snprintf(err, err_size, "cluster key %s: %s", path, strerror(errno));
        goto out;
    }
    rc = check_key_file(path, &st, err, err_size);
    if (rc < 0)
        goto out;
    while (got < sizeof(buf)) { /* the file may have grown since fstat */
        ssize_t n = read(fd, buf + got, sizeof(buf) - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            snprintf(err, err_size, "cluster key %s: %s", path, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    if (got > 0 && buf[got - 1] == '\n')
        got--;
    if (got < LINKS_KEY_MIN_BYTES || got > LINKS_KEY_MAX_BYTES) {
        snprintf(err, err_size, "cluster key %s: %zu bytes; a key has %d to %d (make one with "
                 "'head -c 32 /dev/urandom > %s')", path, got, LINKS_KEY_MIN_BYTES,
                 LINKS_KEY_MAX_BYTES, path);
        rc = -EINVAL;
        goto out;
    }
    if (got > cap) {
        snprintf(err, err_size, "cluster key %s: %zu bytes, more than the %zu the caller holds",
                 path, got, cap);
        rc = -ENOSPC;
        goto out;
    }
    memcpy(key, buf, got);
    *len = got;
out:
    OPENSSL_cleanse(buf, sizeof(buf));
    close(fd);
    return rc;
}
