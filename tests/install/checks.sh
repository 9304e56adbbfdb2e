# SPDX-License-Identifier: Apache-2.0
# checks.sh - what the install checks share, sourced by each: a work directory removed at exit
# (kept with WD_KEEP=1 where a script allows it), `fail` counting a failed check, `step` naming
# the next group of checks, and `checks_done` ending the script with the count.

# checks_workdir VAR NAME [KEEPABLE]: a new directory /tmp/wd-NAME-XXXXXX in VAR, removed at
# exit (unless KEEPABLE is set and WD_KEEP is).
checks_workdir() {
	local dir
	dir=$(mktemp -d "/tmp/wd-$2-XXXXXX")
	printf -v "$1" '%s' "$dir"
	if [ -n "${3:-}" ]; then
		# shellcheck disable=SC2064 # the directory is known now
		trap "[ -n \"\${WD_KEEP:-}\" ] || rm -rf '$dir'" EXIT
	else
		# shellcheck disable=SC2064
		trap "rm -rf '$dir'" EXIT
	fi
}

failures=0
fail() {
	echo "FAIL: $*" >&2
	failures=$((failures + 1))
}
step() {
	echo "--- $*"
}

# checks_done WHAT [HINT]: exits 1 naming the failed checks' count (and HINT), else says WHAT
# passed.
checks_done() {
	if [ "$failures" -ne 0 ]; then
		echo "$failures check(s) failed${2:+ ($2)}" >&2
		exit 1
	fi
	echo "$1: all checks passed"
}
