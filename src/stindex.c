/* stindex.c - placeholder until the parser lands. */
#include "stindex.h"
#include "error.h"
#define WD_STUB(err) wd_error_set(err, WD_E_UNSUPPORTED, "%s is not built yet", __func__)
int wd_stindex_parse(const char *json, size_t len, const struct wd_limits *lim,
		     struct wd_stindex *ret, struct wd_error *err) { return WD_STUB(err); }
void wd_stindex_free(struct wd_stindex *idx) { (void)idx; }
