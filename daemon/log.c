/* SPDX-License-Identifier: Apache-2.0 */
/* log.c - one line per event on stderr; journald turns "<N>" prefixes into priorities. */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int cur_level = LOG_LVL_INFO;
static int use_prefix;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

int log_level_parse(const char *s)
{
	static const struct { const char *name; int level; } names[] = {
		{ "error", LOG_LVL_ERR }, { "err", LOG_LVL_ERR }, { "warning", LOG_LVL_WARNING },
		{ "warn", LOG_LVL_WARNING }, { "notice", LOG_LVL_NOTICE }, { "info", LOG_LVL_INFO },
		{ "debug", LOG_LVL_DEBUG },
	};

	for (size_t i = 0; s && i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(s, names[i].name) == 0)
			return names[i].level;
	return -1;
}

/* Workers log too: the level is read and (on reload) written atomically. */
void log_set_level(int level)
{
	__atomic_store_n(&cur_level, level, __ATOMIC_RELAXED);
}

int log_get_level(void)
{
	return __atomic_load_n(&cur_level, __ATOMIC_RELAXED);
}

const char *log_level_name(int level)
{
	switch (level) {
	case LOG_LVL_ERR: return "error";
	case LOG_LVL_WARNING: return "warning";
	case LOG_LVL_NOTICE: return "notice";
	case LOG_LVL_INFO: return "info";
	case LOG_LVL_DEBUG: return "debug";
	default: return "?";
	}
}

void log_set_prefix(int journald)
{
	use_prefix = journald;
}

void log_msg(int level, const char *fmt, ...)
{
	static const char *const names[] = { "emerg", "alert", "crit", "error", "warning",
					      "notice", "info", "debug" };
	char line[2048];
	va_list ap;

	if (level > log_get_level())
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&log_lock);
	if (use_prefix)
		fprintf(stderr, "<%d>%s\n", level, line);
	else
		fprintf(stderr, "weightd: %s: %s\n", names[level & 7], line);
	pthread_mutex_unlock(&log_lock);
}
