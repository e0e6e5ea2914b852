/*
 * sign.c — engine trust on the command line: `kiln keygen`, the key files
 * it writes, and the options every verb that loads an engine takes:
 *
 *   --allow-code      load an engine's native code even if built elsewhere
 *   --no-code         refuse native code unless --verify checks a signature
 *   --verify PUBKEY   require a valid signature by this key (PUBKEY.pub)
 *
 * Key files are hex text: NAME.key (the 64-byte Ed25519 secret key, mode
 * 0600) and NAME.pub (the 32-byte public key).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static unsigned char g_pub[32];
kiln_load_options cli_load_opts;

/* Read `n` bytes of hex from `path` (whitespace around allowed). */
int cli_key_read(const char *verb, const char *path, unsigned char *out, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return cli_fail(verb, "cannot open key file '%s': %s", path, strerror(errno));
    char buf[300];
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[k] = 0;
    char *s = buf;
    while (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t') s++;
    size_t len = 0;
    while (s[len] && s[len] != '\n' && s[len] != '\r' && s[len] != ' ') len++;
    if (len != 2 * n)
        return cli_fail(verb, "key file '%s': expected %zu hex digits (a %s key), found %zu", path, 2 * n,
                        n == 32 ? "public" : "secret", len);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1 || !strchr("0123456789abcdefABCDEF", s[2 * i]) ||
            !strchr("0123456789abcdefABCDEF", s[2 * i + 1]))
            return cli_fail(verb, "key file '%s': not hex at character %zu", path, 2 * i);
        out[i] = (unsigned char)v;
    }
    return 0;
}

int cli_trust_opt(const char *verb, int argc, char **argv, int *i) {
    const char *v;
    if (!strcmp(argv[*i], "--allow-code")) {
        cli_load_opts.code = KILN_CODE_ALLOW;
        return 1;
    }
    if (!strcmp(argv[*i], "--no-code")) {
        cli_load_opts.code = KILN_CODE_DENY;
        return 1;
    }
    int m = cli_opt(argc, argv, i, "--verify", &v);
    if (m <= 0) return m;
    if (cli_key_read(verb, v, g_pub, sizeof g_pub)) return -1;
    cli_load_opts.verify_key = g_pub;
    return 1;
}

static int write_hex(const char *verb, const char *path, const unsigned char *b, size_t n, int mode) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0)
        return cli_fail(verb, "cannot create '%s': %s%s", path, strerror(errno),
                        errno == EEXIST ? " (keys are never overwritten)" : "");
    char hex[260];
    for (size_t i = 0; i < n; i++) snprintf(hex + 2 * i, 3, "%02x", b[i]);
    hex[2 * n] = '\n';
    ssize_t w = write(fd, hex, 2 * n + 1);
    int bad = w != (ssize_t)(2 * n + 1);
    if (close(fd) != 0) bad = 1;
    if (bad) {
        unlink(path);
        return cli_fail(verb, "writing '%s' failed", path);
    }
    return 0;
}

static int keygen_usage(FILE *f) {
    fprintf(f, "usage: kiln keygen NAME\n"
               "  Write an Ed25519 key pair: NAME.key (secret, mode 0600: for kiln build --sign)\n"
               "  and NAME.pub (public: for kiln run/bench/inspect --verify).  Needs kiln built\n"
               "  with libsodium.\n");
    return f == stdout ? 0 : 2;
}

int kiln_cli_keygen(int argc, char **argv) {
    const char *verb = "keygen";
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) return keygen_usage(stdout);
    if (argc != 2 || argv[1][0] == '-') return keygen_usage(stderr);
    unsigned char pk[32], sk[64];
    int rc = kiln_sign_keypair(pk, sk);
    if (rc) return cli_fail_kiln(verb, rc, "generating a key");
    size_t l = strlen(argv[1]) + 5;
    char kp[4096], pp[4096];
    if (l >= sizeof kp) return cli_fail(verb, "key name too long");
    snprintf(kp, sizeof kp, "%s.key", argv[1]);
    snprintf(pp, sizeof pp, "%s.pub", argv[1]);
    if (write_hex(verb, kp, sk, sizeof sk, 0600)) return 1;
    if (write_hex(verb, pp, pk, sizeof pk, 0644)) {
        unlink(kp);
        return 1;
    }
    memset(sk, 0, sizeof sk);
    printf("wrote %s (secret: keep it private) and %s (public)\n", kp, pp);
    return 0;
}
