/* SPDX-License-Identifier: Apache-2.0 */
/* log.h - daemon logging to stderr with syslog priority prefixes ("<3>") that journald reads. */
#ifndef WD_LOG_H
#define WD_LOG_H

enum log_level { LOG_LVL_ERR = 3, LOG_LVL_WARNING = 4, LOG_LVL_NOTICE = 5, LOG_LVL_INFO = 6,
		 LOG_LVL_DEBUG = 7 };

/* Parse "error", "warning", "notice", "info", "debug"; -1 if unknown. */
int log_level_parse(const char *s);
void log_set_level(int level);
int log_get_level(void);
/* "error" ... "debug" ("?" for anything else). */
const char *log_level_name(int level);
/* Prefix lines with "<N>" (journald) when true; plain "weightd: level: " otherwise. */
void log_set_prefix(int journald);

void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_err(...) log_msg(LOG_LVL_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LVL_WARNING, __VA_ARGS__)
#define log_notice(...) log_msg(LOG_LVL_NOTICE, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LVL_DEBUG, __VA_ARGS__)

#endif
