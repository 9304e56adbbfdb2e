/* recipe.c - placeholder until recipes land. */
#include "recipe.h"
#include "error.h"
#define WD_STUB(err) wd_error_set(err, WD_E_UNSUPPORTED, "%s is not built yet", __func__)
int wd_recipe_preflight(const struct wd_recipe *r, const struct wd_resolver *res,
			const struct wd_recipe_limits *lim, struct wd_plan **ret, struct wd_error *err) { return WD_STUB(err); }
void wd_plan_free(struct wd_plan *p) { (void)p; }
enum wd_dtype wd_plan_dtype(const struct wd_plan *p) { return WD_DTYPE_INVALID; }
int wd_plan_ndim(const struct wd_plan *p) { return 0; }
const uint64_t *wd_plan_shape(const struct wd_plan *p) { return NULL; }
uint64_t wd_plan_nbytes(const struct wd_plan *p) { return 0; }
const uint8_t *wd_plan_key(const struct wd_plan *p) { return NULL; }
uint64_t wd_plan_read_bytes(const struct wd_plan *p) { return 0; }
size_t wd_plan_source_count(const struct wd_plan *p) { return 0; }
const struct wd_source *wd_plan_source(const struct wd_plan *p, size_t i) { return NULL; }
const char *wd_plan_label(const struct wd_plan *p) { return ""; }
int wd_plan_execute(const struct wd_plan *p, struct wd_sink *sink, struct wd_scratch *scratch,
		    uint64_t *ret_bytes_read, struct wd_error *err) { return WD_STUB(err); }
