# Man pages: docs/man/NAME.SECTION.scd -> build/man/NAME.SECTION, built with scdoc when it is
# present (Debian's package scdoc; tools/setup.sh installs it), installed by `cmake --install`
# under share/man/manSECTION. Without scdoc the pages are skipped with a note, and so is
# their lint test (tests/docs/CMakeLists.txt); the agreement test reads the sources.
include(GNUInstallDirs)
find_program(SALUS_SCDOC scdoc)
file(GLOB SALUS_MAN_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/docs/man/*.scd)
set(SALUS_MAN_PAGES "")
if(SALUS_SCDOC)
  foreach(src ${SALUS_MAN_SOURCES})
    get_filename_component(page ${src} NAME)
    string(REGEX REPLACE "\\.scd$" "" page "${page}")
    string(REGEX MATCH "[0-9]$" section "${page}")
    set(out ${CMAKE_BINARY_DIR}/man/${page})
    add_custom_command(OUTPUT ${out}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
      COMMAND sh -c "\"${SALUS_SCDOC}\" < \"${src}\" > \"${out}.tmp\" && mv \"${out}.tmp\" \"${out}\""
      DEPENDS ${src}
      COMMENT "scdoc: man/${page}" VERBATIM)
    list(APPEND SALUS_MAN_PAGES ${out})
    install(FILES ${out} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
  endforeach()
  add_custom_target(man ALL DEPENDS ${SALUS_MAN_PAGES})
else()
  message(STATUS "scdoc not found: man pages are not built (apt-get install scdoc)")
endif()
