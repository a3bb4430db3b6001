/* The cryptography of daemon links (links.h): nonces from getrandom(2), the handshake's
 * HMAC-SHA256 proofs (OpenSSL libcrypto) checked in constant time. */
#ifndef SALUS_SALUSD_LINK_AUTH_H
#define SALUS_SALUSD_LINK_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define LINK_AUTH_NONCE_BYTES 32
#define LINK_AUTH_MAC_BYTES 32
#define LINK_AUTH_NODE_MAX_BYTES 255 /* node names longer than links.h's are refused anyway */
#define LINK_AUTH_SESSION_KEY_BYTES 32
#define LINK_AUTH_TAG_BYTES 16 /* a frame's tag: HMAC-SHA256 cut to its first 16 bytes */

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

/* The key of one connection's frames after its handshake:
 *   HMAC-SHA256(key, "salus-link-frames" 0 dialer_nonce acceptor_nonce dialer_node 0
 *               acceptor_node)
 * Both ends know it once each proved the key; it is new with every connection. 0, -EINVAL
 * (a node name too long), -EIO. */
int link_auth_session_key(const uint8_t *key, size_t key_len,
                          const uint8_t dialer_nonce[LINK_AUTH_NONCE_BYTES],
                          const uint8_t acceptor_nonce[LINK_AUTH_NONCE_BYTES],
                          const char *dialer_node, const char *acceptor_node,
                          uint8_t session_key[LINK_AUTH_SESSION_KEY_BYTES]);

/* A frame's tag: the first LINK_AUTH_TAG_BYTES of
 *   HMAC-SHA256(session_key, seq (8 bytes, big-endian) head body)
 * (head: the frame's length prefix, body: what follows it, without the tag). 0 or -EIO. */
int link_auth_frame_tag(const uint8_t session_key[LINK_AUTH_SESSION_KEY_BYTES], uint64_t seq,
                        const uint8_t *head, size_t head_len, const uint8_t *body,
                        size_t body_len, uint8_t tag[LINK_AUTH_TAG_BYTES]);

/* 1 when tag (from the wire) is the frame's, compared in constant time; 0 otherwise. */
int link_auth_frame_check(const uint8_t session_key[LINK_AUTH_SESSION_KEY_BYTES], uint64_t seq,
                          const uint8_t *head, size_t head_len, const uint8_t *body,
                          size_t body_len, const uint8_t tag[LINK_AUTH_TAG_BYTES]);

#endif
