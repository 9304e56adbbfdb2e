/* SPDX-License-Identifier: Apache-2.0 */
/* convert.c - element-wise casts: exact portable scalar kernels and vector twins chosen at run time. */
#include "convert.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "convert_kern.h"
#include "error.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

/*
 * How it is built. Every float format is described by its field widths (struct fmt); a value is
 * decoded exactly into sign, class and an integer significand with a binary exponent (struct fval)
 * and encoded back with one rounding to nearest, ties to even, done in integer arithmetic. That
 * generic path serves every pair and does not depend on the floating-point environment. The hot
 * pairs f32<->bf16, f32<->f16 and bf16<->f16 also have dedicated scalar kernels; those and
 * f32<->f64 have vector kernels that give the same bits. The vector kernels that use the FPU (f16
 * and f64 conversions) assume the default environment (round to nearest, no FTZ/DAZ), which
 * weightd never changes.
 */

/* ---- formats and exact values ---- */

struct fmt {
	uint8_t mbits;   /* stored fraction bits */
	uint8_t ebits;   /* exponent bits */
	int16_t bias;
	bool fn;         /* finite-only (E4M3FN): only S.1111.111 is NaN, no infinity, overflow -> NaN */
	bool canon_nan;  /* every NaN encodes as S.all-ones (PyTorch's FP8 rule) */
};

static const struct fmt fmt_f64 = { 52, 11, 1023, false, false };
static const struct fmt fmt_f32 = { 23, 8, 127, false, false };
static const struct fmt fmt_f16 = { 10, 5, 15, false, false };
static const struct fmt fmt_bf16 = { 7, 8, 127, false, false };
static const struct fmt fmt_e4m3 = { 3, 4, 7, true, true };
static const struct fmt fmt_e5m2 = { 2, 5, 15, false, true };

static const struct fmt *fmt_of(enum wd_dtype t)
{
	switch (t) {
	case WD_F64: return &fmt_f64;
	case WD_F32: return &fmt_f32;
	case WD_F16: return &fmt_f16;
	case WD_BF16: return &fmt_bf16;
	case WD_F8_E4M3: return &fmt_e4m3;
	case WD_F8_E5M2: return &fmt_e5m2;
	default: return NULL;
	}
}

enum { V_ZERO, V_FINITE, V_INF, V_NAN };

/*
 * An exact value: for V_FINITE, (-1)^neg * sig * 2^exp2 with sig != 0; for V_NAN, sig holds the
 * source fraction left-justified in 64 bits (the payload, quiet bit included).
 */
struct fval {
	int cls;
	bool neg;
	int exp2;
	uint64_t sig;
};

/* The exact value of a code of format f (the code's bits above the format's width are ignored). */
static struct fval fp_decode(const struct fmt *f, uint64_t code)
{
	struct fval v = { V_ZERO, false, 0, 0 };
	uint64_t mmask = (UINT64_C(1) << f->mbits) - 1;
	uint64_t emax = (UINT64_C(1) << f->ebits) - 1;
	uint64_t e = (code >> f->mbits) & emax;
	uint64_t m = code & mmask;

	v.neg = (code >> (f->mbits + f->ebits)) & 1;
	if (e == emax && (!f->fn || m == mmask)) {
		if (m == 0) {
			v.cls = V_INF;
		} else {
			v.cls = V_NAN;
			v.sig = m << (64 - f->mbits);
		}
	} else if (e == 0) {
		if (m != 0) {
			v.cls = V_FINITE;
			v.sig = m;
			v.exp2 = 1 - f->bias - f->mbits;
		}
	} else {
		v.cls = V_FINITE;
		v.sig = m | (UINT64_C(1) << f->mbits);
		v.exp2 = (int)e - f->bias - f->mbits;
	}
	return v;
}

/* x / 2^s rounded to nearest, ties to even (s >= 0). */
static uint64_t round_shift(uint64_t x, int s)
{
	uint64_t q, rem, half;

	if (s == 0)
		return x;
	if (s > 64)
		return 0; /* x < 2^64 < half */
	q = s == 64 ? 0 : x >> s;
	rem = s == 64 ? x : x & ((UINT64_C(1) << s) - 1);
	half = UINT64_C(1) << (s - 1);
	if (rem > half || (rem == half && (q & 1)))
		q++;
	return q;
}

/*
 * Encode an exact value in format f: one rounding to nearest even, computed as if the exponent were
 * unbounded; a result beyond the largest finite code becomes infinity (NaN for finite-only formats).
 */
