/* SPDX-License-Identifier: Apache-2.0 */
/* dist_ports.h - loopback ports for the tests that start a whole cluster in one process.
 *
 * A port found free (bound to port 0, then closed) may be taken by another process before a
 * server listens on it: a connection of a test running beside this one gets it as its
 * ephemeral port. So a test starts its cluster on dist_free_ports' ports, and when a server
 * fails because its port was taken (dist_port_taken), stops what it started and tries again
 * on new ports, up to DIST_START_ATTEMPTS times. */
#ifndef FLOE_TESTS_DIST_PORTS_H
#define FLOE_TESTS_DIST_PORTS_H

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <floe/floe.h>

#define DIST_START_ATTEMPTS 5

/* n distinct free loopback ports into port (bound all at once, so no two are the same). */
static inline void dist_free_ports(int *port, int n) {
  int fd[16];
  ck_assert_int_le(n, 16);
  for (int i = 0; i < n; i++) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    fd[i] = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert(fd[i] >= 0 && bind(fd[i], (struct sockaddr *)&a, sizeof a) == 0 &&
              getsockname(fd[i], (struct sockaddr *)&a, &len) == 0);
    port[i] = ntohs(a.sin_port);
  }
  for (int i = 0; i < n; i++) close(fd[i]);
}

/* st is a server's failure to listen because another process holds its port. */
static inline bool dist_port_taken(const FloeStatus *st) {
  return strstr(floe_status_message(st), "the port is in use") != NULL;
}

#endif
