/* SPDX-License-Identifier: Apache-2.0 */
/* test_hostile_view.c - what one uid can learn or make the daemon spend through requests it is
 * allowed to send: status, list, describe, metrics and events of checkpoints it may not read;
 * recipe temporaries outside the shared-memory budget. Needs root (the other uid is 65534). */
#include "fixture.h"
#include "hostile.h"

/* Rewrite a checkpoint under the same path (new file, renamed into place): a new generation. */
static void rewrite(const char *name, const char *spec)
{
	char path[512], tmp[600];

	harness_path(&H, name, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	it_fixture("safetensors %s %s", tmp, spec);
	chmod(tmp, 0644);
	assert_int_equal(rename(tmp, path), 0);
}

/*
 * Status used to show every checkpoint's path, weight labels and digests to any connected
 * uid, and subscribe("*") delivered events of checkpoints the subscriber may not read. Now uid
 * 65534 sees nothing of "secret" in status, list, metrics or events, while root sees it all.
 */
static void other_uids_see_only_what_they_may_read(void **state)
{
	struct hostile_base base;
	struct hostile_chan ch;
	char line[4096], secret_path[512];
	weightd_client *root;
	weightd_weight *held;
	weightd_status *st;
	pid_t pid;

	(void)state;
	hostile_start(&H, NULL);
	base = hostile_baseline(&H);
	harness_path(&H, "secret.safetensors", secret_path, sizeof(secret_path));
	root = it_connect(&H);
	held = it_get_ok(root, "secret", "s0"); /* a secret weight is resident and held */
	pid = hostile_fork(&ch);
	if (pid == 0) {
		const char *all[] = { "*" }, *named[] = { "secret", "tiny" };
		weightd_client *c = NULL, *c2 = NULL;
		weightd_source_list *l = NULL;
		weightd_description *dsc = NULL;
		weightd_event_list *ev = NULL;
		weightd_error err;
		int tiny_events = 0;

		chan_child(&ch);
		hostile_become(UID_ATTACKER);
		if (weightd_connect(H.sock, "spy", &c, &err) < 0 ||
		    weightd_connect(H.sock, "spy2", &c2, &err) < 0)
			_exit(70);
		if (weightd_status_get(c, &st, &err) < 0)
			_exit(71);
		if (it_source(st, "secret") || it_source(st, "tiny") == NULL)
			_exit(72);
		for (size_t i = 0; i < st->n_weights; i++)
			if (strstr(st->weight_list[i].label, "secret") ||
			    strcmp(st->weight_list[i].source, "secret") == 0)
				_exit(73);
		weightd_status_free(st);
		if (weightd_list(c, &l, &err) < 0)
			_exit(74);
		for (size_t i = 0; i < l->count; i++)
			if (strcmp(l->sources[i].name, "secret") == 0)
				_exit(75);
		weightd_source_list_free(l);
		if (weightd_describe(c, "secret", &dsc, &err) == 0 ||
		    err.code != WEIGHTD_E_UNKNOWN_SOURCE)
			_exit(76);
		if (weightd_subscribe(c, all, 1, &err) < 0 || weightd_subscribe(c2, named, 2, &err) < 0)
			_exit(77);
		chan_say(ch.to_parent[1], "subscribed\n");
		if (!chan_hear(ch.to_child[0], line, sizeof(line)))
			_exit(78);
		/* both checkpoints changed and were reloaded: only tiny's events arrive */
		for (int k = 0; k < 2; k++) {
			weightd_client *x = k ? c2 : c;

			if (weightd_poll_events(x, 2000, &ev, &err) < 0)
				_exit(79);
			for (size_t i = 0; i < ev->count; i++) {
				if (strcmp(ev->events[i].checkpoint, "secret") == 0)
					_exit(80);
				tiny_events += strcmp(ev->events[i].checkpoint, "tiny") == 0;
			}
			weightd_event_list_free(ev);
			if (weightd_poll_events(x, 300, &ev, &err) < 0)
				_exit(81);
			for (size_t i = 0; i < ev->count; i++)
				if (strcmp(ev->events[i].checkpoint, "secret") == 0)
					_exit(82);
			weightd_event_list_free(ev);
		}
		chan_say(ch.to_parent[1], "tiny events %d\n", tiny_events);
		weightd_close(c);
		weightd_close(c2);
		_exit(0);
	}
	chan_parent(&ch);
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	/* status and metrics through weightctl as that uid: not a word of the secret checkpoint */
	{
		char *argv[] = { (char *)harness_weightctl(), "--socket", H.sock, "--json", "status",
				 NULL };
		char *margv[] = { (char *)harness_weightctl(), "--socket", H.sock, "metrics", NULL };
		static char out[1 << 16];

		assert_int_equal(harness_run(argv, out, sizeof(out), UID_ATTACKER), 0);
		assert_non_null(strstr(out, "tiny"));
		assert_null(strstr(out, "secret"));
		assert_int_equal(harness_run(margv, out, sizeof(out), UID_ATTACKER), 0);
		assert_non_null(strstr(out, "weightd_clients"));
		assert_null(strstr(out, "secret"));
		/* root sees it: the filter is by uid, not a blanket omission */
		assert_int_equal(harness_run(argv, out, sizeof(out), 0), 0);
		assert_non_null(strstr(out, secret_path));
	}
	{
		const char *all[] = { "*" };
		weightd_event_list *ev = NULL;
		weightd_error err;
		int secret_events = 0;

		if (weightd_subscribe(root, all, 1, &err) < 0)
			fail_msg("subscribe: %s", err.message);
		/* same bytes, new files: a new generation of each */
		rewrite("secret.safetensors", "--seed 7 --tensor s0:U8:4096 --tensor s1:F32:128x128");
		rewrite("tiny.safetensors", "--tensor t0:U8:65536 --tensor t1:U8:65536 "
			"--tensor t2:U8:65536 --tensor t3:U8:65536 --tensor m0:F32:256x256 "
			"--tensor m1:F32:256x256");
		if (weightd_reload(root, &err) < 0)
			fail_msg("reload: %s", err.message);
		chan_say(ch.to_child[1], "reloaded\n");
		assert_int_equal(weightd_poll_events(root, 2000, &ev, &err), 0);
		for (size_t i = 0; i < ev->count; i++)
			secret_events += strcmp(ev->events[i].checkpoint, "secret") == 0;
		weightd_event_list_free(ev);
		assert_true(secret_events >= 1);
	}
	assert_true(chan_hear(ch.to_parent[0], line, sizeof(line)));
	assert_string_equal(line, "tiny events 2");
	hostile_reap(&ch, pid);
	weightd_release(held);
	weightd_close(root);
	st = it_wait_quiet(&H, 0, 0, 10000);
	weightd_status_free(st);
	hostile_back_to_base(&H, &base);
}

static int unit_json(weightd_client *c, const char *json, weightd_error *err)
{
	weightd_unit *u = NULL;
	int r = weightd_unit_from_json(c, json, strlen(json), &u, err);

	if (r == 0)
		r = weightd_unit_submit(u, err);
	if (r == 0)
		r = weightd_unit_validate(u, err);
	weightd_unit_free(u);
	return r;
}

#define T(m) "{\"op\":\"transpose\",\"perm\":[1,0],\"input\":{\"op\":\"source\"," \
	     "\"checkpoint\":\"tiny\",\"tensor\":\"" m "\"}}"

/*
 * Recipe temporaries (a transpose holds its whole input on the heap) used to be counted
 * nowhere. Now running jobs share max_temp: one transpose of 256 KiB fits in 300 KiB, two at
 * once do not, and the unit that asks for both fails whole with the figures; another uid is
 * served, and nothing stays reserved.
 */
static void recipe_temporaries_are_capped(void **state)
{
	struct hostile_base base;
	weightd_client *c;
	weightd_status *st;
	weightd_error err;
	pid_t pid;

	(void)state;
	pid = hostile_attack(&H, "max_temp = 300K\n", &base);
	if (pid == 0) {
		weightd_client *a = NULL;
		weightd_error e;

		hostile_become(UID_ATTACKER);
		if (weightd_connect(H.sock, "temp", &a, &e) < 0)
			_exit(90);
		if (unit_json(a, "{\"slots\":[{\"name\":\"a\",\"recipe\":" T("m0") "},"
				 "{\"name\":\"b\",\"recipe\":" T("m1") "}]}", &e) == 0)
			_exit(91);
		if (e.code != WEIGHTD_E_RESOURCE_EXHAUSTED ||
		    !strstr(e.message, "working memory") ||
		    !strstr(e.message, "raise `max_temp` in weightd.conf")) {
			fprintf(stderr, "temp: %s\n", e.message);
			_exit(92);
		}
		weightd_close(a);
		_exit(0);
	}
	it_wait_child_ok(pid);
	hostile_victim_served(&H);
	st = it_wait_quiet(&H, 0, 0, 10000);
	assert_int_equal(st->temp_bytes, 0);
	weightd_status_free(st);
	/* one at a time fits: the limit is on the sum of running jobs */
	c = it_connect(&H);
	if (unit_json(c, "{\"slots\":[{\"name\":\"a\",\"recipe\":" T("m0") "}]}", &err) < 0)
		fail_msg("one transpose: %s", err.message);
	weightd_close(c);
	hostile_back_to_base(&H, &base);
}

#define SRC(c, t) "{\"op\":\"source\",\"checkpoint\":\"" c "\",\"tensor\":\"" t "\"}"
#define MIX "{\"name\":\"mix\",\"recipe\":{\"op\":\"concat\",\"axis\":0,\"inputs\":[" \
	    SRC("tiny", "t0") "," SRC("secret", "s0") "]}}"

/* weightctl status --json as `uid`: does it mention `text`? */
static bool status_mentions(uid_t uid, const char *text)
{
	char *argv[] = { (char *)harness_weightctl(), "--socket", H.sock, "--json", "status", NULL };
	static char out[1 << 16];

	assert_int_equal(harness_run(argv, out, sizeof(out), uid), 0);
	assert_non_null(strstr(out, "tiny")); /* it did answer, with what the uid may see */
	return strstr(out, text) != NULL;
}

/*
 * A recipe may read several checkpoints: root makes "mix", concat(tiny:t0, secret:s0), beside
 * tiny:t1 in the same unit. Status used to decide who may see a weight and its segment by its
 * first checkpoint only, so uid 65534, allowed on tiny, saw mix's label, digest and segment.
 * Now a weight and its segment are shown only to uids allowed on every checkpoint it reads, also
 * after a restart re-adopts them (the state record names them all); materializing mix is
 * refused to that uid naming "secret"; and mix never shares a segment with weights of tiny
 * alone, so the segment of tiny:t1 the uid maps holds no byte of secret.
 */
static void recipes_spanning_checkpoints_are_shown_to_who_may_read_all(void **state)
{
	struct hostile_base base;
	weightd_client *root;
	weightd_unit *u = NULL;
	weightd_status *st;
	weightd_error err;
	uint64_t mix_seg, plain_seg;
	pid_t pid;
	bool found = false;

	(void)state;
	hostile_start(&H, NULL);
	base = hostile_baseline(&H);
	root = it_connect(&H);
	{
		const char *json = "{\"slots\":[" MIX ",{\"name\":\"plain\",\"recipe\":"
				   SRC("tiny", "t1") "}]}";

		if (weightd_unit_from_json(root, json, strlen(json), &u, &err) < 0 ||
		    weightd_unit_submit(u, &err) < 0 || weightd_unit_validate(u, &err) < 0)
			fail_msg("root's unit: %s", err.message);
	}
	mix_seg = weightd_weight_segment(weightd_unit_weight(u, "mix"));
	plain_seg = weightd_weight_segment(weightd_unit_weight(u, "plain"));
	assert_true(mix_seg != plain_seg);
	st = it_status(root); /* root sees mix's segment, named after both checkpoints */
	for (size_t i = 0; i < st->n_segments; i++)
		if (st->segment_list[i].id == mix_seg)
			found = strstr(st->segment_list[i].source, "tiny+secret") ||
				strstr(st->segment_list[i].source, "secret+tiny");
	assert_true(found);
	found = false;
	/* and the fresh weight itself names both, as after a restart, not only its first */
	for (size_t i = 0; i < st->n_weights; i++)
		if (st->weight_list[i].segment == mix_seg)
			found = !st->weight_list[i].adopted &&
				(strcmp(st->weight_list[i].source, "tiny+secret") == 0 ||
				 strcmp(st->weight_list[i].source, "secret+tiny") == 0);
	weightd_status_free(st);
	assert_true(found);
	found = false;
	assert_true(status_mentions(0, "secret"));
	assert_false(status_mentions(UID_ATTACKER, "secret"));
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		weightd_client *c = NULL;
		weightd_weight *w = NULL;
		weightd_error e;

		hostile_become(UID_ATTACKER);
		if (weightd_connect(H.sock, "mixer", &c, &e) < 0)
			_exit(70);
		if (unit_json(c, "{\"slots\":[" MIX "]}", &e) == 0 ||
		    e.code != WEIGHTD_E_UNKNOWN_SOURCE || !strstr(e.message, "secret")) {
			fprintf(stderr, "mixer: %s\n", e.message);
			_exit(71);
		}
		if (weightd_status_get(c, &st, &e) < 0)
			_exit(72);
		for (size_t i = 0; i < st->n_segments; i++)
			if (st->segment_list[i].id == mix_seg)
				_exit(73);
		for (size_t i = 0; i < st->n_weights; i++)
			if (st->weight_list[i].segment == mix_seg)
				_exit(74);
		weightd_status_free(st);
		/* the weight of tiny alone: a segment of its own, free of secret's bytes */
		if (it_get(c, "tiny", "t1", &w, &e) < 0 || weightd_weight_segment(w) != plain_seg)
			_exit(75);
		weightd_release(w);
		weightd_close(c);
		_exit(0);
	}
	it_wait_child_ok(pid);
	hostile_victim_served(&H);
	weightd_unit_free(u);
	weightd_close(root);
	hostile_back_to_base(&H, &base);

	/* re-adopted after a restart: the record names both checkpoints; still hidden */
	assert_int_equal(harness_stop(&H), 0);
	assert_int_equal(harness_start(&H), 0);
	st = it_status_of(&H);
	for (size_t i = 0; i < st->n_weights; i++)
		found |= strstr(st->weight_list[i].source, "secret") &&
			 strstr(st->weight_list[i].source, "tiny") && st->weight_list[i].adopted;
	weightd_status_free(st);
	assert_true(found);
	assert_true(status_mentions(0, "secret"));
	assert_false(status_mentions(UID_ATTACKER, "secret"));
	hostile_victim_served(&H);
}

TEST_MAIN_WATCHDOG(600, NULL, NULL, TEST(other_uids_see_only_what_they_may_read),
		   TEST(recipe_temporaries_are_capped),
		   TEST(recipes_spanning_checkpoints_are_shown_to_who_may_read_all))
