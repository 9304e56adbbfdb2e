/* frame.c - placeholder until frames land. */
#include "frame.h"
#include <stddef.h>
struct wd_outq *wd_outq_new(void) { return NULL; }
void wd_outq_free(struct wd_outq *q) { (void)q; }
int wd_outq_push(struct wd_outq *q, const void *payload, size_t len, const int *fds, size_t nfds) { return -WD_E_UNSUPPORTED; }
int wd_outq_flush(struct wd_outq *q, int sock) { return -WD_E_UNSUPPORTED; }
size_t wd_outq_bytes(const struct wd_outq *q) { return 0; }
size_t wd_outq_frames(const struct wd_outq *q) { return 0; }
struct wd_inbuf *wd_inbuf_new(uint32_t max_payload, uint32_t max_fds) { return NULL; }
void wd_inbuf_free(struct wd_inbuf *b) { (void)b; }
int wd_inbuf_read(struct wd_inbuf *b, int sock) { return -WD_E_UNSUPPORTED; }
int wd_inbuf_feed(struct wd_inbuf *b, const void *data, size_t len) { return -WD_E_UNSUPPORTED; }
int wd_inbuf_next(struct wd_inbuf *b, struct wd_frame *ret) { return -WD_E_UNSUPPORTED; }
void wd_frame_close_fds(struct wd_frame *f) { (void)f; }
int wd_frame_send_blocking(int sock, const void *payload, size_t len, const int *fds, size_t nfds) { return -WD_E_UNSUPPORTED; }
