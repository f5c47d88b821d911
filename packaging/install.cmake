# SPDX-License-Identifier: Apache-2.0
# Installation, included at the end of CMakeLists.txt.
#   make install [PREFIX=/usr/local] [DESTDIR=/tmp/stage]
#   cmake --install BUILD [--prefix P]       (DESTDIR from the environment)
# Layout, with the prefix P:
#   P/sbin/keylessd, P/bin/keyless-cli, P/bin/keyless-bench, P/bin/keyless-seal
#   P/lib/libkeyless.so.0 (+ .so link), P/include/keyless/*.h,
#   P/lib/pkgconfig/keyless.pc     libkeyless (CMakeLists.txt; lib/ is
#                                  GNUInstallDirs' libdir)
#   P/share/man/man8/keylessd.8.gz, man1/keyless-cli.1.gz, keyless-bench.1.gz,
#   keyless-keyref.1.gz, keyless-seal.1.gz
#   P/share/doc/keylessd/           README.md and every docs/*.md
#   P/share/doc/keylessd/examples/monitoring/  alerting rules, dashboard
#   P/lib/systemd/system/keylessd.service   (ExecStart pointing into P)
#   /etc/keyless/gokeyless.yaml     0640, never overwritten: an existing file
#                                   is kept and the sample goes next to it as
#                                   gokeyless.yaml.dist
#   /etc/keyless/keys/              0700
# /etc/keyless does not follow the prefix: keylessd looks there whatever its
# prefix, as the reference server does. Ownership (user keyless) is left to
# the Debian postinst or the operator: make install creates no users.
include(GNUInstallDirs)

set(KL_CONFDIR /etc/keyless
    CACHE PATH "configuration directory (absolute; DESTDIR applies)")
set(KL_SYSTEMD_UNITDIR lib/systemd/system
    CACHE STRING "systemd unit directory, relative to the prefix or absolute")

# For packaging/build-deb.sh (the package version).
file(WRITE ${CMAKE_BINARY_DIR}/VERSION "${PROJECT_VERSION}\n")

if(TARGET keylessd)
  target_compile_definitions(keylessd
                             PRIVATE KEYLESSD_VERSION="${PROJECT_VERSION}")
endif()

# Man pages, compressed at build time (gzip -n: no name or time stamp, so
# the package is reproducible).
set(KL_MAN_OUT "")
foreach(page keylessd.8 keyless-cli.1 keyless-bench.1 keyless-keyref.1
             keyless-seal.1)
  set(src ${CMAKE_CURRENT_SOURCE_DIR}/packaging/man/${page})
  if(NOT EXISTS ${src})
    continue()
  endif()
  string(REGEX REPLACE "^.*\\.([0-9])$" "\\1" section ${page})
  set(out ${CMAKE_BINARY_DIR}/man/${page}.gz)
  add_custom_command(OUTPUT ${out}
                     COMMAND ${CMAKE_COMMAND} -E make_directory
                             ${CMAKE_BINARY_DIR}/man
                     COMMAND sh -c "gzip -9nc '${src}' > '${out}'"
                     DEPENDS ${src} VERBATIM)
  list(APPEND KL_MAN_OUT ${out})
  install(FILES ${out} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
endforeach()
add_custom_target(man ALL DEPENDS ${KL_MAN_OUT})

# Every page of docs/: the shipped ones point to each other (OPERATIONS.md
# to METRICS, ROUTING, SECURITY, PROVIDER, TRACING ...), and README.md to
# all of them.
file(GLOB KL_DOC_PAGES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/docs/*.md)
install(FILES README.md ${KL_DOC_PAGES}
        DESTINATION ${CMAKE_INSTALL_DOCDIR} OPTIONAL)

# The unit names the binary and the configuration directory: both follow
# the prefix and KL_CONFDIR chosen at install time (cmake --install --prefix
# too), so the text is rewritten then.
install(CODE "
  set(kl_unit_src \"${CMAKE_CURRENT_SOURCE_DIR}/packaging/keylessd.service\")
  set(kl_unit_tmp \"${CMAKE_BINARY_DIR}/keylessd.service.installed\")
  set(kl_unit_dir \"${KL_SYSTEMD_UNITDIR}\")
  set(kl_confdir \"${KL_CONFDIR}\")
  set(kl_sbindir \"${CMAKE_INSTALL_SBINDIR}\")
  set(kl_conf_src \"${CMAKE_CURRENT_SOURCE_DIR}/packaging/gokeyless.yaml\")
")
install(CODE [[
  file(READ "${kl_unit_src}" kl_unit)
  string(REPLACE "/usr/sbin/keylessd" "${CMAKE_INSTALL_PREFIX}/${kl_sbindir}/keylessd"
         kl_unit "${kl_unit}")
  string(REPLACE "/etc/keyless" "${kl_confdir}" kl_unit "${kl_unit}")
  file(WRITE "${kl_unit_tmp}" "${kl_unit}")
  if(NOT IS_ABSOLUTE "${kl_unit_dir}")
    set(kl_unit_dir "${CMAKE_INSTALL_PREFIX}/${kl_unit_dir}")
  endif()
  file(INSTALL DESTINATION "${kl_unit_dir}" TYPE FILE
       PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
       FILES "${kl_unit_tmp}" RENAME keylessd.service)

  # /etc/keyless: the sample configuration and the keys directory.
  set(kl_conf "$ENV{DESTDIR}${kl_confdir}")
  set(kl_name gokeyless.yaml)
  if(EXISTS "${kl_conf}/gokeyless.yaml")
    set(kl_name gokeyless.yaml.dist)
    message(STATUS "Keeping ${kl_conf}/gokeyless.yaml; the sample is "
                   "${kl_name}")
  endif()
  file(INSTALL DESTINATION "${kl_confdir}" TYPE FILE
       PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ
       FILES "${kl_conf_src}" RENAME "${kl_name}")
  file(MAKE_DIRECTORY "${kl_conf}/keys")
  execute_process(COMMAND chmod 0700 "${kl_conf}/keys"
                  RESULT_VARIABLE kl_rc)
  if(NOT kl_rc EQUAL 0)
    message(FATAL_ERROR "chmod 0700 ${kl_conf}/keys failed")
  endif()
  if("$ENV{DESTDIR}" STREQUAL "")
    message(STATUS "keylessd: make install creates no user; for the "
            "service: chgrp keyless ${kl_conf}/gokeyless.yaml and "
            "chown keyless:keyless ${kl_conf}/keys (README.Debian)")
  endif()
]])

# Prometheus alerting rules and the Grafana dashboard (docs/METRICS.md
# "Alerts and dashboard"), as examples: the operator copies them into
# Prometheus's rule files and imports the dashboard.
install(FILES packaging/monitoring/keylessd-alerts.yml
              packaging/monitoring/keylessd-dashboard.json
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples/monitoring)