static uint64_t fp_encode(const struct fmt *f, struct fval v)
{
	uint64_t sign = (uint64_t)v.neg << (f->mbits + f->ebits);
	uint64_t mmask = (UINT64_C(1) << f->mbits) - 1;
	int emax = (1 << f->ebits) - 1;
	uint64_t inf = (uint64_t)emax << f->mbits;
	uint64_t nan_all = inf | mmask;
	uint64_t overflow = f->fn ? nan_all : inf;
	uint64_t maxfin = overflow - 1;
	uint64_t code, q;
	int msb, e, s, emin;

	switch (v.cls) {
	case V_ZERO:
		return sign;
	case V_INF:
		return sign | overflow;
	case V_NAN:
		if (f->canon_nan)
			return sign | nan_all;
		return sign | inf | (v.sig >> (64 - f->mbits)) | (UINT64_C(1) << (f->mbits - 1));
	default:
		break;
	}
	msb = 63 - __builtin_clzll(v.sig);
	e = msb + v.exp2; /* exponent of the leading bit */
	emin = 1 - f->bias;
	if (e >= emin) {
		s = msb - f->mbits;
		q = s >= 0 ? round_shift(v.sig, s) : v.sig << -s;
		if (q >> (f->mbits + 1)) { /* rounding carried into a new binade */
			q >>= 1;
			e++;
		}
		if (e + f->bias > emax)
			return sign | overflow;
		code = ((uint64_t)(e + f->bias) << f->mbits) | (q & mmask);
	} else {
		/* subnormal: count quanta of 2^(emin - mbits); 2^mbits quanta is the smallest normal */
		s = emin - f->mbits - v.exp2;
		code = s >= 0 ? round_shift(v.sig, s) : v.sig << -s;
	}
	if (code > maxfin)
		return sign | overflow;
	return sign | code;
}

/* ---- element access ---- */

static uint64_t load_bits(const unsigned char *p, size_t size)
{
	uint8_t b8;
	uint16_t b16;
	uint32_t b32;
	uint64_t b64;

	switch (size) {
	case 1: memcpy(&b8, p, 1); return b8;
	case 2: memcpy(&b16, p, 2); return b16;
	case 4: memcpy(&b32, p, 4); return b32;
	default: memcpy(&b64, p, 8); return b64;
	}
}

static void store_bits(unsigned char *p, size_t size, uint64_t bits)
{
	uint8_t b8 = (uint8_t)bits;
	uint16_t b16 = (uint16_t)bits;
	uint32_t b32 = (uint32_t)bits;

	switch (size) {
	case 1: memcpy(p, &b8, 1); break;
	case 2: memcpy(p, &b16, 2); break;
	case 4: memcpy(p, &b32, 4); break;
	default: memcpy(p, &bits, 8); break;
	}
}

static bool is_signed_int(enum wd_dtype t)
{
	return t == WD_I8 || t == WD_I16 || t == WD_I32 || t == WD_I64;
}

/* An integer element as its 64-bit two's-complement bits (signed types sign-extended). */
static uint64_t int_bits(enum wd_dtype t, uint64_t raw)
{
	switch (t) {
	case WD_BOOL: return raw != 0;
	case WD_I8: return (uint64_t)(int64_t)(int8_t)raw;
	case WD_I16: return (uint64_t)(int64_t)(int16_t)raw;
	case WD_I32: return (uint64_t)(int64_t)(int32_t)raw;
	default: return raw;
	}
}

/* The exact value of an integer element given as int_bits() returns it. */
static struct fval int_value(enum wd_dtype t, uint64_t bits)
{
	struct fval v = { V_ZERO, false, 0, 0 };

	if (is_signed_int(t) && (int64_t)bits < 0) {
		v.neg = true;
		bits = UINT64_C(0) - bits;
	}
	if (bits) {
		v.cls = V_FINITE;
		v.sig = bits;
	}
	return v;
}

