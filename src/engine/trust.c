/*
 * trust.c — the build host id and Ed25519 signatures of engine files.
 *
 * A signature covers the whole file except three derived ranges (the
 * header checksum, the signature section's table checksum and the
 * signature section itself), streamed through Ed25519ph (libsodium's
 * crypto_sign_init/update/final_*), so a mapped multi-GB engine is
 * verified without a copy.  The signature section is written last.
 *
 * libsodium is optional at build time (KILN_HAVE_SODIUM): without it the
 * signing entry points return KILN_EUNSUPPORTED saying so.
 */
#include "kiln_int.h"
#include "engine/trust.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#ifdef KILN_HAVE_SODIUM
#include <sodium.h>
#endif


uint64_t kiln__host_id(void) {
    static uint64_t id;
    uint64_t v = __atomic_load_n(&id, __ATOMIC_RELAXED);
    if (v) return v;
    char buf[256];
    size_t n = 0;
    int fd = open("/etc/machine-id", O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0) {
        ssize_t k = read(fd, buf, sizeof buf);
        n = k > 0 ? (size_t)k : 0;
        close(fd);
    }
    if (!n && gethostname(buf, sizeof buf - 1) == 0) n = strnlen(buf, sizeof buf - 1);
    v = kiln__file_checksum(buf, n);
    if (!v) v = 1;
    __atomic_store_n(&id, v, __ATOMIC_RELAXED);
    return v;
}

KILN_API int kiln_sign_available(void) {
#ifdef KILN_HAVE_SODIUM
    return 1;
#else
    return 0;
#endif
}

#ifdef KILN_HAVE_SODIUM
static int sodium_ready(void) {
    if (sodium_init() < 0) return kiln__err(KILN_EINTERNAL, "libsodium failed to initialise");
    return 0;
}

/* Feed the image minus the skipped ranges (sorted, disjoint) to st. */
static void sig_stream(crypto_sign_state *st, const uint8_t *img, size_t n, const kiln__sig_skip *s) {
    size_t at = 0;
    for (int i = 0; i < 3; i++) {
        if (s->at[i] > at) crypto_sign_update(st, img + at, s->at[i] - at);
        at = s->at[i] + s->len[i];
    }
    if (n > at) crypto_sign_update(st, img + at, n - at);
}
#define NO_SODIUM(what) ((void)0)
#else
#define NO_SODIUM(what)                                                                       \
    return kiln__err(KILN_EUNSUPPORTED, "%s: this kiln was built without libsodium "         \
                     "(install libsodium-dev and rebuild to sign and verify engines)", what)
#endif

KILN_API int kiln_sign_keypair(unsigned char pk[32], unsigned char sk[64]) {
    if (!pk || !sk) return kiln__err(KILN_EINVAL, "kiln_sign_keypair: NULL key buffer");
    NO_SODIUM("generating a signing key");
#ifdef KILN_HAVE_SODIUM
    int rc = sodium_ready();
    if (rc) return rc;
    crypto_sign_keypair(pk, sk);
    return 0;
#endif
}

int kiln__sig_create(const uint8_t *img, size_t n, const kiln__sig_skip *skip,
                     const unsigned char *sk, uint8_t out[KILN__SIG_SECTION]) {
    (void)img, (void)n, (void)skip, (void)sk, (void)out;
    NO_SODIUM("signing an engine");
#ifdef KILN_HAVE_SODIUM
    int rc = sodium_ready();
    if (rc) return rc;
    crypto_sign_state st;
    crypto_sign_init(&st);
    sig_stream(&st, img, n, skip);
    crypto_sign_ed25519_sk_to_pk(out, sk);
    crypto_sign_final_create(&st, out + KILN__SIG_PK, NULL, sk);
    return 0;
#endif
}

int kiln__sig_verify(const uint8_t *img, size_t n, const kiln__sig_skip *skip,
                     const uint8_t sig[KILN__SIG_SECTION], const unsigned char *pk) {
    (void)img, (void)n, (void)skip, (void)sig, (void)pk;
    NO_SODIUM("verifying an engine's signature");
#ifdef KILN_HAVE_SODIUM
    int rc = sodium_ready();
    if (rc) return rc;
    if (memcmp(sig, pk, KILN__SIG_PK) != 0)
        return kiln__err(KILN_ETRUST, "engine is signed by another key (its public key starts "
                         "%02x%02x%02x%02x, the verification key %02x%02x%02x%02x)",
                         sig[0], sig[1], sig[2], sig[3], pk[0], pk[1], pk[2], pk[3]);
    crypto_sign_state st;
    crypto_sign_init(&st);
    sig_stream(&st, img, n, skip);
    if (crypto_sign_final_verify(&st, (unsigned char *)sig + KILN__SIG_PK, pk) != 0)
        return kiln__err(KILN_ETRUST, "engine signature does not verify: the file was changed "
                         "after signing, or the signature is not from this key");
    return 0;
#endif
}
