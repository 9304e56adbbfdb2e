/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - weightctl, the command line of weightd: global options and the command table. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "weightctl.h"

static const char usage_text[] =
	"usage: weightctl [--socket PATH] [--json] COMMAND [ARGS]\n"
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
	"  status                               the daemon's counters, sources and weights\n"
	"  metrics                              the counters in Prometheus text format\n"
	"  reload                               make weightd re-read its configuration\n"
	"  evict                                drop every weight no client holds\n"
	"\n"
	"options:\n"
	"  --socket PATH   weightd's socket (default: $WEIGHTD_SOCKET or "
	WEIGHTD_DEFAULT_SOCKET ")\n"
	"  --json          machine-readable output\n"
	"\n"
	"get and preload draw a progress bar on stderr when it is a terminal.\n"
	"exit status: 0 success, 1 error, 2 usage error\n";

static int connect_or_fail(const struct opts *o, weightd_client **ret)
{
	weightd_error err;

	if (weightd_connect(o->socket, "weightctl", ret, &err) < 0)
		return fail_err(&err);
	return 0;
}

/* Every command, in the order of the usage text. */
static const struct command commands[] = {
	{ "list", 0, NULL, cmd_list },
	{ "describe", 1, NULL, cmd_describe },
	{ "get", -1, parse_get, cmd_get },
	{ "preload", -1, parse_preload, cmd_preload },
	{ "preflight", 1, NULL, cmd_preflight },
	{ "status", 0, NULL, cmd_status },
	{ "metrics", 0, NULL, cmd_metrics },
	{ "reload", 0, NULL, cmd_reload },
	{ "evict", 0, NULL, cmd_evict },
};

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { 0 };
	struct cmd_args a = { 0 };
	const struct command *cmd = NULL;
	weightd_client *c = NULL;
	const char *name;
	int ch, rc;

	opterr = 0;
	while ((ch = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
		switch (ch) {
		case 's': o.socket = optarg; break;
		case 'j': o.json = true; break;
		case 'h': fputs(usage_text, stdout); return 0;
		case 'V': printf("weightctl %s\n", weightd_version()); return 0;
		default:
			return usage_error("unknown option or missing value: %s", argv[optind - 1]);
		}
	}
	if (optind >= argc)
		return usage_error("no command given");
	name = argv[optind];
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(name, commands[i].name) == 0)
			cmd = &commands[i];
	if (!cmd && strcmp(name, "purge") == 0)
		return usage_error("purge is done by the daemon itself, stopped: weightd --purge "
				   "--config FILE (see weightd(8))");
	if (!cmd)
		return usage_error("unknown command \"%s\"", name);
	a.argc = argc - optind;
	a.argv = argv + optind;
	if (cmd->nargs >= 0 && a.argc - 1 != cmd->nargs)
		return usage_error("%s takes %d argument%s, not %d", name, cmd->nargs,
				   cmd->nargs == 1 ? "" : "s", a.argc - 1);
	/* usage is checked before connecting: a bad command line never touches the daemon */
	if (cmd->parse && (rc = cmd->parse(&a)) != 0)
		return rc;
	rc = connect_or_fail(&o, &c);
	if (rc != 0)
		return rc;
	rc = cmd->run(&o, c, &a);
	weightd_close(c);
	if (fflush(stdout) != 0 && rc == 0)
		rc = fail("cannot write output: %s", strerror(errno));
	return rc;
}