/* Truncate toward zero and saturate to a `bytes`-wide integer; NaN -> 0. Returns the bits. */
static uint64_t value_to_int(struct fval v, size_t bytes, bool is_signed)
{
	unsigned bits = (unsigned)bytes * 8;
	uint64_t mag = 0, limit;
	int msb;
	bool big = false;

	if (v.cls == V_NAN || v.cls == V_ZERO)
		return 0;
	if (v.cls == V_INF) {
		big = true;
	} else if (v.exp2 >= 0) {
		msb = 63 - __builtin_clzll(v.sig);
		if (msb + v.exp2 >= 64)
			big = true;
		else
			mag = v.sig << v.exp2;
	} else if (v.exp2 > -64) {
		mag = v.sig >> -v.exp2;
	}
	if (!is_signed) {
		if (v.neg)
			return 0;
		limit = bits == 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
		return big || mag > limit ? limit : mag;
	}
	limit = UINT64_C(1) << (bits - 1); /* |min|; max is limit - 1 */
	if (!v.neg)
		return big || mag > limit - 1 ? limit - 1 : mag;
	if (big || mag > limit)
		mag = limit;
	return UINT64_C(0) - mag;
}

/* ---- the generic scalar kernel: any element pair, one element at a time ---- */

static void convert_generic(enum wd_dtype from, const unsigned char *s, enum wd_dtype to,
			    unsigned char *d, size_t n)
{
	const struct fmt *ff = fmt_of(from), *tf = fmt_of(to);
	size_t ss = wd_dtype_size(from), ds = wd_dtype_size(to);
	bool to_signed = is_signed_int(to);
	struct fval v;
	uint64_t raw, out;

	for (size_t i = 0; i < n; i++, s += ss, d += ds) {
		raw = load_bits(s, ss);
		if (ff)
			v = fp_decode(ff, raw);
		else
			v = int_value(from, int_bits(from, raw));
		if (tf)
			out = fp_encode(tf, v);
		else if (to == WD_BOOL)
			out = v.cls != V_ZERO;
		else if (!ff)
			out = int_bits(from, raw); /* int -> int wraps: keep the low bits */
		else
			out = value_to_int(v, ds, to_signed);
		store_bits(d, ds, out);
	}
}

/* ---- dedicated scalar helpers for the hot pairs ---- */

static uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static float bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint32_t bf16_to_f32_bits(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	if ((u & 0x7FFFFFFF) > 0x7F800000)
		u |= 0x00400000; /* quiet */
	return u;
}

static uint16_t f32_bits_to_bf16(uint32_t u)
{
	if ((u & 0x7FFFFFFF) > 0x7F800000)
		return (uint16_t)((u >> 16) | 0x40);
	/* bf16 keeps f32's exponent range: adding 0x7FFF + lsb rounds to nearest even, carries into
	 * the exponent and overflows to infinity exactly as IEEE rounding does */
	return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

static uint32_t f16_to_f32_bits(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, a = h & 0x7FFF, m = h & 0x3FF;
	int sh;

	if (a - 0x0400 < 0x7800) /* normal (exponent field 1..30): move up and rebias by 127 - 15 */
		return sign | ((a << 13) + 0x38000000);
	if (a >= 0x7C00)
		return sign | 0x7F800000 | (m ? 0x00400000 | (m << 13) : 0);
	if (!m)
		return sign;
	/* subnormal m * 2^-24: shift the leading bit to position 10 */
	sh = __builtin_clz(m) - 21;
	m <<= sh;
	return sign | ((uint32_t)(113 - sh) << 23) | ((m & 0x3FF) << 13);
}

static uint16_t f32_bits_to_f16(uint32_t u)
{
	uint16_t sign = (u >> 16) & 0x8000;
	uint32_t a = u & 0x7FFFFFFF, r, m, q, rem, half;
	int s;

	if (a - 0x38800000 < 0x47800000 - 0x38800000) {
		/* the f16 normal range [2^-14, 2^16): rebias, round, a carry may reach infinity */
		r = a - 0x38000000;
		r += 0xFFF + ((r >> 13) & 1);
		return sign | (uint16_t)(r >> 13);
	}
	if (a > 0x7F800000)
		return sign | 0x7E00 | ((a >> 13) & 0x3FF);
	if (a >= 0x47800000) /* >= 2^16, infinity included */
		return sign | 0x7C00;
	if (a <= 0x33000000) /* <= 2^-25, half the smallest subnormal: rounds to zero */
		return sign;
	m = (a & 0x7FFFFF) | 0x800000;
	s = 126 - (int)(a >> 23); /* 14..24 */
	q = m >> s;
	rem = m & ((UINT32_C(1) << s) - 1);
	half = UINT32_C(1) << (s - 1);
	if (rem > half || (rem == half && (q & 1)))
		q++;
	return sign | (uint16_t)q;
}

float wd_f16_to_f32(unsigned short h)
{
	return bits_f32(f16_to_f32_bits(h));
}

unsigned short wd_f32_to_f16(float f)
{
	return f32_bits_to_f16(f32_bits(f));
}

float wd_bf16_to_f32(unsigned short b)
{
	return bits_f32(bf16_to_f32_bits(b));
}

unsigned short wd_f32_to_bf16(float f)
{
	return f32_bits_to_bf16(f32_bits(f));
}

/* ---- kernel tables ---- */

static int pair_of(enum wd_dtype from, enum wd_dtype to)
{
	if (from == WD_F32 && to == WD_BF16) return P_F32_BF16;
	if (from == WD_BF16 && to == WD_F32) return P_BF16_F32;
	if (from == WD_F16 && to == WD_F32) return P_F16_F32;
	if (from == WD_F32 && to == WD_F16) return P_F32_F16;
	if (from == WD_BF16 && to == WD_F16) return P_BF16_F16;
	if (from == WD_F16 && to == WD_BF16) return P_F16_BF16;
	if (from == WD_F32 && to == WD_F64) return P_F32_F64;
	if (from == WD_F64 && to == WD_F32) return P_F64_F32;
	return -1;
}

/* Scalar kernels of the hot pairs; the vector kernels finish their tails with these. */

static void convert_scalar_f32_bf16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	for (size_t i = 0; i < n; i++)
		store_bits(d + 2 * i, 2, f32_bits_to_bf16((uint32_t)load_bits(s + 4 * i, 4)));
}

