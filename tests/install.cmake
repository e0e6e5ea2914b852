# tests/install.cmake — `cmake --install` into a scratch prefix, then an
# outside C program includes <kiln/kiln.h>, links -lkiln via pkg-config and
# runs a built-in op plus its own quick op (tests/install/consumer.c); an
# outside plugin library (tests/install/plugin.c) is built with the README's
# compile line and the installed `kiln` loads it.
find_program(KILN_PKG_CONFIG pkg-config)
if(KILN_PKG_CONFIG AND NOT KILN_SANITIZE)
  add_test(NAME install_pkgconfig
    COMMAND bash ${CMAKE_SOURCE_DIR}/tests/install/check.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
  set_tests_properties(install_pkgconfig PROPERTIES PASS_REGULAR_EXPRESSION
                       "PASS: 0 mismatches.*installed kiln loaded the outside plugin")
endif()
