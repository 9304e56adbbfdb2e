/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_health.c - weightctl health: the answer a liveness, readiness or startup probe wants, as an
 * exit code with the reason printed. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weightctl.h"

#define HEALTH_MAX_TIMEOUT 3600u

int parse_health(struct cmd_args *args)
{
	struct health_args *h = &args->health;
	bool live = false, ready = false;

	h->timeout = 10;
	for (int i = 1; i < args->argc; i++) {
		const char *a = args->argv[i];
		char *end;
		unsigned long v;

		if (strcmp(a, "--live") == 0) {
			live = true;
		} else if (strcmp(a, "--ready") == 0) {
			ready = true;
		} else if (strcmp(a, "--timeout") == 0) {
			if (i + 1 >= args->argc)
				return output_usage_error("--timeout needs a number of seconds");
			v = strtoul(args->argv[++i], &end, 10);
			if (*end || !args->argv[i][0] || args->argv[i][0] == '-' ||
			    v > HEALTH_MAX_TIMEOUT)
				return output_usage_error(
					"--timeout takes 0 to %u seconds, not \"%s\"",
					HEALTH_MAX_TIMEOUT, args->argv[i]);
			h->timeout = (unsigned)v;
		} else {
			return output_usage_error("health: unknown argument \"%s\"", a);
		}
	}
	if (live == ready)
		return output_usage_error("health takes one of --live and --ready");
	h->ready = ready;
	return 0;
}

static bool json_out;

/* Say the verdict (stdout, or JSON) and return its exit code. */
static int verdict(bool ready_probe, bool ok, const char *why)
{
	const char *what = ready_probe ? "ready" : "live";

	if (json_out)
		return output_print_json(json_pack("{s:s, s:b, s:s}", "probe", what, "ok", ok,
						   "reason", why)) ?
			       EXIT_ERR :
			       (ok ? 0 : EXIT_ERR);
	printf("%s%s: %s\n", ok ? "" : "not ", what, why);
	return ok ? 0 : EXIT_ERR;
}

/* A daemon that does not answer in time is not live: said, and the probe fails (exit 1). */
static void on_alarm(int sig)
{
	static const char msg[] = "not live: weightd did not answer within --timeout\n";

	(void)sig;
	if (write(STDOUT_FILENO, msg, sizeof(msg) - 1) < 0) {
		/* nothing more to say */
	}
	_exit(EXIT_ERR);
}

/*
 * Live: the daemon accepts a connection and answers a status request (its main loop turns).
 * Ready: live, and every preload = yes checkpoint is resident and every required = yes one
 * admitted (the daemon decides; the reason names only what this client may see). Exit 0 or 1;
 * the probe's own timeout is --timeout (default 10 s), after which the answer is "not live".
 */
int cmd_health(const struct opts *o, weightd_client *unused, struct cmd_args *args)
{
	const struct health_args *h = &args->health;
	weightd_client *c = NULL;
	weightd_status *s = NULL;
	weightd_error err;
	char why[4096];
	int rc;

	(void)unused;
	json_out = o->json;
	if (h->timeout) {
		signal(SIGALRM, on_alarm);
		alarm(h->timeout);
	}
	if (weightd_connect(o->socket, "weightctl-health", &c, &err) < 0 ||
	    weightd_status_summary(c, &s, &err) < 0) {
		snprintf(why, sizeof(why), "weightd does not answer: %s",
			 err.message[0] ? err.message : weightd_code_name(err.code));
		weightd_close(c);
		verdict(h->ready, false, why);
		return EXIT_ERR;
	}
	alarm(0);
	if (!h->ready) {
		snprintf(why, sizeof(why),
			 "weightd %s answers (up %.0f s, %zu checkpoints, %llu "
			 "clients)",
			 s->server_version, (double)s->uptime_ms / 1000, s->n_sources,
			 (unsigned long long)s->clients);
		rc = verdict(false, true, why);
	} else if (!s->health_known) {
		snprintf(why, sizeof(why),
			 "weightd %s does not report readiness (older than this "
			 "weightctl)",
			 s->server_version);
		rc = verdict(true, false, why);
	} else if (s->ready) {
		size_t preloaded = 0, required = 0;

		for (size_t i = 0; i < s->n_sources; i++) {
			preloaded += s->source_health[i].preloaded;
			required += s->source_health[i].required;
		}
		snprintf(why, sizeof(why),
			 "%zu checkpoint%s preloaded and resident, %zu required "
			 "and admitted",
			 preloaded, preloaded == 1 ? "" : "s", required);
		rc = verdict(true, true, why);
	} else {
		rc = verdict(true, false, s->not_ready ? s->not_ready : "");
	}
	weightd_status_free(s);
	weightd_close(c);
	return rc;
}
