/* Nonces and handshake macs of daemon links (link_auth.h). */
#include "link_auth.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
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

/* HMAC-SHA256(key, label 0 nonce_a nonce_b node_a 0 node_b) */
static int labelled_mac(const char *label, const uint8_t *key, size_t key_len,
                        const uint8_t nonce_a[LINK_AUTH_NONCE_BYTES],
                        const uint8_t nonce_b[LINK_AUTH_NONCE_BYTES], const char *node_a,
                        const char *node_b, uint8_t mac[LINK_AUTH_MAC_BYTES])
{
    const char *sender_node = node_a, *receiver_node = node_b;
    const uint8_t *answered_nonce = nonce_a, *sender_nonce = nonce_b;
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
    OPENSSL_cleanse(data, sizeof(data));
    return 0;
}

int link_auth_mac(link_auth_role_t role, const uint8_t *key, size_t key_len,
                  const uint8_t answered_nonce[LINK_AUTH_NONCE_BYTES],
                  const uint8_t sender_nonce[LINK_AUTH_NONCE_BYTES], const char *sender_node,
                  const char *receiver_node, uint8_t mac[LINK_AUTH_MAC_BYTES])
{
    return labelled_mac(role == LINK_AUTH_ACCEPTOR ? "salus-link-acceptor" : "salus-link-dialer",
                        key, key_len, answered_nonce, sender_nonce, sender_node, receiver_node,
                        mac);
}

int link_auth_session_key(const uint8_t *key, size_t key_len,
                          const uint8_t dialer_nonce[LINK_AUTH_NONCE_BYTES],
                          const uint8_t acceptor_nonce[LINK_AUTH_NONCE_BYTES],
                          const char *dialer_node, const char *acceptor_node,
                          uint8_t session_key[LINK_AUTH_SESSION_KEY_BYTES])
{
    _Static_assert(LINK_AUTH_SESSION_KEY_BYTES == LINK_AUTH_MAC_BYTES, "one HMAC-SHA256");
    return labelled_mac("salus-link-frames", key, key_len, dialer_nonce, acceptor_nonce,
                        dialer_node, acceptor_node, session_key);
}

int link_auth_frame_tag(const uint8_t session_key[LINK_AUTH_SESSION_KEY_BYTES], uint64_t seq,
                        const uint8_t *head, size_t head_len, const uint8_t *body,
                        size_t body_len, uint8_t tag[LINK_AUTH_TAG_BYTES])
{
    static EVP_MAC *hmac; /* fetched once: salusd's loop is its one user */
    uint8_t seq_be[8], full[EVP_MAX_MD_SIZE];
    size_t full_len = 0;
    int ok = 0;
    for (int i = 0; i < 8; i++)
        seq_be[i] = (uint8_t)(seq >> (56 - 8 * i));
    if (!hmac)
        hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = hmac ? EVP_MAC_CTX_new(hmac) : NULL;
    if (ctx) {
        OSSL_PARAM params[] = {
            OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
            OSSL_PARAM_construct_end()};
        ok = EVP_MAC_init(ctx, session_key, LINK_AUTH_SESSION_KEY_BYTES, params) &&
             EVP_MAC_update(ctx, seq_be, sizeof(seq_be)) &&
             (head_len == 0 || EVP_MAC_update(ctx, head, head_len)) &&
             (body_len == 0 || EVP_MAC_update(ctx, body, body_len)) &&
             EVP_MAC_final(ctx, full, &full_len, sizeof(full)) &&
             full_len >= LINK_AUTH_TAG_BYTES;
        EVP_MAC_CTX_free(ctx);
    }
    if (ok)
        memcpy(tag, full, LINK_AUTH_TAG_BYTES);
    OPENSSL_cleanse(full, sizeof(full));
    return ok ? 0 : -EIO;
}

int link_auth_frame_check(const uint8_t session_key[LINK_AUTH_SESSION_KEY_BYTES], uint64_t seq,
                          const uint8_t *head, size_t head_len, const uint8_t *body,
                          size_t body_len, const uint8_t tag[LINK_AUTH_TAG_BYTES])
{
    uint8_t expected[LINK_AUTH_TAG_BYTES];
    if (link_auth_frame_tag(session_key, seq, head, head_len, body, body_len, expected) < 0)
        return 0;
    int same = CRYPTO_memcmp(expected, tag, LINK_AUTH_TAG_BYTES) == 0;
    OPENSSL_cleanse(expected, sizeof(expected));
    return same;
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
