#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_package.sh SOURCE_DIR - build the Debian packages (debian/) from a copy of the source tree
# with dpkg-buildpackage -us -uc -b, as a Debian 12 machine would offline, then check them:
# lintian reports no error; each package holds what it should; unpacked into a scratch root
# (dpkg -x), the units pass systemd-analyze verify, the sysusers.d/tmpfiles.d snippets apply, and
# examples/engine.c builds against the installed libweightd-dev (pkg-config and CMake package)
# and runs with the packaged libweightd0; python3-weightd, when debian/control has it, imports.
# Skipped (exit 77) when dpkg-buildpackage or debhelper is missing: scripts/deps installs them.
set -euo pipefail

src=${1:?usage: test_package.sh SOURCE_DIR}
cc=${WD_CC:-cc}
for tool in dpkg-buildpackage dh dpkg-deb lintian; do
	if ! command -v "$tool" >/dev/null; then
		echo "SKIP: $tool is not installed (scripts/deps installs dpkg-dev, debhelper, lintian)"
		exit 77
	fi
done

. "$(dirname "${BASH_SOURCE[0]}")/checks.sh"
checks_workdir work package keepable

version=$(dpkg-parsechangelog -l "$src/debian/changelog" -S Version)
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
tree=$work/weightd-$version

step "copy the source tree (tracked and new files, no build output)"
mkdir -p "$tree"
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	git -C "$src" ls-files -z --cached --others --exclude-standard |
		(cd "$src" && xargs -0 cp --parents -t "$tree" 2>/dev/null) || true
	# files deleted in the work tree but still in the index are skipped by cp: fine
else
	(cd "$src" && tar --exclude='./build*' --exclude='./obj-*' -cf - .) | tar -C "$tree" -xf -
fi
[ -f "$tree/debian/control" ] || { echo "FAIL: no debian/ in the copy" >&2; exit 1; }

