/* curve_probe: does a CURVE server at ENDPOINT let this client in? A DEALER with the given keys
 * (sparrow/curve.h, as every role sets them) or none ("plain") connects and watches its own
 * handshake through a socket monitor.
 * usage: curve_probe ENDPOINT SERVER_PUBLIC_FILE CLIENT_SECRET_FILE|plain TIMEOUT_MS
 * Prints one line and exits 0 (handshake succeeded), 3 (refused: failed handshake), 4 (nothing
 * within the timeout) or 2 (usage, key files). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "sparrow/curve.h"

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: curve_probe ENDPOINT SERVER_PUBLIC_FILE CLIENT_SECRET_FILE|plain "
                        "TIMEOUT_MS\n");
        return 2;
    }
    const char *endpoint = argv[1];
    bool plain = strcmp(argv[3], "plain") == 0;
    long timeout_ms = strtol(argv[4], NULL, 10);
    struct spw_curve_client_keys keys;
    char errstr[512];
    if (spw_curve_client_load(&keys, "server", plain ? "" : argv[2], "client", plain ? "" : argv[3],
                              errstr, sizeof(errstr)) != SPW_OK) {
        fprintf(stderr, "curve_probe: %s\n", errstr);
        return 2;
    }
    void *ctx = zmq_ctx_new();
    void *sock = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof(linger));
    if (spw_curve_client_apply(&keys, sock, errstr, sizeof(errstr)) != SPW_OK) {
        fprintf(stderr, "curve_probe: %s\n", errstr);
        return 2;
    }
    const int events = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                       ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
    if (zmq_socket_monitor(sock, "inproc://curve-probe", events) != 0) {
        fprintf(stderr, "curve_probe: monitor: %s\n", zmq_strerror(zmq_errno()));
        return 2;
    }
    void *mon = zmq_socket(ctx, ZMQ_PAIR);
    zmq_setsockopt(mon, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_connect(mon, "inproc://curve-probe");
    if (zmq_connect(sock, endpoint) != 0) {
        fprintf(stderr, "curve_probe: connect %s: %s\n", endpoint, zmq_strerror(zmq_errno()));
        return 2;
    }
    int rc = 4;
    const char *what = "no handshake within the timeout";
    zmq_pollitem_t it = {mon, 0, ZMQ_POLLIN, 0};
    while (rc == 4 && zmq_poll(&it, 1, timeout_ms) > 0) {
        zmq_msg_t ev;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, mon, 0) < 0)
            break;
        uint16_t event = 0;
        if (zmq_msg_size(&ev) >= 2)
            memcpy(&event, zmq_msg_data(&ev), 2);
        zmq_msg_close(&ev);
        zmq_msg_init(&ev);
        zmq_msg_recv(&ev, mon, 0); /* the endpoint frame */
        zmq_msg_close(&ev);
        if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            rc = 0;
            what = "handshake succeeded";
        } else {
            rc = 3;
            what = event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH       ? "refused (auth)"
                   : event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ? "refused (protocol)"
                                                                  : "refused (no detail)";
        }
    }
    printf("curve_probe: %s %s client=%s\n", endpoint, what, plain ? "plain" : keys.public_key);
    spw_curve_client_wipe(&keys);
    zmq_socket_monitor(sock, NULL, 0);
    zmq_close(mon);
    zmq_close(sock);
    zmq_ctx_term(ctx);
    return rc;
}
