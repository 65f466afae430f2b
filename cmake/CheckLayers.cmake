# CheckLayers.cmake: fails if a file includes a header of a layer above its
# own (run by CTest as the "layering" test; the header lists come from
# CMakeLists.txt). Layers, lowest first: core, io, linalg, text, model, viz, mpi; then the
# command's support library (src/support/) and the Python package's test
# hooks (python/src/testing.cpp), which may read the library's private
# headers; then the users on top (tools/qkv/, python/, examples/), which see
# include/qkv/ and src/support/ only.
# Inside core, the reference never includes the kernels it checks, and the
# kernels never include the op that calls them.
#   cmake -DSOURCE_DIR=... -DCORE_HEADERS=... -DIO_HEADERS=... -DLINALG_HEADERS=... -DTEXT_HEADERS=...
#         -DMODEL_HEADERS=... -DVIZ_HEADERS=... -P CheckLayers.cmake
# linalg and text sit side by side above io; listed in a line, text may read
# linalg (it does not).
set(levels core io linalg text model viz mpi support top)

function(level_of_layer layer out)
  list(FIND levels ${layer} i)
  set(${out} ${i} PARENT_SCOPE)
endfunction()

# The layer a public header qkv/NAME belongs to.
foreach(layer IN ITEMS core io linalg text model viz mpi)
  string(TOUPPER ${layer} LAYER)
  foreach(h IN LISTS ${LAYER}_HEADERS)
    set(public_${h} ${layer})
  endforeach()
endforeach()

set(errors "")
function(check_file file layer)
  level_of_layer(${layer} mine)
  file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  file(RELATIVE_PATH rel ${SOURCE_DIR} ${file})
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\".*" "\\1" inc "${line}")
    set(bad "")
    if(inc MATCHES "^qkv/(.*)$")
      set(h ${CMAKE_MATCH_1})
      if(NOT DEFINED public_${h})
        set(bad "a public header no layer owns (add it to a QKV_*_HEADERS list)")
      else()
        level_of_layer(${public_${h}} theirs)
        if(theirs GREATER mine)
          set(bad "${public_${h}} is above ${layer}")
        endif()
      endif()
    elseif(inc MATCHES "^support/")
      if(layer STREQUAL top AND NOT rel MATCHES "^tools/")
        set(bad "the command's support library is the command's own")
      elseif(NOT layer MATCHES "^(support|top)$")
        set(bad "support is above ${layer}")
      endif()
    elseif(inc MATCHES "^(core|io|linalg|text|model|viz|mpi)/")
      set(owner ${CMAKE_MATCH_1})
      level_of_layer(${owner} theirs)
      if(layer STREQUAL top)
        set(bad "a private header of ${owner}: users of the library include qkv/ only")
      elseif(theirs GREATER mine)
        set(bad "${owner} is above ${layer}")
      elseif(inc MATCHES "^core/kernels/" AND NOT rel MATCHES "^src/core/(kernels|ops)/")
        set(bad "only the op (src/core/ops) calls the kernels")
      elseif(inc MATCHES "^core/ops/" AND rel MATCHES "^src/core/(kernels|ref)/")
        set(bad "kernels and the reference never include the op that calls them")
      elseif(inc MATCHES "^core/kernels/" AND rel MATCHES "^src/core/ref/")
        set(bad "the reference never uses the kernels it checks")
      endif()
    endif()
    if(bad)
      set(errors "${errors}\n  ${rel}: #include \"${inc}\": ${bad}" PARENT_SCOPE)
    endif()
  endforeach()
endfunction()

foreach(layer IN ITEMS core io linalg text model viz mpi)
  file(GLOB_RECURSE files ${SOURCE_DIR}/src/${layer}/*.cpp ${SOURCE_DIR}/src/${layer}/*.h
                          ${SOURCE_DIR}/src/${layer}/*.inc)
  string(TOUPPER ${layer} LAYER)
  foreach(h IN LISTS ${LAYER}_HEADERS)
    list(APPEND files ${SOURCE_DIR}/include/qkv/${h})
  endforeach()
  foreach(f IN LISTS files)
    check_file(${f} ${layer})
  endforeach()
endforeach()
set(support_files ${SOURCE_DIR}/python/src/testing.cpp)
file(GLOB_RECURSE files ${SOURCE_DIR}/src/support/*.cpp ${SOURCE_DIR}/src/support/*.h)
list(APPEND support_files ${files})
foreach(f IN LISTS support_files)
  check_file(${f} support)
endforeach()
file(GLOB_RECURSE files ${SOURCE_DIR}/tools/*.cpp ${SOURCE_DIR}/tools/*.h
                        ${SOURCE_DIR}/examples/*.cpp ${SOURCE_DIR}/python/*.cpp)
list(REMOVE_ITEM files ${support_files})
foreach(f IN LISTS files)
  check_file(${f} top)
endforeach()

if(errors)
  message(FATAL_ERROR "layering: includes that go upward or around a rule:${errors}")
endif()
message(STATUS "layering: every include goes to the same layer or one below")
