/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_fetch.c - weightctl get, preload and preflight: units built, materialized and checked. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checksum.h"
#include "weightctl.h"


/* Parse "AXIS:START:END" strictly. */
static bool parse_range(const char *s, uint32_t *axis, uint64_t *start, uint64_t *end)
{
	uint64_t v[3];
	const char *p = s;

	for (int i = 0; i < 3; i++) {
		char *e;

		if (*p < '0' || *p > '9')
			return false;
		errno = 0;
		v[i] = strtoull(p, &e, 10);
		if (errno || e == p || (i < 2 && *e != ':') || (i == 2 && *e != '\0'))
			return false;
		p = e + 1;
	}
	if (v[0] > UINT32_MAX)
		return false;
	*axis = (uint32_t)v[0];
	*start = v[1];
	*end = v[2];
	return true;
}

struct got {
	const char *name;
	const weightd_weight *w;
	const void *data;
	char digest[2 * WEIGHTD_DIGEST_LEN + 1];  /* the daemon's, as checked here */
	char sha[2 * WEIGHTD_DIGEST_LEN + 1];     /* --sha256 */
};

/*
 * Hash the mapped bytes independently of the daemon, with the algorithm and chunk composition
 * it reported, and compare with its digest: a mismatch means the memory is not what weightd
 * says it filled. With sha256, also the plain SHA-256 of the bytes (what sha256sum gives).
 */
static int verify(struct got *g, bool sha256)
{
	weightd_digest_algorithm alg = weightd_weight_digest_algorithm(g->w);
	const uint8_t *reported = weightd_weight_digest(g->w);
	size_t len = weightd_weight_digest_len(g->w), n = weightd_weight_nbytes(g->w);
	uint8_t mine[CHECKSUM_MAX];
	char theirs[2 * WEIGHTD_DIGEST_LEN + 1];

	if (sha256) {
		if (checksum_sha256(g->data, n, mine) < 0)
			return output_fail("cannot compute SHA-256 of %s", g->name);
		checksum_hex(mine, 32, g->sha);
	}
	if (!len || checksum_len(alg) != len)
		return output_fail("weightd reported no digest for %s", g->name);
	if (checksum_content(alg, g->data, n, mine) < 0)
		return output_fail("cannot compute the %s digest of %s",
				   weightd_digest_algorithm_name(alg), g->name);
	checksum_hex(mine, len, g->digest);
	checksum_hex(reported, len, theirs);
	if (memcmp(reported, mine, len) != 0)
		return output_fail(
			"digest mismatch for %s: weightd reported %s %s but the mapped bytes hash "
			"to %s",
			g->name, weightd_digest_algorithm_name(alg), theirs, g->digest);
	return 0;
}

static int print_got(const struct opts *o, struct got *gs, size_t n, bool sha256)
{
	if (o->json) {
		json_t *a = json_array();

		for (size_t i = 0; i < n; i++) {
			const weightd_weight *w = gs[i].w;
			char *key = output_fmt_hex(weightd_weight_key(w), WEIGHTD_DIGEST_LEN);
			json_t *x = json_pack(
				"{s:s, s:s, s:o, s:I, s:s, s:s, s:b, s:s, s:I, s:I}", "name",
				gs[i].name, "dtype", weightd_weight_dtype(w), "shape",
				output_json_shape(weightd_weight_shape(w), weightd_weight_ndim(w)),
				"bytes", (json_int_t)weightd_weight_nbytes(w), "digest",
				gs[i].digest, "digest_algorithm",
				weightd_digest_algorithm_name(weightd_weight_digest_algorithm(w)),
				"verified", 1, "key", key, "handle",
				(json_int_t)weightd_weight_handle(w), "generation",
				(json_int_t)weightd_weight_generation(w));

			if (sha256)
				json_object_set_new(x, "sha256", json_string(gs[i].sha));
			json_array_append_new(a, x);
			free(key);
		}
		return output_print_json(json_pack("{s:o}", "weights", a));
	}
	static const char *const head[] = { "NAME", "DTYPE", "SHAPE", "BYTES", "DIGEST", "SHA256" };
	static const bool num[] = { 0, 0, 0, 1, 0, 0 };
	struct table t = { .ncols = sha256 ? 6 : 5, .head = head, .numeric = num };

	for (size_t i = 0; i < n; i++) {
		const weightd_weight *w = gs[i].w;
		char *dg = output_fmt(
			"%s:%s (verified)",
			weightd_digest_algorithm_name(weightd_weight_digest_algorithm(w)),
			gs[i].digest);

		if (sha256)
			output_table_row(
				&t, output_strdup(gs[i].name),
				output_strdup(weightd_weight_dtype(w)),
				output_fmt_shape(weightd_weight_shape(w), weightd_weight_ndim(w)),
				output_fmt("%" PRIu64, weightd_weight_nbytes(w)), dg,
				output_strdup(gs[i].sha));
		else
			output_table_row(
				&t, output_strdup(gs[i].name),
				output_strdup(weightd_weight_dtype(w)),
				output_fmt_shape(weightd_weight_shape(w), weightd_weight_ndim(w)),
				output_fmt("%" PRIu64, weightd_weight_nbytes(w)), dg);
	}
	output_table_print(&t);
	return 0;
}

