# Finds MLIR/LLVM 19, ONNX and protobuf for the compiler side.
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

find_package(Protobuf REQUIRED)
find_library(ONNX_PROTO_LIBRARY onnx_proto REQUIRED)
add_library(gpipe_onnx_proto INTERFACE)
target_link_libraries(gpipe_onnx_proto INTERFACE ${ONNX_PROTO_LIBRARY}
                      protobuf::libprotobuf)
target_compile_definitions(gpipe_onnx_proto INTERFACE ONNX_ML=1
                           ONNX_NAMESPACE=onnx)

set(GPIPE_LLVM_TOOLS_DIR ${LLVM_TOOLS_BINARY_DIR})
