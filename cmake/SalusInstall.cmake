# Installation: `cmake --install <builddir> --prefix P` lays salus out as
#
#   P/bin/salusd, P/bin/salusctl, P/bin/salus-sim (when that target is built)
#   P/lib/salus/libcuda.so.1                  the shim, with libcuda.so and
#                                             libsalus-client.so symlinks to it
#   P/lib/salus/simgpu/libcuda.so.13.0.0      simgpu, with libcuda.so.1 and libcuda.so symlinks
#   P/include/salus.h                         (installed by libsalus-client/CMakeLists.txt)
#   P/include/simgpu_kernel.h                 the simgpu kernel-pack ABI
#   P/etc/salus/salusd.conf                   every option, commented out, with its default;
#                                             never overwritten once there (a reinstall keeps
#                                             the admin's edits)
#   P/share/salus/salusd.conf                 the shipped default, always the current one
#   P/lib/systemd/system/salusd.service       the unit, with the installed paths filled in
#   P/share/bash-completion/completions/salusctl
#   P/share/man/man{1,3,5,8}/...                the man pages (cmake/SalusMan.cmake, with scdoc)
#
# salusctl finds the shim at <its dir>/../lib/salus and salusd finds simgpu at
# <its dir>/../lib/salus/simgpu/libcuda.so.1, so bin/ and lib/salus/ are fixed here rather
# than GNUInstallDirs' BINDIR and LIBDIR (the latter is lib/x86_64-linux-gnu under /usr on
# Debian, where the system's own libcuda.so.1 lives). The executables link only system
# libraries, so nothing needs an RPATH.
#
# Included by the top-level CMakeLists.txt after every add_subdirectory(), so that optional
# targets (salus-sim) are already defined when this file asks for them.
include(GNUInstallDirs)

install(TARGETS salusd salusctl RUNTIME DESTINATION bin)
if(TARGET salus-sim)
  install(TARGETS salus-sim RUNTIME DESTINATION bin)
endif()

# The shim and simgpu: install(TARGETS) writes each library under its file name and creates
# its soname and namelink symlinks as symlinks.
install(TARGETS salus-client LIBRARY DESTINATION lib/salus)
install(TARGETS simgpu LIBRARY DESTINATION lib/salus/simgpu)

install(FILES ${PROJECT_SOURCE_DIR}/tools/simgpu/include/simgpu_kernel.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/tools/bash-completion/salusctl
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)
install(FILES ${PROJECT_SOURCE_DIR}/tools/salusd.conf
        DESTINATION ${CMAKE_INSTALL_DATADIR}/salus)

# What remains depends on the prefix, which `cmake --install --prefix` may change after
# configuration: it runs at install time. Configuration-time values go first, the code that
# uses them follows as a bracket argument (evaluated only at install time).
install(CODE "set(salus_source_dir \"${PROJECT_SOURCE_DIR}\")
set(salus_sysconfdir \"${CMAKE_INSTALL_SYSCONFDIR}\")")
install(CODE [[
  # DESTDIR is prepended by file(INSTALL) itself; the other writes below add it by hand.
  if(IS_ABSOLUTE "${salus_sysconfdir}")
    set(salus_etc "${salus_sysconfdir}")
  else()
    set(salus_etc "${CMAKE_INSTALL_PREFIX}/${salus_sysconfdir}")
  endif()

  # the shim's third name, as in the build tree
  set(salus_link "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/lib/salus/libsalus-client.so")
  message(STATUS "Installing: ${salus_link} -> libcuda.so.1")
  file(REMOVE "${salus_link}")
  file(CREATE_LINK libcuda.so.1 "${salus_link}" SYMBOLIC)
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${salus_link}")

  # the config file, only where there is none yet
  set(salus_conf "$ENV{DESTDIR}${salus_etc}/salus/salusd.conf")
  if(EXISTS "${salus_conf}")
    message(STATUS "Keeping: ${salus_conf} (the shipped default is in share/salus/salusd.conf)")
  else()
    file(INSTALL "${salus_source_dir}/tools/salusd.conf" DESTINATION "${salus_etc}/salus")
  endif()

  # the systemd unit, with the installed paths of salusd and its config
  set(bindir "${CMAKE_INSTALL_PREFIX}/bin")
  set(sysconfdir "${salus_etc}")
  file(READ "${salus_source_dir}/tools/systemd/salusd.service" salus_unit)
  string(CONFIGURE "${salus_unit}" salus_unit @ONLY)
  set(salus_unit_path "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/lib/systemd/system/salusd.service")
  message(STATUS "Installing: ${salus_unit_path}")
  file(WRITE "${salus_unit_path}" "${salus_unit}")
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${salus_unit_path}")
]])