/* A unit of the given tensors of one checkpoint, slots named after the tensors (sel: NULL for
 * full tensors; only with one tensor). 0 or a negative code with err set. */
static int tensor_unit(weightd_client *c, const char *checkpoint, char *const *tensors, size_t n,
		       const weightd_selection *sel, weightd_unit **ret, weightd_error *err)
{
	weightd_unit *u = NULL;
	int r;

	r = weightd_unit_new(c, &u, err);
	for (size_t i = 0; r >= 0 && i < n; i++) {
		r = weightd_unit_slot(u, tensors[i], NULL, NULL, 0, NULL, err);
		if (r >= 0)
			r = weightd_unit_set_tensor(u, tensors[i], checkpoint, tensors[i], sel, err);
	}
	if (r < 0) {
		weightd_unit_free(u);
		return r;
	}
	*ret = u;
	return 0;
}

static int get_tensor(const struct opts *o, weightd_client *c, const struct get_args *a)
{
	weightd_selection *sel = NULL;
	weightd_unit *u = NULL;
	weightd_error err;
	struct got g = { 0 };
	char *label = NULL, *tensor = (char *)a->tensor;
	int rc = EXIT_ERR;

	if (a->has_range && weightd_selection_range(a->axis, a->start, a->end, &sel, &err) < 0)
		return output_fail_err(&err);
	if (tensor_unit(c, a->checkpoint, &tensor, 1, sel, &u, &err) < 0 ||
	    run_unit(c, u, &err) < 0 || weightd_unit_validate(u, &err) < 0) {
		rc = output_fail_err(&err);
		goto out;
	}
	label = a->has_range ? output_fmt("%s:%s[axis %u: %" PRIu64 "..%" PRIu64 "]", a->checkpoint,
					  a->tensor, a->axis, a->start, a->end) :
			       output_fmt("%s:%s", a->checkpoint, a->tensor);
	g.name = label;
	g.w = weightd_unit_weight(u, a->tensor);
	g.data = weightd_unit_data(u, a->tensor);
	if (verify(&g, a->sha256) != 0)
		goto out;
	if (a->out && output_write_file(a->out, g.data, weightd_weight_nbytes(g.w)) != 0)
		goto out;
	rc = print_got(o, &g, 1, a->sha256) == 0 ? 0 : EXIT_ERR;
out:
	weightd_unit_free(u);
	weightd_selection_free(sel);
	free(label);
	return rc;
}

static int load_unit(weightd_client *c, const char *path, weightd_unit **ret)
{
	weightd_error err;
	char *text = NULL;
	size_t len = 0;
	int r;

	if (output_read_file(path, &text, &len) != 0)
		return EXIT_ERR;
	r = weightd_unit_from_json(c, text, len, ret, &err);
	free(text);
	if (r < 0)
		return output_fail("%s: %s", path, err.message);
	return 0;
}

