/* `sparrow curve-keygen`: CurveZMQ key pairs for the *.curve.* key files (docs/OPERATIONS.md). */
#include <stdio.h>
#include <string.h>

#include "command_table.h"
#include "sparrow/curve.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sparrow curve-keygen [PREFIX...]\n\n"
            "Makes CurveZMQ key pairs (Z85). For each PREFIX, writes PREFIX.secret (the secret\n"
            "key, mode 0600; an existing file is never overwritten) and PREFIX.public (the public\n"
            "key), and prints \"PREFIX.public KEY\". Without a PREFIX, prints one pair as\n"
            "\"PUBLIC SECRET\" on one line (for `read PUB SEC < <(sparrow curve-keygen)`).\n"
            "Secret key files go to *.curve.secret_key_file / *.curve.client_key_file, public\n"
            "ones to *.curve.server_key_file and, one per line, *.curve.allowed_clients_file.\n");
}

int spw_curve_keygen_main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (argv[i][0] == '-' || argv[i][0] == '\0') {
            fprintf(stderr, "sparrow curve-keygen: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (argc == 1) {
        char pub[SPW_CURVE_KEY_LEN + 1], sec[SPW_CURVE_KEY_LEN + 1];
        if (spw_curve_keypair(pub, sec) != SPW_OK) {
            fprintf(stderr, "sparrow curve-keygen: libzmq has no CURVE support\n");
            return 1;
        }
        printf("%s %s\n", pub, sec);
        memset(sec, 0, sizeof(sec));
        return fflush(stdout) == 0 ? 0 : 1;
    }
    for (int i = 1; i < argc; i++) {
        char pub[SPW_CURVE_KEY_LEN + 1], errstr[512];
        if (spw_curve_keygen_files(argv[i], pub, errstr, sizeof(errstr)) != SPW_OK) {
            fprintf(stderr, "sparrow curve-keygen: %s\n", errstr);
            return 1;
        }
        printf("%s.public %s\n", argv[i], pub);
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
