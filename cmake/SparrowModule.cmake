# Helpers that give every module, test and fuzz target the same shape.

# spw_add_module(<name> [DEPS <targets>...]): static library sparrow_<name> from <name>/src/*.c with
# public headers in <name>/include; src/ stays private to the module.
function(spw_add_module name)
    cmake_parse_arguments(ARG "" "" "DEPS;SOURCES" ${ARGN})
    file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/*.c)
    add_library(sparrow_${name} STATIC ${srcs} ${ARG_SOURCES})
    target_include_directories(sparrow_${name}
        PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include
        PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
    target_link_libraries(sparrow_${name} PUBLIC ${ARG_DEPS})
endfunction()

# spw_require_files(<files>...): stops the configuration when a file a test or target is built or
# run from does not exist (a renamed or deleted file must not silently drop its test).
function(spw_require_files)
    foreach(f ${ARGN})
        if(NOT EXISTS ${f})
            message(FATAL_ERROR "${f} does not exist (listed in ${CMAKE_CURRENT_LIST_FILE})")
        endif()
    endforeach()
endfunction()

# spw_add_unit_test(<name> SOURCES <files> LIBS <targets> [LABELS <labels>] [TIMEOUT <s>]
#                   [WHITEBOX <modules>]): a cmocka program, one ctest test labelled "unit" and
# LABELS (timeout 60 s unless TIMEOUT). WHITEBOX: modules whose src/ (private headers) it includes.
# A test labelled "tsan" is also a dependency of the target `tsan_tests` (`make tsan` builds only it).
function(spw_add_unit_test name)
    cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;LIBS;LABELS;WHITEBOX" ${ARGN})
    set(srcs "")
    foreach(src ${ARG_SOURCES})
        if(NOT IS_ABSOLUTE ${src})
            set(src ${CMAKE_CURRENT_SOURCE_DIR}/${src})
        endif()
        list(APPEND srcs ${src})
    endforeach()
    spw_require_files(${srcs})
    add_executable(${name} ${srcs})
    target_link_libraries(${name} PRIVATE ${ARG_LIBS} PkgConfig::CMOCKA)
    foreach(module ${ARG_WHITEBOX})
        spw_require_files(${PROJECT_SOURCE_DIR}/${module}/src)
        target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/${module}/src)
    endforeach()
    add_test(NAME ${name} COMMAND ${name})
    if(NOT ARG_TIMEOUT)
        set(ARG_TIMEOUT 60)
    endif()
    set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "unit;${ARG_LABELS}")
    if("tsan" IN_LIST ARG_LABELS)
        set_property(GLOBAL APPEND PROPERTY SPARROW_TSAN_TESTS ${name})
    endif()
endfunction()

# spw_add_fuzz_target(<name> SOURCE <file> LIBS <targets> [DEFINES <defs>]): a libFuzzer target
# when SPARROW_FUZZ is on; always a replay binary that ctest runs over tests/fuzz/corpus/<name>.
function(spw_add_fuzz_target name)
    cmake_parse_arguments(ARG "" "SOURCE" "LIBS;DEFINES" ${ARGN})
    set(corpus ${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${name})
    spw_require_files(${ARG_SOURCE} ${corpus})
    add_executable(${name}_replay ${ARG_SOURCE} ${PROJECT_SOURCE_DIR}/tests/fuzz/replay_main.c)
    target_link_libraries(${name}_replay PRIVATE ${ARG_LIBS})
    target_compile_definitions(${name}_replay PRIVATE ${ARG_DEFINES})
    add_test(NAME ${name}_corpus COMMAND ${name}_replay ${corpus})
    set_tests_properties(${name}_corpus PROPERTIES TIMEOUT 120 LABELS "fuzz")
    if(SPARROW_FUZZ)
        add_executable(${name} ${ARG_SOURCE})
        target_compile_options(${name} PRIVATE -fsanitize=fuzzer)
        target_link_options(${name} PRIVATE -fsanitize=fuzzer)
        target_link_libraries(${name} PRIVATE ${ARG_LIBS})
        target_compile_definitions(${name} PRIVATE ${ARG_DEFINES})
        set_property(GLOBAL APPEND PROPERTY SPARROW_FUZZ_TARGETS ${name})
    endif()
endfunction()

# spw_apply_test_costs(): sets COST from tests/test-costs.txt ("name seconds" per line, # comments)
# on the tests of the calling directory, so that a run without ctest's own cost data (a clean
# clone, CI) starts the long tests first. Call at the end of a directory's CMakeLists.txt.
function(spw_apply_test_costs)
    file(STRINGS ${PROJECT_SOURCE_DIR}/tests/test-costs.txt lines REGEX "^[^#]")
    get_property(tests DIRECTORY PROPERTY TESTS)
    foreach(line ${lines})
        string(REGEX MATCH "^([^ ]+) ([0-9]+)$" m "${line}")
        if(m AND CMAKE_MATCH_1 IN_LIST tests)
            set_tests_properties(${CMAKE_MATCH_1} PROPERTIES COST ${CMAKE_MATCH_2})
        endif()
    endforeach()
endfunction()
