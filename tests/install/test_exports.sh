#!/bin/bash
# test_exports.sh SOURCE_DIR - what libweightd and weightctl are made of, checked on the built
# files (paths in the environment, see tests/install/CMakeLists.txt):
# - libweightd.so and libweightd.a define exactly the WEIGHTD_API functions declared in
#   client/include/weightd/client.h as global symbols, and client/libweightd.map lists exactly
#   those (a function added to the header is caught here, not by a list kept in this test);
# - no symbol of the core beyond the wire part (formats, recipes, kernels, digests, segments) is
#   in either form, not even as a local one; libweightd.so needs no libcrypto/libssl;
# - weightctl defines no symbol of the daemon's sources and needs no inih.
set -euo pipefail

src=${1:?usage: test_exports.sh SOURCE_DIR}
: "${WD_LIBWEIGHTD_SO:?}" "${WD_LIBWEIGHTD_A:?}" "${WD_WEIGHTCTL:?}" "${WD_DAEMON_LIB:?}"
: "${WD_CORE_OBJ_DIR:?}"
nm=${WD_NM:-nm}
tmp=$(mktemp -d /tmp/wd-exports-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
	echo "FAIL: $*" >&2
	failures=$((failures + 1))
}
# compare NAME EXPECTED_FILE ACTUAL_FILE: both sorted lists
compare() {
	if ! diff -u "$2" "$3" >"$tmp/diff"; then
		fail "$1 differs from the WEIGHTD_API functions of client.h (- missing, + extra):"
		sed -n '3,$p' "$tmp/diff" | grep '^[-+]' >&2 || true
	fi
}

# The public functions: every "WEIGHTD_API ... weightd_name(" declaration of the header.
sed -n 's/^WEIGHTD_API[^(]*[^a-zA-Z0-9_(]\(weightd_[a-zA-Z0-9_]*\)[[:space:]]*(.*/\1/p' \
	"$src/client/include/weightd/client.h" | sort -u >"$tmp/api"
n=$(wc -l <"$tmp/api")
[ "$n" -ge 10 ] || fail "found only $n WEIGHTD_API functions in client.h: the parse is broken"
echo "--- $n public functions in client.h"

# The version script's global list.
sed -e 's@/\*.*\*/@@' "$src/client/libweightd.map" | tr -d ' \t' |
	sed -n '/^global:/,/^local:/p' | grep -v ':$' | tr -d ';' | grep . | sort -u >"$tmp/map"
compare "client/libweightd.map" "$tmp/api" "$tmp/map"

# Global definitions of each form (the version node of the .so is an absolute symbol, not code).
"$nm" -D --defined-only "$WD_LIBWEIGHTD_SO" | awk '$2 != "A" { sub(/@.*/, "", $3); print $3 }' |
	sort -u >"$tmp/so"
compare "libweightd.so's dynamic symbols" "$tmp/api" "$tmp/so"
"$nm" -g --defined-only "$WD_LIBWEIGHTD_A" | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/a"
compare "libweightd.a's global symbols" "$tmp/api" "$tmp/a"
echo "--- exports checked: $(wc -l <"$tmp/so") in the .so, $(wc -l <"$tmp/a") in the .a"

# Nothing of the core beyond the wire part: the functions and data the other core objects define.
"$nm" -g --defined-only "$WD_CORE_OBJ_DIR"/*.o | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/core"
[ -s "$tmp/core" ] || fail "no symbols in $WD_CORE_OBJ_DIR/*.o"
for lib in "$WD_LIBWEIGHTD_SO" "$WD_LIBWEIGHTD_A"; do
	"$nm" --defined-only "$lib" 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/all"
	comm -12 "$tmp/core" "$tmp/all" >"$tmp/leak"
	if [ -s "$tmp/leak" ]; then
		fail "$(basename "$lib") contains code of the full core (not the wire part):" \
			"$(head -5 "$tmp/leak" | tr '\n' ' ')"
	fi
done
needed=$(readelf -d "$WD_LIBWEIGHTD_SO" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
echo "--- libweightd.so needs: $needed"
for bad in libcrypto libssl libevent libinih libsystemd; do
	case " $needed" in
	*" $bad"*) fail "libweightd.so needs $bad" ;;
	esac
done

# weightctl: no daemon code, no inih.
"$nm" -g --defined-only "$WD_DAEMON_LIB" 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u \
	>"$tmp/daemon"
[ -s "$tmp/daemon" ] || fail "no symbols in $WD_DAEMON_LIB"
"$nm" --defined-only "$WD_WEIGHTCTL" | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/ctl"
comm -12 "$tmp/daemon" "$tmp/ctl" >"$tmp/leak"
[ ! -s "$tmp/leak" ] || fail "weightctl contains daemon code: $(head -5 "$tmp/leak" | tr '\n' ' ')"
if readelf -d "$WD_WEIGHTCTL" | grep -q 'NEEDED.*libinih'; then
	fail "weightctl needs libinih"
fi

if [ "$failures" -gt 0 ]; then
	echo "$failures check(s) failed" >&2
	exit 1
fi
echo "all checks passed"