static void convert_scalar_bf16_f32(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	for (size_t i = 0; i < n; i++)
		store_bits(d + 4 * i, 4, bf16_to_f32_bits((uint16_t)load_bits(s + 2 * i, 2)));
}

static void convert_scalar_f16_f32(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	for (size_t i = 0; i < n; i++)
		store_bits(d + 4 * i, 4, f16_to_f32_bits((uint16_t)load_bits(s + 2 * i, 2)));
}

static void convert_scalar_f32_f16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	for (size_t i = 0; i < n; i++)
		store_bits(d + 2 * i, 2, f32_bits_to_f16((uint32_t)load_bits(s + 4 * i, 4)));
}

/* bf16 -> f32 and f16 -> f32 are exact, so going through f32 rounds only once. */
static void convert_scalar_bf16_f16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	for (size_t i = 0; i < n; i++)
		store_bits(d + 2 * i, 2,
			   f32_bits_to_f16(bf16_to_f32_bits((uint16_t)load_bits(s + 2 * i, 2))));
}

static void convert_scalar_f16_bf16(const void *src, void *dst, size_t n)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	for (size_t i = 0; i < n; i++)
		store_bits(d + 2 * i, 2,
			   f32_bits_to_bf16(f16_to_f32_bits((uint16_t)load_bits(s + 2 * i, 2))));
}

static void convert_scalar_f32_f64(const void *src, void *dst, size_t n)
{
	convert_generic(WD_F32, src, WD_F64, dst, n);
}

static void convert_scalar_f64_f32(const void *src, void *dst, size_t n)
{
	convert_generic(WD_F64, src, WD_F32, dst, n);
}

const wd_convert_kern_fn wd_convert_kern_scalar[P_COUNT] = {
	[P_F32_BF16] = convert_scalar_f32_bf16, [P_BF16_F32] = convert_scalar_bf16_f32,
	[P_F16_F32] = convert_scalar_f16_f32, [P_F32_F16] = convert_scalar_f32_f16,
	[P_BF16_F16] = convert_scalar_bf16_f16, [P_F16_BF16] = convert_scalar_f16_bf16,
	[P_F32_F64] = convert_scalar_f32_f64, [P_F64_F32] = convert_scalar_f64_f32,
};


/* ---- run-time choice ---- */

static wd_convert_kern_fn active[P_COUNT];
static const char *active_isa = "scalar";
static pthread_once_t pick_once = PTHREAD_ONCE_INIT;

/* The kernel sets by name, fastest last; what WEIGHTD_CPU_KERNELS and wd_convert_select take. */
enum kset { K_SCALAR, K_AVX2, K_AVX512, K_AVX512BF16, K_COUNT };

static const char *const kset_names[K_COUNT] = { "scalar", "avx2", "avx512", "avx512bf16" };

/*
 * Which sets the CPU can run. F16C and AVX512_BF16 are read from CPUID (not every compiler's
 * __builtin_cpu_supports knows them); both use register state that the AVX2 / AVX-512F checks
 * already found the OS enabling.
 */
