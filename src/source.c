/* source.c - placeholder until checkpoint sources land. */
#include "source.h"
#include "error.h"
#define WD_STUB(err) wd_error_set(err, WD_E_UNSUPPORTED, "%s is not built yet", __func__)
int wd_source_open(const char *name, const char *path, const struct wd_limits *lim,
		   struct wd_source **ret, struct wd_error *err) { return WD_STUB(err); }
void wd_source_free(struct wd_source *src) { (void)src; }
const char *wd_source_name(const struct wd_source *src) { return ""; }
const char *wd_source_path(const struct wd_source *src) { return ""; }
enum wd_source_kind wd_source_kind(const struct wd_source *src) { return WD_SOURCE_SAFETENSORS; }
const char *wd_source_kind_name(enum wd_source_kind kind) { return "safetensors"; }
size_t wd_source_tensor_count(const struct wd_source *src) { return 0; }
const struct wd_tensor_info *wd_source_tensor(const struct wd_source *src, size_t i) { return NULL; }
const struct wd_tensor_info *wd_source_find(const struct wd_source *src, const char *tensor) { return NULL; }
size_t wd_source_meta_count(const struct wd_source *src) { return 0; }
const struct wd_meta *wd_source_meta(const struct wd_source *src, size_t i) { return NULL; }
size_t wd_source_file_count(const struct wd_source *src) { return 0; }
const char *wd_source_file_name(const struct wd_source *src, uint32_t file) { return ""; }
const struct wd_file_id *wd_source_file_id(const struct wd_source *src, uint32_t file) { return NULL; }
uint64_t wd_source_bytes(const struct wd_source *src) { return 0; }
void wd_source_identity(const struct wd_source *src, uint8_t ret[32]) { (void)ret; }
int wd_source_check(const struct wd_source *src, uint32_t file, struct wd_error *err) { return WD_STUB(err); }
int wd_source_pread(const struct wd_source *src, uint32_t file, void *buf, size_t len, uint64_t off,
		    struct wd_error *err) { return WD_STUB(err); }
