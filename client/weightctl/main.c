/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - weightctl, the command line of weightd: global options and the command table. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "weightctl.h"

static const char usage_text[] =
	"usage: weightctl [--socket PATH] [--admin-socket PATH] [--json] COMMAND [ARGS]\n"
	"       (the options may also follow the command; -- ends the options)\n"
	"\n"
	"commands:\n"
	"  list                                 sources weightd serves\n"
	"  describe CHECKPOINT                  a source's tensors and metadata\n"
	"  get CHECKPOINT TENSOR [--range AXIS:START:END] [--out FILE] [--sha256]\n"
	"                                       fetch a weight; print dtype, shape, bytes and its\n"
	"                                       digest checked against the mapped bytes (--sha256:\n"
	"                                       also the SHA-256 of those bytes)\n"
	"  get --recipe FILE.json [--out FILE] [--sha256]\n"
	"                                       the same for a recipe or a unit in JSON\n"
	"  preload CHECKPOINT [TENSOR...]       materialize tensors (default: all) and release them,\n"
	"                                       so they stay cached until the budget needs room\n"
	"  preload --recipe FILE.json           the same for a recipe or a unit in JSON\n"
	"  preflight FILE.json                  infer a recipe's or unit's outputs (reads nothing)\n"
	"  status                               the daemon's counters, readiness, sources, jobs\n"
	"                                       and weights\n"
	"  metrics                              the counters in Prometheus text format\n"
	"  health --live|--ready [--timeout S]  for probes: exit 0 when weightd answers (--live)\n"
	"                                       or is ready (--ready), 1 with the reason if not\n"
	"  clients                              connections and what each holds (on the admin\n"
	"                                       socket all of them; with --socket your uid's)\n"
	"  reload                               make weightd re-read its configuration (admin)\n"
	"  evict                                drop every weight no client holds (admin)\n"
	"\n"
	"options:\n"
	"  --socket PATH        weightd's socket (default: $WEIGHTD_SOCKET or "
	WEIGHTD_DEFAULT_SOCKET ")\n"
	"  --admin-socket PATH  where reload, evict and clients go (default: $WEIGHTD_ADMIN_SOCKET;\n"
	"                       else the --socket or $WEIGHTD_SOCKET given; else\n"
	"                       " WEIGHTD_DEFAULT_ADMIN_SOCKET " when it exists,\n"
	"                       " WEIGHTD_DEFAULT_SOCKET " when not)\n"
	"  --json               machine-readable output\n"
	"  --progress           get and preload print progress lines on stderr\n"
	"  --no-progress        ... and nothing\n"
	"\n"
	"get and preload draw a progress bar on stderr when it is a terminal, and print a\n"
	"progress line every 2 s when it is not.\n"
	"exit status: 0 success, 1 error (health: not live or not ready), 2 usage error\n";

/*
 * The socket an administrative command (reload, evict) goes to: --admin-socket, else
 * $WEIGHTD_ADMIN_SOCKET, else the engine socket named by --socket or $WEIGHTD_SOCKET (a daemon of
 * one socket, or one whose refusal then names its admin socket), else the default admin socket
 * when it exists and the default socket when it does not (a host with single_socket = yes).
 */
static const char *admin_socket(const struct opts *o)
{
	const char *env = getenv("WEIGHTD_ADMIN_SOCKET");
	const char *sock = getenv("WEIGHTD_SOCKET");
	struct stat st;

	if (o->admin_socket)
		return o->admin_socket;
	if (env && env[0])
		return env;
	if (o->socket)
		return o->socket;
	if (sock && sock[0])
		return sock;
	if (stat(WEIGHTD_DEFAULT_ADMIN_SOCKET, &st) == 0)
		return WEIGHTD_DEFAULT_ADMIN_SOCKET;
	return WEIGHTD_DEFAULT_SOCKET;
}

static int connect_or_fail(const struct opts *o, bool admin, weightd_client **ret)
{
	weightd_error err;

	if (weightd_connect(admin ? admin_socket(o) : o->socket, "weightctl", ret, &err) < 0)
		return output_fail_err(&err);
	return 0;
}

/* Every command, in the order of the usage text. */
static const struct command commands[] = {
	{ "list", 0, NULL, cmd_list, false, false },
	{ "describe", 1, NULL, cmd_describe, false, false },
	{ "get", -1, parse_get, cmd_get, false, false },
	{ "preload", -1, parse_preload, cmd_preload, false, false },
	{ "preflight", 1, NULL, cmd_preflight, false, false },
	{ "status", 0, NULL, cmd_status, false, false },
	{ "metrics", 0, NULL, cmd_metrics, false, false },
	{ "health", -1, parse_health, cmd_health, false, true },
	{ "clients", 0, NULL, cmd_clients, true, false },
	{ "reload", 0, NULL, cmd_reload, true, false },
	{ "evict", 0, NULL, cmd_evict, true, false },
};

