# Install and export: `cmake --install` puts the public headers, each layer's
# static and shared library, the CMake package (qkvConfig.cmake with the
# components built: core, io, linalg, text, model, viz, mpi) and pkg-config files under the
# prefix.
#
#   find_package(qkv REQUIRED COMPONENTS core)   -> qkv::core, qkv::core_static
#   pkg-config --cflags --libs qkv               -> core; qkv-io, qkv-linalg, qkv-text, qkv-model, qkv-viz
include(CMakePackageConfigHelpers)

set(QKV_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/qkv)

foreach(layer IN LISTS QKV_LAYERS)
  string(TOUPPER ${layer} LAYER)
  install(TARGETS qkv_${layer}_static qkv_${layer}_shared EXPORT qkv-${layer}-targets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT ${layer}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT ${layer})
  install(EXPORT qkv-${layer}-targets NAMESPACE qkv:: DESTINATION ${QKV_CMAKE_DIR}
          COMPONENT ${layer})
  list(TRANSFORM QKV_${LAYER}_HEADERS PREPEND include/qkv/ OUTPUT_VARIABLE headers)
  install(FILES ${headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/qkv COMPONENT ${layer})
endforeach()
if(QKV_BUILD_CLI)
  install(TARGETS qkv_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

configure_package_config_file(cmake/qkvConfig.cmake.in
  ${PROJECT_BINARY_DIR}/qkvConfig.cmake INSTALL_DESTINATION ${QKV_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/qkvConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/qkvConfig.cmake ${PROJECT_BINARY_DIR}/qkvConfigVersion.cmake
        DESTINATION ${QKV_CMAKE_DIR})

# pkg-config: qkv.pc is the core (all an attention user needs); the layers
# above it are qkv-io, qkv-linalg, qkv-text, qkv-model and qkv-viz, each requiring the
# ones below.
# Paths are relative to the .pc file, so an installed tree can be moved.
set(QKV_PC_core_NAME qkv)
set(QKV_PC_core_DESC "exact self-attention on the CPU: tensors, the attention op and its kernels")
set(QKV_PC_core_REQUIRES "")
set(QKV_PC_core_PRIVATE "-fopenmp")
set(QKV_PC_io_NAME qkv-io)
set(QKV_PC_io_DESC "qkv's .npy, safetensors and GGUF files")
set(QKV_PC_io_REQUIRES qkv)
set(QKV_PC_io_PRIVATE "")
set(QKV_PC_linalg_NAME qkv-linalg)
set(QKV_PC_linalg_DESC "qkv's weight types (float32, float16, bf16, ggml's quantized blocks) and their products")
set(QKV_PC_linalg_REQUIRES qkv-io)
set(QKV_PC_linalg_PRIVATE "-ldnnl -fopenmp")
set(QKV_PC_text_NAME qkv-text)
set(QKV_PC_text_DESC "qkv's tokenizers: characters, WordPiece and byte-pair encodings")
set(QKV_PC_text_REQUIRES qkv-io)
set(QKV_PC_text_PRIVATE "-lutf8proc")
set(QKV_PC_model_NAME qkv-model)
set(QKV_PC_model_DESC "qkv's layers, GPT, checkpoints, trainer and sampler")
set(QKV_PC_model_REQUIRES "qkv-linalg qkv-text")
set(QKV_PC_model_PRIVATE "-lutf8proc -fopenmp")
set(QKV_PC_viz_NAME qkv-viz)
set(QKV_PC_viz_DESC "qkv's attention pictures and loss plots (PNG)")
set(QKV_PC_viz_REQUIRES qkv-io)
set(QKV_PC_viz_PRIVATE "")
set(QKV_PC_mpi_NAME qkv-mpi)
set(QKV_PC_mpi_DESC "qkv past one machine: ring attention and data-parallel training on MPI")
set(QKV_PC_mpi_REQUIRES "qkv-model ompi-cxx")
set(QKV_PC_mpi_PRIVATE "")
foreach(layer IN LISTS QKV_LAYERS)
  set(PC_NAME ${QKV_PC_${layer}_NAME})
  set(PC_DESC ${QKV_PC_${layer}_DESC})
  set(PC_REQUIRES ${QKV_PC_${layer}_REQUIRES})
  set(PC_LIBS_PRIVATE ${QKV_PC_${layer}_PRIVATE})
  set(PC_LIB qkv_${layer})
  configure_file(cmake/qkv.pc.in ${PROJECT_BINARY_DIR}/pkgconfig/${PC_NAME}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/pkgconfig/${PC_NAME}.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT ${layer})
endforeach()