static int get_recipe(const struct opts *o, weightd_client *c, const char *path, const char *out,
		      bool sha256)
{
	weightd_unit *u = NULL;
	weightd_error err;
	struct got *gs = NULL;
	size_t n;
	int rc = EXIT_ERR;

	if (load_unit(c, path, &u) != 0)
		return EXIT_ERR;
	n = weightd_unit_slot_count(u);
	if (out && n != 1) {
		weightd_unit_free(u);
		return output_usage_error("--out writes one weight; %s has %zu slots", path, n);
	}
	if (run_unit(c, u, &err) < 0 || weightd_unit_validate(u, &err) < 0) {
		rc = output_fail("%s: %s", path, err.message);
		goto out;
	}
	gs = calloc(n, sizeof(*gs));
	if (!gs) {
		rc = output_fail("out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		gs[i].name = weightd_unit_slot_name(u, i);
		gs[i].w = weightd_unit_weight(u, gs[i].name);
		gs[i].data = weightd_unit_data(u, gs[i].name);
		if (verify(&gs[i], sha256) != 0)
			goto out;
	}
	if (out && output_write_file(out, gs[0].data, weightd_weight_nbytes(gs[0].w)) != 0)
		goto out;
	rc = print_got(o, gs, n, sha256) == 0 ? 0 : EXIT_ERR;
out:
	free(gs);
	weightd_unit_free(u);
	return rc;
}

/* Parse get's arguments completely (before connecting): 0 or EXIT_USAGE. */
int parse_get(struct cmd_args *args)
{
	static const struct option longopts[] = {
		{ "range", required_argument, NULL, 'r' },
		{ "out", required_argument, NULL, 'o' },
		{ "recipe", required_argument, NULL, 'R' },
		{ "sha256", no_argument, NULL, 'S' },
		{ NULL, 0, NULL, 0 },
	};
	struct get_args *g = &args->get;
	int ch, argc = args->argc;
	char **argv = args->argv;

	optind = 0;   /* 0, not 1: re-initialises GNU getopt, whose first pass used "+" */
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'S': g->sha256 = true; break;
		case 'r': g->range = optarg; break;
		case 'o': g->out = optarg; break;
		case 'R': g->recipe = optarg; break;
		default:
			return output_usage_error("get: unknown option or missing value: %s",
						  argv[optind - 1]);
		}
	}
	if (g->recipe) {
		if (g->range || optind != argc)
			return output_usage_error(
				"get --recipe FILE takes no CHECKPOINT, TENSOR or --range");
		return 0;
	}
	if (argc - optind != 2)
		return output_usage_error(
			"get needs CHECKPOINT and TENSOR (or --recipe FILE.json)");
	g->checkpoint = argv[optind];
	g->tensor = argv[optind + 1];
	if (g->range) {
		if (!parse_range(g->range, &g->axis, &g->start, &g->end))
			return output_usage_error(
				"--range takes AXIS:START:END (non-negative integers), "
				"not \"%s\"",
				g->range);
		if (g->start >= g->end)
			return output_usage_error("--range %s is empty: START must be below END",
						  g->range);
		g->has_range = true;
	}
	return 0;
}

int cmd_get(const struct opts *o, weightd_client *c, struct cmd_args *args)
{
	const struct get_args *g = &args->get;

	if (g->recipe)
		return get_recipe(o, c, g->recipe, g->out, g->sha256);
	return get_tensor(o, c, g);
}

/* Parse preload's arguments completely (before connecting): 0 or EXIT_USAGE. */
int parse_preload(struct cmd_args *args)
{
	static const struct option longopts[] = {
		{ "recipe", required_argument, NULL, 'R' },
		{ NULL, 0, NULL, 0 },
	};
	struct preload_args *pa = &args->preload;
	int ch, argc = args->argc;
	char **argv = args->argv;

	optind = 0;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (ch != 'R')
			return output_usage_error("preload: unknown option or missing value: %s",
						  argv[optind - 1]);
		pa->recipe = optarg;
	}
	if (pa->recipe) {
		if (optind != argc)
			return output_usage_error(
				"preload --recipe FILE takes no CHECKPOINT or TENSOR");
		return 0;
	}
	if (optind >= argc)
		return output_usage_error(
			"preload needs CHECKPOINT [TENSOR...] (or --recipe FILE.json)");
	pa->checkpoint = argv[optind];
	pa->tensors = argv + optind + 1;
	pa->n_tensors = (size_t)(argc - optind - 1);
	return 0;
}

/*
 * Materialize a unit and release it at once: the daemon keeps the weights cached (unreferenced,
 * first to go when the budget needs room), so the next client to ask reads nothing.
 */
