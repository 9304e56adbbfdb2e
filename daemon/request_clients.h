/* SPDX-License-Identifier: Apache-2.0 */
/* request_clients.h - the clients request: who is connected and what each holds. */
#ifndef WD_REQUEST_CLIENTS_H
#define WD_REQUEST_CLIENTS_H

#include <stdint.h>

struct session;

/* Answer with one ClientInfo per connection the asking peer may see: every one for a privileged
 * peer (the admin socket's), its own uid's otherwise. Linear in the connections. */
void request_clients(struct session *s, uint64_t id);

#endif
