/* convert.c - placeholder until the kernels land. */
#include "convert.h"
#include <string.h>
bool wd_convert_supported(enum wd_dtype from, enum wd_dtype to) { return from == to; }
void wd_convert(enum wd_dtype from, const void *src, enum wd_dtype to, void *dst, size_t n) { memcpy(dst, src, n * wd_dtype_size(from)); }
void wd_convert_scalar(enum wd_dtype from, const void *src, enum wd_dtype to, void *dst, size_t n) { wd_convert(from, src, to, dst, n); }
const char *wd_convert_isa(void) { return "none"; }
float wd_f16_to_f32(unsigned short h) { return (float)h; }
unsigned short wd_f32_to_f16(float f) { return (unsigned short)f; }
float wd_bf16_to_f32(unsigned short b) { return (float)b; }
unsigned short wd_f32_to_bf16(float f) { return (unsigned short)f; }
