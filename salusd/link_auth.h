/* The cryptography of daemon links (links.h): nonces from getrandom(2), the handshake's
 * HMAC-SHA256 proofs (OpenSSL libcrypto) checked in constant time. */
#ifndef SALUS_SALUSD_LINK_AUTH_H
#define SALUS_SALUSD_LINK_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define LINK_AUTH_NONCE_BYTES 32
#define LINK_AUTH_MAC_BYTES 32
#define LINK_AUTH_NODE_MAX_BYTES 255 /* node names longer than links.h's are refused anyway */

typedef enum link_auth_role {
    LINK_AUTH_ACCEPTOR, /* the challenge's mac: the acceptor proves the key */
    LINK_AUTH_DIALER,   /* the prove's mac: the dialer proves the key */
} link_auth_role_t;

/* Wipes secrets (keys, nonces) from memory before it is freed or reused. */
void link_auth_cleanse(void *data, size_t bytes);

/* Fills nonce with LINK_AUTH_NONCE_BYTES random bytes. 0 or a negative errno. */
int link_auth_nonce(uint8_t nonce[LINK_AUTH_NONCE_BYTES]);

/* The mac that role's side (the sender) sends:
 *   HMAC-SHA256(key, label 0 answered_nonce sender_nonce sender_node 0 receiver_node)
 * label "salus-link-acceptor" or "salus-link-dialer"; answered_nonce is the receiver's nonce.
 * The zero bytes keep the variable-length fields apart (node names never hold one). 0, or
 * -EINVAL (a node name over LINK_AUTH_NODE_MAX_BYTES), -EIO (libcrypto failed). */
int link_auth_mac(link_auth_role_t role, const uint8_t *key, size_t key_len,
                  const uint8_t answered_nonce[LINK_AUTH_NONCE_BYTES],
                  const uint8_t sender_nonce[LINK_AUTH_NONCE_BYTES], const char *sender_node,
                  const char *receiver_node, uint8_t mac[LINK_AUTH_MAC_BYTES]);

/* 1 when mac (mac_len bytes, from the wire) is the one the sender must have sent, compared
 * in constant time; 0 otherwise. Same arguments as link_auth_mac, from the sender's view. */
int link_auth_check(link_auth_role_t role, const uint8_t *key, size_t key_len,
                    const uint8_t answered_nonce[LINK_AUTH_NONCE_BYTES],
                    const uint8_t sender_nonce[LINK_AUTH_NONCE_BYTES], const char *sender_node,
                    const char *receiver_node, const uint8_t *mac, size_t mac_len);

#endif