/* qsort order of the first uint64_t of each element */
static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int cmd_preload(const struct opts *o, weightd_client *c, struct cmd_args *args)
{
	const struct preload_args *pa = &args->preload;
	weightd_description *d = NULL;
	weightd_unit *u = NULL;
	weightd_error err;
	char **names = NULL, *b = NULL, *rd = NULL;
	uint64_t *handles = NULL, bytes = 0, bytes_read;
	size_t n, nw = 0;
	int rc = EXIT_ERR;

	if (pa->recipe) {
		if (load_unit(c, pa->recipe, &u) != 0)
			return EXIT_ERR;
	} else if (pa->n_tensors) {
		if (tensor_unit(c, pa->checkpoint, pa->tensors, pa->n_tensors, NULL, &u, &err) < 0)
			return output_fail_err(&err);
	} else {
		if (weightd_describe(c, pa->checkpoint, &d, &err) < 0)
			return output_fail_err(&err);
		if (d->n_tensors == 0) {
			rc = output_fail("checkpoint %s has no tensors", pa->checkpoint);
			goto out;
		}
		names = calloc(d->n_tensors, sizeof(*names));
		if (!names) {
			rc = output_fail("out of memory");
			goto out;
		}
		for (size_t i = 0; i < d->n_tensors; i++)
			names[i] = (char *)d->tensors[i].name;
		if (tensor_unit(c, pa->checkpoint, names, d->n_tensors, NULL, &u, &err) < 0) {
			rc = output_fail_err(&err);
			goto out;
		}
	}
	if (run_unit(c, u, &err) < 0) {
		rc = pa->recipe ? output_fail("%s: %s", pa->recipe, err.message) :
				  output_fail_err(&err);
		goto out;
	}
	/* distinct weights (aliases and identical recipes share one): sorted by handle, each
	 * counted once (n log n: a MoE checkpoint has 100,000 slots) */
	n = weightd_unit_slot_count(u);
	handles = calloc(n ? 2 * n : 1, sizeof(*handles));
	if (!handles) {
		rc = output_fail("out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		const weightd_weight *w = weightd_unit_weight(u, weightd_unit_slot_name(u, i));

		handles[2 * i] = weightd_weight_handle(w);
		handles[2 * i + 1] = weightd_weight_nbytes(w);
	}
	qsort(handles, n, 2 * sizeof(*handles), cmp_u64);
	for (size_t i = 0; i < n; i++)
		if (i == 0 || handles[2 * i] != handles[2 * (i - 1)]) {
			nw++;
			bytes += handles[2 * i + 1];
		}
	bytes_read = weightd_unit_bytes_read(u);
	if (o->json) {
		rc = output_print_json(json_pack("{s:I, s:I, s:I}", "weights", (json_int_t)nw,
						 "bytes", (json_int_t)bytes, "bytes_read",
						 (json_int_t)bytes_read)) ?
			     EXIT_ERR :
			     0;
		goto out;
	}
	b = output_fmt_bytes(bytes);
	rd = output_fmt_bytes(bytes_read);
	printf("preloaded %zu weight%s (%s); %s read from checkpoints\n", nw, nw == 1 ? "" : "s", b,
	       rd);
	rc = 0;
out:
	weightd_unit_free(u);
	weightd_description_free(d);
	free(names);
	free(handles);
	free(b);
	free(rd);
	return rc;
}

int cmd_preflight(const struct opts *o, weightd_client *c, struct cmd_args *args)
{
	const char *path = args->argv[1];
	weightd_unit *u = NULL;
	weightd_inflight *f = NULL;
	weightd_preflight *p = NULL;
	weightd_error err;

	if (load_unit(c, path, &u) != 0)
		return EXIT_ERR;
	if (weightd_unit_preflight(u, &f, &err) < 0 || weightd_preflight_finish(f, &p, &err) < 0) {
		weightd_unit_free(u);
		return output_fail("%s: %s", path, err.message);
	}
	weightd_unit_free(u);
	if (o->json) {
		json_t *a = json_array();

		for (size_t i = 0; i < p->count; i++) {
			const weightd_output_info *x = &p->outputs[i];
			char *key = x->key ? output_fmt_hex(x->key, WEIGHTD_DIGEST_LEN) :
					     output_strdup("");

			json_array_append_new(a, json_pack("{s:s, s:s, s:o, s:I, s:s, s:s}", "name",
							   x->name, "dtype", x->dtype, "shape",
							   output_json_shape(x->shape, x->ndim),
							   "bytes", (json_int_t)x->nbytes,
							   "alias_of", x->alias_of, "key", key));
			free(key);
		}
		weightd_preflight_free(p);
		return output_print_json(json_pack("{s:o}", "outputs", a));
	}
	static const char *const head[] = { "NAME", "DTYPE", "SHAPE", "BYTES", "ALIAS OF" };
	static const bool num[] = { 0, 0, 0, 1, 0 };
	struct table t = { .ncols = 5, .head = head, .numeric = num };

	for (size_t i = 0; i < p->count; i++) {
		const weightd_output_info *x = &p->outputs[i];

		output_table_row(&t, output_strdup(x->name), output_strdup(x->dtype),
				 output_fmt_shape(x->shape, x->ndim),
				 output_fmt("%" PRIu64, x->nbytes),
				 output_strdup(x->alias_of[0] ? x->alias_of : "-"));
	}
	output_table_print(&t);
	weightd_preflight_free(p);
	return 0;
}

