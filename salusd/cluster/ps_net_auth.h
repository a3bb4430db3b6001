/* Integrity of the parameter servers' UCX messages (ps_net.h, salusd --ps-net-integrity):
 * AES-256-GCM with no plaintext (GMAC, OpenSSL libcrypto; AES-NI and carry-less multiply where
 * the CPU has them), keyed per (sender, receiver, token): the token is the one the receiver
 * issued to the sender over the authenticated daemon links, so each exchange of tokens gives
 * new keys. The tag covers ps_net's header (its tag field zeroed), the caller's header and
 * the payload; the nonce is the message's 64-bit number, drawn from one counter per net that
 * never goes back. Built with link_auth.c, apart from salusd's headers (salusd/CMakeLists.txt). */
#ifndef SALUS_SALUSD_PS_NET_AUTH_H
#define SALUS_SALUSD_PS_NET_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define PS_NET_AUTH_KEY_BYTES 32
#define PS_NET_AUTH_TAG_BYTES 16

typedef struct ps_net_auth_s ps_net_auth_t;

/* The master key of the data plane from the cluster key: HMAC-SHA256(key, "salus-ps-net").
 * 0 or -EIO. */
int ps_net_auth_master(const uint8_t *cluster_key, size_t key_len,
                       uint8_t master[PS_NET_AUTH_KEY_BYTES]);

/* The key of sender's messages to receiver under token:
 *   HMAC-SHA256(master, "salus-ps-net-pair" 0 sender 0 receiver 0 token (8 bytes, LE))
 * NULL when out of memory or libcrypto fails. */
ps_net_auth_t *ps_net_auth_new(const uint8_t master[PS_NET_AUTH_KEY_BYTES], const char *sender,
                               const char *receiver, uint64_t token);
void ps_net_auth_free(ps_net_auth_t *auth); /* NULL ok; the key is wiped */

/* The tag of message seq over head then payload (either may be empty). 0 or -EIO. */
int ps_net_auth_tag(ps_net_auth_t *auth, uint64_t seq, const void *head, size_t head_len,
                    const void *payload, size_t payload_len, uint8_t tag[PS_NET_AUTH_TAG_BYTES]);

/* 1 when tag is message seq's, compared in constant time; 0 otherwise. */
int ps_net_auth_check(ps_net_auth_t *auth, uint64_t seq, const void *head, size_t head_len,
                      const void *payload, size_t payload_len,
                      const uint8_t tag[PS_NET_AUTH_TAG_BYTES]);

#endif
