/* Replays a fuzz corpus through a target's LLVMFuzzerTestOneInput, for builds without libFuzzer. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            uint8_t *nbuf = realloc(buf, cap);
            if (!nbuf) {
                free(buf);
                fclose(f);
                return -1;
            }
            buf = nbuf;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        if (n == 0)
            break;
        len += n;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0, failed = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: no such corpus\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            failed += replay_file(argv[i]) != 0;
            files++;
            continue;
        }
        DIR *dir = opendir(argv[i]);
        if (!dir)
            return 1;
        struct dirent *de;
        while ((de = readdir(dir)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[i], de->d_name);
            failed += replay_file(path) != 0;
            files++;
        }
        closedir(dir);
    }
    printf("replayed %d inputs, %d unreadable\n", files, failed);
    if (files == 0) {
        fprintf(stderr, "replay: empty corpus\n");
        return 1;
    }
    return failed ? 1 : 0;
}