static bool cpu_has(enum kset k)
{
#if defined(__x86_64__)
	unsigned a = 0, b = 0, c = 0, d = 0;

	__builtin_cpu_init();
	switch (k) {
	case K_SCALAR: return true;
	case K_AVX2:
		return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) &&
		       (c & (1u << 29));
	case K_AVX512: return __builtin_cpu_supports("avx512f");
	case K_AVX512BF16:
#if defined(WD_HAVE_AVX512BF16)
		return __builtin_cpu_supports("avx512f") && __get_cpuid_count(7, 1, &a, &b, &c, &d) &&
		       (a & (1u << 5));
#else
		return false;
#endif
	default: return false;
	}
#else
	return k == K_SCALAR;
#endif
}

/* Make set k active (the caller checked cpu_has). */
static void use_kernels(enum kset k)
{
	memcpy(active, wd_convert_kern_scalar, sizeof(active));
	active_isa = "scalar";
#if defined(__x86_64__)
	if (k == K_AVX2) {
		memcpy(active, wd_convert_kern_avx2, sizeof(active));
		active_isa = "avx2+f16c";
	}
	if (k >= K_AVX512) {
		memcpy(active, wd_convert_kern_avx512, sizeof(active));
		active_isa = "avx512f";
		/* every AVX-512 CPU that ships has BW too; the set's name stays what it was */
		if (__builtin_cpu_supports("avx512bw"))
			active[P_BF16_F16] = wd_convert_kern_avx512bw_bf16_f16;
	}
#if defined(WD_HAVE_AVX512BF16)
	if (k == K_AVX512BF16) {
		active[P_F32_BF16] = wd_convert_kern_avx512bf16_f32_bf16;
		active_isa = "avx512f+avx512bf16";
	}
#endif
#endif
}

static int kset_from_name(const char *name)
{
	for (int k = 0; k < K_COUNT; k++)
		if (strcmp(name, kset_names[k]) == 0)
			return k;
	return -1;
}

/*
 * The fastest set the CPU has, or no faster than WEIGHTD_CPU_KERNELS asks: a set the CPU lacks
 * falls back to the fastest one below it, an unknown name (or "auto") to the automatic choice.
 * The result shows in wd_convert_isa().
 */
static void pick_kernels(void)
{
	const char *want = getenv("WEIGHTD_CPU_KERNELS");
	int k = want ? kset_from_name(want) : -1;

	if (k < 0)
		k = K_COUNT - 1;
	while (k > K_SCALAR && !cpu_has((enum kset)k))
		k--;
	use_kernels((enum kset)k);
}

int wd_convert_select(const char *name)
{
	int k = name ? kset_from_name(name) : -1;

	if (name && strcmp(name, "auto") == 0) {
		pthread_once(&pick_once, pick_kernels);
		pick_kernels();
		return 0;
	}
	if (k < 0)
		return -WEIGHTD_E_INVALID_ARGUMENT;
	if (!cpu_has((enum kset)k))
		return -WEIGHTD_E_UNSUPPORTED;
	pthread_once(&pick_once, pick_kernels);
	use_kernels((enum kset)k);
	return 0;
}

static bool is_element(enum wd_dtype t)
{
	return t >= WD_BOOL && t <= WD_F8_E5M2;
}

bool wd_convert_supported(enum wd_dtype from, enum wd_dtype to)
{
	return is_element(from) && is_element(to);
}

void wd_convert_scalar(enum wd_dtype from, const void *src, enum wd_dtype to, void *dst, size_t n)
{
	int p;

	if (n == 0 || !wd_convert_supported(from, to))
		return;
	if (from == to) {
		memcpy(dst, src, n * wd_dtype_size(from));
		return;
	}
	p = pair_of(from, to);
	if (p >= 0)
		wd_convert_kern_scalar[p](src, dst, n);
	else
		convert_generic(from, src, to, dst, n);
}

void wd_convert(enum wd_dtype from, const void *src, enum wd_dtype to, void *dst, size_t n)
{
	int p = pair_of(from, to);

	if (p < 0 || n == 0) {
		wd_convert_scalar(from, src, to, dst, n);
		return;
	}
	pthread_once(&pick_once, pick_kernels);
	active[p](src, dst, n);
}

const char *wd_convert_isa(void)
{
	pthread_once(&pick_once, pick_kernels);
	return active_isa;
}
