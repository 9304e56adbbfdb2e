/* SPDX-License-Identifier: Apache-2.0 */
/* test_wire_columns.c - a unit's columns, spoken directly from proto/weightd.proto (not through
 * libweightd): a unit whose whole-tensor entries come as TensorEntries is answered with the same
 * weights as the same unit of UnitEntry messages, with the right bytes behind each fd and offset;
 * columns that do not add up are refused by name before anything is made. */
#include <sys/mman.h>

#include "fixture.h"
#include "float_ref.h"
#include "rawcall.h"

#define MAX_ENTRIES 64

static int setup(void **state)
{
	char sample[512], other[512], args[1200], sections[1400];

	(void)state;
	if (harness_init(&H) < 0)
		return -1;
	harness_path(&H, "other.safetensors", other, sizeof(other));
	if (harness_sample(&H, "tiny.safetensors", sample, sizeof(sample)) < 0)
		return -1;
	/* "b": float k is ((k * 131 + 5 * 7 + 13) % 251 - 125) / 1024 (the values pattern) */
	snprintf(args, sizeof(args), "safetensors %s --tensor a:F32:8:values=4 --tensor b:F32:6x5:values=5",
		 other);
	if (harness_mkfixture(args) < 0)
		return -1;
	snprintf(sections, sizeof(sections), "[checkpoint:tiny]\npath = %s\n[checkpoint:other]\npath = %s\n",
		 sample, other);
	snprintf(args, sizeof(args), "max_unit_entries = %d\n", MAX_ENTRIES);
	return fixture_start(args, sections);
}

/* A reply and the fds that came with it. */
struct reply {
	Weightd__Response *resp;
	int *fds;
	uint32_t nfds;
};

static void reply_free(struct reply *r)
{
	for (uint32_t i = 0; i < r->nfds; i++)
		close(r->fds[i]);
	free(r->fds);
	weightd__response__free_unpacked(r->resp, NULL);
	memset(r, 0, sizeof(*r));
}

/* Send req as one frame and wait for the one message answering it, fds and all. */
static struct reply call(int sock, Weightd__Request *req)
{
	struct reply r = { NULL, NULL, 0 };

	r.resp = it_raw_call(sock, req, &r.fds, &r.nfds);
	return r;
}

/* A raw connection that agreed on the current version. */
static int conn(void)
{
	const uint32_t version = WEIGHTD__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT;
	Weightd__Request req = WEIGHTD__REQUEST__INIT;
	Weightd__Hello hello = WEIGHTD__HELLO__INIT;
	struct reply r;
	int sock = it_raw_connect(&H);

	assert_true(sock >= 0);
	hello.protocol_version = version;
	hello.client_name = "columns";
	req.id = 1;
	req.body_case = WEIGHTD__REQUEST__BODY_HELLO;
	req.hello = &hello;
	r = call(sock, &req);
	assert_int_equal(r.resp->body_case, WEIGHTD__RESPONSE__BODY_HELLO);
	assert_int_equal(r.resp->hello->protocol_version, version);
	reply_free(&r);
	return sock;
}

static struct reply materialize(int sock, uint64_t id, Weightd__Unit *unit)
{
	Weightd__Request req = WEIGHTD__REQUEST__INIT;

	req.id = id;
	req.body_case = WEIGHTD__REQUEST__BODY_MATERIALIZE;
	req.materialize = unit;
	return call(sock, &req);
}

/* Weights the daemon has made so far (its status). */
static uint64_t daemon_weights(void)
{
	weightd_status *st = it_status_of(&H);
	uint64_t n = st->weights;

	weightd_status_free(st);
	return n;
}

/* The tensors of "tiny" in the unit of UnitEntry messages, in the order of the entries below. */
static const char *const TENSOR[] = { "model.norm.weight", "model.layers.0.input_layernorm.weight",
				      "model.embed_tokens.weight",
				      "model.layers.0.self_attn.q_proj.weight" };
#define N_MSG 4

/* The first dimension of weight k in a packed reply's dims. */
static size_t dims_at(const Weightd__PackedWeights *pw, size_t k)
{
	size_t at = 0;

	for (size_t i = 0; i < k; i++)
		at += pw->ndim[i];
	return at;
}

