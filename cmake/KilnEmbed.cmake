# kiln_embed_sources(OUTPUT <file.cpp> BASE <dir> FILES <abs paths...>)
# Generates, at build time, a C++ file that holds every listed file as bytes plus a registry
# (relative name -> bytes). Rebuilt whenever one of the files changes.
function(kiln_embed_sources)
  cmake_parse_arguments(E "" "OUTPUT;BASE" "FILES" ${ARGN})
  add_custom_command(
    OUTPUT "${E_OUTPUT}"
    COMMAND ${CMAKE_COMMAND} -DOUTPUT=${E_OUTPUT} -DBASE=${E_BASE} "-DFILES=${E_FILES}"
            -P "${PROJECT_SOURCE_DIR}/cmake/KilnEmbedScript.cmake"
    DEPENDS ${E_FILES} "${PROJECT_SOURCE_DIR}/cmake/KilnEmbedScript.cmake"
    COMMENT "Embedding device sources into ${E_OUTPUT}"
    VERBATIM)
endfunction()