step "dpkg-buildpackage -us -uc -b (nocheck; log in $work/build.log)"
start=$(date +%s)
if ! (cd "$tree" && DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" \
	dpkg-buildpackage -us -uc -b >"$work/build.log" 2>&1); then
	tail -n 60 "$work/build.log" >&2
	echo "FAIL: dpkg-buildpackage" >&2
	exit 1
fi
echo "built in $(($(date +%s) - start)) s"
changes=$work/weightd_${version}_${arch}.changes
for p in weightd libweightd0 libweightd-dev; do
	[ -f "$work/${p}_${version}_${arch}.deb" ] || fail "no ${p}_${version}_${arch}.deb"
done
[ -f "$changes" ] || fail "no $(basename "$changes")"
# The packages for scripts/image (deploy.image), so that the suite builds them once.
if [ -n "${WD_DEBS_OUT:-}" ]; then
	rm -rf "$WD_DEBS_OUT" && mkdir -p "$WD_DEBS_OUT" && cp "$work"/*.deb "$WD_DEBS_OUT/"
	"$src/scripts/image" --print-key >"$WD_DEBS_OUT/tree" 2>/dev/null || true
fi

step "lintian"
# --fail-on error: warnings and infos are printed, errors fail.
if ! lintian --fail-on error --tag-display-limit 0 "$changes" >"$work/lintian.log" 2>&1; then
	cat "$work/lintian.log" >&2
	fail "lintian reports errors"
else
	cat "$work/lintian.log"
fi

step "contents"
has() { # has PACKAGE PATH...
	local pkg=$1 list
	shift
	list=$(dpkg-deb -c "$work/${pkg}_${version}_${arch}.deb" | awk '{print $6}' | sed 's@^\.@@')
	for f in "$@"; do
		grep -qx "$f" <<<"$list" || fail "$pkg does not contain $f"
	done
}
has weightd /usr/sbin/weightd /usr/bin/weightctl /lib/systemd/system/weightd.service \
	/lib/systemd/system/weightd.socket /lib/systemd/system/var-lib-weightd-segments.mount \
	/usr/lib/sysusers.d/weightd.conf \
	/usr/lib/tmpfiles.d/weightd.conf /usr/share/weightd/weightd.conf.example \
	/usr/share/man/man8/weightd.8.gz /usr/share/man/man1/weightctl.1.gz \
	/usr/share/man/man5/weightd.conf.5.gz /usr/share/doc/weightd/weightd.service.d/remote.conf
has libweightd0 "/usr/lib/$multiarch/libweightd.so.0"
has libweightd-dev /usr/include/weightd/client.h /usr/include/weightd/error.h \
	"/usr/lib/$multiarch/libweightd.so" \
	"/usr/lib/$multiarch/libweightd.a" "/usr/lib/$multiarch/pkgconfig/libweightd.pc" \
	"/usr/lib/$multiarch/cmake/weightd/weightdConfig.cmake" \
	/usr/share/man/man3/libweightd.3.gz /usr/share/doc/libweightd-dev/examples/engine.c
dpkg-deb -f "$work/libweightd-dev_${version}_${arch}.deb" Depends |
	grep -q "libweightd0 (= $version)" || fail "libweightd-dev does not depend on libweightd0 (= $version)"
# no conffile: installing over a config that was there first (cmake --install, an edit) must
# not stop at a dpkg prompt
if dpkg-deb -I "$work/weightd_${version}_${arch}.deb" conffiles 2>/dev/null |
	grep -q /etc/weightd/weightd.conf; then
	fail "/etc/weightd/weightd.conf is a conffile (dpkg would prompt over an existing one)"
fi
dpkg-deb -e "$work/weightd_${version}_${arch}.deb" "$work/control"
grep -q 'systemd-sysusers .*weightd.conf' "$work/control/postinst" ||
	fail "weightd's postinst does not create the user with systemd-sysusers"
grep -q 'systemd-tmpfiles .*--create weightd.conf' "$work/control/postinst" ||
	fail "weightd's postinst does not create the tmpfiles.d directories"

step "unpacked into a scratch root"
root=$work/root
mkdir -p "$root"
for p in weightd libweightd0 libweightd-dev; do
	dpkg -x "$work/${p}_${version}_${arch}.deb" "$root"
done
"$root/usr/sbin/weightd" --version | grep -qx "weightd ${version%%-*}" || fail "weightd --version"
LD_LIBRARY_PATH="$root/usr/lib/$multiarch" "$root/usr/bin/weightctl" --version |
	grep -qx "weightctl ${version%%-*}" || fail "weightctl --version"

step "systemd-analyze verify"
if command -v systemd-analyze >/dev/null; then
	mkdir -p "$root/usr/lib/systemd/system" "$root/bin"
	cp -an /usr/lib/systemd/system/. "$root/usr/lib/systemd/system/"
	[ -e "$root/bin/kill" ] || cp /bin/kill "$root/bin/kill"
	out=$(MANPATH="$root/usr/share/man" systemd-analyze verify --root="$root" \
		/lib/systemd/system/weightd.service /lib/systemd/system/weightd.socket 2>&1) ||
		fail "systemd-analyze verify failed"
	if [ -n "$out" ]; then
		echo "$out" >&2
		fail "systemd-analyze verify reported problems"
	fi
	mkdir -p "$root/etc"
	systemd-sysusers --root="$root" "$root/usr/lib/sysusers.d/weightd.conf" >/dev/null 2>&1 &&
		grep -q '^weightd:' "$root/etc/passwd" ||
		fail "the packaged sysusers.d snippet creates no weightd user"
	systemd-tmpfiles --root="$root" --create "$root/usr/lib/tmpfiles.d/weightd.conf" &&
		[ -d "$root/var/lib/weightd" ] || fail "the packaged tmpfiles.d snippet does not apply"
else
	fail "systemd-analyze is required"
fi

step "maintainer scripts in the scratch root (DPKG_ROOT)"
# weightd's own parts of its maintainer scripts (the sources: debhelper's parts, which enable
# units on the running system, are left out), run as dpkg runs them for another root
maint() { # maint SCRIPT ARGS...
	local s=$1
	shift
	DPKG_ROOT=$root sh "$src/debian/weightd.$s" "$@" >"$work/maint.log" 2>&1
}
rm -rf "$root/etc/weightd"
maint postinst configure || fail "postinst configure failed: $(cat "$work/maint.log")"
cmp -s "$root/etc/weightd/weightd.conf" "$root/usr/share/weightd/weightd.conf.example" ||
	fail "postinst did not make /etc/weightd/weightd.conf from the example"
printf '[daemon]\nbudget = 1G\n' >"$root/etc/weightd/weightd.conf"
maint postinst configure 0.0.1 || fail "postinst configure (upgrade) failed"
grep -qx 'budget = 1G' "$root/etc/weightd/weightd.conf" ||
	fail "postinst replaced a configuration that was there"
mkdir -p "$root/var/lib/weightd"
touch "$root/var/lib/weightd/state-record"
maint postrm remove || fail "postrm remove failed"
[ -f "$root/var/lib/weightd/state-record" ] && [ -f "$root/etc/weightd/weightd.conf" ] ||
	fail "postrm remove (not purge) removed the state or the configuration"
maint postrm purge || fail "postrm purge failed"
[ ! -e "$root/var/lib/weightd" ] || fail "purge left /var/lib/weightd behind"
[ ! -e "$root/etc/weightd" ] || fail "purge left /etc/weightd behind"
maint prerm remove || fail "prerm remove failed"

step "examples/engine.c against the installed libweightd-dev"
libdir=$root/usr/lib/$multiarch
pc() {
	PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config "$@"
}
# shellcheck disable=SC2046 # the pkg-config output is a list of flags
if $cc -o "$work/engine-pc" "$root/usr/share/doc/libweightd-dev/examples/engine.c" \
	$(pc --cflags --libs libweightd); then
	deps=$(LD_LIBRARY_PATH="$libdir" ldd "$work/engine-pc")
	grep -q "=> $libdir/libweightd.so.0" <<<"$deps" ||
		fail "the example does not run with the packaged libweightd.so.0"
	# no daemon: it must say so and fail cleanly
	if LD_LIBRARY_PATH="$libdir" WEIGHTD_SOCKET="$work/none.sock" "$work/engine-pc" m \
		>"$work/engine.out" 2>&1; then
		fail "the example succeeded without a daemon"
	fi
	grep -q "$work/none.sock" "$work/engine.out" ||
		fail "the example's error does not name the socket: $(cat "$work/engine.out")"
else
	fail "examples/engine.c does not build with pkg-config libweightd"
fi
mkdir -p "$work/consumer"
cp "$root/usr/share/doc/libweightd-dev/examples/engine.c" "$work/consumer/"
cat >"$work/consumer/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(engine C)
find_package(weightd REQUIRED)
add_executable(engine-shared engine.c)
target_link_libraries(engine-shared PRIVATE weightd::weightd)
add_executable(engine-static engine.c)
target_link_libraries(engine-static PRIVATE weightd::weightd_static)
CMAKE
if cmake -S "$work/consumer" -B "$work/consumer/build" -DCMAKE_C_COMPILER="$cc" \
	-DCMAKE_PREFIX_PATH="$root/usr" >"$work/consumer.log" 2>&1 &&
	cmake --build "$work/consumer/build" >>"$work/consumer.log" 2>&1; then
	deps=$(ldd "$work/consumer/build/engine-static")
	if grep -q libweightd <<<"$deps"; then
		fail "engine-static depends on libweightd.so"
	fi
	if grep -q libcrypto <<<"$deps"; then
		fail "engine-static links libcrypto"
	fi
else
	cat "$work/consumer.log" >&2
	fail "examples/engine.c does not build with find_package(weightd)"
fi

# The Python module, when debian/control has a python3-weightd package.
pydeb=$work/python3-weightd_${version}_${arch}.deb
if grep -q '^Package: python3-weightd$' "$src/debian/control"; then
	step "python3-weightd: the module imports with the packaged libweightd0"
	if [ -f "$pydeb" ]; then
		dpkg -x "$pydeb" "$root"
		pydir=$root/usr/lib/python3/dist-packages
		[ -f "$pydir/weightd/__init__.py" ] || fail "python3-weightd has no weightd/__init__.py"
		probe='import weightd, weightd._weightd as m; print(weightd.__version__, m.__file__)'
		out=$(cd / && PYTHONPATH="$pydir" LD_LIBRARY_PATH="$libdir" /usr/bin/python3 -c \
			"$probe" 2>&1) ||
			fail "import weightd from python3-weightd failed: $out"
		case $out in
		"${version%%-*} $pydir/weightd/"*) ;;
		*) fail "import weightd did not load the packaged module: $out" ;;
		esac
		dpkg-deb -f "$pydeb" Depends | grep -q 'libweightd0' ||
			fail "python3-weightd does not depend on libweightd0"
	else
		fail "no $(basename "$pydeb")"
	fi
fi

checks_done package "kept in $work with WD_KEEP=1"