/* Packed weight k of ur is described exactly as weight j of want (another packed reply). */
static void same_weight(const Weightd__UnitReply *ur, size_t k, const Weightd__UnitReply *want,
			size_t j)
{
	const Weightd__PackedWeights *pw = ur->packed, *wp = want->packed;

	assert_int_equal(pw->handle[k], wp->handle[j]);
	assert_int_equal(pw->nbytes[k], wp->nbytes[j]);
	assert_int_equal(pw->offset[k], wp->offset[j]);
	assert_int_equal(pw->generation[k], wp->generation[j]);
	assert_string_equal(pw->dtypes[pw->dtype[k]], wp->dtypes[wp->dtype[j]]);
	assert_int_equal(pw->ndim[k], wp->ndim[j]);
	assert_memory_equal(pw->dims + dims_at(pw, k), wp->dims + dims_at(wp, j),
			    pw->ndim[k] * sizeof(uint64_t));
	assert_int_equal(pw->digest_algorithm.data[k], wp->digest_algorithm.data[j]);
	assert_memory_equal(pw->digests.data + 32 * k, wp->digests.data + 32 * j, 32);
	assert_memory_equal(pw->keys.data + 32 * k, wp->keys.data + 32 * j, 32);
	assert_true(pw->segment[k] < ur->n_segments);
	assert_true(wp->segment[j] < want->n_segments);
	assert_int_equal(ur->segments[pw->segment[k]]->id, want->segments[wp->segment[j]]->id);
}

/* The float at element k of the fixture's values pattern with `seed`. */
static float pattern_value(uint64_t k, unsigned seed)
{
	return (float)((int)((k * 131 + seed * 7 + 13) % 251) - 125) / 1024.0f;
}

/* The F32 weight k of a packed reply holds the values pattern with `seed`, read through its fd. */
static void check_f32_values(const struct reply *r, size_t k, unsigned seed)
{
	const Weightd__PackedWeights *pw = r->resp->materialize->packed;
	const Weightd__SegmentInfo *si = r->resp->materialize->segments[pw->segment[k]];
	uint8_t *map;

	assert_int_equal(pw->offset[k] % 64, 0);
	assert_true(pw->offset[k] + pw->nbytes[k] <= si->size);
	map = mmap(NULL, si->size, PROT_READ, MAP_SHARED, r->fds[pw->segment[k]], 0);
	assert_true(map != MAP_FAILED);
	for (uint64_t e = 0; e < pw->nbytes[k] / 4; e++) {
		uint32_t bits;

		memcpy(&bits, map + pw->offset[k] + 4 * e, 4);
		if (ref_f32_from_bits(bits) != pattern_value(e, seed))
			fail_msg("weight %zu element %llu: %g, want %g", k, (unsigned long long)e,
				 (double)ref_f32_from_bits(bits), (double)pattern_value(e, seed));
	}
	munmap(map, si->size);
}

/*
 * One unit, both ways: a UnitEntry per tensor, and one UnitEntry followed by four column entries
 * over two checkpoints (one tensor named unlike its slot, one slot declared) and two aliases.
 * The columns' weights are described exactly as the messages' are (same handles, segments,
 * offsets, digests, keys: nothing is made twice), aliases point at their entry, and the bytes
 * behind an fd and offset are the checkpoint's.
 */
