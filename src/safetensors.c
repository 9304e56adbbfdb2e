/* safetensors.c - placeholder until the parser lands. */
#include "safetensors.h"
#include "error.h"
#define WD_STUB(err) wd_error_set(err, WD_E_UNSUPPORTED, "%s is not built yet", __func__)
int wd_safetensors_parse(const uint8_t *buf, size_t buf_len, uint64_t file_size, uint32_t file,
			 const struct wd_limits *lim, struct wd_table *table,
			 uint64_t *ret_data_start, struct wd_error *err) { return WD_STUB(err); }
int wd_safetensors_read(int fd, uint64_t file_size, uint32_t file, const struct wd_limits *lim,
			struct wd_table *table, uint64_t *ret_data_start, struct wd_error *err) { return WD_STUB(err); }