/*
 * Global options may stand before or after the command (weightctl --json list, weightctl list
 * --json), so a script can add them to any command line. They are taken out of argv wherever
 * they are, up to a "--" (after it every word is the command's); what is left, in order, is
 * the command and its own arguments, written back into argv. Returns 0 with *ret_argc set,
 * EXIT_USAGE (said), or -1 when --help or --version was answered.
 */
static int take_global_options(int argc, char **argv, struct opts *o, int *ret_argc)
{
	bool have_cmd = false, verbatim = false;
	int n = 1;

	/* --json first, wherever it is, so that even a usage error comes out as JSON */
	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
		if (strcmp(argv[i], "--json") == 0)
			o->json = true;
	output_json_errors(o->json);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (verbatim) {
			argv[n++] = argv[i];
		} else if (strcmp(a, "--") == 0) {
			verbatim = true;
		} else if (strcmp(a, "--json") == 0) {
			o->json = true;
		} else if (strcmp(a, "--socket") == 0) {
			if (i + 1 >= argc)
				return output_usage_error("--socket needs a path");
			o->socket = argv[++i];
		} else if (strncmp(a, "--socket=", 9) == 0) {
			o->socket = a + 9;
		} else if (strcmp(a, "--admin-socket") == 0) {
			if (i + 1 >= argc)
				return output_usage_error("--admin-socket needs a path");
			o->admin_socket = argv[++i];
		} else if (strncmp(a, "--admin-socket=", 15) == 0) {
			o->admin_socket = a + 15;
		} else if (strcmp(a, "--progress") == 0) {
			progress_set_mode(PROGRESS_LINES);
		} else if (strcmp(a, "--no-progress") == 0) {
			progress_set_mode(PROGRESS_OFF);
		} else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			fputs(usage_text, stdout);
			return -1;
		} else if (strcmp(a, "--version") == 0 || strcmp(a, "-V") == 0) {
			printf("weightctl %s\n", weightd_version());
			return -1;
		} else if (a[0] == '-' && a[1] && !have_cmd) {
			return output_usage_error("unknown option or missing value: %s", a);
		} else {
			have_cmd = true;
			argv[n++] = argv[i];
		}
	}
	argv[n] = NULL;
	*ret_argc = n;
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = { 0 };
	struct cmd_args a = { 0 };
	const struct command *cmd = NULL;
	weightd_client *c = NULL;
	const char *name;
	int rc;

	/* A reader that stops early (weightctl status | head) ends weightctl quietly, as it ends
	 * any filter, whatever disposition the parent left (libweightd's own socket writes use
	 * MSG_NOSIGNAL and never raise it). */
	signal(SIGPIPE, SIG_DFL);
	rc = take_global_options(argc, argv, &o, &argc);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	if (argc < 2)
		return output_usage_error("no command given");
	name = argv[1];
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(name, commands[i].name) == 0)
			cmd = &commands[i];
	if (!cmd && strcmp(name, "purge") == 0)
		return output_usage_error(
			"purge is done by the daemon itself, stopped: weightd --purge "
			"--config FILE (see weightd(8))");
	if (!cmd)
		return output_usage_error("unknown command \"%s\"", name);
	a.argc = argc - 1;
	a.argv = argv + 1;
	if (cmd->nargs >= 0 && a.argc - 1 != cmd->nargs)
		return output_usage_error("%s takes %d argument%s, not %d", name, cmd->nargs,
					  cmd->nargs == 1 ? "" : "s", a.argc - 1);
	/* usage is checked before connecting: a bad command line never touches the daemon */
	if (cmd->parse && (rc = cmd->parse(&a)) != 0)
		return rc;
	if (cmd->no_connect) /* it connects itself (health: a failure is its answer) */
		return cmd->run(&o, NULL, &a);
	rc = connect_or_fail(&o, cmd->admin, &c);
	if (rc != 0)
		return rc;
	rc = cmd->run(&o, c, &a);
	weightd_close(c);
	if (fflush(stdout) != 0 && rc == 0)
		rc = errno == EPIPE ? EXIT_ERR :
				      output_fail("cannot write output: %s", strerror(errno));
	return rc;
}
