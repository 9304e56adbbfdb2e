/* dequant.c - placeholder until the kernels land. */
#include "dequant.h"
#include "error.h"
#define WD_STUB(err) wd_error_set(err, WD_E_UNSUPPORTED, "%s is not built yet", __func__)
bool wd_dequant_supported(enum wd_dtype t) { (void)t; return false; }
int wd_dequant_f32(enum wd_dtype t, const void *blocks, size_t nblocks, float *out) { return -WD_E_UNSUPPORTED_CAST; }
