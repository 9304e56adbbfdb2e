/* segment.c - placeholder until segments land. */
#include "segment.h"
#include "error.h"
#define WD_STUB(err) wd_error_set(err, WD_E_UNSUPPORTED, "%s is not built yet", __func__)
int wd_segment_create(const char *name, uint64_t size, struct wd_segment *ret, struct wd_error *err) { return WD_STUB(err); }
void wd_segment_seal(struct wd_segment *seg) { (void)seg; }
int wd_segment_adopt(const char *name, struct wd_segment *ret, struct wd_error *err) { return WD_STUB(err); }
void wd_segment_close(struct wd_segment *seg) { (void)seg; }
int wd_segment_unlink(const char *name) { return -WD_E_UNSUPPORTED; }
int wd_segment_list(const char *prefix, int (*fn)(const char *name, uint64_t size, void *arg), void *arg) { return 0; }
int wd_segment_purge(const char *prefix) { return 0; }
int wd_segment_prefix_valid(const char *prefix) { return 0; }
