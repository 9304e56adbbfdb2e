#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_install.sh BUILD_DIR - install a weightd build into a DESTDIR and check what was installed:
# every file in its place, the units pass systemd-analyze verify (and keep a low exposure score),
# the sysusers.d and tmpfiles.d snippets apply, the man pages format without warnings, and a
# program builds and runs against the installed pkg-config file and CMake package.
# Installation paths come from the environment (see tests/install/CMakeLists.txt).
set -euo pipefail

build=${1:?usage: test_install.sh BUILD_DIR}
: "${WD_VERSION:?}" "${WD_PREFIX:?}" "${WD_SBINDIR:?}" "${WD_BINDIR:?}" "${WD_LIBDIR:?}"
: "${WD_INCLUDEDIR:?}" "${WD_MANDIR:?}" "${WD_DOCDIR:?}" "${WD_SYSCONFDIR:?}" "${WD_UNITDIR:?}"
: "${WD_SYSUSERSDIR:?}" "${WD_TMPFILESDIR:?}"
cc=${WD_CC:-cc}
san=${WD_SANITIZE_FLAGS:-}

under_prefix() {
	case $1 in
	/*) echo "$1" ;;
	*) echo "$WD_PREFIX/$1" ;;
	esac
}
unitdir=$(under_prefix "$WD_UNITDIR")
sysusersdir=$(under_prefix "$WD_SYSUSERSDIR")
tmpfilesdir=$(under_prefix "$WD_TMPFILESDIR")

. "$(dirname "${BASH_SOURCE[0]}")/checks.sh"
checks_workdir dest install keepable

step "cmake --install into $dest"
DESTDIR=$dest cmake --install "$build" >"$dest.log" 2>&1 || {
	cat "$dest.log" >&2
	rm -f "$dest.log"
	echo "FAIL: cmake --install" >&2
	exit 1
}
rm -f "$dest.log"

step "layout"
for f in "$WD_SBINDIR/weightd" "$WD_BINDIR/weightctl"; do
	[ -x "$dest$f" ] || fail "$f is not installed as an executable"
done
for f in "$WD_LIBDIR/libweightd.so" "$WD_LIBDIR/libweightd.so.${WD_VERSION%%.*}" \
	"$WD_LIBDIR/libweightd.so.$WD_VERSION" "$WD_LIBDIR/libweightd.a" \
	"$WD_INCLUDEDIR/weightd/client.h" "$WD_INCLUDEDIR/weightd/error.h" \
	"$WD_LIBDIR/pkgconfig/libweightd.pc" \
	"$WD_LIBDIR/cmake/weightd/weightdConfig.cmake" \
	"$WD_LIBDIR/cmake/weightd/weightdConfigVersion.cmake" \
	"$WD_LIBDIR/cmake/weightd/weightdTargets.cmake" \
	"$unitdir/weightd.service" "$unitdir/weightd.socket" \
	"$unitdir/var-lib-weightd-segments.mount" \
	"$sysusersdir/weightd.conf" "$tmpfilesdir/weightd.conf" \
	"$WD_DOCDIR/weightd.conf.example" "$WD_SYSCONFDIR/weightd/weightd.conf" \
	"$WD_MANDIR/man8/weightd.8" "$WD_MANDIR/man1/weightctl.1" \
	"$WD_MANDIR/man5/weightd.conf.5" "$WD_MANDIR/man3/libweightd.3"; do
	[ -f "$dest$f" ] || fail "$f is not installed"
done
# The shared library exports only the public API.
if command -v nm >/dev/null; then
	bad=$(nm -D --defined-only "$dest$WD_LIBDIR/libweightd.so" | awk '$2 ~ /^[TDBR]$/ && $3 !~ /^weightd_/ {print $3}')
	[ -z "$bad" ] || fail "libweightd.so exports non-API symbols: $bad"
fi

step "a second install keeps an existing weightd.conf"
echo "# edited by the operator" >>"$dest$WD_SYSCONFDIR/weightd/weightd.conf"
DESTDIR=$dest cmake --install "$build" >/dev/null 2>&1 || fail "second cmake --install"
tail -n 1 "$dest$WD_SYSCONFDIR/weightd/weightd.conf" | grep -q "edited by the operator" ||
	fail "a reinstall overwrote $WD_SYSCONFDIR/weightd/weightd.conf"

step "the service runs the installed binary on the installed config"
grep -qx "ExecStart=$WD_SBINDIR/weightd --config $WD_SYSCONFDIR/weightd/weightd.conf --foreground" \
	"$dest$unitdir/weightd.service" || fail "ExecStart does not name the installed paths"

step "cmake --install --prefix elsewhere: the service and config follow that prefix"
alt=$dest/alt
alt_prefix=/opt/wd-alt
if DESTDIR=$alt cmake --install "$build" --prefix "$alt_prefix" >"$dest.alt.log" 2>&1; then
	alt_unitdir=$unitdir
	case $WD_UNITDIR in /*) ;; *) alt_unitdir=$alt_prefix/$WD_UNITDIR ;; esac
	want="ExecStart=$alt_prefix/sbin/weightd --config /etc/opt/wd-alt/weightd/weightd.conf --foreground"
	grep -qx "$want" "$alt$alt_unitdir/weightd.service" ||
		fail "installed with --prefix $alt_prefix, weightd.service does not say: $want"
	[ -x "$alt$alt_prefix/sbin/weightd" ] || fail "no $alt_prefix/sbin/weightd"
	[ -f "$alt/etc/opt/wd-alt/weightd/weightd.conf" ] || fail "no /etc/opt/wd-alt/weightd/weightd.conf"
	alt_pc=$(find "$alt$alt_prefix" -name libweightd.pc | head -n 1)
	[ -n "$alt_pc" ] || fail "no libweightd.pc under $alt_prefix"
	if [ -n "$alt_pc" ]; then
		got=$(PKG_CONFIG_PATH=$(dirname "$alt_pc") pkg-config --variable=libdir libweightd)
		[ -f "$got/libweightd.so" ] ||
			fail "libweightd.pc installed under $alt_prefix points at $got, without libweightd.so"
	fi
else
	cat "$dest.alt.log" >&2
	fail "cmake --install --prefix $alt_prefix"
fi
rm -f "$dest.alt.log"

step "systemd-analyze verify"
if command -v systemd-analyze >/dev/null; then
	# verify --root resolves units, binaries and dependencies inside the DESTDIR: give it the
	# system's own units (sysinit.target, sockets.target, ...) and the kill of ExecReload.
	mkdir -p "$dest/usr/lib/systemd/system" "$dest/bin"
	cp -an /usr/lib/systemd/system/. "$dest/usr/lib/systemd/system/"
	[ -e "$dest/bin/kill" ] || cp /bin/kill "$dest/bin/kill"
	# Documentation= man pages are looked up with man(1): the installed ones must be found.
	out=$(MANPATH="$dest$WD_MANDIR" systemd-analyze verify --root="$dest" \
		"$unitdir/weightd.service" "$unitdir/weightd.socket" \
		"$unitdir/var-lib-weightd-segments.mount" 2>&1) || fail "systemd-analyze verify failed"
	# Unknown keys and unparsable values are only warnings for systemd: any output fails here.
	if [ -n "$out" ]; then
		echo "$out" >&2
		fail "systemd-analyze verify reported problems"
	fi
	# The sandbox must stay strong: exposure at most 2.0 of 10 ("OK").
	if systemd-analyze --help | grep -q -- '--offline'; then
		out=$(systemd-analyze security --offline=true --threshold=20 --root="$dest" \
			"$unitdir/weightd.service" 2>&1) || {
			echo "$out" >&2
			fail "systemd-analyze security rates weightd.service above 2.0"
		}
		echo "$out" | grep 'Overall exposure' || true
	fi
	# The drop-in for remote checkpoints, applied as an operator applies it: the unit still
	# verifies cleanly and its effective settings open the network, and nothing else.
	dropin=$WD_DOCDIR/weightd.service.d/remote.conf
	[ -f "$dest$dropin" ] || fail "$dropin is not installed"
	mkdir -p "$dest/etc/systemd/system/weightd.service.d"
	cp "$dest$dropin" "$dest/etc/systemd/system/weightd.service.d/remote.conf"
	out=$(MANPATH="$dest$WD_MANDIR" systemd-analyze verify --root="$dest" \
		"$unitdir/weightd.service" 2>&1) || fail "systemd-analyze verify failed with remote.conf"
	if [ -n "$out" ]; then
		echo "$out" >&2
		fail "systemd-analyze verify reported problems with remote.conf"
	fi
	if systemd-analyze --help | grep -q -- '--offline'; then
		# the network is open (those checks now fail) and the rest of the sandbox is as it was
		out=$(systemd-analyze security --offline=true --root="$dest" \
			"$unitdir/weightd.service" 2>&1) || true
		for want in PrivateNetwork= IPAddressDeny= RestrictAddressFamilies=~AF_.INET.; do
			echo "$out" | grep -E "^. $want" | grep -q '^✗' ||
				fail "with remote.conf, systemd-analyze security does not see $want opened"
		done
		for kept in NoNewPrivileges= ProtectSystem= PrivateDevices= ProtectKernelModules= \
			CapabilityBoundingSet=~CAP_SYS_ADMIN SystemCallFilter=~@mount; do
			echo "$out" | grep -E "^. $kept" | grep -q '^✓' ||
				fail "with remote.conf, $kept is no longer set"
		done
		echo "$out" | grep 'Overall exposure' | sed 's/^/with remote.conf: /' || true
	fi
	rm -r "$dest/etc/systemd/system/weightd.service.d"
else
	echo "systemd-analyze not found: units not verified" >&2
	fail "systemd-analyze is required"
fi

step "sysusers.d and tmpfiles.d applied to the DESTDIR"
mkdir -p "$dest/etc"
if systemd-sysusers --root="$dest" "$dest$sysusersdir/weightd.conf" >/dev/null 2>&1; then
	grep -q '^weightd:' "$dest/etc/passwd" || fail "sysusers created no weightd user"
	grep -q '^weightd-clients:' "$dest/etc/group" || fail "sysusers created no weightd-clients group"
	grep -Eq '^weightd-clients:[^:]*:[^:]*:(.*,)?weightd(,|$)' "$dest/etc/group" ||
		fail "sysusers did not make weightd a member of weightd-clients"
else
	fail "systemd-sysusers rejected $sysusersdir/weightd.conf"
fi
if systemd-tmpfiles --root="$dest" --create "$dest$tmpfilesdir/weightd.conf"; then
	uid=$(awk -F: '$1 == "weightd" {print $3}' "$dest/etc/passwd")
	[ "$(stat -c '%a %u' "$dest/run/weightd")" = "755 $uid" ] || fail "/run/weightd: wrong mode or owner"
	[ "$(stat -c '%a %u' "$dest/run/weightd-admin")" = "755 $uid" ] ||
		fail "/run/weightd-admin: wrong mode or owner"
	[ "$(stat -c '%a %u' "$dest/var/lib/weightd")" = "750 $uid" ] || fail "/var/lib/weightd: wrong mode or owner"
else
	fail "systemd-tmpfiles rejected $tmpfilesdir/weightd.conf"
fi

step "man pages"
if command -v groff >/dev/null; then
	for p in man8/weightd.8 man1/weightctl.1 man5/weightd.conf.5 man3/libweightd.3; do
		out=$(groff -man -ww -z "$dest$WD_MANDIR/$p" 2>&1) || fail "groff failed on $p"
		[ -z "$out" ] || { echo "$out" >&2; fail "groff warns about $p"; }
	done
fi

# A consumer: prints the version of the library it runs with.
work=$dest/consumer
mkdir -p "$work"
cat >"$work/smoke.c" <<'EOF'
#include <stdio.h>
#include <weightd/client.h>

int main(void)
{
	printf("%s\n", weightd_version());
	return 0;
}
EOF

step "build against the installed pkg-config file"
# No --define-variable: the file finds its prefix from its own place, inside the DESTDIR.
pc() {
	PKG_CONFIG_PATH="$dest$WD_LIBDIR/pkgconfig" pkg-config "$@"
}
[ "$(realpath -m "$(pc --variable=prefix libweightd)")" = "$(realpath -m "$dest$WD_PREFIX")" ] ||
	fail "libweightd.pc's prefix is not $dest$WD_PREFIX: $(pc --variable=prefix libweightd)"
if [ "$(pc --modversion libweightd)" != "$WD_VERSION" ]; then
	fail "pkg-config --modversion libweightd is not $WD_VERSION"
fi
pc --static --libs libweightd >/dev/null || fail "pkg-config --static cannot resolve the private requirements"
# shellcheck disable=SC2046,SC2086 # $san and the pkg-config output are lists of flags
if $cc $san -o "$work/smoke-pc" "$work/smoke.c" $(pc --cflags --libs libweightd); then
	got=$(LD_LIBRARY_PATH="$dest$WD_LIBDIR" "$work/smoke-pc") || fail "smoke-pc did not run"
	[ "$got" = "$WD_VERSION" ] || fail "smoke-pc printed '$got', expected '$WD_VERSION'"
	deps=$(LD_LIBRARY_PATH="$dest$WD_LIBDIR" ldd "$work/smoke-pc")
	grep -q "=> $dest$WD_LIBDIR/libweightd.so" <<<"$deps" ||
		fail "smoke-pc is not linked with the installed libweightd.so"
else
	fail "cannot build against pkg-config libweightd"
fi

step "build against the installed CMake package"
cat >"$work/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.25)
project(wd_consumer C)
find_package(weightd ${WD_WANT} REQUIRED)
add_executable(smoke-shared smoke.c)
target_link_libraries(smoke-shared PRIVATE weightd::weightd)
add_executable(smoke-static smoke.c)
target_link_libraries(smoke-static PRIVATE weightd::weightd_static)
EOF
if cmake -S "$work" -B "$work/build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$san" \
	-DCMAKE_EXE_LINKER_FLAGS="$san" -DCMAKE_PREFIX_PATH="$dest$WD_PREFIX" \
	-DWD_WANT="${WD_VERSION%%.*}" >"$work/cmake.log" 2>&1 &&
	cmake --build "$work/build" >>"$work/cmake.log" 2>&1; then
	for exe in smoke-shared smoke-static; do
		got=$("$work/build/$exe") || fail "$exe did not run"
		[ "$got" = "$WD_VERSION" ] || fail "$exe printed '$got', expected '$WD_VERSION'"
	done
	# (ldd output is captured first: with pipefail, grep -q closing the pipe early fails ldd.)
	deps=$(ldd "$work/build/smoke-shared")
	grep -q "=> $dest$WD_LIBDIR/libweightd.so" <<<"$deps" ||
		fail "smoke-shared is not linked with the installed libweightd.so"
	deps=$(ldd "$work/build/smoke-static")
	if grep -q libweightd <<<"$deps"; then
		fail "smoke-static depends on libweightd.so"
	fi
else
	cat "$work/cmake.log" >&2
	fail "cannot build against find_package(weightd)"
fi
# The version file refuses another major version.
if cmake -S "$work" -B "$work/build-v" -DCMAKE_PREFIX_PATH="$dest$WD_PREFIX" \
	-DWD_WANT=$((${WD_VERSION%%.*} + 1)) >/dev/null 2>&1; then
	fail "find_package(weightd $((${WD_VERSION%%.*} + 1))) accepted version $WD_VERSION"
fi

checks_done install
