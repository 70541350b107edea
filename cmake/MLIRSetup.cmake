# Finds MLIR/LLVM 19 for the compiler side (ONNX and protobuf:
# cmake/OnnxProto.cmake, shared with the runtime).
set(MLIR_DIR /usr/lib/llvm-19/lib/cmake/mlir CACHE PATH "MLIR CMake directory")
find_package(MLIR REQUIRED CONFIG)
if(NOT LLVM_VERSION_MAJOR EQUAL 19)
  message(FATAL_ERROR "gpipe needs MLIR/LLVM 19, found ${LLVM_PACKAGE_VERSION}")
endif()
message(STATUS "Using MLIR ${LLVM_PACKAGE_VERSION} from ${MLIR_DIR}")

list(APPEND CMAKE_MODULE_PATH "${MLIR_CMAKE_DIR}" "${LLVM_CMAKE_DIR}")
include(TableGen)
include(AddLLVM)
include(AddMLIR)

include_directories(SYSTEM ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})
separate_arguments(GPIPE_LLVM_DEFINITIONS NATIVE_COMMAND "${LLVM_DEFINITIONS}")
add_definitions(${GPIPE_LLVM_DEFINITIONS})
if(NOT LLVM_ENABLE_RTTI)
  add_compile_options(-fno-rtti)
endif()

# Project headers: include/ (compiler libraries), dialects/ (dialect
# definitions) and the generated TableGen output of both.
include_directories(${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/dialects)
# Generated code is not project code for warnings: SYSTEM silences it.
include_directories(SYSTEM ${PROJECT_BINARY_DIR}/dialects
                    ${PROJECT_BINARY_DIR}/include)


set(GPIPE_LLVM_TOOLS_DIR ${LLVM_TOOLS_BINARY_DIR})