static void columns_answer_like_entries(void **state)
{
	int sm = conn(), sc = conn();
	struct it_src_entry me[N_MSG + 1];
	Weightd__UnitEntry *mp[N_MSG + 1];
	Weightd__Unit um = WEIGHTD__UNIT__INIT, uc = WEIGHTD__UNIT__INIT;
	Weightd__TensorEntries te = WEIGHTD__TENSOR_ENTRIES__INIT;
	Weightd__Alias a1 = WEIGHTD__ALIAS__INIT, a2 = WEIGHTD__ALIAS__INIT, *ap[2] = { &a1, &a2 };
	static const char names[] = "model.layers.0.input_layernorm.weight\0emb\0"
				    "model.layers.0.self_attn.q_proj.weight\0b";
	static const char tensors[] = "\0model.embed_tokens.weight\0\0b";
	char *ckpts[] = { "tiny", "other" }, *dtypes[] = { "F16" };
	uint32_t ck[] = { 0, 0, 0, 1 }, dt[] = { 0, 0, 1, 0 }, nd[] = { 0, 0, 2, 0 };
	uint64_t dims[] = { 64, 64 };
	struct it_src_entry first;
	Weightd__UnitEntry *fp = &first.e;
	struct reply rm, rc;
	const Weightd__UnitReply *ur;
	const Weightd__PackedWeights *pw;

	(void)state;
	/* the same tensors, one UnitEntry each ("b" of "other" last) */
	for (size_t i = 0; i < N_MSG; i++) {
		it_src_entry(&me[i], TENSOR[i], "tiny", TENSOR[i]);
		mp[i] = &me[i].e;
	}
	it_src_entry(&me[N_MSG], "b", "other", "b");
	mp[N_MSG] = &me[N_MSG].e;
	um.n_entries = N_MSG + 1;
	um.entries = mp;
	rm = materialize(sm, 2, &um);
	assert_int_equal(rm.resp->body_case, WEIGHTD__RESPONSE__BODY_MATERIALIZE);
	assert_non_null(rm.resp->materialize->packed);
	assert_int_equal(rm.resp->materialize->n_weights, 0);
	assert_int_equal(rm.resp->materialize->packed->n_handle, N_MSG + 1);

	/* columns */
	it_src_entry(&first, "norm", "tiny", "model.norm.weight");
	first.e.check_slot = 1;
	first.e.dtype = "F32";
	first.e.n_shape = 1;
	first.e.shape = dims;
	te.n_checkpoints = 2;
	te.checkpoints = ckpts;
	te.names.data = (uint8_t *)names;
	te.names.len = sizeof(names);
	te.tensors.data = (uint8_t *)tensors;
	te.tensors.len = sizeof(tensors);
	te.n_checkpoint = 4;
	te.checkpoint = ck;
	te.n_dtypes = 1;
	te.dtypes = dtypes;
	te.n_dtype = te.n_ndim = 4;
	te.dtype = dt;
	te.ndim = nd;
	te.n_dims = 2;
	te.dims = dims;
	a1.name = "q_alias";
	a1.target = "model.layers.0.self_attn.q_proj.weight";
	a2.name = "q_alias2";
	a2.target = "q_alias";
	uc.n_entries = 1;
	uc.entries = &fp;
	uc.tensors = &te;
	uc.n_aliases = 2;
	uc.aliases = ap;
	rc = materialize(sc, 3, &uc);
	if (rc.resp->error)
		fail_msg("refused: %s", rc.resp->error->message);
	ur = rc.resp->materialize;
	pw = ur->packed;
	assert_non_null(pw);
	assert_int_equal(ur->n_weights, 0);
	assert_int_equal(ur->bytes_read, 0); /* everything was made for the unit of messages */
	assert_int_equal(pw->n_handle, 5);
	assert_int_equal(pw->n_segment, 5);
	assert_int_equal(pw->n_offset, 5);
	assert_int_equal(pw->n_nbytes, 5);
	assert_int_equal(pw->n_generation, 5);
	assert_int_equal(pw->n_dtype, 5);
	assert_int_equal(pw->n_ndim, 5);
	assert_int_equal(pw->digest_algorithm.len, 5);
	assert_int_equal(pw->digests.len, 5 * 32);
	assert_int_equal(pw->keys.len, 5 * 32);
	assert_int_equal(ur->n_segments, rc.nfds);
	for (size_t i = 0; i < ur->n_segments; i++)
		assert_int_equal(ur->segments[i]->fd_index, i);
	/* entry 0 the UnitEntry, then the columns in order */
	for (size_t k = 0; k <= N_MSG; k++)
		same_weight(ur, k, rm.resp->materialize, k);
	/* both aliases resolve to the q_proj column entry (index 1 + 2) */
	assert_int_equal(pw->n_alias_owner, 2);
	assert_int_equal(pw->alias_owner[0], 3);
	assert_int_equal(pw->alias_owner[1], 3);
	/* the bytes: input_layernorm is tensor 1 of the sample (values, seed 1), "b" seed 5 */
	check_f32_values(&rc, 1, 1);
	check_f32_values(&rc, 4, 5);
	check_f32_values(&rc, 0, 8);
	/* entries whose segments alternate: each segment once in the reply, each entry pointing at
	 * its own (the weights are those of the unit of messages) */
	{
		static const size_t pick[] = { 3, N_MSG, 0, N_MSG, 1 };
		Weightd__UnitEntry *ap_[5];
		Weightd__Unit ua = WEIGHTD__UNIT__INIT;
		struct it_src_entry ae[5];
		const Weightd__UnitReply *ura;
		struct reply ra;
		size_t distinct = 0;

		static const char *const name[] = { "alt0", "alt1", "alt2", "alt3", "alt4" };

		for (size_t k = 0; k < 5; k++) {
			it_src_entry(&ae[k], name[k], pick[k] == N_MSG ? "other" : "tiny",
				     pick[k] == N_MSG ? "b" : TENSOR[pick[k]]);
			ap_[k] = &ae[k].e;
		}
		ua.n_entries = 5;
		ua.entries = ap_;
		ra = materialize(sm, 4, &ua);
		if (ra.resp->error)
			fail_msg("refused: %s", ra.resp->error->message);
		ura = ra.resp->materialize;
		for (size_t k = 0; k < 5; k++)
			same_weight(ura, k, rm.resp->materialize, pick[k]);
		for (size_t i = 0; i < rm.resp->materialize->n_segments; i++)
			for (size_t k = 0; k < 5; k++)
				if (rm.resp->materialize->packed->segment[pick[k]] == i) {
					distinct++;
					break;
				}
		assert_true(distinct > 1); /* one per checkpoint: segments pack one source's weights */
		assert_int_equal(ura->n_segments, distinct);
		assert_int_equal(ra.nfds, distinct);
		reply_free(&ra);
	}
	reply_free(&rm);
	reply_free(&rc);
	close(sm);
	close(sc);
}

