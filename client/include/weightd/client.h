/* weightd/client.h - libweightd, the client library of weightd. (API lands with the client.) */
#ifndef WEIGHTD_CLIENT_H
#define WEIGHTD_CLIENT_H

#if defined(WEIGHTD_BUILDING)
#define WEIGHTD_API __attribute__((visibility("default")))
#else
#define WEIGHTD_API
#endif

WEIGHTD_API const char *weightd_version(void);

#endif
