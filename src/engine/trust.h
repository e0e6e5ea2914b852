/*
 * trust.h — what decides whether an engine's native code may run: the
 * build host id and Ed25519 signatures over the engine file (trust.c).
 * See kiln_load_options in kiln.h for the policy.
 */
#ifndef KILN_ENGINE_TRUST_H
#define KILN_ENGINE_TRUST_H

#include <stddef.h>
#include <stdint.h>

/* SIGNATURE section: the signer's public key, then the signature. */
#define KILN__SIG_PK 32u
#define KILN__SIG_LEN 64u
#define KILN__SIG_SECTION (KILN__SIG_PK + KILN__SIG_LEN)

/* This machine's id: a hash of /etc/machine-id (else of the host name),
 * never 0.  Recorded in META by the builder; compared by KILN_CODE_LOCAL. */
uint64_t kiln__host_id(void);

/* Byte ranges of a file image that a signature does not cover: the header
 * checksum, the signature section's checksum and the signature section. */
typedef struct kiln__sig_skip {
    size_t at[3], len[3];
} kiln__sig_skip;

/* Sign the image minus `skip` with sk (64 bytes): out = pk || signature.
 * KILN_EUNSUPPORTED without libsodium. */
int kiln__sig_create(const uint8_t *img, size_t n, const kiln__sig_skip *skip,
                     const unsigned char *sk, uint8_t out[KILN__SIG_SECTION]);
/* Verify `sig` (pk || signature, from the file) against `pk`: 0, or
 * KILN_ETRUST saying why, or KILN_EUNSUPPORTED without libsodium. */
int kiln__sig_verify(const uint8_t *img, size_t n, const kiln__sig_skip *skip,
                     const uint8_t sig[KILN__SIG_SECTION], const unsigned char *pk);

#endif
