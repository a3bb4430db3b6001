/* GMAC tags of the parameter servers' UCX messages (ps_net_auth.h). */
#include "ps_net_auth.h"

#include <errno.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>

struct ps_net_auth_s {
    EVP_CIPHER_CTX *ctx; /* AES-256-GCM with the pair's key set */
};

int ps_net_auth_master(const uint8_t *cluster_key, size_t key_len,
                       uint8_t master[PS_NET_AUTH_KEY_BYTES])
{
    static const char label[] = "salus-ps-net";
    unsigned int len = 0;
    if (!HMAC(EVP_sha256(), cluster_key, (int)key_len, (const uint8_t *)label, sizeof(label) - 1,
              master, &len) ||
        len != PS_NET_AUTH_KEY_BYTES)
        return -EIO;
    return 0;
}

ps_net_auth_t *ps_net_auth_new(const uint8_t master[PS_NET_AUTH_KEY_BYTES], const char *sender,
                               const char *receiver, uint64_t token)
{
    static const char label[] = "salus-ps-net-pair";
    uint8_t data[sizeof(label) + 2 * 256 + 8], key[PS_NET_AUTH_KEY_BYTES];
    size_t s_len = strnlen(sender, 256), r_len = strnlen(receiver, 256), n = 0;
    unsigned int key_len = 0;
    if (s_len >= 256 || r_len >= 256)
        return NULL;
    memcpy(data + n, label, sizeof(label)); /* with its zero byte */
    n += sizeof(label);
    memcpy(data + n, sender, s_len + 1);
    n += s_len + 1;
    memcpy(data + n, receiver, r_len + 1);
    n += r_len + 1;
    for (int i = 0; i < 8; i++)
        data[n++] = (uint8_t)(token >> (8 * i));
    ps_net_auth_t *auth = calloc(1, sizeof(*auth));
    int ok = auth && HMAC(EVP_sha256(), master, PS_NET_AUTH_KEY_BYTES, data, n, key, &key_len) &&
             key_len == sizeof(key) && (auth->ctx = EVP_CIPHER_CTX_new()) != NULL &&
             EVP_EncryptInit_ex(auth->ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) == 1 &&
             EVP_CIPHER_CTX_ctrl(auth->ctx, EVP_CTRL_GCM_SET_IVLEN, 12, NULL) == 1 &&
             EVP_EncryptInit_ex(auth->ctx, NULL, NULL, key, NULL) == 1;
    OPENSSL_cleanse(key, sizeof(key));
    OPENSSL_cleanse(data, sizeof(data));
    if (!ok) {
        ps_net_auth_free(auth);
        return NULL;
    }
    return auth;
}

void ps_net_auth_free(ps_net_auth_t *auth)
{
    if (!auth)
        return;
    EVP_CIPHER_CTX_free(auth->ctx); /* wipes the key schedule */
    free(auth);
}

/* more additional data (no plaintext), in pieces EVP's int lengths hold */
static int add_aad(EVP_CIPHER_CTX *ctx, const uint8_t *p, size_t len)
{
    while (len > 0) {
        int piece = len > (size_t)(INT_MAX / 2) ? INT_MAX / 2 : (int)len, out = 0;
        if (EVP_EncryptUpdate(ctx, NULL, &out, p, piece) != 1)
            return -1;
        p += piece;
        len -= (size_t)piece;
    }
    return 0;
}

int ps_net_auth_tag(ps_net_auth_t *auth, uint64_t seq, const void *head, size_t head_len,
                    const void *payload, size_t payload_len, uint8_t tag[PS_NET_AUTH_TAG_BYTES])
{
    uint8_t iv[12] = {0}, none[16];
    int out = 0;
    for (int i = 0; i < 8; i++)
        iv[4 + i] = (uint8_t)(seq >> (8 * i));
    if (EVP_EncryptInit_ex(auth->ctx, NULL, NULL, NULL, iv) != 1 ||
        add_aad(auth->ctx, head, head_len) < 0 || add_aad(auth->ctx, payload, payload_len) < 0 ||
        EVP_EncryptFinal_ex(auth->ctx, none, &out) != 1 ||
        EVP_CIPHER_CTX_ctrl(auth->ctx, EVP_CTRL_GCM_GET_TAG, PS_NET_AUTH_TAG_BYTES, tag) != 1)
        return -EIO;
    return 0;
}

int ps_net_auth_check(ps_net_auth_t *auth, uint64_t seq, const void *head, size_t head_len,
                      const void *payload, size_t payload_len,
                      const uint8_t tag[PS_NET_AUTH_TAG_BYTES])
{
    uint8_t expected[PS_NET_AUTH_TAG_BYTES];
    if (ps_net_auth_tag(auth, seq, head, head_len, payload, payload_len, expected) < 0)
        return 0;
    return CRYPTO_memcmp(expected, tag, sizeof(expected)) == 0;
}
