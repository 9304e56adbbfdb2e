# SPDX-License-Identifier: Apache-2.0
# install_paths.cmake - runs inside `cmake --install`: writes weightd.service and, when there is
# none, weightd.conf, with paths that follow the prefix of this install (CMAKE_INSTALL_PREFIX here
# is --prefix when given, else the configured one), so a build configured for one prefix and
# installed into another is consistent. Relative directories are joined to the prefix with
# GNUInstallDirs' rules (sysconfdir is /etc under / and /usr, /etc/opt/X under /opt/X).
# Set by the caller: wd_service_template, wd_conf_example, wd_work_dir, wd_sbindir,
# wd_sysconfdir, wd_unitdir.

# GNUInstallDirs' CMAKE_INSTALL_FULL_<dir> for a relative dir under the install-time prefix.
function(wd_full_dir var dir kind)
  set(p "${CMAKE_INSTALL_PREFIX}")
  string(REGEX REPLACE "/+$" "" p "${p}")
  if(IS_ABSOLUTE "${dir}")
    set(full "${dir}")
  elseif(kind STREQUAL "sysconf" AND (p STREQUAL "" OR p STREQUAL "/usr"))
    set(full "/${dir}")
  elseif(kind STREQUAL "sysconf" AND p MATCHES "^/opt/(.*)")
    set(full "/${dir}/opt/${CMAKE_MATCH_1}")
  else()
    set(full "${p}/${dir}")
  endif()
  set(${var} "${full}" PARENT_SCOPE)
endfunction()

wd_full_dir(wd_full_sbindir "${wd_sbindir}" "")
wd_full_dir(wd_full_sysconfdir "${wd_sysconfdir}" "sysconf")
wd_full_dir(wd_full_unitdir "${wd_unitdir}" "")

file(READ "${wd_service_template}" wd_unit)
string(REPLACE "/usr/sbin/weightd" "${wd_full_sbindir}/weightd" wd_unit "${wd_unit}")
string(REPLACE "/etc/weightd/" "${wd_full_sysconfdir}/weightd/" wd_unit "${wd_unit}")
file(WRITE "${wd_work_dir}/install/weightd.service" "${wd_unit}")
file(INSTALL DESTINATION "${wd_full_unitdir}" TYPE FILE
     FILES "${wd_work_dir}/install/weightd.service")

# file(INSTALL) adds DESTDIR itself; the EXISTS test must add it by hand.
set(wd_conf "$ENV{DESTDIR}${wd_full_sysconfdir}/weightd/weightd.conf")
if(EXISTS "${wd_conf}")
  message(STATUS "Keeping: ${wd_conf}")
else()
  file(INSTALL DESTINATION "${wd_full_sysconfdir}/weightd" TYPE FILE RENAME weightd.conf
       FILES "${wd_conf_example}")
endif()