/* One refused columns request: the code, the words, the slot, and nothing made. */
static void expect_refused(int sock, Weightd__Unit *u, int code, const char *words, const char *slot)
{
	static uint64_t id = 100;
	uint64_t before = daemon_weights();
	struct reply r = materialize(sock, ++id, u);

	if (!r.resp->error)
		fail_msg("accepted; expected \"%s\"", words);
	assert_int_equal(r.resp->error->code, code);
	if (!strstr(r.resp->error->message, words))
		fail_msg("the message does not say \"%s\": %s", words, r.resp->error->message);
	if (slot)
		assert_string_equal(r.resp->error->slot, slot);
	assert_int_equal(r.nfds, 0);
	reply_free(&r);
	assert_int_equal(daemon_weights(), before);
}

/*
 * Columns that do not add up, each refused with invalid-argument saying which column (and entry)
 * is wrong; a limit counted over entries and columns together; a declared slot that does not
 * match; an unknown checkpoint named by its first entry; a name used by an entry and a column.
 * Nothing is made, and the connection then serves a good unit.
 */
static void bad_columns_are_refused_by_name(void **state)
{
	int s3 = conn();
	Weightd__Unit u = WEIGHTD__UNIT__INIT;
	Weightd__TensorEntries te;
	char *ckpts[] = { "other", "tiny" }, *nowhere[] = { "nowhere" }, *dtypes[] = { "F32" };
	uint32_t ck2[] = { 0, 2 }, dt2[] = { 1, 3 }, dt_ok[] = { 1, 0 }, nd1[] = { 1, 0 },
		 nd_under[] = { 0, 1 }, nd_many[] = { 9, 0 };
	uint64_t dims1[] = { 8 }, dims_bad[] = { 9 };
	char many[MAX_ENTRIES * 4 + 8];
	struct it_src_entry dup;
	Weightd__UnitEntry *dp = &dup.e;
	size_t at = 0;

	(void)state;
	u.tensors = &te;
#define RESET(names_)                                                                             \
	do {                                                                                      \
		weightd__tensor_entries__init(&te);                                               \
		te.names.data = (uint8_t *)(names_);                                              \
		te.names.len = sizeof(names_);                                                    \
		te.n_checkpoints = 1;                                                             \
		te.checkpoints = ckpts;                                                           \
	} while (0)

	RESET("a\0b");
	te.names.len--; /* "b" not ended */
	expect_refused(s3, &u, WEIGHTD__ERROR_CODE__ERR_INVALID_ARGUMENT,
		       "unit tensors: the entry names do not end with a NUL byte", NULL);
	RESET("a\0b");
	te.n_checkpoints = 0;
	expect_refused(s3, &u, WEIGHTD__ERROR_CODE__ERR_INVALID_ARGUMENT,
		       "2 entries name no checkpoint", NULL);
	RESET("a\0b");
	te.tensors.data = (uint8_t *)"a";
	te.tensors.len = 2;
	expect_refused(s3, &u, WEIGHTD__ERROR_CODE__ERR_INVALID_ARGUMENT,
		       "1 tensor names for 2 entries", NULL);
	RESET("a\0b");
	te.checkpoint = ck2;
	te.n_checkpoint = 1;
	expect_refused(s3, &u, WEIGHTD__ERROR_CODE__ERR_INVALID_ARGUMENT,
		       "1 checkpoint indices for 2 entries", NULL);
	RESET("a\0b");
	te.n_checkpoints = 2;
	te.checkpoint = ck2;
	te.n_checkpoint = 2;
	expect_refused(s3, &u, WEIGHTD__ERROR_CODE__ERR_INVALID_ARGUMENT,
		       "entry 1 (\"b\") has checkpoint index 2; it must be below 2", "b");
	RESET("a\0b");
	te.dtypes = dtypes;
	te.n_dtypes = 1;
	te.dtype = dt2;
	te.n_dtype = 2;
	te.ndim = nd1;
	te.n_ndim = 2;
	te.dims = dims1;
	te.n_dims = 1;
	expect_refused(s3, &u, WEIGHTD__ERROR_CODE__ERR_INVALID_ARGUMENT,
		       "entry 1 (\"b\") has dtype index + 1 3; it must be below 2", "b");
	te.dtype = dt_ok;
	te.ndim = nd_under;
	expect_refused(s3, &u, WEIGHTD__ERROR_CODE__ERR_INVALID_ARGUMENT,
		       "entry 1 (\"b\") has undeclared dtype and rank 1", "b");
	te.ndim = nd_many;
	expect_refused(s3, &u, WEIGHTD__ERROR_CODE__ERR_INVALID_ARGUMENT,
		       "entry 0 (\"a\") has rank 9; it must be below 9", "a");
	te.ndim = nd1;
	te.n_dims = 0;
	expect_refused(s3, &u, WEIGHTD__ERROR_CODE__ERR_INVALID_ARGUMENT,
		       "the declared ranks add up to 1 but 0 dimensions came", NULL);
	te.n_ndim = 1;
	te.n_dims = 1;
	expect_refused(s3, &u, WEIGHTD__ERROR_CODE__ERR_INVALID_ARGUMENT,
		       "1 declared ranks for 2 declared dtypes", NULL);
	/* declared, consistent, but not what the tensor is: "a" of other is F32 [8] */
	te.n_ndim = 2;
	te.dims = dims_bad;
	expect_refused(s3, &u, WEIGHTD__ERROR_CODE__ERR_SLOT_MISMATCH,
		       "slot \"a\" is declared F32 [9] but its recipe gives F32 [8]", "a");
	weightd__tensor_entries__init(&te);
	te.checkpoint = ck2;
	te.n_checkpoint = 2;
	expect_refused(s3, &u, WEIGHTD__ERROR_CODE__ERR_INVALID_ARGUMENT,
		       "columns came but no entry names", NULL);
	/* an unknown checkpoint, named by the slot that reads it first */
	RESET("a\0b");
	te.checkpoints = nowhere;
	expect_refused(s3, &u, WEIGHTD__ERROR_CODE__ERR_UNKNOWN_SOURCE, "nowhere", "a");
	/* a name both an entry and a column entry */
	RESET("a\0b");
	it_src_entry(&dup, "b", "other", "b");
	u.entries = &dp;
	u.n_entries = 1;
	expect_refused(s3, &u, WEIGHTD__ERROR_CODE__ERR_DUPLICATE_NAME, "\"b\"", "b");
	/* the limit counts entries and columns together: 1 + 64 > 64 */
	for (int i = 0; i < MAX_ENTRIES; i++)
		at += (size_t)snprintf(many + at, sizeof(many) - at, "c%d", i) + 1;
	weightd__tensor_entries__init(&te);
	te.names.data = (uint8_t *)many;
	te.names.len = at;
	te.n_checkpoints = 1;
	te.checkpoints = ckpts;
	{
		struct reply r = materialize(s3, 50, &u);

		assert_non_null(r.resp->error);
		assert_int_equal(r.resp->error->code, WEIGHTD__ERROR_CODE__ERR_LIMIT_EXCEEDED);
		assert_non_null(strstr(r.resp->error->message, "the unit has 65 entries"));
		assert_non_null(strstr(r.resp->error->message, "max_unit_entries"));
		assert_int_equal(r.resp->error->expected, MAX_ENTRIES);
		assert_int_equal(r.resp->error->actual, MAX_ENTRIES + 1);
		reply_free(&r);
	}
	/* and the connection serves a good columns unit */
	u.n_entries = 0;
	u.entries = NULL;
	RESET("a\0b");
	{
		struct reply r = materialize(s3, 51, &u);

		if (r.resp->error)
			fail_msg("refused: %s", r.resp->error->message);
		assert_int_equal(r.resp->materialize->packed->n_handle, 2);
		check_f32_values(&r, 1, 5);
		reply_free(&r);
	}
#undef RESET
	close(s3);
}

TEST_MAIN(setup, fixture_cleanup, cmocka_unit_test(columns_answer_like_entries),
	  cmocka_unit_test(bad_columns_are_refused_by_name))
