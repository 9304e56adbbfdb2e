#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_exports.sh SOURCE_DIR - what libweightd and weightctl are made of, checked on the built
# files (paths in the environment, see tests/install/CMakeLists.txt), and what can be checked
# mechanically of the tree:
# - libweightd.so and libweightd.a define exactly the WEIGHTD_API functions declared in
#   client/include/weightd/client.h as global symbols, and client/libweightd.map lists exactly
#   those (a function added to the header is caught here, not by a list kept in this test);
# - no symbol of the core beyond the wire part (formats, recipes, kernels, digests, segments) is
#   in either form, not even as a local one; libweightd.so needs no libcrypto/libssl;
# - weightctl is built from client/weightctl/ and libweightd alone: its objects are those of
#   client/weightctl/, it links no archive but libweightd.a, it defines no symbol of the daemon's
#   sources or of the core's, the wire part of the core reaches it only inside libweightd.a (as
#   local symbols), and it needs no inih;
# - every source file git tracks carries an SPDX-License-Identifier line (scripts/spdx --check).
set -euo pipefail

src=${1:?usage: test_exports.sh SOURCE_DIR}
: "${WD_LIBWEIGHTD_SO:?}" "${WD_LIBWEIGHTD_A:?}" "${WD_WEIGHTCTL:?}" "${WD_DAEMON_LIB:?}"
: "${WD_CORE_OBJ_DIR:?}" "${WD_WIRE_OBJ_DIR:?}" "${WD_WEIGHTCTL_DIR:?}"
nm=${WD_NM:-nm}
. "$(dirname "${BASH_SOURCE[0]}")/checks.sh"
checks_workdir tmp exports
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

# weightctl: its own objects and libweightd.a, nothing else of the tree.
link="$WD_WEIGHTCTL_DIR/link.txt"
[ -s "$link" ] || fail "no link line for weightctl at $link"
for word in $(cat "$link"); do
	case $word in
	*.o)
		case $word in
		CMakeFiles/weightctl.dir/weightctl/*.c.o) ;;
		*) fail "weightctl links $word, which is not from client/weightctl/" ;;
		esac
		;;
	*.a)
		[ "$(basename "$word")" = libweightd.a ] ||
			fail "weightctl links the archive $word (only libweightd.a is allowed)"
		;;
	esac
done
n=$(ls "$WD_WEIGHTCTL_DIR"/weightctl/*.o 2>/dev/null | wc -l)
[ "$n" -ge 3 ] || fail "found only $n objects of client/weightctl/ in $WD_WEIGHTCTL_DIR"
for o in $(find "$WD_WEIGHTCTL_DIR" -name '*.o'); do
	case $o in
	"$WD_WEIGHTCTL_DIR"/weightctl/*) ;;
	*) fail "weightctl has an object from outside client/weightctl/: $o" ;;
	esac
done
echo "--- weightctl: $n objects of client/weightctl/, libweightd.a"

# weightctl: no daemon code, no core code beyond the wire part inside libweightd, no inih.
"$nm" -g --defined-only "$WD_DAEMON_LIB" 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u \
	>"$tmp/daemon"
[ -s "$tmp/daemon" ] || fail "no symbols in $WD_DAEMON_LIB"
"$nm" --defined-only "$WD_WEIGHTCTL" | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/ctl"
comm -12 "$tmp/daemon" "$tmp/ctl" >"$tmp/leak"
[ ! -s "$tmp/leak" ] || fail "weightctl contains daemon code: $(head -5 "$tmp/leak" | tr '\n' ' ')"
comm -12 "$tmp/core" "$tmp/ctl" >"$tmp/leak"
[ ! -s "$tmp/leak" ] || fail "weightctl contains core code: $(head -5 "$tmp/leak" | tr '\n' ' ')"
"$nm" -g --defined-only "$WD_WIRE_OBJ_DIR"/*.o | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/wire"
[ -s "$tmp/wire" ] || fail "no symbols in $WD_WIRE_OBJ_DIR/*.o"
"$nm" -g --defined-only "$WD_WEIGHTCTL" | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/ctl-global"
comm -12 "$tmp/wire" "$tmp/ctl-global" >"$tmp/leak"
[ ! -s "$tmp/leak" ] ||
	fail "weightctl links the core's wire part itself: $(head -5 "$tmp/leak" | tr '\n' ' ')"
if readelf -d "$WD_WEIGHTCTL" | grep -q 'NEEDED.*libinih'; then
	fail "weightctl needs libinih"
fi

# Every source file carries its license line (scripts/spdx adds what is missing; it reads git's
# list of files, so a tree without git, such as a source package, is not checked here).
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	if ! "$src/scripts/spdx" --check >"$tmp/spdx" 2>&1; then
		fail "files without an SPDX-License-Identifier line (scripts/spdx adds them):" \
			"$(grep -v 'file(s) without' "$tmp/spdx" | head -5 | tr '\n' ' ')"
	fi
	echo "--- SPDX lines: checked on $(git -C "$src" ls-files | wc -l) tracked files"
else
	echo "--- SPDX lines: not checked ($src is not a git checkout)"
fi

checks_done exports
