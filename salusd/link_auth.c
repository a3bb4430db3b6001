/* Nonces and handshake macs of daemon links (link_auth.h).
 * Built apart from salusd's other files (salusd/CMakeLists.txt): OpenSSL's headers include
 * <pthread.h>, which includes <sched.h>, and salusd's own sched.h would be found first. */
#include "link_auth.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <string.h>
#include <sys/random.h>

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
    uint8_t data[32 + 2 * LINK_AUTH_NONCE_BYTES + 2 * (LINK_AUTH_NODE_MAX_BYTES + 1)];
    size_t label_len = strlen(label) + 1; /* with its zero byte */
    size_t sender_len = strnlen(sender_node, LINK_AUTH_NODE_MAX_BYTES + 1);
    size_t receiver_len = strnlen(receiver_node, LINK_AUTH_NODE_MAX_BYTES + 1);
    if (sender_len > LINK_AUTH_NODE_MAX_BYTES || receiver_len > LINK_AUTH_NODE_MAX_BYTES)
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
