/* Fuzzes the JSON log line (log_json.c): any message and key=value text, which log calls may take
 * from outside input, gives one line that is one valid JSON object (json-c, strict, UTF-8
 * checked) with ts, level, role and msg, within SPW_LOG_JSON_MAX bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "log_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* byte 0: level and whether the text was cut; then msg, a 0xff byte, then the kv text
     * (NUL bytes end the C strings early, as they would in a log call) */
    if (size < 1)
        return 0;
    enum spw_log_level level = (enum spw_log_level)(data[0] & 3);
    bool cut = data[0] & 4;
    const uint8_t *rest = data + 1;
    size_t n = size - 1;
    const uint8_t *sep = memchr(rest, 0xff, n);
    size_t msg_len = sep ? (size_t)(sep - rest) : n;
    char *msg = strndup((const char *)rest, msg_len);
    char *kv = sep ? strndup((const char *)sep + 1, n - msg_len - 1) : NULL;
    if (!msg || (sep && !kv))
        abort();
    static char line[SPW_LOG_JSON_MAX];
    size_t len = spw_log__json_line(line, sizeof(line), "2026-01-01T00:00:00.000Z", level, "fuzz",
                                    msg, kv, cut);
    if (len < 2 || len > sizeof(line) || line[len - 1] != '\n' || memchr(line, '\n', len - 1))
        abort(); /* one line */
    struct json_tokener *tok = json_tokener_new();
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    struct json_object *obj = json_tokener_parse_ex(tok, line, (int)len - 1);
    if (!obj || json_tokener_get_parse_end(tok) != len - 1 ||
        !json_object_is_type(obj, json_type_object))
        abort(); /* one JSON object, nothing after it */
    const char *need[] = {"ts", "level", "role", "msg"};
    for (size_t i = 0; i < 4; i++) {
        struct json_object *v;
        if (!json_object_object_get_ex(obj, need[i], &v) ||
            !json_object_is_type(v, json_type_string))
            abort();
    }
    struct json_object *t;
    if (cut && (!json_object_object_get_ex(obj, "truncated", &t) || !json_object_get_boolean(t)))
        abort(); /* a cut text is said to be cut */
    json_object_put(obj);
    json_tokener_free(tok);
    free(msg);
    free(kv);
    return 0;
}
